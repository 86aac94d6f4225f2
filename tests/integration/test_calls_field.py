"""A short list of names finds the code that calls them (the ``calls`` field),
above the code that defines or merely mentions them; ``calls:`` is a field of
the query language.  Real engines, indexed by the project's own operations."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import pytest

from cleveragents.application.container import build_container
from cleveragents.application.services.operations import AcmsOperations
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.infrastructure.acms import tantivy_query

FILES = {
    # Defines the three names; its docstrings repeat them (a strong BM25 match).
    "lib/ops.py": '''
        def load_table(path):
            """load_table reads a table; see save_table and index_rows.

            load_table, save_table, index_rows: the table trio.
            """
            return open(path).read()


        def save_table(path, rows):
            """save_table writes what load_table read; index_rows first."""
            return rows


        def index_rows(rows):
            """index_rows orders rows for save_table and load_table."""
            return sorted(rows)
        ''',
    # Calls all three.
    "app/job.py": """
        from lib.ops import index_rows, load_table, save_table


        def nightly(path):
            # Run every night: reports, archives, cleanup, notification.
            started = clock()
            report = build_report(started)
            archive = archive_path(report, started)
            cleanup_temporary(archive)
            notify_operators(report, archive)
            rows = load_table(path)
            save_table(path, index_rows(rows))
            record_duration(started, clock())
            return report
        """,
    # Mentions them in prose only.
    "docs/notes.md": """
        # Tables

        load_table, save_table and index_rows: load_table then index_rows then
        save_table.  load_table is the slow one.
        """,
}
QUERY = "load_table save_table index_rows"


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScopedView]:
    base = tmp_path_factory.mktemp("calls")
    root = base / "repo"
    for rel, body in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(body))
    ops = AcmsOperations.from_container(build_container("local", base / "data"))
    ops.add_project("t/calls")
    rid = ops.add_resource(str(root), "t/calls", "directory").resource_id
    ops.reindex(jobs=1)
    yield ops.view(frozenset({rid}))


def _paths(view: ScopedView, query: str, **kw: str) -> list[str]:
    return [r.metadata["path"] for r in view.search(query, max_results=5, **kw)]


def test_the_calling_chunk_ranks_first_for_a_list_of_names(view: ScopedView) -> None:
    hits = view.search(QUERY, max_results=5)
    assert hits[0].metadata["path"] == "app/job.py"
    assert {"load_table", "save_table", "index_rows"} <= set(hits[0].metadata["calls"].split())


def test_without_the_calls_field_the_definitions_win(
    view: ScopedView, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The positive control: the corpus is built so that plain BM25 prefers
    # the definitions; the calls clause is what changes the order.
    # (Another spelling of the query: the backend caches built queries by text.)
    monkeypatch.setattr(tantivy_query, "W_CALLS", 0.0)
    assert _paths(view, f" {QUERY} ")[0] != "app/job.py"


def test_one_name_still_finds_its_definition_first(view: ScopedView) -> None:
    assert _paths(view, "save_table")[0] == "lib/ops.py"


def test_calls_is_a_field_of_the_query_language(view: ScopedView) -> None:
    assert _paths(view, "calls:index_rows", syntax="tantivy") == ["app/job.py"]
    assert _paths(view, "calls:Index_Rows", syntax="tantivy") == ["app/job.py"]


def test_a_short_sentence_is_not_a_list_of_names(view: ScopedView) -> None:
    # "and" is a sentence's word: no calls clause, so BM25's order stands
    # (the definitions, as in the control above).
    assert _paths(view, "load_table and save_table and index_rows")[0] != "app/job.py"
    assert tantivy_query._called_names("load_table and save_table") == []
    assert tantivy_query._called_names("read the json stream") == []
    assert tantivy_query._called_names("getaddrinfo iter next") == ["getaddrinfo", "iter", "next"]
    assert tantivy_query._called_names("Py_INCREF Py_INCREF") == ["py_incref"]
    assert tantivy_query._called_names("dumps") == []  # one name: its definition is wanted
    assert tantivy_query._called_names("a b c d e f g") == []  # longer than a list
    assert tantivy_query._called_names("foo( bar") == []  # not identifiers
