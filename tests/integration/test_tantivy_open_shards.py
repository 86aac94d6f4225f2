"""The text index keeps at most ``max_open_shards`` shards open between
searches (each holds memory maps; unbounded, a long-lived service over
thousands of resources reaches the kernel's map limit).

Observed from outside: the shard directories this process has mapped
(``/proc/self/maps``).  Oracle for the answers: a backend with the default
bound over the same index.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from cleveragents.domain.models.acms.backends import IndexUnit
from cleveragents.domain.models.acms.uko import unit_uri
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend

RIDS = sorted(str(ULID()) for _ in range(8))

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/maps").exists(), reason="needs /proc/self/maps"
)


def _units(rid: str, n: int, version: int = 0) -> list[IndexUnit]:
    return [
        IndexUnit(
            unit_uri(rid, f"f{i}.py", "L1-L2"),
            f"shared word{n} v{version} " + "filler " * i,
            {"path": f"f{i}.py"},
        )
        for i in range(n % 3 + 1)
    ]


def _write_all(path: Path) -> None:
    writer = TantivyTextBackend(path)
    try:
        for n, rid in enumerate(RIDS):
            writer.upsert(rid, _units(rid, n))
    finally:
        writer.close()


@pytest.fixture
def indexed(tmp_path: Path) -> Path:
    """A text index directory holding every resource of RIDS."""
    path = tmp_path / "text"
    _write_all(path)
    return path


def _mapped_shards(path: Path) -> set[str]:
    """Shard directories under ``path`` with a file mapped in this process."""
    root = str(path) + "/"
    found = set()
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            name = line.rstrip("\n").split(maxsplit=5)[-1]
            if name.startswith(root):
                found.add(name[len(root) :].split("/", 1)[0])
    return found


def _settled(path: Path, at_most: int) -> set[str]:
    """:func:`_mapped_shards` once the engine has let go of the shards a
    search closed: a shard dropped on this thread is unmapped only once the
    thread yields (an inline search closes shards and returns without
    yielding: 3 runs of 40 saw a closed shard still mapped right after it,
    none of 40 after one ``time.sleep(0)``).  Waits at most 2 s for
    ``at_most``; a shard kept open stays mapped, so a leak still fails."""
    deadline = time.monotonic() + 2.0
    while True:
        found = _mapped_shards(path)
        if len(found) <= at_most or time.monotonic() > deadline:
            return found
        time.sleep(0.001)


def _answer(backend: TantivyTextBackend, scope: frozenset[str]) -> list[tuple[str, float]]:
    return [(r.uko_uri, r.score) for r in backend.search("shared", scope=scope, max_results=50)]


def test_searching_each_resource_keeps_at_most_the_bound_open(indexed: Path) -> None:
    path = indexed
    backend = TantivyTextBackend(path, max_open_shards=3)
    try:
        seen = 0
        for rid in RIDS:
            assert len(backend.search("shared", scope=frozenset([rid]))) >= 1
            mapped = _settled(path, 3)
            assert rid in mapped  # the one just searched stays open
            assert len(mapped) <= 3
            seen = max(seen, len(mapped))
        assert seen == 3  # it does keep up to the bound, not one at a time
    finally:
        backend.close()


def test_the_least_recently_searched_shard_is_closed_first(indexed: Path) -> None:
    path = indexed
    backend = TantivyTextBackend(path, max_open_shards=3)
    try:
        hot, *others = RIDS
        for rid in others:
            backend.search("shared", scope=frozenset([hot]))
            backend.search("shared", scope=frozenset([rid]))
            assert hot in _mapped_shards(path)
    finally:
        backend.close()


def test_a_scope_wider_than_the_bound_is_answered_whole(indexed: Path) -> None:
    path = indexed
    bounded = TantivyTextBackend(path, max_open_shards=2)
    reference = TantivyTextBackend(path)
    try:
        everything = frozenset(RIDS)
        for _ in range(2):  # the second time reopens what the first closed
            assert _answer(bounded, everything) == _answer(reference, everything)
            assert len(_answer(bounded, everything)) == sum(n % 3 + 1 for n in range(len(RIDS)))
        bounded.search("shared", scope=everything)
        assert len(_mapped_shards(path)) <= len(RIDS)  # the reference holds them all
        reference.close()
        assert len(_settled(path, 2)) <= 2
    finally:
        bounded.close()
        reference.close()


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("search"), st.sets(st.sampled_from(RIDS), min_size=1, max_size=5)),
            st.tuples(st.just("write"), st.sets(st.sampled_from(RIDS), min_size=1, max_size=1)),
        ),
        min_size=1,
        max_size=12,
    ),
    bound=st.integers(1, 4),
)
def test_a_bounded_backend_answers_as_an_unbounded_one(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, set[str]]], bound: int
) -> None:
    """Closed shards reopen at their latest commit: interleaving writes by
    another backend with searches never serves a stale or missing shard."""
    path = tmp_path_factory.mktemp("bounded") / "text"
    _write_all(path)
    bounded = TantivyTextBackend(path, max_open_shards=bound)
    writer = TantivyTextBackend(path)
    try:
        for version, (op, rids) in enumerate(steps, start=1):
            if op == "write":
                (rid,) = rids
                writer.upsert(rid, _units(rid, RIDS.index(rid) + version, version))
                continue
            scope = frozenset(rids)
            reference = TantivyTextBackend(path)
            try:
                assert _answer(bounded, scope) == _answer(reference, scope)
            finally:
                reference.close()
            assert len(bounded._shards) <= max(bound, len(scope))
    finally:
        bounded.close()
        writer.close()


def test_the_bound_is_validated(tmp_path: Path) -> None:
    for bad in (0, -1):
        with pytest.raises(ValueError, match="max_open_shards"):
            TantivyTextBackend(tmp_path / "text", max_open_shards=bad)
    with pytest.raises(TypeError):
        TantivyTextBackend(tmp_path / "text", max_open_shards=2.5)  # type: ignore[arg-type]
