"""FaissVectorBackend against real FAISS indexes, on disk (tmp_path) and in memory.

The oracle is numpy brute force: cosine over the L2-normalised in-scope rows.
"""

from __future__ import annotations

import itertools
import logging
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs
from ulid import ULID

from cleveragents.domain.models.acms.backends import IndexUnit, VectorIndex, VectorResult
from cleveragents.domain.models.acms.errors import IndexUnavailableError
from cleveragents.domain.models.acms.uko import unit_uri
from cleveragents.infrastructure.acms import faiss_vector
from cleveragents.infrastructure.acms.faiss_vector import DB_FILENAME, FaissVectorBackend

TOL = 1e-5
SRC = Path(__file__).resolve().parents[2] / "src"
SHM = "/dev/shm"


# ---------------------------------------------------------------- helpers


def units_for(rid: str, count: int, path: str = "src/mod.py", start: int = 1) -> list[IndexUnit]:
    return [
        IndexUnit(unit_uri(rid, path, f"L{i}-L{i + 1}"), f"chunk {i} of {rid}", {"path": path})
        for i in range(start, start + count)
    ]


def oracle(
    corpus: dict[str, tuple[str, np.ndarray]],
    query: np.ndarray,
    scope: frozenset[str],
    top_k: int,
) -> tuple[list[tuple[str, float]], dict[str, float], bool]:
    """Brute-force ranking of the in-scope rows.

    Returns the expected (uri, clamped score) list, the clamped score of every
    in-scope uri, and whether the ranking is free of near-ties (so the exact
    order is well defined).
    """
    scope = frozenset(s.upper() for s in scope)
    uris = sorted(uri for uri, (rid, _) in corpus.items() if rid in scope)
    if not uris:
        return [], {}, True
    rows = np.array([corpus[uri][1] for uri in uris], dtype=np.float64)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    q = np.asarray(query, dtype=np.float64)
    q = q / np.linalg.norm(q)
    cosine = rows @ q
    raw = dict(zip(uris, (float(c) for c in cosine), strict=True))
    clamp = {uri: max(0.0, min(1.0, c)) for uri, c in raw.items()}
    # Selected by raw cosine (as the engine ranks); ordered by the clamped
    # score the API reports, ties by URI.
    selected = sorted(uris, key=lambda u: (-raw[u], u))
    boundary_clear = len(selected) <= top_k or raw[selected[top_k - 1]] - raw[selected[top_k]] > TOL
    expected = sorted(((u, clamp[u]) for u in selected[:top_k]), key=lambda e: (-e[1], e[0]))

    def clearly_ordered(a: str, b: str) -> bool:
        # Rows clearly below zero all report exactly 0.0 and fall back to URI order.
        return clamp[a] - clamp[b] > TOL or (raw[a] < -TOL and raw[b] < -TOL)

    separated = boundary_clear and all(
        clearly_ordered(a, b) for (a, _), (b, _) in itertools.pairwise(expected)
    )
    return expected, clamp, separated


def assert_matches_oracle(
    results: list[VectorResult],
    expected: list[tuple[str, float]],
    scores: dict[str, float],
    separated: bool,
) -> None:
    assert len(results) == len(expected)
    got = [r.uko_uri for r in results]
    assert len(set(got)) == len(got)
    for result, (_, want) in zip(results, expected, strict=True):
        assert result.uko_uri in scores, "an out-of-scope (or unknown) unit surfaced"
        assert abs(result.score - want) <= TOL
        assert abs(result.score - scores[result.uko_uri]) <= TOL
    for a, b in itertools.pairwise(results):
        assert (a.score, b.uko_uri) >= (b.score, a.uko_uri)  # desc score, ties by uri
    # Same URIs in the same order up to ties: a different URI at a position
    # must be a near-tie of the expected one.
    for uri, (want_uri, want) in zip(got, expected, strict=True):
        assert uri == want_uri or abs(scores[uri] - want) <= TOL
    if separated:
        assert got == [uri for uri, _ in expected]


def load(backend: FaissVectorBackend, corpus: dict[str, tuple[str, np.ndarray]]) -> None:
    by_rid: dict[str, list[str]] = {}
    for uri, (rid, _) in corpus.items():
        by_rid.setdefault(rid, []).append(uri)
    for rid, uris in by_rid.items():
        units = [IndexUnit(uri, f"content of {uri}") for uri in uris]
        backend.upsert(rid, units, np.array([corpus[u][1] for u in uris], dtype=np.float32))


def sqlite_ids(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path / DB_FILENAME)
    try:
        return dict(conn.execute("SELECT uri, id FROM units").fetchall())
    finally:
        conn.close()


@pytest.fixture(params=["disk", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path):
    path = tmp_path / "vectors" if request.param == "disk" else None
    b = FaissVectorBackend(path, dimension=8)
    yield b
    b.close()


def rid() -> str:
    return str(ULID())


# ---------------------------------------------------------------- oracle


@pytest.mark.parametrize("where", ["disk", "memory"])
def test_scoped_search_equals_numpy_even_when_out_of_scope_rows_are_closer(
    tmp_path: Path, where: str
) -> None:
    rng = np.random.default_rng(7)
    dim = 32
    near, far_a, far_b = rid(), rid(), rid()
    query = rng.normal(size=dim)
    corpus: dict[str, tuple[str, np.ndarray]] = {}
    for owner in (near, far_a, far_b):
        for unit in units_for(owner, 150):
            noise = rng.normal(size=dim)
            # The `near` resource is almost the query itself: it would win every slot.
            vec = query + 0.05 * noise if owner == near else noise
            corpus[unit.uko_uri] = (owner, vec)
    with FaissVectorBackend(tmp_path if where == "disk" else None, dimension=dim) as backend:
        load(backend, corpus)
        for scope, top_k in [
            (frozenset({far_a}), 10),
            (frozenset({far_a, far_b}), 25),
            (frozenset({far_b.lower()}), 150),
            (frozenset({far_b}), 10**9),
            (frozenset({near, far_a, far_b}), 40),
            (frozenset({far_a, rid()}), 7),
        ]:
            results = backend.similarity_search(list(query), scope=scope, top_k=top_k)
            expected, scores, separated = oracle(corpus, query, scope, top_k)
            in_scope = 150 * len({s.upper() for s in scope} & {near, far_a, far_b})
            assert len(results) == min(top_k, in_scope)
            assert all(r.metadata["resource_id"] in {s.upper() for s in scope} for r in results)
            assert_matches_oracle(results, expected, scores, separated)


RIDS = sorted(str(ULID()) for _ in range(4))
components = st.one_of(
    st.integers(-2, 2).map(float),
    st.floats(-1.0, 1.0, allow_nan=False, width=32),
)


@st.composite
def vectors(draw: st.DrawFn, dim: int) -> list[float]:
    vec = draw(st.lists(components, min_size=dim, max_size=dim))
    if not any(vec):
        vec[draw(st.integers(0, dim - 1))] = 1.0
    return vec


@st.composite
def scenarios(draw: st.DrawFn):
    dim = draw(st.integers(2, 6))
    corpus: dict[str, tuple[str, np.ndarray]] = {}
    for owner in draw(st.lists(st.sampled_from(RIDS), min_size=1, max_size=4, unique=True)):
        count = draw(st.integers(1, 12))
        for unit in units_for(owner, count):
            corpus[unit.uko_uri] = (owner, np.array(draw(vectors(dim))))
    doomed = draw(st.lists(st.sampled_from(sorted(corpus)), unique=True, max_size=len(corpus)))
    scope = frozenset(draw(st.lists(st.sampled_from(RIDS), unique=True, max_size=4)))
    top_k = draw(st.one_of(st.integers(1, 60), st.just(10**9)))
    query = np.array(draw(vectors(dim)))
    return dim, corpus, doomed, scope, top_k, query


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_property_scoped_search_matches_numpy(scenario) -> None:
    dim, corpus, doomed, scope, top_k, query = scenario
    with FaissVectorBackend(dimension=dim) as backend:
        load(backend, corpus)
        for uri in doomed:
            backend.delete(corpus[uri][0], [uri])
        alive = {uri: v for uri, v in corpus.items() if uri not in set(doomed)}
        results = backend.similarity_search(list(query), scope=scope, top_k=top_k)
        expected, scores, separated = oracle(alive, query, scope, top_k)
        in_scope = sum(1 for owner, _ in alive.values() if owner in scope)
        assert len(results) == min(top_k, in_scope)
        assert all(r.metadata["resource_id"] in scope for r in results)
        assert all(r.uko_uri in alive for r in results)  # no -1 ever maps to a unit
        assert_matches_oracle(results, expected, scores, separated)


# ---------------------------------------------------------------- protocol and basics


def test_is_a_vector_index(backend: FaissVectorBackend) -> None:
    assert isinstance(backend, VectorIndex)
    assert backend.dimension == 8


def test_empty_scope_unknown_resource_and_empty_index(backend: FaissVectorBackend) -> None:
    q = [1.0] * 8
    assert backend.similarity_search(q, scope=frozenset({rid()})) == []
    r = rid()
    backend.upsert(r, units_for(r, 2), np.ones((2, 8), dtype=np.float32))
    assert backend.similarity_search(q, scope=frozenset()) == []
    assert backend.similarity_search(q, scope=frozenset({rid()})) == []
    assert len(backend.similarity_search(q, scope=frozenset({r}), top_k=10**9)) == 2


def test_results_carry_content_metadata_and_clamped_scores(backend: FaissVectorBackend) -> None:
    r = rid()
    units = [
        IndexUnit(unit_uri(r, "a.py", "L1-L2"), "same", {"lang": "py", "resource_id": "lie"}),
        IndexUnit(unit_uri(r, "a.py", "L3-L4"), "opposite"),
    ]
    emb = np.zeros((2, 8), dtype=np.float32)
    emb[0, 0], emb[1, 0] = 3.0, -2.0
    backend.upsert(r, units, emb)
    same, opposite = backend.similarity_search([1.0] + [0.0] * 7, scope=frozenset({r}))
    assert (same.uko_uri, same.content, same.score) == (units[0].uko_uri, "same", 1.0)
    assert same.metadata == {"lang": "py", "resource_id": r}
    assert (opposite.content, opposite.score) == ("opposite", 0.0)
    assert opposite.metadata == {"resource_id": r}


def test_ties_are_broken_by_uri(backend: FaissVectorBackend) -> None:
    r = rid()
    units = units_for(r, 12)
    backend.upsert(r, units[::-1], np.ones((12, 8), dtype=np.float32))
    results = backend.similarity_search([1.0] * 8, scope=frozenset({r}), top_k=12)
    assert [x.uko_uri for x in results] == sorted(u.uko_uri for u in units)


def test_accepts_any_real_dtype_and_normalises(backend: FaissVectorBackend) -> None:
    r = rid()
    units = units_for(r, 3)
    emb = np.array([[1e-30] * 8, [1e300] * 8, [2] * 8], dtype=np.float64)
    emb_int = np.array([[2] * 8], dtype=np.int64)
    backend.upsert(r, units, emb)
    r2 = rid()
    backend.upsert(r2, units_for(r2, 1), emb_int)
    results = backend.similarity_search([5.0] * 8, scope=frozenset({r, r2}))
    assert len(results) == 4
    assert all(abs(x.score - 1.0) <= TOL for x in results)


# ---------------------------------------------------------------- writes


def test_upsert_replace_delete_uris_and_delete_all(backend: FaissVectorBackend) -> None:
    r, other = rid(), rid()
    first = units_for(r, 3)
    backend.upsert(r, first, np.eye(8, dtype=np.float32)[:3])
    backend.upsert(other, units_for(other, 1), np.ones((1, 8), dtype=np.float32))
    assert backend.unit_uris(r) == {u.uko_uri for u in first}
    assert backend.resource_ids() == {r, other}

    # Replace unit 0 (new content and vector), delete unit 1, add unit 4.
    new = [IndexUnit(first[0].uko_uri, "replaced"), *units_for(r, 1, start=4)]
    emb = np.zeros((2, 8), dtype=np.float32)
    emb[0, 7], emb[1, 6] = 1.0, 1.0
    backend.upsert(r, new, emb, delete_uris=[first[1].uko_uri])
    assert backend.unit_uris(r) == {first[0].uko_uri, first[2].uko_uri, new[1].uko_uri}
    top = backend.similarity_search([0.0] * 7 + [1.0], scope=frozenset({r}), top_k=1)
    assert (top[0].uko_uri, top[0].content, top[0].score) == (first[0].uko_uri, "replaced", 1.0)
    all_hits = backend.similarity_search([1.0] * 8, scope=frozenset({r}), top_k=100)
    assert {x.uko_uri for x in all_hits} == backend.unit_uris(r)

    backend.upsert(r, [], np.empty((0, 8), dtype=np.float32), delete_uris=[first[2].uko_uri])
    assert first[2].uko_uri not in backend.unit_uris(r)
    backend.delete(r, [first[2].uko_uri])  # already gone: a no-op
    backend.delete(r, [])
    assert backend.unit_uris(r) == {first[0].uko_uri, new[1].uko_uri}
    backend.delete(r.lower())
    assert backend.unit_uris(r) == set()
    assert backend.resource_ids() == {other}
    assert backend.similarity_search([1.0] * 8, scope=frozenset({r})) == []
    assert len(backend.similarity_search([1.0] * 8, scope=frozenset({r, other}))) == 1


def test_duplicate_uris_in_one_upsert_last_wins(backend: FaissVectorBackend) -> None:
    r = rid()
    uri = unit_uri(r, "a.py", "L1-L1")
    emb = np.eye(8, dtype=np.float32)[:2]
    backend.upsert(r, [IndexUnit(uri, "old"), IndexUnit(uri, "new")], emb)
    (hit,) = backend.similarity_search([0.0, 1.0] + [0.0] * 6, scope=frozenset({r}))
    assert (hit.content, hit.score) == ("new", 1.0)


def test_writes_reject_units_and_uris_of_another_resource(backend: FaissVectorBackend) -> None:
    r, other = rid(), rid()
    backend.upsert(r, units_for(r, 1), np.ones((1, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="does not belong"):
        backend.upsert(r, units_for(other, 1), np.ones((1, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="does not name"):
        backend.upsert(
            r,
            units_for(r, 1, start=9),
            np.ones((1, 8), dtype=np.float32),
            delete_uris=[unit_uri(other, "x.py", "L1-L1")],
        )
    with pytest.raises(ValueError, match="does not name"):
        backend.delete(r, ["https://example.com/x"])
    with pytest.raises(TypeError):
        backend.delete(r, unit_uri(r, "a.py", "L1-L1"))  # a str, not a list of URIs
    with pytest.raises(ValueError):
        backend.upsert("not-a-ulid", [], np.empty((0, 8), dtype=np.float32))
    with pytest.raises(TypeError):
        backend.upsert(r, ["uko://nope"], np.ones((1, 8), dtype=np.float32))  # type: ignore[list-item]
    # Nothing was written by the rejected calls.
    assert backend.resource_ids() == {r}
    assert backend.unit_uris(r) == {units_for(r, 1)[0].uko_uri}


@pytest.mark.parametrize(
    ("embeddings", "error"),
    [
        (np.ones((2, 8), dtype=np.float32), ValueError),  # too many rows
        (np.ones((1, 7), dtype=np.float32), ValueError),  # wrong dimension
        (np.ones(8, dtype=np.float32), ValueError),  # 1-D
        (np.ones((1, 1, 8), dtype=np.float32), ValueError),  # 3-D
        (np.zeros((1, 8), dtype=np.float32), ValueError),  # zero row
        (np.full((1, 8), np.nan, dtype=np.float32), ValueError),
        (np.full((1, 8), np.inf, dtype=np.float64), ValueError),
        (np.ones((1, 8), dtype=bool), TypeError),
        (np.ones((1, 8), dtype=np.complex64), TypeError),
        (np.array([["a"] * 8]), TypeError),
    ],
)
def test_upsert_rejects_bad_embeddings(
    backend: FaissVectorBackend, embeddings: np.ndarray, error: type[Exception]
) -> None:
    r = rid()
    with pytest.raises(error):
        backend.upsert(r, units_for(r, 1), embeddings)
    assert backend.resource_ids() == set()


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ([float("nan")] + [1.0] * 7, ValueError),
        ([float("inf")] + [1.0] * 7, ValueError),
        ([1.0] * 7, ValueError),
        ([1.0] * 9, ValueError),
        ([], ValueError),
        ([0.0] * 8, ValueError),
        (np.ones((1, 8)), ValueError),
        ([True] * 8, TypeError),
        (np.ones(8, dtype=bool), TypeError),
        ("1" * 8, TypeError),
    ],
)
def test_search_rejects_bad_queries(
    backend: FaissVectorBackend, query: object, error: type[Exception]
) -> None:
    r = rid()
    backend.upsert(r, units_for(r, 1), np.ones((1, 8), dtype=np.float32))
    with pytest.raises(error):
        backend.similarity_search(query, scope=frozenset({r}))  # type: ignore[arg-type]


def test_search_rejects_bad_scope_and_top_k(backend: FaissVectorBackend) -> None:
    q = [1.0] * 8
    with pytest.raises(TypeError):
        backend.similarity_search(q, scope={rid()})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        backend.similarity_search(q, scope=frozenset({"nope"}))
    with pytest.raises(ValueError):
        backend.similarity_search(q, scope=frozenset({rid()}), top_k=0)
    with pytest.raises(TypeError):
        backend.similarity_search(q, scope=frozenset({rid()}), top_k=True)


def test_numpy_query_is_accepted(backend: FaissVectorBackend) -> None:
    r = rid()
    backend.upsert(r, units_for(r, 1), np.ones((1, 8), dtype=np.float32))
    (hit,) = backend.similarity_search(np.ones(8, dtype=np.float32), scope=frozenset({r}))  # type: ignore[arg-type]
    assert abs(hit.score - 1.0) <= TOL


# ---------------------------------------------------------------- durability and ids


def test_ids_are_never_reused_after_delete_and_across_reopen(tmp_path: Path) -> None:
    r = rid()
    units = units_for(r, 3)
    emb = np.ones((3, 8), dtype=np.float32)
    with FaissVectorBackend(tmp_path, dimension=8) as backend:
        backend.upsert(r, units, emb)
        first = sqlite_ids(tmp_path)
        backend.delete(r)  # deletes the highest ids too
        backend.upsert(r, units, emb)
        second = sqlite_ids(tmp_path)
        assert min(second.values()) > max(first.values())
        backend.upsert(r, units[:1], emb[:1])  # replace: a fresh id
        third = sqlite_ids(tmp_path)
        assert third[units[0].uko_uri] > max(second.values())
        highest = max(third.values())
        backend.delete(r, [units[0].uko_uri])
    with FaissVectorBackend(tmp_path, dimension=8) as backend:
        backend.upsert(r, units[:1], emb[:1])
        assert sqlite_ids(tmp_path)[units[0].uko_uri] > highest
        hits = backend.similarity_search([1.0] * 8, scope=frozenset({r}), top_k=10)
        assert sorted(h.uko_uri for h in hits) == sorted(u.uko_uri for u in units)


def test_persistence_across_reopen(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    r1, r2 = rid(), rid()
    query = list(rng.normal(size=8))
    with FaissVectorBackend(tmp_path / "idx", dimension=8) as backend:
        backend.upsert(r1, units_for(r1, 20), rng.normal(size=(20, 8)).astype(np.float32))
        backend.upsert(r2, units_for(r2, 5), rng.normal(size=(5, 8)).astype(np.float32))
        backend.delete(r2, [units_for(r2, 1)[0].uko_uri])
        before = backend.similarity_search(query, scope=frozenset({r1, r2}), top_k=50)
    with FaissVectorBackend(str(tmp_path / "idx"), dimension=8) as reopened:
        assert reopened.resource_ids() == {r1, r2}
        assert len(reopened.unit_uris(r2)) == 4
        after = reopened.similarity_search(query, scope=frozenset({r1, r2}), top_k=50)
    assert after == before
    assert len(after) == 24


def test_reopen_with_another_dimension_is_rejected(tmp_path: Path) -> None:
    FaissVectorBackend(tmp_path, dimension=8).close()
    with pytest.raises(ValueError, match="dimension 8"):
        FaissVectorBackend(tmp_path, dimension=16)
    with pytest.raises(ValueError):
        FaissVectorBackend(tmp_path, dimension=0)
    with pytest.raises(TypeError):
        FaissVectorBackend(tmp_path, dimension=8.0)  # type: ignore[arg-type]


def test_another_instance_sees_writes_on_its_next_search(tmp_path: Path) -> None:
    r1, r2 = rid(), rid()
    q = [1.0] * 8
    scope = frozenset({r1, r2})
    with (
        FaissVectorBackend(tmp_path, dimension=8) as a,
        FaissVectorBackend(tmp_path, dimension=8) as b,
    ):
        assert b.similarity_search(q, scope=scope) == []
        a.upsert(r1, units_for(r1, 2), np.ones((2, 8), dtype=np.float32))
        assert len(b.similarity_search(q, scope=scope)) == 2
        # b writes on top of a stale mirror: b must end up with both writes.
        a.upsert(r1, units_for(r1, 1, start=10), np.ones((1, 8), dtype=np.float32))
        b.upsert(r2, units_for(r2, 4), np.ones((4, 8), dtype=np.float32))
        assert len(b.similarity_search(q, scope=scope, top_k=100)) == 7
        assert len(a.similarity_search(q, scope=scope, top_k=100)) == 7
        b.delete(r1)
        assert {h.metadata["resource_id"] for h in a.similarity_search(q, scope=scope)} == {r2}
        assert a.resource_ids() == {r2}


def test_open_failures_are_index_unavailable(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(IndexUnavailableError):
        FaissVectorBackend(tmp_path / "file", dimension=8)
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / DB_FILENAME).write_bytes(b"this is not a sqlite database" * 100)
    with pytest.raises(IndexUnavailableError) as info:
        FaissVectorBackend(corrupt, dimension=8)
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)


def corrupt_one_resource(tmp_path: Path, embedding: bytes) -> tuple[str, str]:
    """Two resources on disk; the first one's stored embeddings are replaced."""
    bad, good = rid(), rid()
    with FaissVectorBackend(tmp_path, dimension=8) as backend:
        backend.upsert(bad, units_for(bad, 2), np.ones((2, 8), dtype=np.float32))
        backend.upsert(good, units_for(good, 2), np.ones((2, 8), dtype=np.float32))
    conn = sqlite3.connect(tmp_path / DB_FILENAME)
    with conn:
        conn.execute("UPDATE units SET embedding = ? WHERE resource_id = ?", (embedding, bad))
    conn.close()
    return bad, good


@pytest.mark.parametrize(
    "embedding", [b"\x00", np.full(8, np.nan, np.float32).tobytes()], ids=["size", "nan"]
)
def test_a_corrupt_embedding_row_is_index_unavailable(tmp_path: Path, embedding: bytes) -> None:
    """Opening reads no vectors, so a corrupt row is reported by the first
    search whose scope holds it, every time, and never harms another scope."""
    bad, good = corrupt_one_resource(tmp_path, embedding)
    with FaissVectorBackend(tmp_path, dimension=8) as backend:
        for _ in range(2):
            with pytest.raises(IndexUnavailableError):
                backend.similarity_search([1.0] * 8, scope=frozenset({bad, good}))
            assert backend.loaded_resources() <= {good}
        assert len(backend.similarity_search([1.0] * 8, scope=frozenset({good}))) == 2


def test_closed_backend_is_index_unavailable(backend: FaissVectorBackend) -> None:
    backend.close()
    backend.close()  # idempotent
    r = rid()
    with pytest.raises(IndexUnavailableError):
        backend.similarity_search([1.0] * 8, scope=frozenset({r}))
    with pytest.raises(IndexUnavailableError):
        backend.upsert(r, units_for(r, 1), np.ones((1, 8), dtype=np.float32))
    with pytest.raises(IndexUnavailableError):
        backend.resource_ids()


def test_concurrent_searches_and_writes_in_process(backend: FaissVectorBackend) -> None:
    rng = np.random.default_rng(11)
    owners = [rid() for _ in range(4)]
    for owner in owners:
        backend.upsert(owner, units_for(owner, 50), rng.normal(size=(50, 8)).astype(np.float32))
    errors: list[BaseException] = []

    def searcher() -> None:
        try:
            for _ in range(200):
                hits = backend.similarity_search(
                    list(rng.normal(size=8)), scope=frozenset(owners[:2]), top_k=30
                )
                assert len(hits) == 30
                assert {h.metadata["resource_id"] for h in hits} <= set(owners[:2])
        except BaseException as exc:  # collected for the main thread
            errors.append(exc)

    def writer() -> None:
        try:
            for i in range(100):
                owner = owners[2 + i % 2]
                backend.upsert(owner, units_for(owner, 5), np.ones((5, 8), dtype=np.float32))
                backend.delete(owner, [units_for(owner, 1)[0].uko_uri])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=searcher) for _ in range(2)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# ---------------------------------------------------------------- per-resource search


@pytest.mark.parametrize("top_k", [1, 2, 5, 15, 16, 100])
def test_ties_across_the_top_k_boundary_are_broken_by_uri(
    backend: FaissVectorBackend, top_k: int
) -> None:
    """Equal scores straddling ``top_k``, within and across resources: the
    lowest URIs win, whatever order the rows were inserted in."""
    r1, r2 = rid(), rid()
    best = np.zeros(8, dtype=np.float32)
    best[0] = 1.0
    tied = np.zeros(8, dtype=np.float32)
    tied[:2] = 1.0
    units1 = units_for(r1, 8)
    units2 = units_for(r2, 8, path="src/other.py")
    backend.upsert(r1, units1[::-1], np.array([tied] * 7 + [best]))  # units1[0] is `best`
    backend.upsert(r2, units2[::-1], np.array([tied] * 8))
    ranked = [units1[0].uko_uri, *sorted(u.uko_uri for u in units1[1:] + units2)]
    results = backend.similarity_search(best.tolist(), scope=frozenset({r1, r2}), top_k=top_k)
    assert [r.uko_uri for r in results] == ranked[:top_k]
    alone = backend.similarity_search(best.tolist(), scope=frozenset({r2}), top_k=top_k)
    assert [r.uko_uri for r in alone] == sorted(u.uko_uri for u in units2)[:top_k]


def test_many_resources_merge_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(21)
    dim = 16
    corpus: dict[str, tuple[str, np.ndarray]] = {}
    owners = [rid() for _ in range(30)]
    for i, owner in enumerate(owners):
        for unit in units_for(owner, 1 + i % 7):
            corpus[unit.uko_uri] = (owner, rng.normal(size=dim))
    with FaissVectorBackend(tmp_path, dimension=dim) as backend:
        load(backend, corpus)
        # Deletes in the middle of a resource keep its rows and ids aligned.
        doomed = [uri for n, uri in enumerate(sorted(corpus)) if n % 3 == 1]
        for uri in doomed:
            backend.delete(corpus[uri][0], [uri])
            del corpus[uri]
        for scope_size, top_k in [(1, 3), (5, 10), (30, 25), (30, 10**6)]:
            scope = frozenset(owners[:scope_size])
            query = rng.normal(size=dim)
            results = backend.similarity_search(list(query), scope=scope, top_k=top_k)
            expected, scores, separated = oracle(corpus, query, scope, top_k)
            assert_matches_oracle(results, expected, scores, separated)


@pytest.mark.parametrize(
    "convert",
    [
        list,
        tuple,
        lambda v: np.array(v, dtype=np.float32),
        lambda v: np.array(v, dtype=np.float64),
        lambda v: [np.float64(x) for x in v],  # float subclass: the checked path
        lambda v: [int(x) for x in v],  # ints: the checked path
    ],
)
def test_query_fast_path_agrees_with_the_checked_path(
    backend: FaissVectorBackend, convert: object
) -> None:
    r = rid()
    rng = np.random.default_rng(5)
    backend.upsert(r, units_for(r, 20), rng.normal(size=(20, 8)).astype(np.float32))
    base = [3.0, -1.0, 2.0, 0.0, 5.0, -4.0, 1.0, 2.0]
    want = backend.similarity_search(base, scope=frozenset({r}), top_k=5)
    got = backend.similarity_search(convert(base), scope=frozenset({r}), top_k=5)  # type: ignore[operator]
    assert [h.uko_uri for h in got] == [h.uko_uri for h in want]
    assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-6)


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ([1.0] * 7 + [True], TypeError),
        ([1.0] * 7 + ["1.0"], TypeError),
        ([1.0] * 7 + [float("nan")], ValueError),
        ((1.0,) * 7 + (float("inf"),), ValueError),
        ([1.0] * 9, ValueError),
        (np.array([1.0] * 7 + [np.nan]), ValueError),
        (np.ones(9), ValueError),
        ([0.0] * 8, ValueError),
        ([10**400] + [1.0] * 7, ValueError),
    ],
)
def test_query_fast_path_still_rejects_bad_input(
    backend: FaissVectorBackend, query: object, error: type[Exception]
) -> None:
    r = rid()
    backend.upsert(r, units_for(r, 1), np.ones((1, 8), dtype=np.float32))
    with pytest.raises(error):
        backend.similarity_search(query, scope=frozenset({r}))  # type: ignore[arg-type]


def test_tiny_query_components_are_normalised(backend: FaissVectorBackend) -> None:
    r = rid()
    backend.upsert(r, units_for(r, 2), np.eye(8, dtype=np.float32)[:2])
    (hit,) = backend.similarity_search([1e-310] + [0.0] * 7, scope=frozenset({r}), top_k=1)
    assert hit.score == pytest.approx(1.0)


def test_a_row_deleted_behind_the_index_is_index_unavailable(tmp_path: Path) -> None:
    """A hit whose row vanished without a generation bump (not a write of
    this adapter) is looked for again, then reported, never a KeyError."""
    r = rid()
    with FaissVectorBackend(tmp_path, dimension=8) as backend:
        backend.upsert(r, units_for(r, 3), np.ones((3, 8), dtype=np.float32))
        assert len(backend.similarity_search([1.0] * 8, scope=frozenset({r}))) == 3
        conn = sqlite3.connect(tmp_path / DB_FILENAME)
        with conn:
            conn.execute("DELETE FROM units WHERE id = (SELECT MIN(id) FROM units)")
        conn.close()
        with pytest.raises(IndexUnavailableError):
            backend.similarity_search([1.0] * 8, scope=frozenset({r}))


def test_a_concurrent_delete_by_another_instance_is_seen(tmp_path: Path) -> None:
    r = rid()
    with (
        FaissVectorBackend(tmp_path, dimension=8) as a,
        FaissVectorBackend(tmp_path, dimension=8) as b,
    ):
        a.upsert(r, units_for(r, 30), np.random.default_rng(1).normal(size=(30, 8)))
        assert len(b.similarity_search([1.0] * 8, scope=frozenset({r}), top_k=50)) == 30
        for n in range(1, 30, 2):
            a.delete(r, [units_for(r, 1, start=n)[0].uko_uri])
            hits = b.similarity_search([1.0] * 8, scope=frozenset({r}), top_k=50)
            assert len(hits) == 30 - (n + 1) // 2


# ---------------------------------------------------------------- loading follows the scope


@contextmanager
def load_events() -> Iterator[list[dict[str, Any]]]:
    """The adapter's ``faiss_vector.loaded`` events (one per resource brought
    up to date from SQLite), whatever level an earlier test configured."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with capture_logs() as logs:
            loaded: list[dict[str, Any]] = []
            yield loaded
            loaded += [e for e in logs if e["event"] == "faiss_vector.loaded"]
    finally:
        structlog.configure(**saved)


def three_resources(path: Path, rows: int = 50) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(17)
    owners = sorted(rid() for _ in range(3))
    matrix = rng.normal(size=(rows, 8))
    with FaissVectorBackend(path, dimension=8) as writer:
        for owner in owners:
            writer.upsert(owner, units_for(owner, rows), matrix)
    return owners, matrix


def test_open_loads_nothing_and_a_search_loads_only_its_scope(tmp_path: Path) -> None:
    (a, b, c), _ = three_resources(tmp_path)
    q = [1.0] * 8
    with load_events() as events, FaissVectorBackend(tmp_path, dimension=8) as reader:
        assert reader.loaded_resources() == frozenset()
        assert events == []
        assert len(reader.similarity_search(q, scope=frozenset({a}), top_k=100)) == 50
        assert reader.loaded_resources() == {a}
        assert len(reader.similarity_search(q, scope=frozenset({a, b}), top_k=200)) == 100
        assert reader.loaded_resources() == {a, b}
        # Unknown resources, repeated scopes: nothing more is read.
        reader.similarity_search(q, scope=frozenset({a, b, rid()}))
        reader.similarity_search(q, scope=frozenset({b}))
        assert reader.loaded_resources() == {a, b}
    assert [(e["resource_id"], e["added"], e["removed"]) for e in events] == [
        (a, 50, 0),
        (b, 50, 0),
    ]
    assert c not in {e["resource_id"] for e in events}


def test_a_foreign_commit_to_a_refreshes_only_a_with_its_change(tmp_path: Path) -> None:
    """Another connection writes A: B's in-memory index is the same object,
    untouched; A's is brought up to date in place, reading only the change,
    and the next search sees the write (read-after-write)."""
    (a, b, _), matrix = three_resources(tmp_path, rows=200)
    with (
        FaissVectorBackend(tmp_path, dimension=8) as reader,
        FaissVectorBackend(tmp_path, dimension=8) as writer,
    ):
        both = frozenset({a, b})
        reader.similarity_search([1.0] * 8, scope=both)
        # White box: the per-resource objects, to show which ones were touched.
        res_a, res_b = reader._resources[a], reader._resources[b]
        index_b, ids_b = res_b.index, res_b.ids

        probe = np.zeros(8)
        probe[3] = 1.0
        new = units_for(a, 1, path="src/new.py")[0]
        writer.upsert(a, [new], probe[None, :])
        with load_events() as events:
            (hit,) = reader.similarity_search(probe.tolist(), scope=both, top_k=1)
        assert (hit.uko_uri, hit.score) == (new.uko_uri, pytest.approx(1.0))
        assert [(e["resource_id"], e["added"], e["removed"]) for e in events] == [(a, 1, 0)]
        assert reader._resources[a] is res_a and res_a.index.ntotal == 201
        assert reader._resources[b] is res_b
        assert res_b.index is index_b and res_b.ids is ids_b and index_b.ntotal == 200

        doomed = units_for(a, 1, start=7)[0].uko_uri
        writer.delete(a, [doomed, new.uko_uri])
        with load_events() as events:
            hits = reader.similarity_search(probe.tolist(), scope=both, top_k=1000)
        assert [(e["resource_id"], e["added"], e["removed"]) for e in events] == [(a, 0, 2)]
        assert events[0]["via"] == "log"  # the removed ids, not a scan of A's ids
        assert {h.uko_uri for h in hits} == writer.unit_uris(a) | writer.unit_uris(b)
        assert len(hits) == 399
        assert reader._resources[b] is res_b and res_b.index is index_b

        writer.delete(a)
        with load_events() as events:
            hits = reader.similarity_search(matrix[0].tolist(), scope=both, top_k=1000)
        assert {h.metadata["resource_id"] for h in hits} == {b} and len(hits) == 200
        assert reader.loaded_resources() == {b} and reader._resources[b] is res_b
        assert events == []  # a resource with no rows left is dropped, not read


WRITER = """
import sys
import numpy as np
from cleveragents.domain.models.acms.backends import IndexUnit
from cleveragents.domain.models.acms.uko import unit_uri
from cleveragents.infrastructure.acms.faiss_vector import FaissVectorBackend
path, rid = sys.argv[1:]
with FaissVectorBackend(path, dimension=8) as w:
    probe = np.zeros((1, 8)); probe[0, 5] = 1.0
    w.upsert(rid, [IndexUnit(unit_uri(rid, "src/other.py", "L1-L1"), "from afar")], probe)
"""


def test_a_commit_by_another_process_is_not_even_checked_by_other_scopes(tmp_path: Path) -> None:
    (a, b, _), _ = three_resources(tmp_path)
    with FaissVectorBackend(tmp_path, dimension=8) as reader:
        reader.similarity_search([1.0] * 8, scope=frozenset({a, b}))
        res_b = reader._resources[b]
        subprocess.run(
            [sys.executable, "-c", WRITER, str(tmp_path), a],
            check=True,
            env={**os.environ, "PYTHONPATH": str(SRC)},
            timeout=120,
        )
        probe = [0.0] * 5 + [1.0, 0.0, 0.0]
        with load_events() as events:
            reader.similarity_search(probe, scope=frozenset({b}))
        assert events == []
        assert reader._resources[b] is res_b
        with load_events() as events:
            (hit,) = reader.similarity_search(probe, scope=frozenset({a}), top_k=1)
        assert (hit.content, hit.score) == ("from afar", pytest.approx(1.0))
        assert [(e["resource_id"], e["added"]) for e in events] == [(a, 1)]


def test_a_commit_to_another_resource_costs_a_reader_one_lookup(tmp_path: Path) -> None:
    """Another process commits to A: a reader of B (and of B and C) learns
    that B did not move from one read of the in-scope generations, with no
    transaction and no read of B's rows, and keeps B's memory as it was."""
    (a, b, c), _ = three_resources(tmp_path)
    with FaissVectorBackend(tmp_path, dimension=8) as reader:
        reader.similarity_search([1.0] * 8, scope=frozenset({b, c}))
        res_b, res_c = reader._resources[b], reader._resources[c]
        statements: list[str] = []
        assert reader._conn is not None
        reader._conn.set_trace_callback(statements.append)
        for scope in (frozenset({b}), frozenset({b, c})):
            subprocess.run(
                [sys.executable, "-c", WRITER, str(tmp_path), a],
                check=True,
                env={**os.environ, "PYTHONPATH": str(SRC)},
                timeout=120,
            )
            statements.clear()
            with load_events() as events:
                reader.similarity_search([1.0] * 8, scope=scope)
            assert events == []
            assert not [s for s in statements if s.lstrip().upper().startswith("BEGIN")]
            assert len([s for s in statements if "FROM resources" in s]) == 1
            assert not [s for s in statements if "embedding" in s]
            assert reader._resources[b] is res_b and reader._resources[c] is res_c
        # A commit to B itself is still seen, through the synced path.
        subprocess.run(
            [sys.executable, "-c", WRITER, str(tmp_path), b],
            check=True,
            env={**os.environ, "PYTHONPATH": str(SRC)},
            timeout=120,
        )
        probe = [0.0] * 5 + [1.0, 0.0, 0.0]
        with load_events() as events:
            (hit,) = reader.similarity_search(probe, scope=frozenset({b}), top_k=1)
        assert (hit.content, hit.score) == ("from afar", pytest.approx(1.0))
        assert [(e["resource_id"], e["added"]) for e in events] == [(b, 1)]
        assert reader._resources[b] is res_b


def test_own_writes_update_a_loaded_resource_in_place_and_never_load_one(
    backend: FaissVectorBackend,
) -> None:
    a, b = rid(), rid()
    backend.upsert(a, units_for(a, 5), np.ones((5, 8), dtype=np.float32))
    assert backend.loaded_resources() == frozenset()  # a write loads nothing
    backend.similarity_search([1.0] * 8, scope=frozenset({a}))
    backend.upsert(b, units_for(b, 5), np.ones((5, 8), dtype=np.float32))
    assert backend.loaded_resources() == {a}
    probe = [0.0] * 7 + [1.0]
    with load_events() as events:
        backend.upsert(a, units_for(a, 1, start=50), np.array([probe]))
        backend.delete(a, [units_for(a, 1)[0].uko_uri])
        hits = backend.similarity_search(probe, scope=frozenset({a}), top_k=10)
    assert events == []  # mirrored in memory: nothing read back
    assert hits[0].uko_uri == units_for(a, 1, start=50)[0].uko_uri
    assert {h.uko_uri for h in hits} == backend.unit_uris(a)


def test_a_database_of_the_first_schema_is_opened_and_searched(tmp_path: Path) -> None:
    """Databases written before per-resource generations get them on open."""
    (a, b, _), _ = three_resources(tmp_path)
    conn = sqlite3.connect(tmp_path / DB_FILENAME)
    with conn:
        conn.execute("DROP TABLE resources")
        conn.execute("DELETE FROM meta WHERE key = 'schema'")
    conn.close()
    with FaissVectorBackend(tmp_path, dimension=8) as backend:
        assert len(backend.similarity_search([1.0] * 8, scope=frozenset({a, b}), top_k=500)) == 100
        backend.delete(b)
        assert len(backend.similarity_search([1.0] * 8, scope=frozenset({a, b}), top_k=500)) == 50


POOL = sorted(str(ULID()) for _ in range(4))
searches = st.tuples(
    st.just("search"),
    st.frozensets(st.sampled_from(POOL), max_size=4),
    st.tuples(st.integers(1, 8), vectors(4)),
)
writes = st.one_of(
    st.tuples(
        st.just("upsert"),
        st.sampled_from(POOL),
        st.lists(st.tuples(st.integers(1, 6), vectors(4)), min_size=1, max_size=4),
    ),
    st.tuples(st.just("delete"), st.sampled_from(POOL), st.lists(st.integers(1, 6))),
    st.tuples(st.just("drop"), st.sampled_from(POOL), st.none()),
)
# Each write is followed by a few searches, so a write between two searches
# of the same resource is common.
operations = st.lists(
    st.tuples(writes, st.lists(searches, min_size=1, max_size=3)), min_size=2, max_size=12
).map(lambda steps: [op for write, after in steps for op in (write, *after)])


@pytest.mark.parametrize("log_limit", [faiss_vector.LOG_LIMIT, 0], ids=["log", "scan"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations)
def test_property_a_lazy_reader_beside_a_writer_matches_numpy(
    log_limit: int, ops: list[Any]
) -> None:
    """A reader that loads lazily, beside a writer on the same database: every
    search equals brute force over the writer's current rows, and the reader
    holds in memory only resources some search named that still have rows.

    Removed rows are found from the removal log ("log"), or, with a log that
    is emptied at every write, by scanning the resource's ids ("scan").
    """
    saved, faiss_vector.LOG_LIMIT = faiss_vector.LOG_LIMIT, log_limit
    try:
        check_lazy_reader(ops)
    finally:
        faiss_vector.LOG_LIMIT = saved


def check_lazy_reader(ops: list[Any]) -> None:
    # tmpfs when there is one: this test is about logic, not durability (fsync).
    with tempfile.TemporaryDirectory(dir=SHM if os.path.isdir(SHM) else None) as d:
        writer = FaissVectorBackend(d, dimension=4)
        reader = FaissVectorBackend(d, dimension=4)
        corpus: dict[str, tuple[str, np.ndarray]] = {}
        named: set[str] = set()
        try:
            for op, target, arg in ops:
                if op == "upsert":
                    units = [IndexUnit(unit_uri(target, f"m{n}.py", "L1-L1"), "x") for n, _ in arg]
                    writer.upsert(target, units, np.array([v for _, v in arg]))
                    for unit, (_, v) in zip(units, arg, strict=True):
                        corpus[unit.uko_uri] = (target, np.array(v))
                elif op == "delete":
                    uris = [unit_uri(target, f"m{n}.py", "L1-L1") for n in arg]
                    writer.delete(target, uris)
                    for uri in uris:
                        corpus.pop(uri, None)
                elif op == "drop":
                    writer.delete(target)
                    corpus = {u: v for u, v in corpus.items() if v[0] != target}
                else:
                    top_k, query = arg
                    named |= target
                    got = reader.similarity_search(query, scope=target, top_k=top_k)
                    assert_matches_oracle(got, *oracle(corpus, np.array(query), target, top_k))
                    with_rows = {owner for owner, _ in corpus.values()}
                    assert reader.loaded_resources() <= named
                    assert reader.loaded_resources() & target == with_rows & target
        finally:
            reader.close()
            writer.close()


def test_readers_behind_an_emptied_removal_log_scan_ids_instead(tmp_path: Path) -> None:
    """A write that removes more ids than the log keeps empties it; a reader
    loaded before that finds the removed rows by scanning the ids."""
    (a, _, _), _ = three_resources(tmp_path, rows=50)
    with (
        FaissVectorBackend(tmp_path, dimension=8) as reader,
        FaissVectorBackend(tmp_path, dimension=8) as writer,
    ):
        scope = frozenset({a})
        reader.similarity_search([1.0] * 8, scope=scope)
        saved, faiss_vector.LOG_LIMIT = faiss_vector.LOG_LIMIT, 3
        try:
            writer.delete(a, [u.uko_uri for u in units_for(a, 2)])  # logged: 2
            writer.delete(a, [u.uko_uri for u in units_for(a, 2, start=10)])  # 4 > 3
        finally:
            faiss_vector.LOG_LIMIT = saved
        with load_events() as events:
            hits = reader.similarity_search([1.0] * 8, scope=scope, top_k=100)
        assert [(e["removed"], e["via"]) for e in events] == [(4, "scan")]
        assert {h.uko_uri for h in hits} == writer.unit_uris(a) and len(hits) == 46
        writer.delete(a, [units_for(a, 1, start=30)[0].uko_uri])  # logged again
        with load_events() as events:
            assert len(reader.similarity_search([1.0] * 8, scope=scope, top_k=100)) == 45
        assert [(e["removed"], e["via"]) for e in events] == [(1, "log")]


def test_loaded_vectors_are_bounded_least_recently_searched_first(tmp_path: Path) -> None:
    """Past ``cache_bytes`` the least recently searched resources outside the
    current scope are dropped; answers never change (a dropped resource is
    read again), and a scope over the budget is still searched whole."""
    (a, b, c), _ = three_resources(tmp_path, rows=50)
    one = 50 * (4 * 8 + 8)  # 50 rows of 8 float32 and an int64 id each
    q = [1.0] + [0.5] * 7
    with (
        FaissVectorBackend(tmp_path, dimension=8) as unbounded,
        FaissVectorBackend(tmp_path, dimension=8, cache_bytes=2 * one + one // 2) as bounded,
    ):

        def search(*rids: str) -> list[VectorResult]:
            got = bounded.similarity_search(q, scope=frozenset(rids), top_k=200)
            assert got == unbounded.similarity_search(q, scope=frozenset(rids), top_k=200)
            assert len(got) == sum(len(bounded.unit_uris(r)) for r in rids)
            return got

        search(a)
        search(b)
        assert bounded.loaded_resources() == {a, b}
        assert bounded.loaded_bytes() == 2 * one
        search(c)  # a is the least recently searched
        assert bounded.loaded_resources() == {b, c}
        search(b)
        with load_events() as events:
            search(a)  # now c is
        assert bounded.loaded_resources() == {a, b}
        assert [(e["resource_id"], e["added"]) for e in events] == [(a, 50)]
        search(a, b, c)  # over the budget, but all needed now
        assert bounded.loaded_resources() == {a, b, c}
        search(c)  # back under the budget: one of a, b goes
        assert c in bounded.loaded_resources() and len(bounded.loaded_resources()) == 2
        assert bounded.loaded_bytes() == 2 * one
        # A write to a loaded resource that outgrows the budget keeps only it.
        bounded.upsert(c, units_for(c, 60, start=100), np.ones((60, 8)))
        assert bounded.loaded_resources() == {c}
        search(c, a)
        search(a)
        assert bounded.loaded_resources() == {a}


def test_cache_bytes_is_validated(tmp_path: Path) -> None:
    for bad in (0, -1):
        with pytest.raises(ValueError):
            FaissVectorBackend(tmp_path, dimension=8, cache_bytes=bad)
    with pytest.raises(TypeError):
        FaissVectorBackend(tmp_path, dimension=8, cache_bytes=1.5)  # type: ignore[arg-type]


_WRITE_PAST_A_FILE_SIZE_LIMIT = """
import resource, signal, sys
import numpy as np
from cleveragents.domain.models.acms.backends import IndexUnit
from cleveragents.domain.models.acms.errors import IndexUnavailableError
from cleveragents.domain.models.acms.uko import unit_uri
from cleveragents.infrastructure.acms.faiss_vector import FaissVectorBackend

backend = FaissVectorBackend(sys.argv[1], dimension=4)
rid = "01JD5TD11B0000000000000000"
one = [IndexUnit(unit_uri(rid, "a.py", "L1-L1"), "x", {"path": "a.py"})]
backend.upsert(rid, one, np.ones((1, 4), dtype=np.float32))
# What a full disk does to the next write, without filling one.
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
many = [
    IndexUnit(unit_uri(rid, f"f{i}.py", "L1-L1"), "y" * 500, {"path": f"f{i}.py"})
    for i in range(3000)
]
try:
    backend.upsert(rid, many, np.ones((3000, 4), dtype=np.float32))
except IndexUnavailableError as exc:
    print(exc)
"""


def test_a_write_the_disk_refuses_names_the_database_and_why(tmp_path: Path) -> None:
    """Found by a reviewer: a full disk was "cannot write the vector index",
    even at debug level; the database and SQLite's reason are in the line."""
    done = subprocess.run(
        [sys.executable, "-c", _WRITE_PAST_A_FILE_SIZE_LIMIT, str(tmp_path / "v")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    assert line.startswith(f"cannot write the vector index {tmp_path / 'v' / 'vectors.sqlite3'}: ")
    assert "disk I/O error" in line or "full" in line, line
