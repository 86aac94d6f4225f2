"""The watcher catches up on what changed before its file-system watch was
live: a file saved after the last reindex but before the watch started raises
no event, yet becomes searchable.  Real engines and watchfiles, in process."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from cleveragents.application.container import build_container
from cleveragents.application.services.operations import AcmsOperations
from cleveragents.cli.watch import run


def test_a_file_saved_before_the_watch_started_is_indexed(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("def first():\n    return 1\n")
    data = tmp_path / "data"
    ops = AcmsOperations.from_container(build_container("local", data))
    ops.add_project("local/w")
    rid = ops.add_resource(str(repo), "local/w", "directory").resource_id
    ops.reindex(jobs=1)
    # Saved after the last reindex, before any watch exists: no event will come.
    (repo / "b.py").write_text("def quokka_marker():\n    return 2\n")

    def found() -> bool:
        view = ops.view(frozenset({rid}))
        return any("quokka_marker" in r.content for r in view.search("quokka_marker"))

    assert not found()
    stop = threading.Event()
    watcher = threading.Thread(
        target=run,
        kwargs={"ops": ops, "debounce": 0.05, "rescan": 0.2, "stop": stop, "data_dir": data},
    )
    watcher.start()
    try:
        deadline = time.monotonic() + 30
        while not found() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert found()
    finally:
        stop.set()
        watcher.join(timeout=30)
    assert not watcher.is_alive()
