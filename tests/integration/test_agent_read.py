"""``read`` over a real data directory: the file as it is now, held to the
rules its indexing applied, numbered as the indexer numbers it.

- A file that took in a secret, or became binary, since it was indexed is
  not served; one that changed otherwise is, marked ``changed_since_indexed``.
- Line numbers and ``total_lines`` agree with the search hits' ranges, for
  ``\\n``, ``\\r\\n`` and ``\\r`` endings, with or without a final newline.
- A range past the end, an unknown symbol or fragment is an error; a
  ``#sym=`` URI reads that symbol's lines.
- A line too long for the budget is cut to what fits, and says how much was
  cut; ``context`` says how many hits it left out.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cleveragents.application.services.agent_session import AgentSession, render
from cleveragents.application.services.operations import AcmsOperations
from cleveragents.bootstrap import bootstrap
from cleveragents.domain.models.acms.errors import QueryError
from cleveragents.domain.models.acms.uko import file_uri

AWS_KEY = "AKIA" + "QWERTYUIOPASDFGH"  # the shape the content filter refuses
CORE = (
    "class Loader:\n"
    "    def run(self):\n"
    "        return helper()\n"
    "\n"
    "\n"
    "def helper():\n"
    "    return 'quokka'\n"
)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[AcmsOperations, AgentSession, str, Path]]:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "core.py").write_text(CORE)
    (root / "pkg" / "crlf.py").write_bytes(b"a = 1\r\nb = 2\r\nc = 3\r\n")
    (root / "pkg" / "cr.py").write_bytes(b"x = 1\ry = 2\rz = 'wombat'")
    (root / "pkg" / "empty.py").write_text("")
    (root / "pkg" / "long.txt").write_text("w" * 200_000 + "\nshort\n")
    (root / "notes.md").write_text("# Notes\n\nThe quokka helper.\n")
    ops = bootstrap(tmp_path / "data", embedding_dimension=16)
    ops.add_project("local/r")
    rid = ops.add_resource(str(root), "local/r").resource_id
    ops.reindex()
    yield ops, ops.agent_session(projects=["local/r"]), rid, root
    ops._store().close()


def lines_of(answer: dict[str, object]) -> list[tuple[int, str]]:
    return [(r["line"], r["text"]) for r in answer["results"]]  # type: ignore[attr-defined]


@contextmanager
def indexed_session(root: Path, data: Path) -> Iterator[AgentSession]:
    """``root`` indexed alone in project local/r of ``data``; its session."""
    ops = bootstrap(data, embedding_dimension=16)
    try:
        ops.add_project("local/r")
        ops.add_resource(str(root), "local/r")
        ops.reindex()
        yield ops.agent_session(projects=["local/r"])
    finally:
        ops._store().close()


def test_a_file_that_took_in_a_secret_since_indexing_is_not_served(world) -> None:  # type: ignore[no-untyped-def]
    _, session, rid, root = world
    with (root / "pkg" / "core.py").open("a") as fh:
        fh.write(f'KEY = "{AWS_KEY}"\n')
    with pytest.raises(ValueError, match="secret filter") as err:
        session.read("pkg/core.py")
    assert AWS_KEY not in str(err.value)
    with pytest.raises(ValueError, match="secret filter"):
        session.read(file_uri(rid, "pkg/core.py") + "#L1-L2")  # not even other lines


def test_a_file_that_became_binary_since_indexing_is_not_served(world) -> None:  # type: ignore[no-untyped-def]
    _, session, _, root = world
    (root / "pkg" / "core.py").write_bytes(b"\x00\x01garbage\xff" * 50)
    with pytest.raises(ValueError, match="binary now"):
        session.read("pkg/core.py")


def test_a_changed_file_is_served_as_it_is_now_and_says_so(world) -> None:  # type: ignore[no-untyped-def]
    _, session, _, root = world
    assert "changed_since_indexed" not in session.read("pkg/core.py")
    (root / "pkg" / "core.py").write_text("# a\n# b\n" + CORE)
    answer = session.read("pkg/core.py#L1-L2")
    assert answer["changed_since_indexed"] is True
    assert lines_of(answer) == [(1, "# a"), (2, "# b")]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("pkg/core.py", CORE.splitlines()),
        ("pkg/crlf.py", ["a = 1", "b = 2", "c = 3"]),
        ("pkg/cr.py", ["x = 1", "y = 2", "z = 'wombat'"]),
        ("pkg/empty.py", []),
    ],
)
def test_lines_are_numbered_as_the_indexer_numbers_them(world, path: str, expected) -> None:  # type: ignore[no-untyped-def]
    _, session, _, _ = world
    answer = session.read(path)
    assert answer["total_lines"] == len(expected)
    assert lines_of(answer) == list(enumerate(expected, 1))


def test_a_search_hits_range_reads_the_lines_it_matched(world) -> None:  # type: ignore[no-untyped-def]
    _, session, _, _ = world
    hit = session.search("wombat", mode="text")["results"][0]
    assert hit["path"] == "pkg/cr.py"
    read = session.read(hit["uri"])
    assert [n for n, _ in lines_of(read)] == list(range(hit["start_line"], hit["end_line"] + 1))
    assert any("wombat" in text for _, text in lines_of(read))


def test_a_range_past_the_end_is_an_error(world) -> None:  # type: ignore[no-untyped-def]
    _, session, _, _ = world
    with pytest.raises(ValueError, match="has 7 lines: line 500 is past its end"):
        session.read("pkg/core.py#L500-L600")
    assert lines_of(session.read("pkg/core.py#L7-L90")) == [(7, "    return 'quokka'")]
    # An empty file read whole is no lines; its line 1 is past its end too
    # (a reviewer found "no results", exit 0, where a.py#L2 of a one-line file fails).
    assert session.read("pkg/empty.py")["results"] == []
    with pytest.raises(ValueError, match="has 0 lines: line 1 is past its end"):
        session.read("pkg/empty.py#L1")


def test_a_symbol_uri_reads_the_symbols_lines(world) -> None:  # type: ignore[no-untyped-def]
    _, session, rid, _ = world
    run = session.read(file_uri(rid, "pkg/core.py") + "#sym=Loader.run")
    assert lines_of(run) == [(2, "    def run(self):"), (3, "        return helper()")]
    assert lines_of(session.read("pkg/core.py#sym=helper"))[0] == (6, "def helper():")
    with pytest.raises(ValueError, match="defines no symbol 'Nope'"):
        session.read("pkg/core.py#sym=Nope")
    with pytest.raises(ValueError, match="neither a line range"):
        session.read("pkg/core.py#frobnicate")


@pytest.mark.parametrize("budget", [256, 1_000, 50_000, 199_999])
def test_a_line_too_long_for_the_budget_is_cut_to_fit_and_says_so(world, budget: int) -> None:  # type: ignore[no-untyped-def]
    _, session, _, _ = world
    answer = session.read("pkg/long.txt", budget=budget)
    assert len(render(answer)) <= budget
    first = answer["results"][0]
    assert first["line"] == 1
    assert len(first["text"]) + first["cut"] == 200_000
    # Cut to what fits: within the envelope's and the marker's room of it.
    assert len(first["text"]) > budget - 250
    assert answer["truncated"] == {"more": 1}


def test_context_says_how_many_hits_it_left_out(world) -> None:  # type: ignore[no-untyped-def]
    _, session, _, _ = world
    small = session.context("quokka helper loader", budget=256)
    large = session.context("quokka helper loader", budget=20_000)
    assert large["truncated"] is False and large["results"]
    assert small["truncated"] == {"more": len(large["results"]) - len(small["results"])}


@pytest.mark.parametrize(("lang", "meant"), [("py", "python"), ("Markdwn", "markdown")])
def test_an_unknown_language_filter_is_an_error_not_an_empty_answer(world, lang, meant) -> None:  # type: ignore[no-untyped-def]
    _, session, _, _ = world
    for mode in ("text", "hybrid"):
        with pytest.raises(QueryError, match=f"did you mean {meant!r}"):
            session.search("quokka", mode=mode, lang=lang)
    assert session.search("quokka", mode="text", lang="PYTHON")["results"]


def test_every_file_the_indexer_takes_can_be_read(tmp_path: Path) -> None:
    """A generated module of 900 KB is indexed (the indexer takes up to 1 MB):
    a hit in it, or a symbol of it, must be readable, not refused as 'moved'."""
    from cleveragents.application.services.agent_session import READ_FILE_BYTES
    from cleveragents.application.services.indexer import DEFAULT_INDEX_FILE_BYTES

    root = tmp_path / "repo"
    root.mkdir()
    body = "".join(f"def generated_{i}(x):\n    return x + {i}\n\n" for i in range(20_000))
    (root / "big.py").write_text(body)
    assert 800_000 < len(body) < DEFAULT_INDEX_FILE_BYTES
    with indexed_session(root, tmp_path / "data") as session:
        answer = session.read("big.py#L59998-L59999")

        assert READ_FILE_BYTES >= DEFAULT_INDEX_FILE_BYTES
        assert lines_of(answer) == [
            (59998, "def generated_19999(x):"),
            (59999, "    return x + 19999"),
        ]
        assert answer["total_lines"] == 60_000


def test_a_long_query_is_echoed_cut_and_leaves_the_budget_to_the_hits(world) -> None:  # type: ignore[no-untyped-def]
    """An agent pastes a traceback of 7,900 characters: the answer repeats
    200 of them and says how many it left out, instead of failing because
    the query alone filled the budget."""
    from cleveragents.application.services.agent_session import ECHO_CHARS

    _, session, _, _ = world
    query = "helper quokka " + "x" * 7_886

    for answer in (
        session.search(query, mode="hybrid", budget=8_000),
        session.search(query, mode="text", budget=8_000),
        session.context(query, budget=8_000),
    ):
        assert len(render(answer)) <= 8_000
        assert answer["query"] == query[:ECHO_CHARS]
        assert answer["query_cut"] == len(query) - ECHO_CHARS
        assert any(r["path"] == "pkg/core.py" for r in answer["results"]), answer
    short = session.search("helper", mode="text")
    assert short["query"] == "helper" and "query_cut" not in short


def test_context_names_its_own_argument_when_it_is_empty(world) -> None:  # type: ignore[no-untyped-def]
    _, session, _, _ = world
    with pytest.raises(ValueError, match=r"^task must be a non-empty string$"):
        session.context("   ")


@pytest.mark.parametrize(
    ("tool", "arg"),
    [
        ("read", "pkg/\ud800.py"),
        ("read", "uko://{rid}/pkg/\ud800.py"),
        ("read", "pkg/core.py\udbff#L1"),
        ("symbols", "pkg/\ud800.py"),
        ("triples", "pkg/\ud800.py"),
        ("triples", "uko://{rid}/pkg/\ud800.py"),
        ("traverse", "pkg/\ud800.py"),
        ("traverse", "uko://{rid}/\udc00"),
    ],
)
def test_a_path_that_is_not_valid_text_is_one_clear_error(world, tool: str, arg: str) -> None:  # type: ignore[no-untyped-def]
    """A lone surrogate (JSON's ``"\\ud800"``) encodes to no file name: an
    error saying so, not Python's "'utf-8' codec can't encode"."""
    _, session, rid, _ = world
    with pytest.raises(ValueError) as err:
        getattr(session, tool)(arg.replace("{rid}", rid))
    message = str(err.value)
    assert "is not valid text" in message and "codec" not in message, message
    assert "\n" not in message
    message.encode("utf-8")  # printable as it is, surrogates escaped


def test_a_path_of_undecodable_bytes_is_read_a_lone_surrogate_refused(tmp_path: Path) -> None:
    """What the indexer keeps of a non-UTF-8 file name (surrogate escapes,
    ``os.fsdecode``) is a path: read, listed and walked by it.  Only what
    no file name decodes to is refused."""
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    name = os.fsdecode(b"pkg/caf\xe9.py")
    (root / name).write_text("def cafe():\n    pass\n")
    with indexed_session(root, tmp_path / "data") as session:
        assert session.read(name)["total_lines"] == 2
        assert [r["name"] for r in session.symbols(name)["results"]] == ["cafe"]
        assert session.traverse(name, depth=1)["results"]
        with pytest.raises(ValueError, match="is not valid text"):
            session.read(name.replace("\udce9", "\ud800"))
