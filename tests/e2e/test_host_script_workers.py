"""A host script that calls ``reindex`` at module level, with no
``if __name__ == "__main__":`` guard, runs once: worker processes do not run
the host's script again (they would re-open the data directory and die with
their batch).  Run as a real subprocess, with two jobs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from cleveragents.application.services.indexer import WORKER_BATCH_BYTES

HOST = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    out = Path(sys.argv[1])
    with (out / "runs.txt").open("a") as fh:
        fh.write("ran\\n")
    from cleveragents.application.container import build_container
    from cleveragents.application.services.operations import AcmsOperations
    ops = AcmsOperations.from_container(build_container("local", out / "data"))
    ops.add_project("t/p")
    ops.add_resource(str(out / "repo"), "t/p", "directory")
    report = ops.reindex(jobs=2)
    (out / "report.json").write_text(json.dumps({
        "files": report.total.files_indexed, "skipped": report.total.skipped,
        "failed": report.failed,
    }))
    """
)


def test_a_host_script_without_a_main_guard_runs_once(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    n = 2 * WORKER_BATCH_BYTES // (32 * 1024) + 2
    for i in range(n):
        lines = [f"note {i} line {j} alpha beta gamma delta\n" for j in range(800)]
        (repo / f"notes{i:03}.txt").write_text("".join(lines))
    script = tmp_path / "host.py"
    script.write_text(HOST)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "runs.txt").read_text() == "ran\n"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report == {"files": n, "skipped": {}, "failed": {}}
