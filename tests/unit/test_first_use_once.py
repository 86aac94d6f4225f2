"""An index opened on first use is opened once, however many threads use it
first at the same moment; a walk past its limit keeps nothing alive.

Found by a reviewer: 40 concurrent ``traverse`` calls on a freshly started
service took the service from 76 to ~470 MiB (1.9 GiB before each tool had
its own lane of threads), never given back.  The lane's 8 threads each opened
the graph index (and the catalog) themselves, each a backend with its own
lock, so eight cold walks ran at once over eight copies of the records; and
each walk past its limit was kept, 10,000 triples and their sets, in a cycle
through the error's traceback until a full collection.  With the fixes: 76
to 147 MiB, and sequential calls flat.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import pytest

from cleveragents.application.services.agent_session import (
    AgentSession,
    FileText,
    SessionScope,
)
from cleveragents.application.services.operations import _LazyBackend
from cleveragents.domain.models.acms.backends import GraphBackend, TextBackend, VectorBackend
from cleveragents.domain.models.acms.errors import WalkLimitError
from cleveragents.domain.models.acms.uko import PREDICATES, file_uri
from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder
from cleveragents.infrastructure.acms.index_store import ManagedIndexStore
from cleveragents.infrastructure.acms.memory_indexes import (
    MemoryCatalog,
    MemoryGraphIndex,
    MemoryTextIndex,
    MemoryVectorIndex,
)

THREADS = 8
A = "01JD5TD11B0000000000000000"


def counted(make: Callable[[], object]) -> tuple[Callable[[], object], list[int]]:
    """A factory as slow as a first open (an engine imported, files opened)
    that counts its calls."""
    calls: list[int] = []

    def factory() -> object:
        calls.append(1)
        time.sleep(0.05)
        return make()

    return factory, calls


def at_once(use: Callable[[], object]) -> list[object]:
    """``use()`` in THREADS threads released together; what each got."""
    start = threading.Barrier(THREADS)
    got: list[object] = []

    def run() -> None:
        start.wait()
        got.append(use())

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(got) == THREADS
    return got


def test_a_lazy_backend_used_first_by_many_threads_is_built_once() -> None:
    factory, calls = counted(MemoryTextIndex)
    lazy = cast(Any, _LazyBackend(factory))
    methods = at_once(lambda: lazy.search)
    assert len(calls) == 1
    assert len({id(m.__self__) for m in methods}) == 1  # one backend behind them all


@pytest.mark.parametrize("name", ["text", "vector", "graph", "catalog"])
def test_the_store_opens_each_index_once_when_many_threads_open_it_first(name: str) -> None:
    made: dict[str, list[int]] = {}
    factories: dict[str, Callable[[], object]] = {}
    for key, make in (
        ("text", MemoryTextIndex),
        ("vector", lambda: MemoryVectorIndex(4)),
        ("graph", MemoryGraphIndex),
        ("catalog", MemoryCatalog),
    ):
        factories[key], made[key] = counted(make)
    store = ManagedIndexStore(
        text=cast(Any, factories["text"]),
        vector=cast(Any, factories["vector"]),
        graph=cast(Any, factories["graph"]),
        catalog=cast(Any, factories["catalog"]),
        dimension=4,
    )
    opened = at_once(lambda: getattr(store, name))
    assert len(made[name]) == 1
    assert len({id(index) for index in opened}) == 1


def test_a_walk_past_its_limit_leaves_nothing_for_the_collector() -> None:
    graph = MemoryGraphIndex(max_rows=50)
    start = file_uri(A, "hub.py")
    triples = [(start, PREDICATES["imports"], file_uri(A, f"m{i}.py")) for i in range(40)]
    triples += [
        (file_uri(A, f"m{i}.py"), PREDICATES["imports"], file_uri(A, f"n{i}_{j}.py"))
        for i in range(40)
        for j in range(40)
    ]
    graph.upsert(A, triples)
    session = AgentSession(
        text=cast(TextBackend, MemoryTextIndex()),
        vector=cast(VectorBackend, MemoryVectorIndex(4)),
        graph=cast(GraphBackend, graph),
        embedder=HashingEmbedder(4),
        scope=SessionScope(frozenset({A}), {"p/a": frozenset({A})}),
        read_file=lambda rid, path, size: FileText(""),
        is_indexed=lambda rid, path: path == "hub.py",
    )
    gc.collect()
    gc.disable()
    try:
        with pytest.raises(WalkLimitError, match="at hop 2"):
            session.traverse("hub.py", depth=3)
        left = gc.collect()  # what only a cycle kept: the walk's frames and lists
    finally:
        gc.enable()
    assert left < 100, f"{left} objects of a finished walk were kept by a cycle"
