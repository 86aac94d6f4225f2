"""Lines of the CLI's human output that say what a reader must know."""

from __future__ import annotations

from typing import Any

from cleveragents.cli.main import _status


def status_of(**extra: Any) -> str:
    row = {
        "resource_id": "01JD5TD11B0000000000000000",
        "type": "directory",
        "files": 3,
        "text_units": 3,
        "vector_units": 3,
        "graph_subjects": 9,
        "last_indexed_at": None,
        "location": "/src/p",
        "secret_filter": {"enabled": True, "allow": []},
        "secrets_skipped": 0,
        "quarantined": 0,
        "interrupted": 0,
        **extra,
    }
    return _status(
        {
            "data_dir": "/d",
            "projects": 1,
            "profile": "local",
            "resources": [row],
            "bytes_on_disk": {"text": 1},
        }
    )


def test_a_resource_a_stopped_run_left_is_named_with_what_repairs_it() -> None:
    assert "interrupted" not in status_of()
    line = status_of(interrupted=1).splitlines()[1]
    assert "interrupted: a reindex of it stopped midway" in line
    assert "the next reindex, which repairs it" in line


def test_a_hit_s_matching_lines_past_the_four_shown_are_counted() -> None:
    """Found by a reviewer: ``search text scan_once`` showed two of a hit's
    lines and dropped line 230, which matched too, without a word."""
    from cleveragents.cli.main import _hits
    from cleveragents.domain.models.acms.backends import TextResult

    content = "\n".join(
        "def scan_once(): pass" if i % 3 == 0 else f"other = {i}" for i in range(30)
    )
    hit = TextResult(
        "uko://01JD5TD11B0000000000000000/a.py#L10-L39",
        content,
        0.5,
        {"path": "a.py", "start_line": "10", "end_line": "39"},
    )
    text = _hits([hit], "scan_once")
    shown = [line for line in text.splitlines() if "def scan_once" in line]
    assert 1 <= len(shown) < 10
    assert f"… {10 - len(shown)} more matching lines (acms read the URI)" in text
    one = TextResult(hit.uko_uri, "def scan_once(): pass\nx = 1", 0.5, hit.metadata)
    assert "more matching" not in _hits([one], "scan_once")


def test_a_resource_a_reindex_writes_now_is_not_called_interrupted() -> None:
    line = status_of(reindexing=1).splitlines()[1]
    assert "reindexing: a reindex is writing it now" in line
    assert "interrupted" not in line
