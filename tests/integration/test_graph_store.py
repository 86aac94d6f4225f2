"""The graph store: lazy per-resource loading, per-resource change detection,
crash safety of its file format, and two handles against an oracle.

"Another process" is a forked child writing through its own backend; a
second handle in this process shares nothing with the first but the files,
so it stands for another process where forking adds nothing.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs
from ulid import ULID

from cleveragents import _process as process
from cleveragents.domain.models.acms.backends import Literal
from cleveragents.domain.models.acms.errors import IndexUnavailableError
from cleveragents.domain.models.acms.uko import UKO, file_uri
from cleveragents.infrastructure.acms import graph_store
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend

Q = "SELECT ?s ?p ?o WHERE { ?s ?p ?o }"


def new_ulid() -> str:
    return str(ULID())


# How C records are written now (a list of edges per subject), and how
# format 3 wrote them (the writer's sets as they are).
_as_written_now = graph_store._as_written


def _as_format_3_wrote(change: graph_store.Change) -> Any:
    return change


def _triples(rid: str, n: int, tag: str = "v") -> list[Any]:
    return [(file_uri(rid, f"m{i}.py"), UKO + "tag", Literal(f"{tag}{i}")) for i in range(n)]


@pytest.fixture
def three(tmp_path: Path) -> tuple[Path, list[str]]:
    rids = [new_ulid() for _ in range(3)]
    with RdflibGraphBackend(tmp_path) as backend:
        for i, rid in enumerate(rids):
            backend.upsert(rid, _triples(rid, 5 + i))
    return tmp_path, rids


def _reads(logs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(event, resource) of each graph the store read, in order."""
    return [
        (e["event"], e["resource"])
        for e in logs
        if e["event"] in ("graph_store.loaded", "graph_store.followed")
    ]


@pytest.fixture(autouse=True)
def _debug_events() -> Iterator[None]:
    # Another test may have configured a level that filters out debug events;
    # its configuration is put back afterwards.
    saved = structlog.get_config()
    structlog.reset_defaults()
    yield
    structlog.configure(**saved)


# ---------------------------------------------------------------- lazy loading


def test_opening_reads_no_graph(three: tuple[Path, list[str]]) -> None:
    root, rids = three
    # A corrupt file would fail any read: opening and listing must not read it.
    (root / "graphs" / f"{rids[2]}.graph").write_bytes(b"garbage")
    with capture_logs() as logs, RdflibGraphBackend(root) as backend:
        assert backend.resource_ids() == set(rids)
        assert backend.loaded_resource_ids() == frozenset()
    assert _reads(logs) == []


def test_a_query_loads_only_the_in_scope_graphs(three: tuple[Path, list[str]]) -> None:
    root, (a, b, c) = three
    (root / "graphs" / f"{c}.graph").write_bytes(b"garbage")  # never read below
    with capture_logs() as logs, RdflibGraphBackend(root) as backend:
        scope = frozenset({a})
        assert len(backend.sparql_query(Q, scope=scope).triples) == 5
        assert len(backend.traverse(file_uri(a, "m0.py"), depth=2, scope=scope).triples) == 1
        assert backend.get_triples(file_uri(b, "m0.py"), scope=scope).triples == []
        assert backend.loaded_resource_ids() == {a}
        assert len(backend.subjects(b)) == 6  # read record by record (verify, the sweep)
        assert backend.loaded_resource_ids() == {a}
        _hold(backend, b)
        assert backend.loaded_resource_ids() == {a, b}
    assert _reads(logs) == [("graph_store.loaded", a), ("graph_store.loaded", b)]


def _hold(backend: RdflibGraphBackend, rid: str) -> None:
    """Load ``rid``'s graph into the cache, as a query that needs it whole does."""
    with backend._lock:
        backend._load([rid])
        backend._trim({rid})


def test_a_subject_outside_uko_is_looked_up_in_every_in_scope_graph(tmp_path: Path) -> None:
    a, b = new_ulid(), new_ulid()
    with RdflibGraphBackend(tmp_path) as backend:
        backend.upsert(a, [("urn:shared", UKO + "x", "urn:from-a")])
        backend.upsert(b, [("urn:shared", UKO + "x", "urn:from-b")])
    with RdflibGraphBackend(tmp_path) as backend:
        both = frozenset({a, b})
        assert [t[2] for t in backend.get_triples("urn:shared", scope=both).triples] == [
            "urn:from-a",
            "urn:from-b",
        ]
        assert [t[2] for t in backend.traverse("urn:shared", scope=frozenset({b})).triples] == [
            "urn:from-b"
        ]
        every = frozenset(backend.resource_ids())  # every graph, said explicitly
        assert len(backend.get_triples("urn:shared", scope=every).triples) == 2


# ---------------------------------------------------------------- change detection


def _write_in_child(root: Path, rid: str, triples: list[Any]) -> None:
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_child_upsert, args=(root, rid, triples))
    child.start()
    child.join(60)
    assert child.exitcode == 0


def _child_upsert(root: Path, rid: str, triples: list[Any]) -> None:
    with RdflibGraphBackend(root) as backend:
        backend.upsert(rid, triples)


def test_a_commit_to_a_in_another_process_rereads_only_a(three: tuple[Path, list[str]]) -> None:
    root, (a, b, _) = three
    new = (file_uri(a, "new.py"), UKO + "tag", "urn:new")
    with RdflibGraphBackend(root) as reader:
        union_b = reader._union(frozenset({b}))
        assert len(reader.sparql_query(Q, scope=frozenset({a, b})).triples) == 11
        _write_in_child(root, a, [new])
        with capture_logs() as logs:
            assert len(reader.sparql_query(Q, scope=frozenset({b})).triples) == 6
            assert reader._union(frozenset({b})) is union_b  # not rebuilt
            assert _reads(logs) == []
            # Read after write: A follows the appended record, nothing more.
            assert new in reader.get_triples(new[0], scope=frozenset({a})).triples
            assert len(reader.sparql_query(Q, scope=frozenset({a, b})).triples) == 12
        assert _reads(logs) == [("graph_store.followed", a)]


def test_a_union_follows_a_members_change_without_a_rebuild(tmp_path: Path) -> None:
    """A commit to a member is applied to the cached union (O(change)); a
    triple removed from one member stays while another member holds it."""
    a, b = new_ulid(), new_ulid()
    fa = file_uri(a, "a.py")
    shared = ("urn:shared", UKO + "x", "urn:both")
    with RdflibGraphBackend(tmp_path) as writer, RdflibGraphBackend(tmp_path) as reader:
        writer.upsert(a, [shared, (fa, UKO + "x", "urn:old")])
        fb = (file_uri(b, "b.py"), UKO + "x", "urn:b")
        writer.upsert(b, [shared, fb])
        both = frozenset({a, b})
        assert len(reader.sparql_query(Q, scope=both).triples) == 3
        union = reader._union(both)
        writer.upsert(a, [(fa, UKO + "x", "urn:new")], delete_subjects=[fa, "urn:shared"])
        assert sorted(reader.sparql_query(Q, scope=both).triples) == sorted(
            [(fa, UKO + "x", "urn:new"), fb, shared]
        )
        assert reader._union(both) is union
        reader.upsert(b, [], delete_subjects=["urn:shared"])  # this handle's own write
        assert sorted(reader.sparql_query(Q, scope=both).triples) == sorted(
            [(fa, UKO + "x", "urn:new"), fb]
        )
        assert reader._union(both) is union
    with RdflibGraphBackend() as memory:
        memory.upsert(a, [shared])
        memory.upsert(b, [shared])
        assert len(memory.sparql_query(Q, scope=both).triples) == 1
        memory.delete(a, ["urn:shared"])
        assert memory.sparql_query(Q, scope=both).triples == [shared]
        memory.delete(b, ["urn:shared"])
        assert memory.sparql_query(Q, scope=both).triples == []


def test_a_reader_follows_a_compaction_and_a_deletion_of_a_only(tmp_path: Path) -> None:
    a, b = new_ulid(), new_ulid()
    with RdflibGraphBackend(tmp_path) as writer, RdflibGraphBackend(tmp_path) as reader:
        writer.upsert(a, _triples(a, 3))
        writer.upsert(b, _triples(b, 4))
        assert len(reader.sparql_query(Q, scope=frozenset({a, b})).triples) == 7
        path = tmp_path / "graphs" / f"{a}.graph"
        first = path.stat().st_ino
        f = file_uri(a, "m0.py")
        for i in range(400):
            writer.upsert(a, [(f, UKO + "n", Literal(str(i)))], delete_subjects=[f])
        assert path.stat().st_ino != first  # compacted into a new file
        with capture_logs() as logs:
            assert reader.get_triples(f, scope=frozenset({a})).triples == [(f, UKO + "n", "399")]
            assert len(reader.subjects(b)) == 4
            writer.delete(a)
            assert reader.resource_ids() == {b}
            assert reader.sparql_query(Q, scope=frozenset({a})).triples == []
            assert reader.loaded_resource_ids() == {b}
        assert _reads(logs) == [("graph_store.loaded", a)]


def test_a_file_replaced_within_one_timestamp_tick_is_not_mistaken_for_unchanged(
    tmp_path: Path,
) -> None:
    """A resource deleted and re-created at once may get the old inode back,
    with the same size and, on a coarse clock, the same mtime: its stat then
    proves nothing.  Simulated exactly: another same-size graph file's bytes
    are written into the same inode and the mtime is restored.  The reader
    must see the new triples (a recent file is checked by its header's
    random name and its tail, not by its stat)."""
    rid = new_ulid()
    s = file_uri(rid, "a.py")
    scope = frozenset({rid})
    with RdflibGraphBackend(tmp_path / "other") as other:
        other.upsert(rid, [(s, UKO + "x", "urn:new")])
    replacement = (tmp_path / "other" / "graphs" / f"{rid}.graph").read_bytes()
    with (
        RdflibGraphBackend(tmp_path / "live") as writer,
        RdflibGraphBackend(tmp_path / "live") as reader,
    ):
        writer.upsert(rid, [(s, UKO + "x", "urn:old")])
        assert reader.get_triples(s, scope=scope).triples == [(s, UKO + "x", "urn:old")]
        path = tmp_path / "live" / "graphs" / f"{rid}.graph"
        before = path.stat()
        assert before.st_size == len(replacement)
        with open(path, "r+b") as fh:
            fh.write(replacement)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = path.stat()
        assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
            before.st_ino,
            before.st_size,
            before.st_mtime_ns,
        )
        assert reader.get_triples(s, scope=scope).triples == [(s, UKO + "x", "urn:new")]


def test_graphs_beyond_the_cache_budget_are_dropped_least_recent_first(
    three: tuple[Path, list[str]],
) -> None:
    root, (a, b, c) = three
    with RdflibGraphBackend(root, cache_triples=13) as backend:
        _hold(backend, a)
        _hold(backend, b)
        assert backend.loaded_resource_ids() == {a, b}  # 5 + 6 triples
        _hold(backend, c)
        assert backend.loaded_resource_ids() == {b, c}  # a was least recently used
        # One query's own graphs are kept even over the budget.
        assert len(backend.sparql_query(Q, scope=frozenset({a, b, c})).triples) == 18
        assert backend.loaded_resource_ids() == {a, b, c}


def test_a_one_question_process_leaves_the_indexes_to_the_query_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console script declares one question (cleveragents._process): the
    loaded graph's indexes are then built only in the query's worker, for
    what the query needs; the answer is the same."""
    a = new_ulid()
    with RdflibGraphBackend(tmp_path) as backend:
        backend.upsert(a, _triples(a, 10))
    with RdflibGraphBackend(tmp_path) as backend:
        expected = backend.sparql_query(Q, scope=frozenset({a})).triples
        assert backend._graphs[a].incoming is not None  # built here, kept for later queries
    monkeypatch.setattr(process, "_one_question", True)
    with RdflibGraphBackend(tmp_path) as backend:
        assert backend.sparql_query(Q, scope=frozenset({a})).triples == expected
        graph = backend._graphs[a]
        assert graph.incoming is None and graph.by_predicate is None


_DECLARED = """
import sys
from cleveragents import _process
from cleveragents.cli.main import _main
data = ["--data-dir", sys.argv[1]]
seen = []
for args, console in ((["project", "list"], True), (["status"], False), (["status"], True)):
    _main([*data, *args], console=console)
    seen.append(_process.one_question())
print(seen)
"""


def test_the_console_script_declares_one_question(tmp_path: Path) -> None:
    # In a process of its own: the CLI's entry sets process-wide state.
    done = subprocess.run(
        [sys.executable, "-c", _DECLARED, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # The console script's non-question; main()'s question (its caller may ask
    # again); the console script's question.
    assert done.stdout.split()[-3:] == ["[False,", "False,", "True]"]


def test_the_budget_counts_the_indexes_a_query_built(tmp_path: Path) -> None:
    """SPARQL indexes the graphs it reads (predicates, incoming edges: 0.4
    triple per triple); the budget counts them.  Two graphs of 10 triples
    fit a budget of 22; once one is indexed (14) they do not."""
    a, b = new_ulid(), new_ulid()
    with RdflibGraphBackend(tmp_path, cache_triples=22) as backend:
        backend.upsert(a, _triples(a, 10))
        backend.upsert(b, _triples(b, 10))
        _hold(backend, a)
        _hold(backend, b)
        assert backend.loaded_resource_ids() == {a, b}
        assert len(backend.sparql_query(Q, scope=frozenset({a})).triples) == 10
        _hold(backend, b)
        assert backend.loaded_resource_ids() == {b}


@pytest.mark.parametrize("on_disk", [True, False])
def test_sparql_views_copy_nothing_and_graphs_stay_in_budget(tmp_path: Path, on_disk: bool) -> None:
    """SPARQL reads the in-scope graphs in place: with many scopes queried,
    the loaded graphs stay within ``cache_triples`` beyond what the latest
    query itself holds, and every answer is still whole."""
    rids = [new_ulid() for _ in range(4)]
    budget = 15
    with RdflibGraphBackend(
        tmp_path if on_disk else None, cache_triples=budget, union_cache_size=8
    ) as backend:
        for rid in rids:
            backend.upsert(rid, _triples(rid, 6))
        scopes = [rids[:1], rids[:2], rids[:3], rids[1:], rids[2:], rids, rids[:1]]
        for _ in range(2):
            for scope in scopes:
                answer = backend.sparql_query(Q, scope=frozenset(scope))
                assert len(answer.triples) == 6 * len(scope)
                # The query's graphs, with the indexes SPARQL built on them.
                own = (6 + 6 // 10 + 6 * 3 // 10) * len(scope)
                if on_disk:
                    assert backend.held_triples() <= max(budget, own)
                else:  # the graphs are the data
                    assert backend.loaded_resource_ids() == set(rids)
                assert backend.loaded_resource_ids() >= set(scope)


def test_a_writer_that_adds_holds_no_graph(tmp_path: Path) -> None:
    # Adding triples appends a change record without loading the graph: an
    # indexer's memory follows its batch, not the resource (issue 10).
    rids = [new_ulid() for _ in range(4)]
    with RdflibGraphBackend(tmp_path, cache_triples=10) as backend:
        for rid in rids:
            backend.upsert(rid, _triples(rid, 6))
            subjects = [s for s, _, _ in _triples(rid, 6)]
            # Appends to its file, replacing the subjects' triples.
            backend.upsert(rid, _triples(rid, 6, tag="w"), delete_subjects=subjects)
            assert backend.loaded_resource_ids() == set()
        assert backend.resource_ids() == set(rids)
    with RdflibGraphBackend(tmp_path) as reopened:
        for rid in rids:
            scope = frozenset({rid})
            found = {
                t
                for s in reopened.subjects(rid)
                for t in reopened.get_triples(s, scope=scope).triples
            }
            assert found == {(s, p, o.value) for s, p, o in _triples(rid, 6, tag="w")}


def test_a_store_in_the_earlier_n_triples_layout_is_converted_once(tmp_path: Path) -> None:
    a, b, gone = new_ulid(), new_ulid(), new_ulid()
    fa, fb = file_uri(a, "a.py"), file_uri(b, "b.py")
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    (tmp_path / "generation").write_text("7\n")
    lit = '"tab\\t \\u00FC \\"q\\""'
    (graphs / f"{a}.nt").write_text(
        f'<{fa}> <{UKO}path> {lit} .\n<{fa}> <{UKO}lines> "010"^^<urn:int> .\n'
    )
    # a committed record, then a torn one
    (graphs / f"{a}.log").write_text(
        f'+<{fa}> <{UKO}imports> <urn:os> .\n-<{fa}> <{UKO}lines> "010"^^<urn:int> .\nC\n'
        f"+<{fa}> <{UKO}x> <urn:torn> .\n"
    )
    (graphs / f"{b}.nt").write_text(f'<{fb}> <{UKO}path> "b.py" .\n')
    (graphs / f"{gone}.log").write_text(f"+<{fb}> <{UKO}x> <urn:stale> .\nC\n")
    with RdflibGraphBackend(tmp_path) as backend:
        assert backend.resource_ids() == {a, b}
        assert backend.get_triples(fa, scope=frozenset({a})).triples == [
            (fa, UKO + "imports", "urn:os"),
            (fa, UKO + "path", 'tab\t \u00fc "q"'),
        ]
        assert backend.subjects(b) == {fb}
    # Each graph file with its subject index; no earlier file is left.
    assert sorted(p.name for p in graphs.iterdir()) == sorted(
        f"{rid}.{suffix}" for rid in (a, b) for suffix in ("graph", "subjects")
    )
    assert not (tmp_path / "generation").exists()
    assert (tmp_path / "format").read_bytes() == graph_store.FORMAT


def test_a_corrupt_store_in_the_earlier_layout_is_index_unavailable(tmp_path: Path) -> None:
    (tmp_path / "graphs").mkdir()
    (tmp_path / "generation").write_text("3\n")
    (tmp_path / "graphs" / f"{new_ulid()}.nt").write_text("this is not n-triples\n")
    with pytest.raises(IndexUnavailableError, match="corrupt"):
        RdflibGraphBackend(tmp_path)


# ---------------------------------------------------------------- crash safety


def _killed_at(root: Path, point: str, action: Callable[[RdflibGraphBackend], None]) -> int:
    """Run ``action`` in a child that SIGKILLs itself at ``point``; its exit code."""
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_kill_at, args=(root, point, action))
    child.start()
    child.join(60)
    return int(child.exitcode or 0)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_at(root: Path, point: str, action: Callable[[RdflibGraphBackend], None]) -> None:
    real_append, real_write_new = graph_store._append, graph_store._write_new

    def append(path: Path, ino: int, data: bytes) -> os.stat_result:
        if point == "append.half":
            with open(path, "ab") as fh:
                fh.write(data[: len(data) // 2])
                fh.flush()
            _die()
        st = real_append(path, ino, data)
        if point == "append.done":
            _die()
        return st

    def write_new(path: Path, pieces: Iterable[bytes]) -> os.stat_result:
        data = b"".join(pieces)
        if point == "replace.temp":
            fd, _ = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.write(fd, data[: len(data) // 2])
            _die()
        st = real_write_new(path, [data])
        if point == "replace.done":
            _die()
        return st

    graph_store._append = append  # type: ignore[assignment]
    graph_store._write_new = write_new  # type: ignore[assignment]
    with RdflibGraphBackend(root) as backend:
        action(backend)


def _compacting_write(rid: str) -> Callable[[RdflibGraphBackend], None]:
    f = file_uri(rid, "m0.py")

    def action(backend: RdflibGraphBackend) -> None:
        for i in range(1000):
            backend.upsert(rid, [(f, UKO + "n", Literal(str(i)))], delete_subjects=[f])

    return action


@pytest.mark.parametrize(
    "point", ["append.half", "append.done", "replace.temp", "replace.done"], ids=str
)
def test_a_writer_killed_mid_write_leaves_the_last_commit_readable(
    tmp_path: Path, point: str
) -> None:
    rid, other = new_ulid(), new_ulid()
    f = file_uri(rid, "m0.py")
    with RdflibGraphBackend(tmp_path) as backend:
        backend.upsert(rid, _triples(rid, 3))
        backend.upsert(other, _triples(other, 2))
        before = backend.get_triples(f, scope=frozenset({rid})).triples
    # append.*: the first write appends; replace.*: writes go on until a compaction.
    if point.startswith("append"):
        action = lambda b: b.upsert(rid, [(f, UKO + "n", Literal("new"))])  # noqa: E731
    else:
        action = _compacting_write(rid)
    assert _killed_at(tmp_path, point, action) == -signal.SIGKILL
    with RdflibGraphBackend(tmp_path) as reader:
        after = reader.get_triples(f, scope=frozenset({rid})).triples
        # All of a change or none of it; "done" points had committed theirs.
        if point == "append.half":
            assert after == before
        elif point == "append.done":
            assert after == sorted([*before, (f, UKO + "n", "new")])
        else:  # each write replaced f's triples by one (f, n, "<i>")
            [(_, p, o)] = after
            assert p == UKO + "n" and o.isdigit()
        assert len(reader.subjects(other)) == 2
        # The next writer cuts any torn tail and its change survives a reopen.
        reader.upsert(rid, [(f, UKO + "after", "urn:crash")])
        expected = reader.get_triples(f, scope=frozenset({rid})).triples
    with RdflibGraphBackend(tmp_path) as reopened:
        assert reopened.get_triples(f, scope=frozenset({rid})).triples == expected
        assert (f, UKO + "after", "urn:crash") in expected


# ---------------------------------------------------------------- property

_POOL = [new_ulid() for _ in range(3)]
_SUBJECTS = [f"a{i}.py" for i in range(3)]

_triple = st.tuples(
    st.sampled_from(_SUBJECTS),
    st.sampled_from([UKO + "p", UKO + "q"]),
    st.one_of(
        st.sampled_from(["urn:x", "urn:y"]),
        st.tuples(st.text(max_size=4), st.sampled_from([None, UKO + "dt"])),
    ),
)
_op = st.one_of(
    st.tuples(
        st.just("upsert"),
        st.integers(0, 1),
        st.sampled_from(_POOL),
        st.lists(_triple, max_size=5),
        st.lists(st.sampled_from(_SUBJECTS), max_size=2),
    ),
    st.tuples(st.just("delete"), st.integers(0, 1), st.sampled_from(_POOL)),
    st.tuples(st.just("read"), st.integers(0, 1), st.sampled_from(_POOL)),
)


def _concrete(rid: str, spec: tuple[str, str, Any]) -> tuple[str, str, Any]:
    s, p, o = spec
    obj = o if isinstance(o, str) else Literal(o[0], o[1])
    return file_uri(rid, s), p, obj


def _as_read(rid: str, spec: tuple[str, str, Any]) -> tuple[str, str, str]:
    s, p, o = spec
    return file_uri(rid, s), p, o if isinstance(o, str) else o[0]


def _actual(backend: RdflibGraphBackend, rid: str) -> set[tuple[str, str, str]]:
    scope = frozenset({rid})
    return {t for s in backend.subjects(rid) for t in backend.get_triples(s, scope=scope).triples}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(_op, min_size=1, max_size=14), upgraded_at=st.integers(0, 14))
def test_two_handles_agree_with_an_oracle_after_reopen(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    ops: list[Any],
    upgraded_at: int,
) -> None:
    monkeypatch.setattr(graph_store, "COMPACT_MIN_BYTES", 64)  # compact often
    root = tmp_path_factory.mktemp("prop")
    oracle: dict[str, set[tuple[str, str, str]]] = {}
    handles = [RdflibGraphBackend(root), RdflibGraphBackend(root)]
    try:
        for step, op in enumerate(ops):
            # The writes before ``upgraded_at`` write C records as format 3
            # did (sets of edges), the later ones as now (lists).
            monkeypatch.setattr(
                graph_store,
                "_as_written",
                _as_format_3_wrote if step < upgraded_at else _as_written_now,
            )
            kind, h, rid = op[0], op[1], op[2]
            backend = handles[h]
            if kind == "upsert":
                specs, doomed = op[3], op[4]
                backend.upsert(
                    rid,
                    [_concrete(rid, t) for t in specs],
                    delete_subjects=[file_uri(rid, s) for s in doomed],
                )
                graph = oracle.setdefault(rid, set())
                gone = {file_uri(rid, s) for s in doomed}
                graph.difference_update({t for t in graph if t[0] in gone})
                graph.update(_as_read(rid, t) for t in specs)
            elif kind == "delete":
                backend.delete(rid)
                oracle.pop(rid, None)
            else:
                assert _actual(backend, rid) == oracle.get(rid, set())
        for backend in handles:
            assert backend.resource_ids() == {r for r, g in oracle.items() if g}
    finally:
        for backend in handles:
            backend.close()
    with RdflibGraphBackend(root) as reopened:
        for rid in _POOL:
            assert _actual(reopened, rid) == oracle.get(rid, set())


@pytest.mark.parametrize("version", [2, 3])
def test_an_older_store_is_upgraded_in_place(tmp_path: Path, version: int) -> None:
    # Version 2 files (one snapshot, L records) and version 3 files (C
    # records with sets) are valid version 4 files: only the format file
    # changes, so code knowing only an older version refuses the store.
    rid = new_ulid()
    with RdflibGraphBackend(tmp_path) as backend:
        backend.upsert(rid, _triples(rid, 3))
    (tmp_path / "format").write_bytes(b"acms-graph-store %d\n" % version)
    with RdflibGraphBackend(tmp_path) as reopened:
        assert len(reopened.subjects(rid)) == 3
    assert (tmp_path / "format").read_bytes() == graph_store.FORMAT == b"acms-graph-store 4\n"


def test_a_snapshot_holding_lists_loads_and_reads_as_sets(tmp_path: Path) -> None:
    # What a host of format 3 still running after the upgrade may write: it
    # compacts a format 4 change record's lists into a snapshot as they are.
    rid = new_ulid()
    a, b = file_uri(rid, "a.py"), file_uri(rid, "b.py")
    edges = {a: [(UKO + "tag", ("x", None)), (UKO + "calls", b)], b: [(UKO + "tag", ("y", None))]}
    store = graph_store.GraphStore(tmp_path)
    try:
        store.replace(rid, graph_store.ResourceGraph(edges))  # type: ignore[arg-type]
    finally:
        store.close()
    want = {(s, p, o if isinstance(o, str) else o[0]) for s, es in edges.items() for p, o in es}
    with RdflibGraphBackend(tmp_path) as by_subject, RdflibGraphBackend(tmp_path) as loaded:
        assert _actual(by_subject, rid) == want  # read subject by subject
        query = f"SELECT ?s ?p ?o WHERE {{ ?s <{UKO}tag> ?o . BIND(<{UKO}tag> AS ?p) }}"
        tags = loaded.sparql_query(query, scope=frozenset({rid}))  # by predicate: a full load
        assert loaded.loaded_resource_ids() == {rid}
        assert set(tags.triples) == {t for t in want if t[1] == UKO + "tag"}
        loaded.upsert(rid, [(b, UKO + "tag", Literal("z"))])  # adds to a loaded subject
        assert _actual(loaded, rid) == want | {(b, UKO + "tag", "z")}


def test_a_change_record_holds_a_list_of_edges_per_subject(tmp_path: Path) -> None:
    # marshal writes a set ~4x slower than a list (it sorts the members'
    # encodings): an indexer's C records hold lists, without repeats.
    rid = new_ulid()
    with RdflibGraphBackend(tmp_path) as writer:
        writer.upsert(rid, _triples(rid, 3))  # the file's first write: a snapshot
        triples = _triples(rid, 2, "w")
        writer.upsert(rid, [*triples, *triples, (triples[0][0], UKO + "x", "urn:y")])  # repeats
    data = (tmp_path / "graphs" / f"{rid}.graph").read_bytes()
    records, pos = [], graph_store._HEADER
    while (found := graph_store._next_record(data, pos)) is not None:
        records.append((found[0], graph_store._decode_any(found[0], found[1], tmp_path)))
        pos = found[2]
    changes = [value for kind, value in records if kind == graph_store._CHANGE]
    assert len(changes) == 1
    adds = changes[0][2]
    assert adds and all(type(edges) is list for edges in adds.values())
    assert all(len(set(edges)) == len(edges) for edges in adds.values())
    assert sum(map(len, adds.values())) == 3
