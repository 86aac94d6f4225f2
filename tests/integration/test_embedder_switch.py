"""Switching the embedder re-embeds the stored units and nothing else: no file
is read or parsed, the text and graph indexes are not written, the vectors
answer with the new embedder, and a crash part way is finished by the next
run.  Real engines (tantivy, FAISS, rdflib, SQLite) on tmp_path."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from cleveragents.application.services.indexer import Indexer
from cleveragents.cli.main import reembed_reporter
from cleveragents.domain.models.acms.code_facts import CodeFacts
from cleveragents.domain.models.acms.errors import IndexUnavailableError
from cleveragents.domain.models.acms.ulids import canonical_ulid
from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder
from cleveragents.infrastructure.acms.index_store import ManagedIndexStore, split_identity
from cleveragents.infrastructure.acms.memory_indexes import MemoryTextIndex
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend
from cleveragents.infrastructure.acms.tree_sitter_code import TreeSitterCodeParser
from file_stamps import snapshot

RID = canonical_ulid("01J0000000000000000000EMB1")
DIM = 64

FILES = {
    "pkg/geometry.py": (
        "import math\n\n\nclass Shape:\n    def area(self):\n        return 0\n\n\n"
        "class Circle(Shape):\n    def __init__(self, r):\n        self.r = r\n\n"
        "    def area(self):\n        return math.pi * self.r ** 2\n\n\n"
        "def total_area(shapes):\n    return sum(s.area() for s in shapes)\n"
    ),
    "pkg/report.py": (
        "from pkg.geometry import Circle, total_area\n\n\n"
        "def report(radii):\n    shapes = [Circle(r) for r in radii]\n"
        "    return f'total {total_area(shapes):.2f}'\n\n\n"
        "def banner(title):\n    return '=' * len(title) + '\\n' + title\n"
    ),
    "web/app.ts": (
        'import { report } from "./lib";\n\nexport function main(): string {\n'
        "  return report([1, 2, 3]);\n}\n\nexport class Widget {\n"
        "  render(): string { return main(); }\n}\n"
    ),
    "README.md": "# Shapes\n\nComputes the total area of circles.\n\n## Usage\n\nCall report.\n",
    "native/util.c": (
        "static int twice(int x) { return 2 * x; }\nint four(void) { return twice(2); }\n"
    ),
}
# Enough units for several re-embed batches of 4.
FILES.update(
    {
        f"gen/mod{i}.py": f"def f{i}(x):\n    return x * {i} + {i * i}\n\n\nVALUE_{i} = f{i}({i})\n"
        for i in range(10)
    }
)


class SpyParser:
    """The CodeParser port, counting the files it is asked to parse."""

    def __init__(self) -> None:
        self._real = TreeSitterCodeParser()
        self.parsed = 0

    def languages(self) -> frozenset[str]:
        return self._real.languages()

    def parse(self, text: str, language: str) -> CodeFacts | None:
        self.parsed += 1
        return self._real.parse(text, language)


class ReversedHashing:
    """Another embedder: hashing of the reversed text (other vectors, same dimension)."""

    def __init__(self, dimension: int = DIM, *, name: str = "reversed-hashing-test") -> None:
        self._inner = HashingEmbedder(dimension)
        self._name = name
        self.calls = 0
        self.fail_at: int | None = None  # raise on this call (1-based)

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise RuntimeError("injected failure in the middle of the re-embed")
        return self._inner.embed([t[::-1] for t in texts])


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        write_old(root / rel, text)
    return root


def write_old(path: Path, text: str) -> None:
    """Write a file dated a minute ago: not racily clean, so an unchanged
    file is not re-read (only its size and mtime are compared)."""
    path.write_text(text)
    past = time.time_ns() - 60 * 1_000_000_000
    os.utime(path, ns=(past, past))


def open_store(data: Path) -> ManagedIndexStore:
    # Small vector batches, so a re-embed writes several and can fail between them.
    return ManagedIndexStore.open(data, dimension=DIM, batch_units=4)


@pytest.fixture
def data(tmp_path: Path, repo: Path) -> Iterator[Path]:
    """A data directory holding ``repo`` indexed with hashing-v1."""
    data = tmp_path / "data"
    store = open_store(data)
    Indexer(store, HashingEmbedder(DIM), code_parser=SpyParser()).index_resource(
        RID, repo, "directory"
    )
    store.close()
    yield data


def own_scores(
    store: ManagedIndexStore, embed: HashingEmbedder | ReversedHashing
) -> dict[str, float]:
    """For each stored unit: the similarity of its vector to ``embed`` of its content."""
    text = store.text
    assert isinstance(text, TantivyTextBackend)
    units = list(text.units(RID))
    assert units
    scores = {}
    for unit in units:
        query = embed.embed([unit.content])[0].tolist()
        hits = store.vector.similarity_search(query, scope=frozenset({RID}), top_k=len(units))
        scores[unit.uko_uri] = next(h.score for h in hits if h.uko_uri == unit.uko_uri)
    return scores


def identity(store: ManagedIndexStore) -> str | None:
    return store.catalog.get_meta(f"identity:{RID}")


def test_switching_the_embedder_re_embeds_without_reading_or_parsing(
    data: Path, repo: Path
) -> None:
    before_text, before_graph = snapshot(data / "text"), snapshot(data / "graph")
    store = open_store(data)
    units_before = store.text.unit_uris(RID)
    # The old vectors do not answer to the new embedder.
    assert min(own_scores(store, ReversedHashing()).values()) < 0.99
    spy, progress = SpyParser(), []
    new = ReversedHashing()
    stats = Indexer(store, new, code_parser=spy).index_resource(
        RID, repo, "directory", reembed_progress=lambda *a: progress.append(a)
    )
    # (a) nothing read, nothing parsed, nothing re-indexed
    assert (stats.files_read, stats.bytes_read, spy.parsed) == (0, 0, 0)
    assert (stats.files_indexed, stats.units_written) == (0, 0)
    assert stats.units_reembedded == len(units_before)
    # (b) text and graph untouched on disk
    assert snapshot(data / "text") == before_text
    assert snapshot(data / "graph") == before_graph
    # (c) every vector is now the new embedder's embedding of the unit's content
    scores = own_scores(store, new)
    assert set(scores) == units_before == store.vector.unit_uris(RID)
    assert min(scores.values()) > 0.9999
    assert split_identity(identity(store) or "").embedder == f"{new.name}:{DIM}"
    assert store.verify([RID]) == []
    # progress: a start, then batches of 4, ending at the total
    total = len(units_before)
    assert progress[0] == (new.name, 0, total)
    assert progress[-1] == (new.name, total, total)
    assert [d for _, d, _ in progress[1:]] == sorted(
        {min(i, total) for i in range(4, total + 4, 4)}
    )
    # the same embedder again: nothing at all
    again = Indexer(store, new, code_parser=spy).index_resource(RID, repo, "directory")
    assert (again.files_read, again.units_reembedded, again.index_writes, spy.parsed) == (
        0,
        0,
        0,
        0,
    )
    store.close()


def test_unchanged_embedder_does_nothing(data: Path, repo: Path) -> None:
    before_vectors = snapshot(data / "vectors")
    store = open_store(data)
    spy = SpyParser()
    stats = Indexer(store, HashingEmbedder(DIM), code_parser=spy).index_resource(
        RID, repo, "directory"
    )
    assert (stats.files_read, stats.units_reembedded, stats.index_writes, spy.parsed) == (
        0,
        0,
        0,
        0,
    )
    store.close()
    assert snapshot(data / "vectors") == before_vectors


def test_a_file_changed_meanwhile_is_indexed_after_the_re_embed(data: Path, repo: Path) -> None:
    write_old(repo / "pkg" / "report.py", "def summary():\n    return 'only this now'\n")
    store = open_store(data)
    spy, new = SpyParser(), ReversedHashing()
    stats = Indexer(store, new, code_parser=spy).index_resource(RID, repo, "directory")
    assert stats.units_reembedded > 0
    assert (stats.files_read, stats.files_indexed, spy.parsed) == (1, 1, 1)
    scores = own_scores(store, new)
    assert any("only this now" in u.content for u in store.text.units(RID))  # type: ignore[attr-defined]
    assert len(scores) == len(store.vector.unit_uris(RID))
    assert min(scores.values()) > 0.9999
    assert store.verify([RID]) == []
    store.close()


def test_a_failure_mid_re_embed_is_finished_by_the_next_run(data: Path, repo: Path) -> None:
    old_identity = identity(open_store(data))
    assert old_identity is not None
    store = open_store(data)
    total = len(store.text.unit_uris(RID))
    assert total > 8  # several batches of 4
    broken = ReversedHashing()
    broken.fail_at = 2  # the first batch is written, the second fails
    with pytest.raises(RuntimeError, match="injected"):
        Indexer(store, broken, code_parser=SpyParser()).index_resource(RID, repo, "directory")
    # Half done: some vectors new, some old; the identity is still the old one
    # and the resource is marked dirty.
    mixed = own_scores(store, ReversedHashing())
    assert sum(s > 0.9999 for s in mixed.values()) == 4
    assert identity(store) == old_identity
    assert store.catalog.get_meta(f"dirty:{RID}") is not None
    store.close()

    before_text, before_graph = snapshot(data / "text"), snapshot(data / "graph")
    store = open_store(data)
    spy, new = SpyParser(), ReversedHashing()
    stats = Indexer(store, new, code_parser=spy).index_resource(RID, repo, "directory")
    assert (stats.files_read, spy.parsed, stats.units_written) == (0, 0, 0)
    assert stats.units_reembedded == total
    assert min(own_scores(store, new).values()) > 0.9999
    assert split_identity(identity(store) or "").embedder == f"{new.name}:{DIM}"
    assert store.catalog.get_meta(f"dirty:{RID}") is None
    assert store.verify([RID]) == []
    store.close()
    assert snapshot(data / "text") == before_text
    assert snapshot(data / "graph") == before_graph


def test_another_dimension_is_refused_naming_rebuild(data: Path, repo: Path) -> None:
    store = ManagedIndexStore.open(data, dimension=DIM * 2)
    wide = ReversedHashing(DIM * 2)
    with pytest.raises(IndexUnavailableError, match="reindex --rebuild"):
        Indexer(store, wide, code_parser=SpyParser()).index_resource(RID, repo, "directory")
    store.close()
    # Nothing changed: the old embedder still finds its index as it was.
    store = open_store(data)
    assert min(own_scores(store, HashingEmbedder(DIM)).values()) > 0.9999
    store.close()


def test_a_units_change_still_re_indexes_every_file(data: Path, repo: Path) -> None:
    store = open_store(data)
    catalog = store.catalog
    recorded = identity(store) or ""
    assert "units-5" in recorded  # the version this test steps back from
    catalog.set_meta(f"identity:{RID}", recorded.replace("units-5", "units-4"))
    spy = SpyParser()
    stats = Indexer(store, ReversedHashing(), code_parser=spy).index_resource(
        RID, repo, "directory"
    )
    assert stats.units_reembedded == 0
    assert stats.files_read == len(FILES)
    assert spy.parsed > 0
    store.close()


def test_a_text_index_that_cannot_read_units_back_falls_back_to_full(repo: Path) -> None:
    class Opaque(MemoryTextIndex):
        def units(self, resource_id: str) -> Iterator[object]:  # type: ignore[override]
            raise NotImplementedError("this index does not read units back")

    from cleveragents.infrastructure.acms.memory_indexes import (
        MemoryCatalog,
        MemoryGraphIndex,
        MemoryVectorIndex,
    )

    store = ManagedIndexStore.over(
        Opaque(), MemoryVectorIndex(DIM), MemoryGraphIndex(), MemoryCatalog()
    )
    Indexer(store, HashingEmbedder(DIM)).index_resource(RID, repo, "directory")
    spy = SpyParser()
    new = ReversedHashing()
    stats = Indexer(store, new, code_parser=spy).index_resource(RID, repo, "directory")
    assert stats.units_reembedded == 0
    assert stats.files_read == len(FILES)
    assert stats.units_written == len(store.vector.unit_uris(RID)) > 0
    assert store.verify([RID]) == []


def test_the_memory_text_index_reads_back_what_tantivy_does(data: Path, repo: Path) -> None:
    store = open_store(data)
    memory = ManagedIndexStore.in_memory(DIM)
    Indexer(memory, HashingEmbedder(DIM), code_parser=SpyParser()).index_resource(
        RID, repo, "directory"
    )
    tantivy_units = list(store.text.units(RID))  # type: ignore[attr-defined]
    memory_units = list(memory.text.units(RID))  # type: ignore[attr-defined]
    assert tantivy_units == memory_units
    assert len(tantivy_units) == len(store.text.unit_uris(RID)) >= len(FILES)
    assert any("return 2 * x" in u.content for u in tantivy_units)
    store.close()


def test_the_cli_reporter_names_the_embedder_and_count(capsys: pytest.CaptureFixture[str]) -> None:
    report = reembed_reporter("acms")
    report(RID, "minilm-int8", 0, 12)
    report(RID, "minilm-int8", 12, 12)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"acms: re-embedding 12 units with minilm-int8 ({RID})"
    assert err[-1] == f"acms: {RID} re-embedded 12/12 units"
