"""A commit to resource B costs a reader of resource A nothing: through the
operations a host uses, A's loaded vectors, graph and SPARQL union stay the
very objects they were (nothing of A is read again) whether B is committed
by this process or by another ``acms reindex``; a commit to A itself is
followed in place, reading only the change."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from cleveragents.application.services.operations import AcmsOperations
from cleveragents.bootstrap import bootstrap

SRC = Path(__file__).resolve().parents[2] / "src"
DIM = 16
LOADS = ("faiss_vector.loaded", "graph_store.loaded", "graph_store.followed")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[AcmsOperations, Path, dict[str, str], Path]]:
    trees = {}
    for name in ("a", "b"):
        root = tmp_path / name
        root.mkdir()
        (root / "core.py").write_text(f"def {name}_quokka():\n    return helper_{name}()\n")
        (root / "util.py").write_text(f"def helper_{name}():\n    return 1\n")
        trees[name] = root
    data = tmp_path / "data"
    ops = bootstrap(data, embedding_dimension=DIM)
    rids = {}
    for name, root in trees.items():
        ops.add_project(f"local/{name}")
        rids[name] = ops.add_resource(str(root), f"local/{name}").resource_id
    ops.reindex()
    yield ops, data, rids, tmp_path
    ops._store().close()


def _reindex_elsewhere(data: Path, rid: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "cleveragents.acms", "--json", "reindex", "--resource", rid],
        env={
            **os.environ,
            "PYTHONPATH": str(SRC),
            "ACMS_DATA_DIR": str(data),
            "ACMS_EMBEDDING_DIM": str(DIM),
        },
        check=True,
        capture_output=True,
        timeout=300,
    )


def _loads(logs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [
        (e["event"], e.get("resource_id") or e.get("resource", ""))
        for e in logs
        if e["event"] in LOADS
    ]


@pytest.fixture(autouse=True)
def _debug_events() -> Iterator[None]:
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(0))
    try:
        yield
    finally:
        structlog.configure(**saved)


def test_a_commit_to_another_resource_leaves_a_readers_structures_identical(
    world: tuple[AcmsOperations, Path, dict[str, str], Path],
) -> None:
    ops, data, rids, tmp = world
    a, b = rids["a"], rids["b"]
    view = ops.view(frozenset({a}))
    start = f"uko://{a}/core.py"
    query = ops.embed_query("a quokka")

    def read() -> tuple[Any, ...]:
        return (
            [r.uko_uri for r in view.similarity_search(query, top_k=50)],
            view.traverse(start, depth=2).triples,
            view.sparql_query("SELECT ?s ?p ?o WHERE { ?s ?p ?o }").triples,
        )

    first = read()
    assert first[0] and first[1] and first[2]
    store = ops._store()
    vector: Any = store.vector
    graph: Any = store.graph
    held = (vector._resources[a], graph._graphs[a], graph._unions[frozenset({a})])

    for commit in ("here", "elsewhere"):
        (tmp / "b" / "core.py").write_text(f"def b_changed_{commit}():\n    return 2\n")
        if commit == "here":
            ops.reindex(resources=[b])
        else:
            _reindex_elsewhere(data, b)
        with capture_logs() as logs:
            assert read() == first
        assert _loads(logs) == [], commit
        assert all(
            x is y
            for x, y in zip(
                (vector._resources[a], graph._graphs[a], graph._unions[frozenset({a})]),
                held,
                strict=True,
            )
        ), commit

    # A commit to A itself, by another process: followed in place, only the change read.
    (tmp / "a" / "extra.py").write_text("def a_newcomer():\n    return 3\n")
    _reindex_elsewhere(data, a)
    with capture_logs() as logs:
        after = read()
    assert any("extra.py" in uri for uri in after[0])
    assert any("extra.py" in t[0] for t in after[2])
    assert vector._resources[a] is held[0] and graph._graphs[a] is held[1]
    assert [(e["event"], e.get("via"), e.get("added")) for e in logs if e["event"] in LOADS] == [
        ("faiss_vector.loaded", "log", 1),  # the one new unit, read by id
        ("graph_store.followed", None, None),  # the appended records only
    ]


def _calls(fn: Callable[[], object]) -> Counter[tuple[str, str]]:
    """The Python functions and C functions this thread called while running ``fn``."""
    calls: Counter[tuple[str, str]] = Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            calls[(frame.f_code.co_filename, frame.f_code.co_name)] += 1
        elif event == "c_call":
            calls[("C", getattr(arg, "__qualname__", repr(arg)))] += 1

    # No collection inside: gc callbacks (hypothesis installs one) would count.
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        if enabled:
            gc.enable()
    return calls


@pytest.mark.parametrize(
    ("kind", "commits"),
    [
        ("text", ("here", "elsewhere")),
        ("traverse", ("here", "elsewhere")),
        # After another process's commit a vector reader makes its one
        # lookup of the generations (test_faiss_vector's "one lookup").
        ("vector", ("here",)),
    ],
)
def test_the_first_query_after_a_commit_to_another_resource_makes_a_warm_querys_calls(
    world: tuple[AcmsOperations, Path, dict[str, str], Path], kind: str, commits: tuple[str, ...]
) -> None:
    # The oracle is the warm query itself: whatever a commit to B made A's
    # reader check, reload or rebuild would show as calls a warm query does
    # not make, so what is left of the time ratio (the README's after-commit
    # rows) is the CPU's caches.  (SPARQL waits on its worker by polling:
    # its calls vary with timing.)
    ops, data, rids, tmp = world
    a, b = rids["a"], rids["b"]
    view = ops.view(frozenset({a}))
    embedding = ops.embed_query("a quokka")
    queries: dict[str, Callable[[], object]] = {
        "text": lambda: view.search("quokka helper", max_results=20),
        "vector": lambda: view.similarity_search(embedding, top_k=20),
        "traverse": lambda: view.traverse(f"uko://{a}/core.py", depth=2),
    }
    query = queries[kind]
    assert query()
    query()
    warm = _calls(query)
    assert warm == _calls(query)  # the oracle is stable
    for commit in commits:
        (tmp / "b" / "core.py").write_text(f"def b_{kind}_{commit}():\n    return 2\n")
        if commit == "here":
            ops.reindex(resources=[b])
        else:
            _reindex_elsewhere(data, b)
        after = _calls(query)
        assert after == warm, (commit, (after - warm).most_common(5), (warm - after).most_common(5))
