"""The CLI's output boundary: escaped human text, exact JSON, one line per
library warning or log record, and a quiet end on a closed pipe."""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Iterator

import pytest
import structlog

from cleveragents.cli.main import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_USAGE,
    Output,
    configure_logging,
    guarded,
)
from cleveragents.domain.models.acms.backends import GraphResult, TextResult
from cleveragents.domain.models.acms.errors import QueryError, ResourceListingError

ESC = "\x1b"


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level, show = list(root.handlers), root.level, warnings.showwarning
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    warnings.showwarning = show
    structlog.reset_defaults()


def test_human_output_escapes_fields_and_cannot_forge_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from cleveragents.cli.main import _graph, _hits

    hit = TextResult(
        uko_uri="uko://01JD0000000000000000000000/a.py#L1-L1",
        content=f"x = '{ESC}]52;c;SGVsbG8={ESC}\\'\nsecond",
        score=0.5,
        metadata={"path": "two\n0.999  forged.py", "start_line": "1", "end_line": "1"},
    )
    Output(as_json=False).emit([hit], lambda: _hits([hit]))
    out = capsys.readouterr().out
    assert ESC not in out
    assert len(out.splitlines()) == 2  # one hit: its line and its snippet
    assert "two\\n0.999  forged.py:1-1" in out
    graph = GraphResult(triples=[("urn:s", "urn:p", f"a{ESC}[31mb\u202ec")])
    Output(as_json=False).emit(graph, lambda: _graph(graph))
    assert capsys.readouterr().out == "urn:s  urn:p  a\\x1b[31mb\\u202ec\n"


def test_output_escapes_what_a_formatter_forgot(capsys: pytest.CaptureFixture[str]) -> None:
    Output(as_json=False).emit(None, lambda: f"line one {ESC}[2J\nline two \x07")
    assert capsys.readouterr().out == "line one \\x1b[2J\nline two \\x07\n"


def test_json_output_is_exact(capsys: pytest.CaptureFixture[str]) -> None:
    value = {"path": f"caf\udce9{ESC}]0;t\x07\x9b\u202e\n.py", "n": [1, 2.5, None]}
    Output(as_json=True).emit(value, lambda: "unused")
    out = capsys.readouterr().out
    assert json.loads(out) == value
    assert not any(c in out for c in (ESC, "\x07", "\x9b", "\u202e", "\udce9"))


def test_error_lines_are_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    def body() -> int:
        raise QueryError(f"invalid query: {ESC}]52;c;QQ==\x07(")

    assert guarded("acms", body) == EXIT_USAGE
    err = capsys.readouterr().err
    assert ESC not in err and "\x07" not in err
    assert err == "acms: error: invalid query: \\x1b]52;c;QQ==\\x07(\n"


def test_a_listing_failure_is_a_run_time_failure(capsys: pytest.CaptureFixture[str]) -> None:
    def body() -> int:
        raise ResourceListingError("git cannot list /r: dubious ownership (fix: ...)")

    assert guarded("acms", body) == EXIT_FAILURE
    assert capsys.readouterr().err.startswith("acms: failed: git cannot list /r")


def test_a_closed_pipe_is_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    def body() -> int:
        raise BrokenPipeError(32, "Broken pipe")

    assert guarded("acms", body) == EXIT_BROKEN_PIPE == 141
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_python_warnings_become_one_log_line(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("warning")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        configure_logging("warning")  # inside: catch_warnings restores showwarning after
        warnings.warn(f"odd literal {ESC}[31m\nsecond line", UserWarning, stacklevel=1)
    [line] = capsys.readouterr().err.splitlines()
    event = json.loads(line)
    assert event["event"] == "cli.warning" and event["category"] == "UserWarning"
    assert event["message"] == "odd literal \\x1b[31m second line"
    assert event["where"].startswith("test_cli_output.py:")


def test_library_log_records_lose_their_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("warning")
    # Any library's logger (rdflib.term's own records are already tamed by the
    # adapter, see test_sparql_limits.py, so another name is used here).
    log = logging.getLogger("somelibrary.term")
    try:
        int("abc")
    except ValueError:
        log.warning("Failed to convert Literal lexical form to value", exc_info=True)
    log.info("below the level: dropped")
    [line] = capsys.readouterr().err.splitlines()
    event = json.loads(line)
    assert event["event"] == "cli.library_log" and event["logger"] == "somelibrary.term"
    assert event["level"] == "warning"
    assert event["error"].startswith("ValueError: invalid literal")
    assert "Traceback" not in line
    # Configuring again does not add a second handler (one line, not two).
    configure_logging("warning")
    log.warning("once")
    assert len(capsys.readouterr().err.splitlines()) == 1
