"""hybrid_search with a path glob and a language: every source is filtered
(text inside its engine, vector and graph hits here), over the real engines."""

from __future__ import annotations

import fnmatch
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cleveragents.application.container import build_container
from cleveragents.application.services import fusion
from cleveragents.application.services.fusion import FILTERED_VECTOR_FACTOR, hybrid_search
from cleveragents.application.services.operations import AcmsOperations
from cleveragents.domain.models.acms.errors import QueryError
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.domain.models.acms.uko import path_of, resource_id_of
from cleveragents.domain.models.acms.ulids import canonical_ulid

PY = '''
    def parse_header(line):
        """Split one header line into its name and value."""
        name, _, value = line.partition(":")
        return name.strip(), value.strip()
    '''
C = """
    /* Split one header line into its name and value. */
    int parse_header(const char *line, char *name, char *value) {
        return split_line(line, ':', name, value);
    }
    """
MD = """
    # Headers

    parse_header splits one header line into its name and value.
    """
FILES = {
    "pkg/http/headers.py": PY,
    "pkg/http/deep/more_headers.py": PY.replace("parse_header", "parse_more_headers"),
    "pkg/mail/headers.py": PY.replace("header", "mail_header"),
    "native/headers.c": C,
    "docs/headers.md": MD,
}
# (glob, lang) -> the files that may come back, by the documented glob rules:
# ``*`` within one segment, ``**`` across segments, a trailing ``/`` = below.
FILTERS: dict[tuple[str | None, str | None], set[str]] = {
    ("pkg/http/*", None): {"pkg/http/headers.py"},
    ("pkg/**/*.py", None): {
        "pkg/http/headers.py",
        "pkg/http/deep/more_headers.py",
        "pkg/mail/headers.py",
    },
    ("pkg/http/", None): {"pkg/http/headers.py", "pkg/http/deep/more_headers.py"},
    (None, "c"): {"native/headers.c"},
    (None, "python"): {
        "pkg/http/headers.py",
        "pkg/http/deep/more_headers.py",
        "pkg/mail/headers.py",
    },
    ("**/headers.*", "python"): {"pkg/http/headers.py", "pkg/mail/headers.py"},
    ("docs/*", "python"): set(),
}
QUERIES = ["parse_header", "Split one header line into its name and value.", "name value"]
SOURCES = [
    None,
    {"text": 1.0},
    {"vector": 1.0},
    {"graph": 1.0},
    {"text": 1, "vector": 1, "graph": 1},
]


@dataclass
class Corpus:
    ops: AcmsOperations
    embedder: Any
    resources: list[str]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    base = tmp_path_factory.mktemp("hybrid-filters")
    container = build_container("local", base / "data", embedder="hashing")
    ops = AcmsOperations.from_container(container)
    ops.add_project("test/filters")
    resources = []
    for variant in ("one", "two"):
        root = base / variant
        for rel, body in FILES.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(textwrap.dedent(body))
        resources.append(ops.add_resource(str(root), "test/filters", "directory").resource_id)
    ops.reindex()
    yield Corpus(ops, container.embedder(), resources)


def _weights(source: dict[str, float] | None) -> dict[str, float] | None:
    if source is None:
        return None
    return {"text": 0.0, "vector": 0.0, "graph": 0.0, **source}


@pytest.mark.parametrize(("glob", "lang"), list(FILTERS))
@pytest.mark.parametrize("source", SOURCES)
def test_every_source_keeps_to_the_filter(
    corpus: Corpus, glob: str | None, lang: str | None, source: dict[str, float] | None
) -> None:
    view = corpus.ops.view(frozenset(corpus.resources[:1]))
    allowed = FILTERS[(glob, lang)]
    for query in QUERIES:
        hits = hybrid_search(
            view, corpus.embedder, query, path=glob, lang=lang, weights=_weights(source)
        )
        paths = {path_of(h.uko_uri) for h in hits}
        assert paths <= allowed, (query, glob, lang, source, paths)
        assert {resource_id_of(h.uko_uri) for h in hits} <= {canonical_ulid(corpus.resources[0])}


def test_filtered_text_and_vector_find_what_the_filter_admits(corpus: Corpus) -> None:
    view = corpus.ops.view(frozenset(corpus.resources))
    for (glob, lang), allowed in FILTERS.items():
        for source in ({"text": 1.0}, {"vector": 1.0}):
            hits = hybrid_search(
                view,
                corpus.embedder,
                "Split one header line into its name and value",
                path=glob,
                lang=lang,
                weights=_weights(source),
                max_results=50,
            )
            # Every admitted file of both resources holds the sentence's words.
            assert {path_of(h.uko_uri) for h in hits} == allowed, (glob, lang, source)


class Recording:
    def __init__(self, target: Any, calls: list[str]) -> None:
        self._target, self._calls = target, calls

    def __getattr__(self, name: str) -> Any:
        self._calls.append(name)
        return getattr(self._target, name)


@pytest.mark.parametrize(("glob", "lang"), [("", None), ("   ", None), (None, "not a language!")])
def test_a_bad_filter_is_refused_before_any_backend_runs(
    corpus: Corpus, glob: str | None, lang: str | None
) -> None:
    calls: list[str] = []
    c = build_container("local", corpus.ops.data_dir)
    view = ScopedView(
        Recording(c.text_backend(), calls),  # type: ignore[arg-type]
        Recording(c.vector_backend(), calls),  # type: ignore[arg-type]
        Recording(c.graph_backend(), calls),  # type: ignore[arg-type]
        frozenset(corpus.resources),
    )
    with pytest.raises(QueryError):
        hybrid_search(view, corpus.embedder, "parse_header", path=glob, lang=lang)
    assert calls == []


segments = st.sampled_from(["pkg", "http", "mail", "deep", "native", "docs", "*", "**", "*.py"])


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(parts=st.lists(segments, min_size=1, max_size=4), query=st.sampled_from(QUERIES))
def test_random_globs_admit_only_matching_paths(
    corpus: Corpus, parts: list[str], query: str
) -> None:
    glob = "/".join(parts)
    view = corpus.ops.view(frozenset(corpus.resources))
    weights = {"text": 1.0, "vector": 1.0, "graph": 1.0}
    hits = hybrid_search(view, corpus.embedder, query, path=glob, weights=weights)
    # Oracle: fnmatch per segment, with ``**`` as any number of whole segments.
    for hit in hits:
        path = path_of(hit.uko_uri)
        assert path is not None and _glob_oracle(parts, path.split("/")), (glob, path)


def _glob_oracle(parts: list[str], segs: list[str]) -> bool:
    if not parts:
        return not segs
    head, rest = parts[0], parts[1:]
    if head == "**":
        return any(_glob_oracle(rest, segs[i:]) for i in range(len(segs) + 1))
    return bool(segs) and fnmatch.fnmatchcase(segs[0], head) and _glob_oracle(rest, segs[1:])


def test_the_oracle_reads_globs_as_documented() -> None:
    assert _glob_oracle(["pkg", "**", "*.py"], ["pkg", "a.py"])
    assert _glob_oracle(["pkg", "**", "*.py"], ["pkg", "x", "y", "a.py"])
    assert not _glob_oracle(["pkg", "*"], ["pkg", "x", "a.py"])
    assert _glob_oracle(["**"], ["a", "b"])


def test_unfiltered_search_is_unchanged_by_the_new_keywords(corpus: Corpus) -> None:
    view = corpus.ops.view(frozenset(corpus.resources))
    for query in QUERIES:
        plain = hybrid_search(view, corpus.embedder, query)
        explicit = hybrid_search(view, corpus.embedder, query, path=None, lang=None)
        assert [(h.uko_uri, h.score) for h in plain] == [(h.uko_uri, h.score) for h in explicit]
        assert plain, query


def test_paths_are_what_the_tree_holds() -> None:
    # Guards the FILTERS table above against typos in FILES.
    for allowed in FILTERS.values():
        assert allowed <= set(FILES)


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    """30 files close to the queries, two far from them under ``odd/``."""
    base = tmp_path_factory.mktemp("crowded")
    root = base / "repo"
    (root / "noise").mkdir(parents=True)
    (root / "odd").mkdir()
    for i in range(30):
        (root / "noise" / f"n{i:02}.py").write_text(
            f"def split_header_{i}(line):\n    # split one header line into name and value\n"
            f"    return line.partition(':')  # header {i}\n"
        )
    (root / "odd" / "zebra.txt").write_text("zebra giraffe savanna migration\n")
    (root / "odd" / "kelp.md").write_text("# Kelp\n\nkelp forests and otters\n")
    container = build_container("local", base / "data", embedder="hashing")
    ops = AcmsOperations.from_container(container)
    ops.add_project("test/crowded")
    rid = ops.add_resource(str(root), "test/crowded", "directory").resource_id
    ops.reindex(jobs=1)
    yield Corpus(ops, container.embedder(), [rid])


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize(("glob", "lang"), [("odd/*", None), (None, "markdown"), ("odd/", "text")])
def test_filtered_vector_candidates_are_exact_however_deep_they_rank(
    crowded: Corpus, depth: int, glob: str | None, lang: str | None
) -> None:
    """The vector source's filtered candidates are the first ``depth`` of its
    whole ranking that pass the filter (oracle: filter the full ranking),
    also when they rank below the first FILTERED_VECTOR_FACTOR x depth."""
    view = crowded.ops.view(frozenset(crowded.resources))
    query = "split one header line into name and value"
    vector = crowded.embedder.embed([query])[0].tolist()
    full = [r.uko_uri for r in view.similarity_search(vector, top_k=1000)]
    allowed = {"odd/zebra.txt", "odd/kelp.md"} if lang != "markdown" else {"odd/kelp.md"}
    if lang == "text":
        allowed = {"odd/zebra.txt"}
    admitted = [u for u in full if path_of(u) in allowed]
    assert admitted
    # The precondition that makes this test mean something:
    assert full.index(admitted[0]) >= FILTERED_VECTOR_FACTOR * depth
    hits = hybrid_search(
        view,
        crowded.embedder,
        query,
        path=glob,
        lang=lang,
        weights=_weights({"vector": 1.0}),
        depth=depth,
        max_results=depth,
    )
    assert [h.uko_uri for h in hits] == admitted[:depth]


def test_filtered_vector_candidates_stop_at_the_cap(
    crowded: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter that admits only deep units reads at most the cap of vector
    hits (each carries its content), then answers with what passed."""
    monkeypatch.setattr(fusion, "MAX_FILTERED_CANDIDATES", 12)
    asked: list[int] = []
    c = build_container("local", crowded.ops.data_dir)
    vectors = c.vector_backend()

    class Depths:
        def __getattr__(self, name: str) -> Any:
            return getattr(vectors, name)

        def similarity_search(self, embedding: list[float], **kw: Any) -> Any:
            asked.append(kw["top_k"])
            return vectors.similarity_search(embedding, **kw)

    view = ScopedView(
        c.text_backend(),
        Depths(),  # type: ignore[arg-type]
        c.graph_backend(),
        frozenset(crowded.resources),
    )
    hits = hybrid_search(
        view,
        crowded.embedder,
        "split one header line into name and value",
        path="odd/*",
        weights=_weights({"vector": 1.0}),
        depth=1,
        max_results=1,
    )
    assert asked == [8, 12]  # depth x 8, then the cap; the odd files rank below both
    assert hits == []


class RefusesFilters:
    """The real text backend behind an adapter that, as the Milvus one does,
    takes a query but refuses the ``path``/``lang`` options."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def search(
        self, query: str, *, scope: frozenset[str], max_results: int = 20, **options: Any
    ) -> Any:
        if options.get("path") is not None or options.get("lang") is not None:
            raise QueryError("path and lang filters are not supported by this backend")
        return self._target.search(query, scope=scope, max_results=max_results, **options)


def test_a_text_backend_that_refuses_the_filters_is_filtered_here(corpus: Corpus) -> None:
    """Oracle: the same engine filtering inside (the local text backend)."""
    c = build_container("local", corpus.ops.data_dir)
    scope = frozenset(corpus.resources)
    exact = ScopedView(c.text_backend(), c.vector_backend(), c.graph_backend(), scope)
    refusing = ScopedView(
        RefusesFilters(c.text_backend()),  # type: ignore[arg-type]
        c.vector_backend(),
        c.graph_backend(),
        scope,
    )
    text_only = {"text": 1.0, "vector": 0.0, "graph": 0.0}
    answered = 0
    for glob, lang in FILTERS:
        for query in QUERIES:
            want = hybrid_search(
                exact, corpus.embedder, query, path=glob, lang=lang, weights=text_only, depth=3
            )
            got = hybrid_search(
                refusing, corpus.embedder, query, path=glob, lang=lang, weights=text_only, depth=3
            )
            assert [(h.uko_uri, h.content) for h in got] == [
                (h.uko_uri, h.content) for h in want
            ], (glob, lang, query)
            answered += bool(got)
    assert answered > len(FILTERS)  # most combinations have text hits to compare
    # A query it refuses as such still leaves the other sources to answer.
    hits = hybrid_search(refusing, corpus.embedder, "foo(", path="pkg/**/*.py", depth=3)
    assert all(path_of(h.uko_uri).startswith("pkg/") for h in hits)  # type: ignore[union-attr]
