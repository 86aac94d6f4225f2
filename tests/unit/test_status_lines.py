"""``acms status``'s line per resource says what a reader must know."""

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
