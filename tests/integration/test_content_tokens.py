"""The text fields are written as the tokens the analyzer's tokenizer cut
(``prepare_content`` in a planning worker, ``tokens_of``), which a shard
only splits at the spaces (``terms_analyzer``), instead of being analysed
again by the regex tokenizer in the writer.  The index must not change.

Oracles:
- the engine's own analyzer on the analysable text (``code_analyzer``, and
  its tokenizer alone for the positions: over-long tokens leave a gap);
- a backend whose shards analyse the text with the engine, as every shard
  did before: every query's URIs, order and scores must agree;
- either way of writing into a shard the other one made (the schema is the
  same; an earlier version and this one can share a data directory).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import tantivy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from cleveragents.domain.models.acms.backends import IndexUnit
from cleveragents.domain.models.acms.uko import unit_uri
from cleveragents.infrastructure.acms import tantivy_text
from cleveragents.infrastructure.acms.tantivy_query import (
    code_analyzer,
    terms_analyzer,
    token_analyzer,
)
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend
from cleveragents.infrastructure.acms.text_analysis import (
    analysable,
    content_terms,
    pair_terms,
    prepare_content,
)

RID = str(ULID())
SCOPE = frozenset({RID})
LONG = "q" * 120  # over MAX_TOKEN_CHARS: dropped, its position kept
WORDS = st.sampled_from(
    [
        "alpha",
        "beta",
        "HTTPServer",
        "parseJsonV2",
        LONG,
        "x" * 99,
        "é" * 60,  # 120 bytes, 60 characters
        "İ" * 40,  # 80 bytes, 120 lower-cased: remove_long comes first
        "ẞ" * 34,  # 102 bytes, 68 lower-cased
        "naïve",
        "İstanbul",
        "ǅemal",
        "日本",
        "42",
        "_",
    ]
)
SEPARATORS = st.sampled_from([" ", "\n", ".", "(", "_", "", "\u00a0", "\t"])
TEXTS = st.one_of(
    st.text(max_size=300),
    st.builds(
        lambda words, seps: "".join(w + s for w, s in zip(words, seps, strict=False)),
        st.lists(WORDS, max_size=12),
        st.lists(SEPARATORS, min_size=12, max_size=12),
    ),
)
_SPLIT = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()


@settings(max_examples=400, deadline=None)
@given(TEXTS)
def test_tokens_are_the_engine_tokenizers_and_give_its_terms(text: str) -> None:
    tokens, pairs = prepare_content(text)
    ready = analysable(text)
    # The same tokens in the same order (so the same positions, over-long
    # ones included), then the same filters.
    assert _SPLIT.analyze(tokens) == token_analyzer().analyze(ready)
    assert terms_analyzer().analyze(tokens) == code_analyzer().analyze(ready)
    # A shard of an earlier version runs the regex on them: the same terms.
    assert code_analyzer().analyze(tokens) == code_analyzer().analyze(ready)
    assert pairs == pair_terms(content_terms(ready))


NAMES = st.one_of(
    st.text(max_size=40),
    st.lists(WORDS, max_size=4).map("/".join),
)


@settings(max_examples=300, deadline=None)
@given(path=st.one_of(st.none(), NAMES), symbols=st.lists(NAMES, max_size=4))
def test_each_short_field_holds_the_terms_the_engine_gave_its_text(
    path: str | None, symbols: list[str]
) -> None:
    """``path``, ``symbol`` and ``names`` as each field was analysed before:
    the engine's analyzer on the analysable path, symbols, and both."""
    names = " ".join(symbols).split()
    metadata = {"symbols": " ".join(names)} | ({"path": path} if path else {})
    fields = tantivy_text._document("u", RID, "x", metadata).to_dict()
    shard, engine = terms_analyzer(), code_analyzer()

    def held(field: str) -> list[str]:
        return [term for value in fields.get(field, []) for term in shard.analyze(value)]

    assert held("path") == (engine.analyze(analysable(path)) if path else [])
    assert held("symbol") == (engine.analyze(analysable(" ".join(names))) if names else [])
    expected = engine.analyze(analysable(" ".join([path or "", *names])))
    assert held("names") == (expected if path or names else [])


QUERIES = [
    ("alpha beta", "plain"),
    ("http server", "plain"),
    ("naive istanbul", "plain"),
    ("parse json v2", "plain"),
    ('"alpha beta"', "tantivy"),  # adjacent only without a long token between
    ('"alpha beta"~1', "tantivy"),
    ('"beta alpha"', "tantivy"),
    ("content:日本 OR content:42", "tantivy"),
    ("alpha AND NOT beta", "tantivy"),
    ("ǆemal", "tantivy"),
    ("HTTPServer parseJson", "tantivy"),  # the parser analyses query text in full
    ("server", "plain"),  # path, symbol and names fields
    ("path:http OR symbol:naive", "tantivy"),
    ("json naive", "plain"),  # names
]


def _units(docs: list[str]) -> list[IndexUnit]:
    return [
        IndexUnit(
            unit_uri(RID, f"pkg/HTTPServer{n}.py", "L1-L3"),
            text,
            {
                "path": f"pkg/HTTPServer{n}.py",
                "symbols": f"parseJson{n} naïveİ",
                "language": "python",
            },
        )
        for n, text in enumerate(docs)
    ]


def _answers(backend: TantivyTextBackend) -> list[list[tuple[str, float]]]:
    return [
        [(r.uko_uri, round(r.score, 5)) for r in backend.search(q, scope=SCOPE, syntax=s)]
        for q, s in QUERIES
    ]


def _engine_analysed(content: str) -> tuple[str, str]:
    """What a worker handed the writer before: the analysable text."""
    ready = analysable(content)
    return ready, pair_terms(content_terms(ready))


@contextlib.contextmanager
def earlier_version(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While active, a backend writes as every version before this one did:
    analysable text, analysed by the engine's regex in the shard."""
    with monkeypatch.context() as patch:
        patch.setattr(tantivy_text, "terms_analyzer", code_analyzer)
        patch.setattr(tantivy_text, "prepare_content", _engine_analysed)
        patch.setattr(tantivy_text, "tokens_of", analysable)
        yield


DOCS = st.lists(
    st.builds(
        lambda words, seps: "".join(w + s for w, s in zip(words, seps, strict=False)),
        st.lists(WORDS, min_size=1, max_size=10),
        st.lists(SEPARATORS, min_size=10, max_size=10),
    ),
    min_size=1,
    max_size=6,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(docs=DOCS)
def test_a_shard_written_from_tokens_answers_as_one_the_engine_analysed(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, docs: list[str]
) -> None:
    root = tmp_path_factory.mktemp("tokens")
    units = _units(docs)
    with earlier_version(monkeypatch):
        analysed = TantivyTextBackend(root / "engine")
        analysed.upsert(RID, units)
    tokens = TantivyTextBackend(root / "tokens")
    try:
        tokens.upsert(RID, units)
        assert _answers(tokens) == _answers(analysed)
    finally:
        tokens.close()
        analysed.close()


def test_a_phrase_over_a_dropped_long_token_is_not_adjacent(tmp_path: Path) -> None:
    """The gap an over-long token leaves survives the split at spaces."""
    backend = TantivyTextBackend(tmp_path / "t")
    gap, joined = _units([f"alpha {LONG} beta", "alpha beta"])
    backend.upsert(RID, [gap, joined])
    try:
        hits = backend.search('"alpha beta"', scope=SCOPE, syntax="tantivy")
        assert [r.uko_uri for r in hits] == [joined.uko_uri]
        sloppy = backend.search('"alpha beta"~1', scope=SCOPE, syntax="tantivy")
        assert {r.uko_uri for r in sloppy} == {gap.uko_uri, joined.uko_uri}
    finally:
        backend.close()


@pytest.mark.parametrize("first", ["earlier", "this"])
def test_each_version_writes_into_a_shard_the_other_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    docs = ["alpha HTTPServer beta", f"alpha {LONG} beta", "İstanbul naïve 日本42", "ǅemal alpha"]
    units = _units(docs)
    reference = TantivyTextBackend(tmp_path / "reference")
    reference.upsert(RID, units)

    def write(part: list[IndexUnit], earlier: bool) -> None:
        with contextlib.ExitStack() as stack:
            if earlier:
                stack.enter_context(earlier_version(monkeypatch))
            backend = TantivyTextBackend(tmp_path / "shared")
            backend.upsert(RID, part)
            backend.close()

    write(units[:2], earlier=first == "earlier")
    write(units[2:], earlier=first != "earlier")
    shared = TantivyTextBackend(tmp_path / "shared")
    try:
        assert _answers(shared) == _answers(reference)
        assert sum(map(len, _answers(reference))) >= 10
    finally:
        shared.close()
        reference.close()


def test_a_shard_splits_the_content_it_is_given_only_at_spaces(tmp_path: Path) -> None:
    """The writer does not run the regex tokenizer again (the point of the
    change; the answers above cannot tell): a prepared token stays whole."""
    backend = TantivyTextBackend(tmp_path / "t")
    (unit,) = _units(["alpha beta"])
    try:
        backend.upsert_prepared(RID, [unit], [("alpha_beta", "")])
        assert backend.unit_uris(RID) == {unit.uko_uri}
        assert backend.search("alpha", scope=SCOPE, syntax="tantivy") == []
        backend.upsert_prepared(RID, [unit], [prepare_content(unit.content)])
        assert [r.uko_uri for r in backend.search("alpha", scope=SCOPE, syntax="tantivy")] == [
            unit.uko_uri
        ]
    finally:
        backend.close()
