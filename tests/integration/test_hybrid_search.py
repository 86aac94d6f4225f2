"""hybrid_search over the real engines on disk, indexed by the project's own
operations: scope, definitions first, and what each hit carries."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cleveragents.application.container import build_container
from cleveragents.application.services import fusion
from cleveragents.application.services.fusion import (
    DEFAULT_CONFIDENT,
    DEFAULT_K,
    DEFAULT_WEIGHTS,
    hybrid_search,
    reciprocal_rank_fusion,
)
from cleveragents.application.services.operations import AcmsOperations
from cleveragents.domain.models.acms.errors import QueryError
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.domain.models.acms.uko import path_of, resource_id_of
from cleveragents.domain.models.acms.ulids import canonical_ulid
from cleveragents.testing.backend_contracts import new_ulid

FILES = {
    "net/streams.py": '''
        """Streams over sockets."""

        def open_connection(host, port):
            """A wrapper for create_connection() returning a (reader, writer) pair."""
            reader = StreamReader()
            return reader, StreamWriter(host, port)


        class StreamReader:
            """Reads bytes from a transport."""

            def feed_data(self, data):
                self.buffer += data
        ''',
    "net/client.py": '''
        from net.streams import open_connection

        def fetch(host):
            """Download a page: calls open_connection and reads the reply."""
            reader, writer = open_connection(host, 80)
            return reader
        ''',
    "util/sorting.py": '''
        def sort_descending(items):
            """Order the items from largest to smallest."""
            return sorted(items, reverse=True)
        ''',
}

QUERIES = [
    "open_connection",
    "StreamReader",
    "feed_data",
    "fetch",
    "reader writer pair",
    "Order the items from largest to smallest",
    "A wrapper for create_connection() returning a (reader, writer) pair.",
    "foo(",
    "self.feed_data(",
    "sort_descending items",
    "nothing matches this zyzzyva",
]


@dataclass
class Corpus:
    ops: AcmsOperations
    embedder: Any
    resources: list[str]


def _write(root: Path, variant: str) -> None:
    for rel, body in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        # Every resource holds the same names, so a leak would be visible.
        path.write_text(textwrap.dedent(body).replace("Download", f"Download {variant}"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    base = tmp_path_factory.mktemp("hybrid")
    container = build_container("local", base / "data", embedder="hashing")
    ops = AcmsOperations.from_container(container)
    ops.add_project("test/hybrid")
    resources = []
    for variant in ("alpha", "beta", "gamma"):
        root = base / variant
        _write(root, variant)
        resources.append(ops.add_resource(str(root), "test/hybrid", "directory").resource_id)
    ops.reindex()
    yield Corpus(ops, container.embedder(), resources)


class Recording:
    """Passes every call to a real backend and records the scope it was given."""

    def __init__(self, target: Any, calls: list[tuple[str, Any]]) -> None:
        self._target = target
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._target, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self._calls.append((name, kwargs.get("scope", "MISSING")))
            return method(*args, **kwargs)

        return call


def test_every_backend_call_carries_the_scope(corpus: Corpus) -> None:
    calls: list[tuple[str, Any]] = []
    scope = frozenset(corpus.resources[:1])
    c = build_container("local", corpus.ops.data_dir)
    view = ScopedView(
        Recording(c.text_backend(), calls),  # type: ignore[arg-type]
        Recording(c.vector_backend(), calls),  # type: ignore[arg-type]
        Recording(c.graph_backend(), calls),  # type: ignore[arg-type]
        scope,
    )
    # Every source weighted, so every backend is asked (the default graph weight is 0).
    weights = {"text": 1.0, "vector": 1.0, "graph": 1.0}
    hits = hybrid_search(view, corpus.embedder, "open_connection", weights=weights)
    assert hits
    assert {name for name, _ in calls} == {"search", "similarity_search", "sparql_query"}
    assert all(s == scope for _, s in calls), calls


scopes = st.sets(st.integers(0, 2), min_size=1).map(sorted)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    picks=scopes,
    foreign=st.booleans(),
    query=st.sampled_from(QUERIES) | st.text(min_size=1, max_size=30),
    max_results=st.integers(1, 30),
)
def test_no_hit_outside_the_scope_and_ranks_match_the_sources(
    corpus: Corpus, picks: list[int], foreign: bool, query: str, max_results: int
) -> None:
    scope = {corpus.resources[i] for i in picks}
    if foreign:
        scope.add(new_ulid())  # a ULID never indexed widens nothing
    view = corpus.ops.view(frozenset(scope))
    if not query.strip():
        with pytest.raises(ValueError):
            hybrid_search(view, corpus.embedder, query)
        return
    hits = hybrid_search(view, corpus.embedder, query, max_results=max_results, depth=20)
    assert len(hits) <= max_results
    in_scope = {canonical_ulid(r) for r in scope}
    for hit in hits:
        assert resource_id_of(hit.uko_uri) in in_scope, hit.uko_uri
    # The fused ranks are the sources' own ranks, seen through the same view.
    try:
        text_hits = view.search(query, max_results=20)
    except QueryError:
        text_hits = []
    text = [r.uko_uri for r in text_hits]
    sure = bool(text_hits) and max(r.score for r in text_hits) >= DEFAULT_CONFIDENT
    vector = [
        r.uko_uri
        for r in view.similarity_search(corpus.embedder.embed([query])[0].tolist(), top_k=20)
    ]
    for hit in hits:
        if "text" in hit.ranks:
            assert text[hit.ranks["text"] - 1] == hit.uko_uri
        if "vector" in hit.ranks:
            assert vector[hit.ranks["vector"] - 1] == hit.uko_uri
    if sure:
        # Text is sure of itself: its ranking is the answer, nothing else asked.
        assert all(set(h.ranks) == {"text"} for h in hits), hits
    if "graph" not in {s for h in hits for s in h.ranks}:
        expected = reciprocal_rank_fusion(
            {"text": text} if sure else {"text": text, "vector": vector},
            k=DEFAULT_K,
            weights=DEFAULT_WEIGHTS,
            limit=max_results,
        )
        # Without a graph rank among the hits the fusion is that of text and
        # vector alone (a graph-only unit below the cut changes no other score).
        assert [(h.uko_uri, h.score) for h in hits] == [(h.uko_uri, h.score) for h in expected]


def test_the_defining_chunk_ranks_first_for_an_identifier(corpus: Corpus) -> None:
    rid = corpus.resources[1]
    view = corpus.ops.view(frozenset({rid}))
    for name, path in (
        ("open_connection", "net/streams.py"),
        ("StreamReader", "net/streams.py"),
        ("StreamReader.feed_data", "net/streams.py"),
        ("fetch", "net/client.py"),
        ("sort_descending", "util/sorting.py"),
    ):
        # With the default weights, with the graph weighted as much as text,
        # and without the graph (text's definition boost alone): the
        # definition comes first.
        for weights in (None, {**DEFAULT_WEIGHTS, "graph": 1.0}, {**DEFAULT_WEIGHTS, "graph": 0}):
            top = hybrid_search(view, corpus.embedder, name, weights=weights)[0]
            assert path_of(top.uko_uri) == path, (name, top)
            graph_weight = (DEFAULT_WEIGHTS if weights is None else weights)["graph"]
            graph_rank = None if graph_weight == 0 else 1
            assert top.ranks.get("graph") == graph_rank, (name, top)
            definition = f"def {name.rpartition('.')[2]}"
            assert definition in top.content or f"class {name}" in top.content


def test_graph_only_hits_name_their_path_lines_and_symbol(corpus: Corpus) -> None:
    rid = corpus.resources[0]
    view = corpus.ops.view(frozenset({rid}))
    hits = hybrid_search(
        view,
        corpus.embedder,
        "StreamReader.feed_data",
        weights={"text": 0, "vector": 0, "graph": 1},
    )
    assert len(hits) == 1
    (hit,) = hits
    assert hit.content == ""
    assert dict(hit.ranks) == {"graph": 1}
    assert hit.metadata["symbol"] == "StreamReader.feed_data"
    assert hit.metadata["path"] == "net/streams.py"
    assert int(hit.metadata["start_line"]) <= 13 <= int(hit.metadata["end_line"])


def test_a_query_the_text_backend_refuses_still_gets_answers(corpus: Corpus) -> None:
    view = corpus.ops.view(frozenset(corpus.resources))
    for query in ("foo(", "A wrapper for create_connection() returning a (reader, writer) pair."):
        hits = hybrid_search(view, corpus.embedder, query)
        assert hits, query


def test_bad_arguments(corpus: Corpus) -> None:
    view = corpus.ops.view(frozenset(corpus.resources))
    with pytest.raises(ValueError):
        hybrid_search(view, corpus.embedder, "  ")
    with pytest.raises(TypeError):
        hybrid_search(view, corpus.embedder, b"x")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        hybrid_search(view, corpus.embedder, "x", max_results=0)
    with pytest.raises(ValueError):
        hybrid_search(view, corpus.embedder, "x", depth=0)
    with pytest.raises(ValueError):
        hybrid_search(view, corpus.embedder, "x", weights={"text": -1})


def _recording_view(corpus: Corpus, calls: list[tuple[str, Any]]) -> ScopedView:
    c = build_container("local", corpus.ops.data_dir)
    return ScopedView(
        c.text_backend(),
        Recording(c.vector_backend(), calls),  # type: ignore[arg-type]
        c.graph_backend(),
        frozenset(corpus.resources),
    )


@pytest.mark.parametrize("query", ["open_connection", "Order the items from largest to smallest"])
def test_other_sources_are_asked_only_below_the_confidence(
    corpus: Corpus, query: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fusion, "PROSE_CONFIDENT", 0.0)  # the gate alone (prose: below)
    calls: list[tuple[str, Any]] = []
    view = _recording_view(corpus, calls)
    text = view.search(query, max_results=50)
    top = max(r.score for r in text)
    # At its best score, text is sure: the answer is its own ranking.
    sure = hybrid_search(view, corpus.embedder, query, max_results=50, confident=top)
    assert calls == []
    assert [h.uko_uri for h in sure] == list(dict.fromkeys(r.uko_uri for r in text))
    assert all(set(h.ranks) == {"text"} for h in sure)
    # Just above it, the vector ranking is asked and fused.
    unsure = hybrid_search(
        view, corpus.embedder, query, max_results=50, confident=min(1.0, top + 1e-6)
    )
    assert [name for name, _ in calls] == ["similarity_search"]
    assert any("vector" in h.ranks for h in unsure)
    # ``None``: every query is fused.
    calls.clear()
    hybrid_search(view, corpus.embedder, query, confident=None)
    assert [name for name, _ in calls] == ["similarity_search"]


def test_a_question_in_words_is_fused_up_to_the_prose_confidence(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Text's normalised score grows with the number of query terms, so a
    question in words can reach the gate without ranking well: it skips the
    vector source only from PROSE_CONFIDENT; an identifier keeps the gate."""
    calls: list[tuple[str, Any]] = []
    view = _recording_view(corpus, calls)
    prose, code = "Order the items from largest to smallest", "open_connection"
    assert fusion.reads_as_prose(prose) and not fusion.reads_as_prose(code)
    tops = {q: max(r.score for r in view.search(q, max_results=50)) for q in (prose, code)}
    monkeypatch.setattr(fusion, "PROSE_CONFIDENT", min(1.0, max(tops.values()) + 1e-6))
    hybrid_search(view, corpus.embedder, code, max_results=50, confident=tops[code])
    assert calls == []  # an identifier: sure at the gate
    hybrid_search(view, corpus.embedder, prose, max_results=50, confident=tops[prose])
    assert [name for name, _ in calls] == ["similarity_search"]  # prose: asked


def test_a_query_text_cannot_answer_is_answered_by_the_vector_source(corpus: Corpus) -> None:
    calls: list[tuple[str, Any]] = []
    view = _recording_view(corpus, calls)
    # No analysable word: text matches nothing, so it is not sure.
    hits = hybrid_search(view, corpus.embedder, "?! ...")
    assert [name for name, _ in calls] == ["similarity_search"]
    assert hits and all(set(h.ranks) == {"vector"} for h in hits)


@pytest.mark.parametrize("bad", [-0.1, 1.5, True, "0.8", float("nan")])
def test_a_bad_confidence_is_refused(corpus: Corpus, bad: Any) -> None:
    view = corpus.ops.view(frozenset(corpus.resources))
    with pytest.raises(ValueError, match="confident"):
        hybrid_search(view, corpus.embedder, "open_connection", confident=bad)
