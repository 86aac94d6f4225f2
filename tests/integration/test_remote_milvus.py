"""The text and vector contracts, oracles and scope checks against a real
Milvus server (``milvus-lite server`` on 127.0.0.1, started by the tests)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.domain.models.acms.backends import IndexUnit
from cleveragents.domain.models.acms.errors import IndexUnavailableError, QueryError
from cleveragents.domain.models.acms.uko import resource_id_of, unit_uri
from cleveragents.infrastructure.acms.milvus_common import scope_filter
from cleveragents.infrastructure.acms.milvus_text import MilvusTextBackend, parse_query
from cleveragents.infrastructure.acms.milvus_vector import MilvusVectorBackend
from cleveragents.testing.backend_contracts import (
    DIMENSION,
    TextIndexContract,
    VectorIndexContract,
)
from remote_servers import ServerProcess, free_port, milvus_server, running

__all__ = ["milvus_server"]  # the fixture, re-exported so pytest finds it


def emptied(backend: MilvusTextBackend | MilvusVectorBackend) -> None:
    """Delete every row and close: creating a collection costs ~0.5 s on Milvus
    Lite, so each test class reuses one, emptied after every test."""
    try:
        backend._coll.delete_where('id != ""')
    finally:
        backend.close()


class TestMilvusTextContract(TextIndexContract):
    @pytest.fixture
    def backend(self, milvus_server: ServerProcess) -> Iterator[MilvusTextBackend]:
        b = MilvusTextBackend(milvus_server.uri, collection="contract_text", timeout=20)
        yield b
        emptied(b)

    _NO_FILTERS = "Milvus text has no path/lang filters (it raises QueryError, tested below)"

    def test_lang_filter_keeps_one_language(self) -> None:
        pytest.skip(self._NO_FILTERS)

    def test_path_glob_filter(self) -> None:
        pytest.skip(self._NO_FILTERS)

    def test_filters_restrict_without_changing_scores_or_order(self) -> None:
        pytest.skip(self._NO_FILTERS)

    def test_match_lines_are_file_line_numbers_of_matching_lines(self) -> None:
        pytest.skip(self._NO_FILTERS + "; match_lines without a filter: test below")

    def test_the_definition_ranks_first_for_its_name(self) -> None:
        pytest.skip("Milvus text has no symbol field: BM25 over content only")


def test_milvus_refuses_filters_and_reports_match_lines(
    text_backend: MilvusTextBackend,
) -> None:
    rid = A
    u = IndexUnit(
        unit_uri(rid, "a.py", "L5-L7"),
        "one\nsocket two\nthree socket",
        {"path": "a.py", "start_line": "5"},
    )
    text_backend.upsert(rid, [u])
    (hit,) = text_backend.search("socket(", scope=frozenset({rid}))
    assert hit.metadata["match_lines"] == "6,7"
    for options in ({"path": "*.py"}, {"lang": "python"}):
        with pytest.raises(QueryError, match="filters"):
            text_backend.search("socket", scope=frozenset({rid}), **options)


class TestMilvusVectorContract(VectorIndexContract):
    @pytest.fixture
    def backend(self, milvus_server: ServerProcess) -> Iterator[MilvusVectorBackend]:
        b = MilvusVectorBackend(
            milvus_server.uri, dimension=DIMENSION, collection="contract_vectors", timeout=20
        )
        yield b
        emptied(b)


# ---------------------------------------------------------------- scope and filters

A = "01JD5TD11B000000000000000A"
B = "01JD5TD11B000000000000000B"


@pytest.fixture
def text_backend(milvus_server: ServerProcess) -> Iterator[MilvusTextBackend]:
    b = MilvusTextBackend(milvus_server.uri, collection="extra_text", timeout=20)
    yield b
    emptied(b)


@pytest.fixture
def vector_backend(milvus_server: ServerProcess) -> Iterator[MilvusVectorBackend]:
    b = MilvusVectorBackend(milvus_server.uri, dimension=4, collection="extra_vec", timeout=20)
    yield b
    emptied(b)


def _units(rid: str, n: int, text: str) -> list[IndexUnit]:
    return [
        IndexUnit(unit_uri(rid, f"f{i}.py", "L1-L2"), text, {"path": f"f{i}.py"}) for i in range(n)
    ]


INJECTIONS = [
    f'{A}", "{B}',
    f'{A}"] or resource_id != ["',
    f"{A}' or 1==1 or '",
    f'{A}" || true || "',
    f"{A}\\",
    f"{A} ",
    "",
]


@pytest.mark.parametrize("member", INJECTIONS)
def test_filter_text_in_a_scope_is_refused_before_any_request(member: str) -> None:
    with pytest.raises(ValueError, match="ULID"):
        scope_filter(frozenset({A, member}))


@given(st.frozensets(st.text(max_size=40), min_size=1, max_size=4))
@settings(max_examples=300, deadline=None, derandomize=True)
def test_scope_filter_holds_only_canonical_ulids(members: frozenset[str]) -> None:
    try:
        expr = scope_filter(members)
    except (TypeError, ValueError):
        return
    listed = re.fullmatch(r'resource_id in \[("[0-7][0-9A-HJKMNP-TV-Z]{25}"(, )?)+\]', expr)
    assert listed is not None, expr
    assert set(re.findall(r'"([^"]*)"', expr)) == {m.upper() for m in members}


@pytest.mark.parametrize("member", INJECTIONS)
def test_injected_scopes_never_widen_a_search(
    text_backend: MilvusTextBackend, vector_backend: MilvusVectorBackend, member: str
) -> None:
    text_backend.upsert(A, _units(A, 2, "needle alpha"))
    text_backend.upsert(B, _units(B, 5, "needle bravo"))
    vector_backend.upsert(A, _units(A, 2, "a"), np.ones((2, 4), dtype=np.float32))
    vector_backend.upsert(B, _units(B, 5, "b"), np.ones((5, 4), dtype=np.float32))
    for search in (
        lambda s: text_backend.search("needle", scope=s),
        lambda s: vector_backend.similarity_search([1.0, 1, 1, 1], scope=s),
    ):
        with pytest.raises(ValueError, match="ULID"):
            search(frozenset({A, member}))
        assert {resource_id_of(r.uko_uri) for r in search(frozenset({A}))} == {A}


@pytest.mark.parametrize(
    "query",
    [
        f'needle"] or resource_id in ["{B}',
        f"needle resource_id {B}",
        f"{B} needle",
        "needle) or (id != ''",
    ],
)
def test_query_text_never_reaches_the_filter(text_backend: MilvusTextBackend, query: str) -> None:
    text_backend.upsert(A, _units(A, 2, "needle alpha"))
    text_backend.upsert(B, _units(B, 5, f"needle bravo {B}"))
    try:
        results = text_backend.search(query, scope=frozenset({A}), max_results=50)
    except QueryError:
        return
    assert results
    assert {resource_id_of(r.uko_uri) for r in results} == {A}


def test_code_aware_terms_find_identifier_parts(text_backend: MilvusTextBackend) -> None:
    text_backend.upsert(
        A, [IndexUnit(unit_uri(A, "j.py", "L1-L2"), "def parseJsonV2(): HTTPServer()")]
    )
    for query in ("json", "parse", "http", "server", "parseJsonV2"):
        assert len(text_backend.search(query, scope=frozenset({A}))) == 1, query
    assert text_backend.search("jso", scope=frozenset({A})) == []


@pytest.mark.parametrize(
    "query",
    ["alpha AND beta", "NOT alpha", "-alpha beta", "alp*", "alpha~1", "alpha^2", "resource_id:X"],
)
def test_what_bm25_cannot_honour_is_refused(text_backend: MilvusTextBackend, query: str) -> None:
    with pytest.raises(QueryError):
        text_backend.search(query, scope=frozenset({A}), syntax="tantivy")
    # The plain syntax reads the same text as words.
    assert isinstance(text_backend.search(query, scope=frozenset({A})), list)


def test_bm25_statistics_are_not_scope_local(milvus_server: ServerProcess) -> None:
    """Documents the limit: out-of-scope documents change in-scope scores.

    Two collections hold the same in-scope units; one also holds units of 64
    other resources using the query word.  Once data is flushed into sealed
    segments, Milvus Lite computes IDF per segment of a partition-key bucket
    (16 buckets: some of the 64 share the in-scope resource's bucket), over
    every row there, in scope or not.  If this ever fails, the engine became
    scope-local and docs/scale-out.md should say so.
    """
    others = [f"01JD5TD11C{i:016d}" for i in range(64)]
    scores = []
    for name, crowd in (("bm25_alone", []), ("bm25_crowded", others)):
        b = MilvusTextBackend(milvus_server.uri, collection=name, timeout=20)
        try:
            b.upsert(A, _units(A, 3, "needle alpha"))
            b.upsert(A, [IndexUnit(unit_uri(A, "z.py", "L1-L2"), "unrelated text")])
            for rid in crowd:
                b.upsert(rid, _units(rid, 2, "needle needle bravo"))
            b._coll.call("flush", b._coll.name)  # seal the segment
            scores.append([r.score for r in b.search("needle", scope=frozenset({A}))])
        finally:
            emptied(b)
    alone, crowded = scores
    assert len(alone) == len(crowded) == 3
    assert alone != pytest.approx(crowded, abs=1e-6)


def test_writes_are_visible_on_return_to_another_client(
    milvus_server: ServerProcess,
    text_backend: MilvusTextBackend,
    vector_backend: MilvusVectorBackend,
) -> None:
    other_text = MilvusTextBackend(milvus_server.uri, collection="extra_text", timeout=20)
    other_vec = MilvusVectorBackend(
        milvus_server.uri, dimension=4, collection="extra_vec", timeout=20
    )
    try:
        for i in range(15):
            unit = IndexUnit(unit_uri(A, f"v{i}.py", "L1-L2"), f"marker{i} text")
            text_backend.upsert(A, [unit])
            vector_backend.upsert(A, [unit], np.asarray([[1.0, i, 0, 0]], dtype=np.float32))
            assert [r.uko_uri for r in other_text.search(f"marker{i}", scope=frozenset({A}))] == [
                unit.uko_uri
            ]
            assert unit.uko_uri in {
                r.uko_uri
                for r in other_vec.similarity_search(
                    [1.0, i, 0, 0], scope=frozenset({A}), top_k=100
                )
            }
            text_backend.delete(A, [unit.uko_uri])
            vector_backend.delete(A, [unit.uko_uri])
            assert other_text.search(f"marker{i}", scope=frozenset({A})) == []
            assert unit.uko_uri not in other_vec.unit_uris(A)
    finally:
        other_text.close()
        other_vec.close()


def test_units_longer_than_a_varchar_are_stored_cut(
    text_backend: MilvusTextBackend, vector_backend: MilvusVectorBackend
) -> None:
    """One 120 KB line (its terms twice that) is stored cut, never refused:
    it once failed the whole reindex ("terms is 80007 bytes of UTF-8")."""
    line = 'zebraword = "' + "a1\u00e9" * 30_000 + '"'  # 4 bytes a repeat: cuts split a character
    long = IndexUnit(
        unit_uri(A, "long.py", "L7-L7"),
        line,
        {"path": "long.py", "start_line": "7", "end_line": "7", "symbols": "s" * 70_000},
    )
    short = IndexUnit(unit_uri(A, "short.py", "L1-L1"), "quokka here", {"path": "short.py"})
    text_backend.upsert(A, [long, short])
    vector_backend.upsert(A, [long, short], np.asarray([[1.0, 0, 0, 0], [0, 1.0, 0, 0]]))
    (hit,) = text_backend.search("zebraword", scope=frozenset({A}))
    (vhit, _) = vector_backend.similarity_search([1.0, 0, 0, 0], scope=frozenset({A}))
    for found in (hit, vhit):
        assert found.uko_uri == long.uko_uri
        stored = found.content.encode("utf-8")
        assert 60_000 < len(stored) <= 65_535
        assert line.startswith(found.content)
        assert found.metadata["start_line"] == "7" and found.metadata["end_line"] == "7"
        assert found.metadata["path"] == "long.py"
        assert "content" in found.metadata["truncated"].split()
        assert "meta" in found.metadata["truncated"].split()
    assert "terms" in hit.metadata["truncated"].split()
    assert hit.metadata["match_lines"] == "7"
    # The path's words survive the cut of the terms; the short unit is untouched.
    assert [r.uko_uri for r in text_backend.search("long", scope=frozenset({A}))] == [long.uko_uri]
    (other,) = text_backend.search("quokka", scope=frozenset({A}))
    assert "truncated" not in other.metadata


def test_existing_collection_of_another_dimension_is_refused(
    milvus_server: ServerProcess, vector_backend: MilvusVectorBackend
) -> None:
    with pytest.raises(ValueError, match="4-dimensional"):
        MilvusVectorBackend(milvus_server.uri, dimension=8, collection="extra_vec", timeout=20)


def test_rdflib_sparql_worker_survives_an_open_milvus_client(milvus_server: ServerProcess) -> None:
    """gRPC's fork handlers aborted the rdflib adapter's forked SPARQL worker
    (SIGABRT) once a Milvus channel was open: a fresh interpreter proves the fix."""
    script = f"""
from cleveragents.infrastructure.acms.milvus_vector import MilvusVectorBackend
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend
v = MilvusVectorBackend({milvus_server.uri!r}, dimension=4, collection="fork_check")
v.similarity_search([1.0, 0, 0, 0], scope=frozenset({{{A!r}}}))
g = RdflibGraphBackend()
g.upsert({A!r}, [("uko://{A}/a", "urn:p", "urn:o")])
q = "SELECT ?s ?p ?o WHERE {{ ?s ?p ?o }}"
for _ in range(3):
    assert len(g.sparql_query(q, scope=frozenset({{{A!r}}})).triples) == 1
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")


# ---------------------------------------------------------------- failures


@pytest.fixture(scope="module")
def own_milvus() -> Iterator[ServerProcess]:
    """A server these tests may kill, stop and restart (each leaves it running)."""
    with running("milvus") as server:
        yield server


def test_server_down_then_restarted(own_milvus: ServerProcess) -> None:
    b = MilvusVectorBackend(own_milvus.uri, dimension=4, collection="restart", timeout=3)
    try:
        b.upsert(A, _units(A, 3, "x"), np.ones((3, 4), dtype=np.float32))
        assert len(b.similarity_search([1.0, 1, 1, 1], scope=frozenset({A}))) == 3
        own_milvus.kill()
        t0 = time.monotonic()
        with pytest.raises(IndexUnavailableError):
            b.similarity_search([1.0, 1, 1, 1], scope=frozenset({A}))
        assert time.monotonic() - t0 < 3 + 2
        own_milvus.start()
        hits = b.similarity_search([1.0, 1, 1, 1], scope=frozenset({A}))
        assert {resource_id_of(h.uko_uri) for h in hits} == {A}
        assert len(hits) == 3  # acknowledged writes survived the SIGKILL
    finally:
        b.close()


def test_a_hung_server_is_bounded_by_the_timeout(own_milvus: ServerProcess) -> None:
    b = MilvusTextBackend(own_milvus.uri, collection="hung", timeout=2)
    try:
        b.upsert(A, _units(A, 2, "needle"))
        assert own_milvus.proc is not None
        os.kill(own_milvus.proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            with pytest.raises(IndexUnavailableError) as info:
                b.search("needle", scope=frozenset({A}))
            assert time.monotonic() - t0 < 2 + 2
            # One line that names the server and says what gRPC reported.
            message = str(info.value)
            assert own_milvus.uri in message and "\n" not in message, message
            assert len(message) < 500, message
        finally:
            os.kill(own_milvus.proc.pid, signal.SIGCONT)
        assert len(b.search("needle", scope=frozenset({A}))) == 2
    finally:
        b.close()


def test_a_restarted_server_answers_the_first_query(own_milvus: ServerProcess) -> None:
    """A server restarted on its data holds every collection released; the
    first query of each used to fail ("... is in state 'released'")."""
    text = MilvusTextBackend(own_milvus.uri, collection="reload_text", timeout=5)
    vec = MilvusVectorBackend(own_milvus.uri, dimension=4, collection="reload_vec", timeout=5)
    try:
        text.upsert(A, _units(A, 2, "needle"))
        vec.upsert(A, _units(A, 2, "x"), np.ones((2, 4), dtype=np.float32))
        assert len(text.search("needle", scope=frozenset({A}))) == 2
        own_milvus.stop()
        own_milvus.start()
        assert len(text.search("needle", scope=frozenset({A}))) == 2
        assert len(vec.similarity_search([1.0, 1, 1, 1], scope=frozenset({A}))) == 2
        assert text.unit_uris(A) == vec.unit_uris(A)
    finally:
        text.close()
        vec.close()


_NOISY = """
import os, sys
from cleveragents.domain.models.acms.errors import IndexUnavailableError
from cleveragents.infrastructure.acms.milvus_text import MilvusTextBackend
b = MilvusTextBackend(sys.argv[1], collection="noisy", timeout=3)
b.search("needle", scope=frozenset({sys.argv[2]}))
print("ready", flush=True)
sys.stdin.readline()  # the server is killed meanwhile
for _ in range(2):
    try:
        b.search("needle", scope=frozenset({sys.argv[2]}))
    except IndexUnavailableError as exc:
        print("unavailable", flush=True)
print(os.environ["GRPC_VERBOSITY"])
"""


@pytest.mark.parametrize("verbosity", [None, "INFO"])
def test_a_dying_server_prints_nothing_but_our_error(
    own_milvus: ServerProcess, verbosity: str | None
) -> None:
    """pymilvus logged each failed retry with its traceback straight to
    stderr (its own handler, whatever ``--log-level`` said); gRPC's C core
    printed connection chatter.  The caller gets one IndexUnavailableError."""
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    if verbosity is not None:
        env["GRPC_VERBOSITY"] = verbosity  # an operator's own setting wins
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    proc = subprocess.Popen(
        [sys.executable, "-c", _NOISY, own_milvus.uri, A],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        own_milvus.kill()
        out, err = proc.communicate("go\n", timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        own_milvus.start()
    assert proc.returncode == 0, err[-2000:]
    assert out.split() == ["unavailable", "unavailable", verbosity or "ERROR"]
    if verbosity is None:
        assert err == ""
    assert "Traceback" not in err and "pymilvus" not in err


def test_unreachable_server_at_start_is_index_unavailable() -> None:
    t0 = time.monotonic()
    with pytest.raises(IndexUnavailableError):
        MilvusTextBackend(f"http://127.0.0.1:{free_port()}", collection="nowhere", timeout=2)
    assert time.monotonic() - t0 < 2 + 3


# ---------------------------------------------------------------- the query language (no server)


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("parseJsonV2", ["parse", "json", "v", "2"]),
        ("HTTPServer OR json", ["http", "server", "json"]),
        ('"open file" (read OR write)', ["open", "file", "read", "write"]),
        ("how to open a file?", ["how", "to", "open", "a", "file"]),
        ("dict[str] std::vector", ["dict", "str", "std", "vector"]),
    ],
)
def test_query_words(query: str, words: list[str]) -> None:
    assert parse_query(query) == words


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("path:tool.py", "path"),
        ("lang:markdown", "lang"),
        ("symbol:raw_decode", "symbol"),
        ("content:socket", "content"),
        ("decode (path : json OR x)", "path"),
        ('needle title:"a b"', "title"),
        ("resource_id:X", "resource_id"),
    ],
)
def test_field_prefixes_are_refused_not_read_as_words(query: str, field: str) -> None:
    """``path:tool.py`` was searched as the words path, tool, py (wider than
    asked: it found json/__init__.py); the remote adapter has no fields."""
    with pytest.raises(QueryError, match=f"field '{field}'"):
        parse_query(query)


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ('"path:tool.py"', ["path", "tool", "py"]),
        ("std::vector", ["std", "vector"]),
        ("a::b::c", ["a", "b", "c"]),
    ],
)
def test_colons_that_are_no_field_are_words(query: str, words: list[str]) -> None:
    assert parse_query(query) == words


@given(st.text(max_size=200))
@settings(max_examples=500, deadline=None, derandomize=True)
def test_any_text_parses_to_plain_words_or_a_query_error(query: str) -> None:
    try:
        words = parse_query(query)
    except QueryError:
        return
    for word in words:
        assert word and word == word.lower() and re.fullmatch(r"\w+", word), word


class _FakeRpcError(Exception):
    """What grpc's _InactiveRpcError looks like: a multi-line ``str`` whose
    first line says nothing, and the status behind ``code()``/``details()``."""

    def __str__(self) -> str:
        return "<_InactiveRpcError of RPC that terminated with:\n\tstatus = ...\n>"

    def code(self) -> object:
        class Status:
            name = "RESOURCE_EXHAUSTED"

        return Status()

    def details(self) -> str:
        return "message larger than max\x1b[31m (\r\n" + "x" * 1000 + ")"


def test_a_grpc_failure_is_one_bounded_line_with_its_status() -> None:
    from cleveragents.infrastructure.acms.milvus_common import _short

    wrapped = RuntimeError("<MilvusException: (code=1, message=\n<_InactiveRpcError of RPC")
    wrapped.__cause__ = _FakeRpcError()
    for exc in (_FakeRpcError(), wrapped):
        text = _short(exc)
        assert text.startswith("gRPC RESOURCE_EXHAUSTED: message larger than max"), text
        assert len(text) <= 300 and text.isprintable(), text
    assert _short(RuntimeError("a\x00b\n  c")) == "a b c"


def test_holds_any_asks_the_server_for_one_row(
    text_backend: MilvusTextBackend, vector_backend: MilvusVectorBackend
) -> None:
    """A session that starts clean asks each collection whether it holds any
    unit of its resource: one row, not a first iterator batch of thousands."""
    units = _units(A, 5, "alpha beta")
    text_backend.upsert(A, units)
    vector_backend.upsert(A, units, np.ones((5, 4), dtype=np.float32))
    asked: list[tuple[str, object]] = []

    def spying(call: Callable[..., object]) -> Callable[..., object]:
        def spy(name: str, *args: object, **kwargs: object) -> object:
            asked.append((name, kwargs.get("limit")))
            return call(name, *args, **kwargs)

        return spy

    for backend in (text_backend, vector_backend):
        backend._coll.call = spying(backend._coll.call)  # type: ignore[method-assign]
        assert backend.holds_any(A) is True
        assert backend.holds_any(B) is False
    assert asked and all(limit == 1 for _name, limit in asked), asked
