"""The plain query syntax, the filters and the schema upgrade, on real Tantivy.

- No string makes the default (plain) syntax raise: arbitrary text, every
  ASCII punctuation character, and mixes with words (hypothesis).
- The tantivy syntax allows the user-facing fields (``path:``, ``lang:``,
  ``symbol:``) and still refuses the internal ones.
- A shard written with the previous schema (no symbol/path_raw/lang fields)
  is refused by searches with a message naming the rebuild, and the next
  write migrates it without losing a unit.
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from pathlib import Path

import pytest
import tantivy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from cleveragents.domain.models.acms.backends import IndexUnit
from cleveragents.domain.models.acms.errors import IndexUnavailableError, QueryError
from cleveragents.domain.models.acms.uko import unit_uri
from cleveragents.infrastructure.acms import tantivy_query
from cleveragents.infrastructure.acms.memory_indexes import MemoryTextIndex
from cleveragents.infrastructure.acms.tantivy_query import ANALYZER_NAME, code_analyzer
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend

RID = str(ULID())
SCOPE = frozenset({RID})


def unit(path: str, content: str, line: int = 1, **extra: str) -> IndexUnit:
    metadata = {"path": path, "start_line": str(line), "language": "python", **extra}
    return IndexUnit(unit_uri(RID, path, f"L{line}-L{line + 9}"), content, metadata)


CORPUS = [
    unit(
        "pkg/conn.py",
        "def create_connection(host):\n    return socket(host)\n",
        10,
        symbols="create_connection",
    ),
    unit("pkg/use.py", "reader, writer = create_connection(h)\nD.get(k, d)\n"),
    unit("docs/index.md", "# exec() and eval\nfoo( bar )\n", language="markdown"),
    unit(
        "pkg/wrap.py",
        'def open_connection(host):\n    """A wrapper for create_connection() returning a '
        '(reader, writer) pair."""\n    return create_connection(host)\n',
        symbols="open_connection",
    ),
    unit(
        "pkg/graph.py",
        "def transitive_objects(self, s, p):\n    yield s\n",
        symbols="transitive_objects",
    ),
]


@pytest.fixture(scope="module")
def tantivy_backend() -> Iterator[TantivyTextBackend]:
    backend = TantivyTextBackend()
    backend.upsert(RID, CORPUS)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def memory_backend() -> MemoryTextIndex:
    backend = MemoryTextIndex()
    backend.upsert(RID, CORPUS)
    return backend


PUNCTUATION = string.punctuation
any_text = st.one_of(
    st.text(min_size=1, max_size=300),
    st.text(alphabet=PUNCTUATION + " ", min_size=1, max_size=80),
    st.lists(
        st.one_of(
            st.sampled_from(list(PUNCTUATION)),
            st.sampled_from(["create_connection", "D", "get", "self", "exec", "AND", "NOT"]),
            st.sampled_from(["resource_id:", "path:", "lang:", "symbol_exact:", '"', "~9", "^"]),
            st.text(min_size=1, max_size=8),
        ),
        min_size=1,
        max_size=40,
    ).map("".join),
).filter(lambda q: q.strip() != "")


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(query=any_text)
def test_no_string_makes_the_plain_syntax_raise(
    tantivy_backend: TantivyTextBackend, memory_backend: MemoryTextIndex, query: str
) -> None:
    for backend in (tantivy_backend, memory_backend):
        results = backend.search(query, scope=SCOPE, max_results=5)
        assert all(r.uko_uri.startswith(f"uko://{RID}/") for r in results)
        terms = set(code_analyzer().analyze(query.encode("utf-8", "replace").decode()))
        if not terms:
            assert results == [], query  # nothing analysable finds nothing


@pytest.mark.parametrize("char", list(PUNCTUATION))
def test_every_punctuation_character_alone_and_around_a_word(
    tantivy_backend: TantivyTextBackend, char: str
) -> None:
    assert tantivy_backend.search(char, scope=SCOPE) == []
    assert tantivy_backend.search(char * 3, scope=SCOPE) == []
    hits = tantivy_backend.search(f"{char}exec{char}", scope=SCOPE)
    assert [h.metadata["path"] for h in hits] == ["docs/index.md"]


def test_issue_queries_find_their_code(tantivy_backend: TantivyTextBackend) -> None:
    expected = {
        "A wrapper for create_connection() returning a (reader, writer) pair.": "pkg/wrap.py",
        "create_connection(": "pkg/conn.py",
        "Debug a statement executed via the exec() function.": "docs/index.md",
        "D. (k[,d]) -> D.get(k,d)": "pkg/use.py",
        "foo(": "docs/index.md",
        "self.transitive_objects(": "pkg/graph.py",
    }
    for query, path in expected.items():
        hits = tantivy_backend.search(query, scope=SCOPE)
        assert hits and hits[0].metadata["path"] == path, (query, hits[:1])


def test_match_lines_follow_the_chunk_start(tantivy_backend: TantivyTextBackend) -> None:
    (hit,) = tantivy_backend.search("socket", scope=SCOPE)
    assert hit.metadata["match_lines"] == "11"
    hits = tantivy_backend.search("create_connection", scope=SCOPE, path="pkg/conn.py")
    assert hits[0].metadata["match_lines"] == "10"


# ---------------------------------------------------------------- tantivy syntax


def test_tantivy_syntax_allows_the_user_fields(tantivy_backend: TantivyTextBackend) -> None:
    def paths(query: str) -> list[str]:
        found = tantivy_backend.search(query, scope=SCOPE, syntax="tantivy")
        return sorted(r.metadata["path"] for r in found)

    assert paths("path:conn") == ["pkg/conn.py"]
    assert paths("lang:markdown") == ["docs/index.md"]
    assert paths("lang:MARKDOWN AND exec") == ["docs/index.md"]
    assert paths("symbol:connection") == ["pkg/conn.py", "pkg/wrap.py"]
    assert paths("symbol:create") == ["pkg/conn.py"]
    assert paths("symbol:transitive AND symbol:objects") == ["pkg/graph.py"]
    assert paths("create_connection -symbol:create") == ["pkg/use.py", "pkg/wrap.py"]


@pytest.mark.parametrize(
    "field", ["resource_id", "uko_uri", "body", "metadata", "symbol_exact", "names", "path_raw"]
)
def test_tantivy_syntax_refuses_the_internal_fields(
    tantivy_backend: TantivyTextBackend, field: str
) -> None:
    with pytest.raises(QueryError, match=field):
        tantivy_backend.search(f"{field}:x OR conn", scope=SCOPE, syntax="tantivy")
    # In the plain syntax the same text is words.
    assert tantivy_backend.search(f"{field}:x OR conn", scope=SCOPE) is not None


def test_filters_combine_with_the_tantivy_syntax(tantivy_backend: TantivyTextBackend) -> None:
    found = tantivy_backend.search(
        "create_connection OR exec", scope=SCOPE, syntax="tantivy", lang="python", path="pkg/*"
    )
    assert sorted(r.metadata["path"] for r in found) == ["pkg/conn.py", "pkg/use.py", "pkg/wrap.py"]


# ---------------------------------------------------------------- schema upgrade


def _old_schema() -> tantivy.Schema:
    """The schema of the previous version, verbatim."""
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("uko_uri", stored=True, tokenizer_name="raw")
    builder.add_text_field("resource_id", stored=True, tokenizer_name="raw")
    builder.add_text_field("content", tokenizer_name=ANALYZER_NAME)
    builder.add_text_field("path", tokenizer_name=ANALYZER_NAME)
    builder.add_bytes_field("body", stored=True, indexed=False)
    builder.add_bytes_field("metadata", stored=True, indexed=False)
    return builder.build()


def write_old_shard(root: Path, rid: str, units: list[IndexUnit]) -> None:
    (root / rid).mkdir(parents=True)
    index = tantivy.Index(_old_schema(), path=str(root / rid))
    index.register_tokenizer(ANALYZER_NAME, code_analyzer())
    writer = index.writer(15_000_000, 1)
    for u in units:
        doc = tantivy.Document()
        doc.add_text("uko_uri", u.uko_uri)
        doc.add_text("resource_id", rid)
        doc.add_text("content", u.content)
        doc.add_text("path", u.metadata["path"])
        doc.add_bytes("body", u.content.encode())
        doc.add_bytes("metadata", json.dumps(dict(u.metadata), sort_keys=True).encode())
        writer.add_document(doc)
    writer.commit()
    writer.wait_merging_threads()


def shard_fields(root: Path, rid: str) -> set[str]:
    meta = json.loads((root / rid / "meta.json").read_text())
    return {field["name"] for field in meta["schema"]}


def test_an_old_shard_is_refused_then_migrated_by_the_next_write(tmp_path: Path) -> None:
    root = tmp_path / "text"
    write_old_shard(root, RID, CORPUS)
    other = str(ULID())
    backend = TantivyTextBackend(root)
    backend.upsert(other, [IndexUnit(unit_uri(other, "o.py", "L1-L2"), "socket", {"path": "o.py"})])
    with pytest.raises(IndexUnavailableError, match=r"scripts/reindex\.py --rebuild"):
        backend.search("socket", scope=SCOPE)
    # Another resource's shard is unaffected; listing the old shard still works.
    assert len(backend.search("socket", scope=frozenset({other}))) == 1
    assert backend.unit_uris(RID) == {u.uko_uri for u in CORPUS}

    # Any write to the resource (here: one unit replaced) migrates the shard.
    replaced = unit("pkg/use.py", "reader = create_connection(h)  # replaced\n")
    backend.upsert(RID, [replaced])
    assert {"symbol", "symbol_exact", "names", "path_raw", "lang"} <= shard_fields(root, RID)
    assert backend.unit_uris(RID) == {u.uko_uri for u in CORPUS}
    first = backend.search("create_connection", scope=SCOPE)[0]
    assert first.metadata["path"] == "pkg/conn.py"
    assert backend.search("replaced", scope=SCOPE)[0].content == replaced.content
    assert [r.metadata["path"] for r in backend.search("socket", scope=SCOPE, path="pkg/*")] == [
        "pkg/conn.py"
    ]
    backend.close()

    # A second process sees the migrated shard, and so does one opened before.
    again = TantivyTextBackend(root)
    assert len(again.search("create_connection", scope=SCOPE)) == 3
    again.close()


def test_a_reader_opened_before_the_migration_follows_it(tmp_path: Path) -> None:
    root = tmp_path / "text"
    write_old_shard(root, RID, CORPUS)
    reader, writer = TantivyTextBackend(root), TantivyTextBackend(root)
    with pytest.raises(IndexUnavailableError):
        reader.search("socket", scope=SCOPE)
    writer.delete(RID, [CORPUS[1].uko_uri])
    hits = reader.search("create_connection", scope=SCOPE)
    assert [h.metadata["path"] for h in hits] == ["pkg/conn.py", "pkg/wrap.py"]
    assert not [p for p in root.iterdir() if p.name.startswith(".trash")]
    reader.close()
    writer.close()


@settings(max_examples=500, deadline=None)
@given(line=st.text(alphabet=st.characters(max_codepoint=127), max_size=120))
def test_the_ascii_line_tokenizer_agrees_with_the_analyzer(line: str) -> None:
    """``match_lines`` tokenizes ASCII lines in Python; it must read them as
    the engine's analyzer does (tokens of 100+ characters aside)."""
    from cleveragents.infrastructure.acms.text_analysis import analysable

    backend = TantivyTextBackend()
    engine = [t for t in code_analyzer().analyze(analysable(line)) if len(t) < 100]
    assert list(backend._line_terms(line)) == engine


def test_a_qualified_name_asks_for_the_definition_of_its_last_part() -> None:
    """``Graph.parse`` (how symbols, callers and read#sym= print a method) is
    one identifier, ``parse``, whose definition it asks for; not a list of
    two names (which asks where they meet and boosts no definition)."""
    analyzer = tantivy_query.code_analyzer()

    assert tantivy_query.identifiers(analyzer, "Graph.parse") == [("parse", ["parse"])]
    assert tantivy_query.identifiers(analyzer, " os.path.join ") == [("join", ["join"])]
    assert tantivy_query.identifiers(analyzer, "Loader.run_all") == [("run_all", ["run", "all"])]
    # One overload as callers prints it (Shapes.area~2): the same definition asked for.
    assert tantivy_query.identifiers(analyzer, "Shapes.area~2") == [("area", ["area"])]
    assert tantivy_query.qualified_name("Shapes.area~2") == ("Shapes", "area")
    assert tantivy_query.qualified_name("Shapes.area~") is None
    # Within a longer query each word next to the dot stays an identifier.
    found = tantivy_query.identifiers(analyzer, "call Graph.parse(x)")
    assert [word for word, _ in found] == ["Graph", "parse"]
