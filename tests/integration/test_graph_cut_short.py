"""A graph file that lost committed records (cut short by a careless copy
or restore, or a record damaged in place) is an error naming the repair,
never an answer from the part left; the repair writes the whole graph again.

The oracle is an undamaged copy of the same data directory taken before
the damage (the same resource ULIDs), given the same changes.
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cleveragents.application.services.operations import AcmsOperations
from cleveragents.bootstrap import bootstrap
from cleveragents.domain.models.acms.errors import IndexUnavailableError
from cleveragents.domain.models.acms.uko import file_uri

_HEADER = 24  # magic and the file's 16-byte name
_RECORD = struct.Struct("<cII")  # kind, payload length, crc32
_EVERYTHING = "SELECT ?s ?p ?o WHERE { ?s ?p ?o }"


@contextmanager
def opened(data: Path) -> Iterator[AcmsOperations]:
    """``data`` opened afresh, as a new process would."""
    ops = bootstrap(data, embedding_dimension=16)
    try:
        yield ops
    finally:
        ops.close()


def write_tree(root: Path, files: int) -> None:
    """Enough Python that the first reindex writes its graph in several
    records and the subject index covers some of the log."""
    for i in range(files):
        body = "".join(
            f"def f{i}_{j}(x):\n    return g{i}_{j}(x) + {j}\n\n"
            f"class C{i}_{j}:\n    def m(self):\n        return f{i}_{j}(self)\n\n"
            for j in range(12)
        )
        (root / "pkg" / f"mod{i}.py").write_text(body)


def records(path: Path) -> list[tuple[bytes, int, int]]:
    """(kind, start, end) of each whole record of a graph file."""
    data = path.read_bytes()
    out, pos = [], _HEADER
    while pos + _RECORD.size <= len(data):
        kind, length, _crc = _RECORD.unpack_from(data, pos)
        end = pos + _RECORD.size + length
        if end > len(data):
            break
        out.append((kind, pos, end))
        pos = end
    return out


def everything(ops: AcmsOperations, project: str) -> set[tuple[str, str, str]]:
    """Every triple in the project's scope: each subject's (a query of them
    all would pass the row cap)."""
    view = ops.view(ops.scope([project], []))
    subjects = view.sparql_query(
        "SELECT DISTINCT ?s ?t ?u WHERE { ?s ?p ?o BIND(?s AS ?t) BIND(?s AS ?u) }"
    )
    found = {t for s, _p, _o in subjects.triples for t in view.get_triples(s).triples}
    assert found
    return found


@pytest.fixture
def indexed(tmp_path: Path) -> tuple[Path, Path, str, str]:
    """Two resources in two projects, indexed; the data dir, the first
    resource's tree, its ULID and the other's."""
    data = tmp_path / "data"
    hit, fine = tmp_path / "hit", tmp_path / "fine"
    for root in (hit, fine):
        (root / "pkg").mkdir(parents=True)
    write_tree(hit, 40)
    (fine / "pkg" / "side.py").write_text("def quokka_function():\n    return 2\n")
    with opened(data) as ops:
        ops.add_project("local/hit")
        ops.add_project("local/fine")
        rid = ops.add_resource(str(hit), "local/hit").resource_id
        other = ops.add_resource(str(fine), "local/fine").resource_id
        ops.reindex()
    return data, hit, rid, other


def graph_file(data: Path, rid: str) -> Path:
    return data / "graph" / "graphs" / f"{rid}.graph"


def test_a_graph_file_cut_at_a_record_boundary_fails_status_and_queries_until_a_reindex(
    tmp_path: Path, indexed: tuple[Path, Path, str, str]
) -> None:
    """Cut where a record ends, below what its subject index covers: every
    record left is whole, so a load read it as the resource's whole graph
    and answered from half of it; ``status`` said nothing, and an
    incremental reindex changed nothing.  Now both fail naming the repair,
    the other resource answers, and a plain reindex writes the graph again
    (its subject index, which named offsets of the lost records, too)."""
    data, _tree, rid, _other = indexed
    oracle = tmp_path / "oracle"
    shutil.copytree(data, oracle)
    path = graph_file(data, rid)
    found = records(path)
    assert len(found) >= 3, found  # a snapshot and at least two log records
    index = path.with_suffix(".subjects")
    covered = struct.unpack_from("<8s16sQQ", index.read_bytes())[2]
    cut = max(end for _k, _s, end in found[:-1] if end < covered)
    with path.open("r+b") as fh:
        fh.truncate(cut)
    with opened(data) as ops:
        with pytest.raises(IndexUnavailableError, match=rf"{rid}.*cut short.*--full --resource"):
            ops.status()
        hit = ops.view(ops.scope(["local/hit"], []))
        with pytest.raises(IndexUnavailableError, match="cut short"):
            hit.sparql_query(_EVERYTHING)
        with pytest.raises(IndexUnavailableError, match="cut short"):
            hit.traverse(file_uri(rid, "pkg/mod39.py"), depth=1)
        assert everything(ops, "local/fine")
        report = ops.reindex()
        assert report.resources[rid].files_indexed == 40
    with opened(data) as ops, opened(oracle) as want:
        assert ops.status()["resources"]
        assert ops.verify() == []
        assert everything(ops, "local/hit") == everything(want, "local/hit")
        for name in ("pkg/mod0.py", "pkg/mod39.py"):
            start = file_uri(rid, name)
            got = ops.view(ops.scope(["local/hit"], [])).traverse(start, depth=2)
            expected = want.view(want.scope(["local/hit"], [])).traverse(start, depth=2)
            assert sorted(got.triples) == sorted(expected.triples)


def test_a_damaged_record_fails_a_load_and_a_write_removes_the_file_for_the_next_run(
    tmp_path: Path, indexed: tuple[Path, Path, str, str]
) -> None:
    """A byte flipped inside a log record, the file's length intact: a load
    ends the graph there (the record's CRC) and answered from what came
    before; a writer cut everything from it as a torn tail and went on.
    Now a load fails naming the repair; a write refuses, removing the file,
    and the next reindex writes the whole graph again."""
    data, tree, rid, _other = indexed
    oracle = tmp_path / "oracle"
    shutil.copytree(data, oracle)
    path = graph_file(data, rid)
    _kind, start, end = records(path)[1]
    with path.open("r+b") as fh:
        fh.seek((start + end) // 2)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0xFF]))
    damaged = rf"{rid}.*damaged.*--full --resource"
    with opened(data) as ops, pytest.raises(IndexUnavailableError, match=damaged):
        ops.view(ops.scope(["local/hit"], [])).sparql_query(_EVERYTHING)
    (tree / "pkg" / "mod3.py").write_text("def changed():\n    return helper()\n")
    with opened(data) as ops:
        with pytest.raises(IndexUnavailableError, match="removed; the next `acms reindex`"):
            ops.reindex()
        assert not path.exists()
    with opened(data) as ops:
        ops.reindex()
    with opened(oracle) as want:
        want.reindex()
    with opened(data) as ops, opened(oracle) as want:
        assert ops.verify() == []
        assert everything(ops, "local/hit") == everything(want, "local/hit")


@pytest.mark.parametrize("read", ["load", "subject reader"])
def test_a_commit_between_a_read_and_its_check_is_not_damage(
    indexed: tuple[Path, Path, str, str], monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    """Found in a read-back: a reader that read the file, then read the
    recorded commit after another process appended and recorded one, took
    its own older read for a cut file ("cut short or damaged", one query in
    55 beside ``acms watch``).  Here the other process commits in between,
    every time; the reader answers from the file as it is."""
    data, tree, rid, _other = indexed
    with opened(data) as reader, opened(data) as writer:
        graph: Any = reader._store().graph
        store = graph._store
        name = "refresh" if read == "load" else "subject_reader"
        real = getattr(store, name)
        committed: list[int] = []

        def read_then_commit(*args: Any, **kwargs: Any) -> Any:
            found = real(*args, **kwargs)
            if not committed:
                (tree / "pkg" / "mod5.py").write_text("def changed():\n    return other()\n")
                committed.append(writer.reindex().resources[rid].files_indexed)
            return found

        monkeypatch.setattr(store, name, read_then_commit)
        view = reader.view(reader.scope(["local/hit"], []))
        if read == "load":
            assert view.sparql_query(_EVERYTHING + " LIMIT 5").triples
        else:
            assert view.traverse(file_uri(rid, "pkg/mod7.py"), depth=1).triples
        assert committed == [1]
