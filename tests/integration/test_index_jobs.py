"""Indexing with worker processes (``jobs``), against the real engines on disk.

- ``jobs=2`` writes the same index contents as ``jobs=1`` (catalog rows,
  text units and their search results, graph triples, vectors within float
  tolerance), with batches small enough that many are in flight at once.
- A worker that dies (SIGKILL while planning one file) or a file whose
  planning raises does not lose the run: that one file is skipped with a
  reason, every other file is indexed, ``verify`` agrees, and the next run
  indexes the file once it no longer fails.
- Workers import no index engine.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cleveragents import _collector as collector
from cleveragents.application.services import index_workers
from cleveragents.application.services.index_workers import (
    COLLECT_EVERY,
    FAULT_ENV_VAR,
    PlanFailure,
    PlannerPool,
)
from cleveragents.application.services.indexer import Indexer, PlannerSpec
from cleveragents.domain.models.acms.indexing import IndexStats
from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder
from cleveragents.infrastructure.acms.index_store import ManagedIndexStore, split_identity
from cleveragents.infrastructure.acms.text_analysis import prepare_content
from cleveragents.infrastructure.acms.tree_sitter_code import TreeSitterCodeParser

DIM = 64
RID = "01J0000000000000000000WKRS"
STDLIB = Path(sysconfig.get_paths()["stdlib"])
SMALL_BATCH = 8 * 1024  # many batches from a small tree: the window fills


def make_tree(root: Path) -> Path:
    for package in ("json", "wsgiref"):
        shutil.copytree(
            STDLIB / package, root / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("from pkg.core import alpha\n")
    (root / "pkg" / "core.py").write_text(
        "import json\n\n\ndef alpha():\n    return json.dumps(beta())\n\n\n"
        "def beta():\n    return {'k': 1}\n"
    )
    (root / "pkg" / "bad.py").write_text("def hostile():\n    return 'planning me fails'\n")
    (root / "notes.md").write_text("# Notes\n\nThe alpha function dumps beta.\n")
    (root / "blob.bin").write_bytes(b"\0\1\2" * 100)
    return root


def indexer_at(data: Path, *, prepared: bool = False, **batches: int) -> Indexer:
    """``prepared``: workers also run the text index's preparer (as the
    container sets them up), so the writer indexes their prepared text.
    ``batches``: the store's ``batch_units`` / ``batch_bytes`` / ``batch_triples``."""
    store = ManagedIndexStore.open(data, dimension=DIM, **batches)  # type: ignore[arg-type]
    spec = PlannerSpec(
        functools.partial(HashingEmbedder, DIM),
        TreeSitterCodeParser,
        text_preparer=prepare_content if prepared else None,
    )
    return Indexer(store, HashingEmbedder(DIM), code_parser=TreeSitterCodeParser(), spec=spec)


def run(indexer: Indexer, tree: Path, jobs: int, *, full: bool = False) -> IndexStats:
    with indexer.workers(jobs, batch_bytes=SMALL_BATCH) as ix:
        return ix.index_resource(RID, tree, "directory", full=full)


def contents(indexer: Indexer, *, bm25: bool = True) -> dict[str, object]:
    """Everything the indexes hold for the resource, in comparable form.

    ``bm25=False``: text hits as a set without scores (Tantivy counts deleted
    documents in its statistics until segments merge, so after a repair the
    scores, not the hits, depend on the history)."""
    store = indexer.store
    assert isinstance(store, ManagedIndexStore)
    scope = frozenset({RID})
    records = store.catalog.records(RID)
    subjects = sorted(store.graph.subjects(RID))
    triples = sorted(
        tuple(t) for s in subjects for t in store.graph.get_triples(s, scope=scope).triples
    )
    text: dict[str, object] = {}
    for q in ("decoder", "alpha beta", "scanstring", "WSGI server headers"):
        hits = store.text.search(q, scope=scope, max_results=10_000)
        if bm25:
            text[q] = [(r.uko_uri, r.content, round(r.score, 6)) for r in hits]
        else:
            text[q] = sorted((r.uko_uri, r.content) for r in hits)
    probe = HashingEmbedder(DIM)
    vectors = {
        q: [
            (r.uko_uri, r.score)
            for r in store.vector.similarity_search(
                probe.embed([q])[0].tolist(), scope=scope, top_k=10_000
            )
        ]
        for q in ("JSONDecoder raw_decode", "def alpha", "make_server")
    }
    return {
        "records": {p: (r.sha256, r.unit_uris, r.graph_subjects) for p, r in records.items()},
        "text_units": sorted(store.text.unit_uris(RID)),
        "vector_units": sorted(store.vector.unit_uris(RID)),
        "triples": triples,
        "text": text,
        "vectors": vectors,
    }


def assert_same_index(a: Indexer, b: Indexer, *, bm25: bool = True) -> dict[str, object]:
    """Both indexers' stores hold the same resource (``contents``; vectors
    within float tolerance) and each passes ``verify``; ``a``'s contents."""
    ca, cb = contents(a, bm25=bm25), contents(b, bm25=bm25)
    for key in ("records", "text_units", "vector_units", "triples", "text"):
        assert ca[key] == cb[key], key
    va, vb = ca["vectors"], cb["vectors"]
    assert isinstance(va, dict) and isinstance(vb, dict)
    for q in va:
        assert [u for u, _ in va[q]] == [u for u, _ in vb[q]], q
        assert [s for _, s in va[q]] == pytest.approx([s for _, s in vb[q]], abs=1e-6), q
    for ix in (a, b):
        assert isinstance(ix.store, ManagedIndexStore)
        assert ix.store.verify([RID]) == []
    return ca


@pytest.mark.parametrize("prepared", [False, True], ids=["writer-analyses", "workers-prepare"])
def test_two_jobs_write_what_one_job_writes(tmp_path: Path, prepared: bool) -> None:
    tree = make_tree(tmp_path / "tree")
    one, two = indexer_at(tmp_path / "one"), indexer_at(tmp_path / "two", prepared=prepared)
    stats_one = run(one, tree, 1)
    with capture_logs() as logs:
        stats_two = run(two, tree, 2)
    assert any(e["event"] == "indexer.workers_started" for e in logs)  # not planned in process
    assert stats_two.files_indexed == stats_one.files_indexed > 10
    assert stats_two.units_written == stats_one.units_written
    a = assert_same_index(one, two)
    assert len(a["records"]) == stats_one.files_indexed  # type: ignore[arg-type]
    for ix in (one, two):
        assert isinstance(ix.store, ManagedIndexStore)
        ix.store.close()


def test_a_second_run_with_workers_writes_only_the_change(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    ix = indexer_at(tmp_path / "data")
    run(ix, tree, 2)
    (tree / "pkg" / "core.py").write_text("def gamma():\n    return 3\n")
    (tree / "notes.md").unlink()
    again = run(ix, tree, 2)
    assert (again.files_indexed, again.files_deleted) == (1, 1)
    assert ix.store.text.search("gamma", scope=frozenset({RID}))
    units = ix.store.text.unit_uris(RID)
    assert not [u for u in units if "/notes.md#" in u]
    assert [u for u in units if "/pkg/core.py#" in u] == [
        u.uko_uri for u in ix.store.text.search("gamma", scope=frozenset({RID}))
    ]
    assert isinstance(ix.store, ManagedIndexStore)
    assert ix.store.verify([RID]) == []
    ix.store.close()


@pytest.mark.parametrize(
    ("fault", "jobs", "reason"),
    [("raise", 2, "parse_failed"), ("raise", 1, "parse_failed")],
)
def test_a_failing_file_is_skipped_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str, jobs: int, reason: str
) -> None:
    tree = make_tree(tmp_path / "tree")
    reference = indexer_at(tmp_path / "reference")
    run(reference, tree, 1)
    ix = indexer_at(tmp_path / "data")
    # An earlier version of the file was indexed: its units must go.
    (tree / "pkg" / "bad.py").write_text("def hostile_v1():\n    return 1\n")
    run(ix, tree, 1)
    (tree / "pkg" / "bad.py").write_text("def hostile():\n    return 'planning me fails'\n")
    monkeypatch.setenv(FAULT_ENV_VAR, f"{fault}:pkg/bad.py")
    with capture_logs() as logs:
        stats = run(ix, tree, jobs, full=True)  # every file through the workers
    assert stats.skipped.get(reason) == 1, stats
    assert [e["path"] for e in logs if e["event"] == "indexer.file_failed"] == ["pkg/bad.py"]
    store = ix.store
    assert isinstance(store, ManagedIndexStore)
    assert store.verify([RID]) == []
    records = store.catalog.records(RID)
    want = reference.store.catalog.records(RID)
    assert set(records) == set(want) - {"pkg/bad.py"}
    assert {p: r.unit_uris for p, r in records.items()} == {
        p: r.unit_uris for p, r in want.items() if p != "pkg/bad.py"
    }
    assert not store.text.search("hostile_v1", scope=frozenset({RID}), syntax="tantivy")

    monkeypatch.delenv(FAULT_ENV_VAR)
    again = run(ix, tree, jobs)
    assert again.files_read == 1 and again.files_indexed == 1
    assert contents(ix) == contents(reference)
    store.close()
    reference.store.close()


def test_a_file_that_kills_its_worker_is_indexed_without_its_parser_and_quarantined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's planning kills every worker it is sent to: it is planned
    in the writer without the tree-sitter parser (its text and vectors, and
    the symbols the pure-Python reader finds; no calls), and its content is
    quarantined, so no later session parses it in the writer; another
    content of it is parsed again."""
    tree = make_tree(tmp_path / "tree")
    bad = tree / "pkg" / "bad.py"
    bad.write_text("def hostile():\n    return helper_call()\n")
    ix = indexer_at(tmp_path / "data")
    monkeypatch.setenv(FAULT_ENV_VAR, "crash:pkg/bad.py")  # a parser crash, in any process
    with capture_logs() as logs:
        stats = run(ix, tree, 2, full=True)  # every file through the workers
    # blob.bin alone is skipped (by its extension, at listing: never seen).
    assert stats.skipped == {"binary": 1} and stats.files_indexed == stats.files_seen, stats
    crashed = [e for e in logs if e["event"] == "indexer.planner_crashed"]
    assert [e["path"] for e in crashed] == ["pkg/bad.py"]
    store = ix.store
    assert isinstance(store, ManagedIndexStore)
    assert store.verify([RID]) == []
    hits = store.text.search("hostile", scope=frozenset({RID}))
    assert [h.uko_uri.split("#")[0] for h in hits] == [f"uko://{RID}/pkg/bad.py"]
    scope = frozenset({RID})

    def facts(name: str) -> set[str]:
        symbol = f"uko://{RID}/pkg/bad.py#sym={name}"
        triples = store.graph.get_triples(symbol, scope=scope).triples
        return {t[1].rsplit("#", 1)[1] for t in triples}

    assert "name" in facts("hostile") and "calls" not in facts("hostile")  # the fallback's
    sha = hashlib.sha256(bad.read_bytes()).hexdigest()
    with store.session(RID) as tx:  # remembered by the catalog, for later sessions
        assert tx.quarantined("pkg/bad.py", sha)
        assert not tx.quarantined("pkg/bad.py", "0" * 64)
        assert not tx.quarantined("pkg/core.py", sha)
    # Kept while the planning code is the same; tried again by new code (a
    # units identity of another version), which may plan it fine.
    with store.session(RID, identity=ix.identity) as tx:
        assert tx.quarantined("pkg/bad.py", sha)
    newer = ix.identity.replace(split_identity(ix.identity).units, "units-next|rules")
    with store.session(RID, identity=newer) as tx:
        assert tx.full and not tx.quarantined("pkg/bad.py", sha)
    with store.session(RID, identity=ix.identity) as tx:  # the file went with it
        assert not tx.quarantined("pkg/bad.py", sha)
        tx.quarantine("pkg/bad.py", sha)  # as the crash repair would, for the rest
    # A new content of it is parsed again (here without the fault).
    monkeypatch.delenv(FAULT_ENV_VAR)
    bad.write_text("def friendly():\n    return helper_call()\n")
    run(ix, tree, 2)
    assert "calls" in facts("friendly")
    store.close()


@pytest.mark.parametrize("preparer", [None, prepare_content], ids=["plain", "preparer"])
def test_workers_import_no_engine(tmp_path: Path, preparer: Any) -> None:
    """Not even with the text index's preparer: on ASCII text it analyses in
    Python (the engine's analyzer is loaded for other text only)."""
    spec = PlannerSpec(
        functools.partial(HashingEmbedder, DIM), TreeSitterCodeParser, text_preparer=preparer
    )
    with PlannerPool(spec, 2) as pool:
        outcomes = pool.submit(RID, pool.listing(["a.py"]), [("a.py", b"x = 1\n")]).result()
        executor = pool._executor()
        loaded = executor.submit(eval, "sorted(__import__('sys').modules)").result()
    plan = outcomes[0][0]  # type: ignore[index]
    assert (plan.prepared is not None) == (preparer is not None)
    assert "tree_sitter" in loaded  # the parser was built in the worker
    assert not [m for m in loaded if m.split(".")[0] in {"tantivy", "faiss", "rdflib"}]


_CHILD = """
import functools, sys
from pathlib import Path
from cleveragents.application.services.indexer import Indexer, PlannerSpec
from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder
from cleveragents.infrastructure.acms.index_store import ManagedIndexStore
from cleveragents.infrastructure.acms.tree_sitter_code import TreeSitterCodeParser

if __name__ == "__main__":
    data, tree, rid, dim, batch = sys.argv[1:6]
    store = ManagedIndexStore.open(Path(data), dimension=int(dim))
    spec = PlannerSpec(functools.partial(HashingEmbedder, int(dim)), TreeSitterCodeParser)
    ix = Indexer(store, HashingEmbedder(int(dim)), code_parser=TreeSitterCodeParser(), spec=spec)
    with ix.workers(2, batch_bytes=int(batch)) as w:
        w.index_resource(rid, tree, "directory", full=True)
"""


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("step", ["index.text", "index.catalog", "index.clean"])
def test_a_killed_writer_leaves_no_worker_and_the_next_run_repairs(
    tmp_path: Path, step: str
) -> None:
    tree = make_tree(tmp_path / "tree")
    reference = indexer_at(tmp_path / "reference")
    run(reference, tree, 1)
    data = tmp_path / "data"
    ix = indexer_at(data)
    (tree / "pkg" / "bad.py").write_text("def hostile_v1():\n    return 1\n")
    run(ix, tree, 1)
    ix.store.close()
    (tree / "pkg" / "bad.py").write_text("def hostile():\n    return 'planning me fails'\n")
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    marker = f"ACMS_TEST_MARKER={uuid.uuid4().hex}"
    key, value = marker.split("=")
    env = {**os.environ, "ACMS_FAULT_AT": step, key: value}
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, str(script), str(data), str(tree), RID, str(DIM), str(SMALL_BATCH)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=300,
    )
    assert done.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 30
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_with(marker) == []  # the workers went with their writer
    again = indexer_at(data)
    run(again, tree, 2)
    assert isinstance(again.store, ManagedIndexStore)
    assert again.store.verify([RID]) == []
    assert contents(again, bm25=False) == contents(reference, bm25=False)
    again.store.close()
    reference.store.close()


class _GcRecordingEmbedder(HashingEmbedder):
    """Records whether the cyclic collector was on at each embedding call."""

    def __init__(self, dimension: int) -> None:
        super().__init__(dimension)
        self.collector_on: list[bool] = []

    def embed(self, texts: Any) -> Any:
        self.collector_on.append(gc.isenabled())
        return super().embed(texts)


def test_indexing_pauses_the_collector_and_restores_it(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    embedder = _GcRecordingEmbedder(DIM)
    store = ManagedIndexStore.open(tmp_path / "data", dimension=DIM)
    ix = Indexer(store, embedder, code_parser=TreeSitterCodeParser())
    assert gc.isenabled()
    stats = ix.index_resource(RID, tree, "directory")
    assert stats.files_indexed > 5
    assert embedder.collector_on and not any(embedder.collector_on)
    assert gc.isenabled()
    # Also when the session fails half way.
    embedder.collector_on.clear()
    (tree / "pkg" / "core.py").write_text("def alpha():\n    return 2\n")
    with (
        pytest.MonkeyPatch.context() as mp,
        pytest.raises(RuntimeError, match="store gone"),
    ):
        mp.setattr(
            store.catalog,
            "put",
            lambda *a, **k: (_ for _ in ()).throw(RuntimeError("store gone")),
        )
        ix.index_resource(RID, tree, "directory")
    assert embedder.collector_on == [False]
    assert gc.isenabled()
    store.close()


def test_hydration_pauses_the_collector_and_restores_it(tmp_path: Path) -> None:
    from cleveragents.application.services.context_tier_hydrator import (
        hydrate_tiers_from_project,
    )
    from cleveragents.application.services.context_tier_service import ContextTierService

    tree = make_tree(tmp_path / "tree")
    embedder = _GcRecordingEmbedder(DIM)
    store = ManagedIndexStore.open(tmp_path / "data", dimension=DIM)
    ix = Indexer(store, embedder, code_parser=TreeSitterCodeParser())
    assert gc.isenabled()
    stored = hydrate_tiers_from_project(
        ContextTierService(), "p", RID, str(tree), "directory", indexer=ix
    )
    assert stored > 5
    assert embedder.collector_on and not any(embedder.collector_on)
    assert gc.isenabled()
    store.close()


def test_a_long_indexing_run_still_collects_now_and_then(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Other threads of the process (a service's queries) make cycles while
    # the collector is paused: the writer collects once per period.
    calls: list[int] = []
    real = gc.collect
    monkeypatch.setattr(collector, "COLLECT_PERIOD", 0.0)
    monkeypatch.setattr(collector.gc, "collect", lambda *a: calls.append(1) or real(*a))
    tree = make_tree(tmp_path / "tree")
    store = ManagedIndexStore.open(tmp_path / "data", dimension=DIM)
    stats = Indexer(store, HashingEmbedder(DIM)).index_resource(RID, tree, "directory")
    assert len(calls) >= stats.files_indexed > 5  # once per file at a period of 0
    store.close()


def test_workers_plan_with_the_collector_paused(tmp_path: Path) -> None:
    spec = PlannerSpec(functools.partial(HashingEmbedder, DIM), TreeSitterCodeParser)
    with PlannerPool(spec, 2) as pool:
        outcomes = pool.submit(RID, pool.listing(["a.py"]), [("a.py", b"x = 1\n")]).result()
        state = pool._executor().submit(
            eval, "(__import__('gc').isenabled(), __import__('gc').get_freeze_count())"
        )
        enabled, frozen = state.result()
    assert not isinstance(outcomes[0], PlanFailure)
    assert enabled is False
    assert frozen > 1000  # the imports, parser and embedder: never walked again


@pytest.mark.parametrize("env", [None, "0", "3"], ids=["default", "off", "three"])
def test_workers_plan_below_the_writers_priority(
    monkeypatch: pytest.MonkeyPatch, env: str | None
) -> None:
    # The writer, the serial stage, runs first (index_workers' module doc).
    if env is None:
        monkeypatch.delenv(index_workers.NICE_ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(index_workers.NICE_ENV_VAR, env)
    steps = index_workers.WORKER_NICE if env is None else int(env)
    spec = PlannerSpec(functools.partial(HashingEmbedder, DIM), TreeSitterCodeParser)
    with PlannerPool(spec, 2) as pool:
        outcomes = pool.submit(RID, pool.listing(["a.py"]), [("a.py", b"x = 1\n")]).result()
        worker = pool._executor().submit(
            eval, "__import__('os').getpriority(__import__('os').PRIO_PROCESS, 0)"
        )
        niceness = worker.result()
    assert not isinstance(outcomes[0], PlanFailure)
    writer = os.getpriority(os.PRIO_PROCESS, 0)
    assert index_workers.WORKER_NICE > 0
    assert niceness == min(19, writer + steps)


@pytest.mark.parametrize("raw", ["x", "-1", "20", "1.5"])
def test_a_bad_worker_nice_is_refused_before_any_worker_starts(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(index_workers.NICE_ENV_VAR, raw)
    spec = PlannerSpec(functools.partial(HashingEmbedder, DIM), TreeSitterCodeParser)
    with pytest.raises(ValueError, match="ACMS_WORKER_NICE"):
        PlannerPool(spec, 2)


def test_a_bad_worker_nice_is_refused_at_one_job_too(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # One job starts no worker, but a typo in the variable must not wait
    # for a run that does to show.
    monkeypatch.setenv(index_workers.NICE_ENV_VAR, "ten")
    store = ManagedIndexStore.open(tmp_path / "data", dimension=DIM)
    spec = PlannerSpec(functools.partial(HashingEmbedder, DIM), TreeSitterCodeParser)
    ix = Indexer(store, HashingEmbedder(DIM), spec=spec)
    try:
        with pytest.raises(ValueError, match="ACMS_WORKER_NICE"), ix.workers(1):
            pass
    finally:
        store.close()


def test_a_worker_collects_once_per_collect_every_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(index_workers.gc, "collect", lambda *a: calls.append(1) or 0)
    monkeypatch.setattr(index_workers._Worker, "spec", PlannerSpec(HashingEmbedder))
    monkeypatch.setattr(index_workers._Worker, "embedder", HashingEmbedder(DIM))
    monkeypatch.setattr(index_workers._Worker, "batches", 0)
    listing = tmp_path / "listing.pickle"
    listing.write_bytes(pickle.dumps((["a.txt"], None)))  # (paths, root package)
    for _ in range(2 * COLLECT_EVERY + 1):
        index_workers._plan_in_worker(RID, str(listing), [("a.txt", b"hello\n")])
    assert len(calls) == 2


def test_a_suspect_no_worker_can_settle_is_indexed_without_the_parser_and_kept(
    tmp_path: Path,
) -> None:
    """A mark left by a dead writer, and no worker to ask (an indexer without
    a spec, as when shared memory or the workers cannot start): the file is
    indexed without tree-sitter this time, not dropped, and stays a suspect
    (never quarantined on the mark's word alone)."""
    tree = make_tree(tmp_path / "tree")
    ix = indexer_at(tmp_path / "data")
    run(ix, tree, 1)
    core = tree / "pkg" / "core.py"
    core.write_text("def suspected():\n    return helper_call()\n")
    sha = hashlib.sha256(core.read_bytes()).hexdigest()
    planning = tmp_path / "data" / "planning"
    planning.mkdir(exist_ok=True)
    (planning / RID).write_text(json.dumps([sha, "pkg/core.py"]) + "\n")
    alone = Indexer(ix.store, HashingEmbedder(DIM), code_parser=TreeSitterCodeParser())
    with capture_logs() as logs:
        stats = run(alone, tree, 1)
    assert stats.skipped == {"binary": 1} and stats.files_indexed == 1, stats  # blob.bin
    assert [e["path"] for e in logs if e["event"] == "indexer.suspect_unsettled"] == ["pkg/core.py"]
    assert alone.store.text.search("suspected", scope=frozenset({RID}))
    assert (planning / f"{RID}.suspect").exists()
    assert not (planning / f"{RID}.quarantine").exists()
    ix.store.close()


def test_a_walk_limit_error_survives_pickle() -> None:
    from cleveragents.domain.models.acms.backends import walk_limit_error

    err = walk_limit_error("urn:x", 10, 3)
    back = pickle.loads(pickle.dumps(err))
    assert (str(back), back.start, back.max_rows, back.hop) == (str(err), "urn:x", 10, 3)
