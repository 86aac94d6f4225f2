"""A file that crashes the code parser in the indexing process itself.

``--jobs 1``, and at any job count a change too small to start workers, plan
files in the writer.  A parser's native crash (SIGSEGV, abort) then takes
``acms reindex`` or ``acms watch`` down; before the planning mark, the next
run planned the same file the same way and died again, every run.  Now the
run after the crash finds the mark, quarantines that content and plans it
without the parser: one failed run per version of a hostile file.

``ACMS_FAULT_PLAN=crash:<path>`` makes any process that plans ``<path>``
with the code parser SIGKILL itself, as such a crash would.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path

import pytest

from cli_process import indexed_projects, run_acms

REINDEX = Path(__file__).resolve().parents[2] / "scripts" / "reindex.py"
FAULT = "ACMS_FAULT_PLAN"
CRASH = {FAULT: "crash:pkg/bad.py"}


def _world(tmp_path: Path) -> tuple[dict[str, str], Path]:
    env, _ = indexed_projects(
        tmp_path,
        {
            "proj": {
                "pkg/core.py": "def core_entry():\n    return helper_call()\n",
                "pkg/bad.py": "def hostile_v1():\n    return 1\n",
            }
        },
    )
    return env, tmp_path / "proj"


def _symbols(env: dict[str, str]) -> dict[str, list[str]]:
    out = {}
    for path in ("pkg/core.py", "pkg/bad.py"):
        done = run_acms(env, "--json", "symbols", path, "--project", "local/proj")
        assert done.returncode == 0, done.stderr
        out[path] = [r["name"] for r in json.loads(done.stdout)["results"]]
    return out


def _callees(env: dict[str, str], name: str) -> list[str]:
    done = run_acms(env, "--json", "callees", name, "--project", "local/proj")
    assert done.returncode == 0, done.stderr
    return [r["name"] for r in json.loads(done.stdout)["results"]]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_one_crashed_run_then_the_file_is_indexed_without_the_parser(
    tmp_path: Path, jobs: str
) -> None:
    env, tree = _world(tmp_path)
    bad = tree / "pkg" / "bad.py"
    bad.write_text("def hostile_v2():\n    return helper_call()\n")
    crashing = {**env, **CRASH}
    # One changed file: planned in the writer, whatever the job count.
    first = run_acms(crashing, "reindex", "--jobs", jobs)
    assert first.returncode == -signal.SIGKILL, (first.returncode, first.stderr)

    second = run_acms(crashing, "reindex", "--jobs", jobs)
    assert second.returncode == 0, second.stderr
    assert "planner_crashed" in second.stderr and "pkg/bad.py" in second.stderr
    found = run_acms(env, "--json", "search", "text", "hostile_v2", "--project", "local/proj")
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)
    assert hits and all(h["uko_uri"].split("#")[0].endswith("/pkg/bad.py") for h in hits)
    # The pure-Python reader's symbols, not the parser's calls.
    assert _symbols(env)["pkg/bad.py"] == ["hostile_v2"]
    assert _callees(env, "hostile_v2") == []
    assert _callees(env, "core_entry") == ["helper_call"]

    status = run_acms(env, "--json", "status")
    assert json.loads(status.stdout)["resources"][0]["quarantined"] == 1
    assert "quarantined=1 (planned without tree-sitter" in run_acms(env, "status").stdout

    # The quarantine lasts: a full re-read does not parse it in the writer.
    again = run_acms(crashing, "reindex", "--full", "--jobs", jobs)
    assert again.returncode == 0, again.stderr
    assert "planner_crashed" not in again.stderr
    verify = run_acms(env, "--verify", program=[str(REINDEX)])
    assert verify.returncode == 0, verify.stdout + verify.stderr

    # Another content of the file is parsed again.
    bad.write_text("def friendly():\n    return helper_call()\n")
    fixed = run_acms(env, "reindex", "--jobs", jobs)
    assert fixed.returncode == 0, fixed.stderr
    assert _callees(env, "friendly") == ["helper_call"]
    status = run_acms(env, "--json", "status")
    assert json.loads(status.stdout)["resources"][0]["quarantined"] == 0


def test_a_rebuild_keeps_the_quarantine_and_its_marks_outlive_a_killed_rebuild(
    tmp_path: Path,
) -> None:
    env, tree = _world(tmp_path)
    (tree / "pkg" / "bad.py").write_text("def hostile_v2():\n    return helper_call()\n")
    crashing = {**env, **CRASH}
    # A rebuild plans every file in the writer at one job: the parser's
    # crash kills it, and its mark is in the live data directory, not in
    # the .rebuild/ the next run removes.
    killed = run_acms(crashing, "reindex", "--rebuild", "--jobs", "1")
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr)
    rebuilt = run_acms(crashing, "reindex", "--rebuild", "--jobs", "1")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "planner_crashed" in rebuilt.stderr and "pkg/bad.py" in rebuilt.stderr
    assert _symbols(env)["pkg/bad.py"] == ["hostile_v2"]
    # The rebuilt catalog holds the quarantine: the next rebuild does not
    # parse that content in the writer either.
    again = run_acms(crashing, "reindex", "--rebuild", "--jobs", "1")
    assert again.returncode == 0, again.stderr
    assert _callees(env, "core_entry") == ["helper_call"]
    assert _callees(env, "hostile_v2") == []


def test_rebuilds_settle_with_two_crashing_files(tmp_path: Path) -> None:
    """Each rebuild learns one crashing file; what it learns outlives it
    (the quarantine lives beside the live indexes, not in .rebuild/)."""
    env, tree = _world(tmp_path)
    (tree / "pkg" / "also_bad.py").write_text("def hostile_too():\n    return helper_call()\n")
    crashing = {**env, FAULT: "crash:pkg/bad.py,pkg/also_bad.py"}
    codes = [run_acms(crashing, "reindex", "--rebuild", "--jobs", "1").returncode for _ in range(4)]
    assert codes == [-signal.SIGKILL, -signal.SIGKILL, 0, 0], codes
    assert _callees(env, "core_entry") == ["helper_call"]


def test_a_mark_left_by_a_process_killed_from_outside_quarantines_nothing(
    tmp_path: Path,
) -> None:
    """A writer killed while planning a harmless file (kill -9, the OOM
    killer) leaves the same mark a parser crash does: the file is planned
    again in a child process, which lives, so it keeps its code graph."""
    env, tree = _world(tmp_path)
    core = tree / "pkg" / "core.py"
    core.write_text("def core_entry():\n    return other_call()\n")
    sha = hashlib.sha256(core.read_bytes()).hexdigest()
    data = Path(env["ACMS_DATA_DIR"])
    rid = json.loads(run_acms(env, "--json", "resource", "list").stdout)[0]["resource_id"]
    (data / "planning").mkdir(exist_ok=True)
    (data / "planning" / rid).write_text(json.dumps([sha, "pkg/core.py"]) + "\n")
    done = run_acms(env, "--log-level", "info", "reindex", "--jobs", "1")
    assert done.returncode == 0, done.stderr
    assert "planner_died" in done.stderr and "suspect_cleared" in done.stderr
    assert "planner_crashed" not in done.stderr
    assert _callees(env, "core_entry") == ["other_call"]
    assert not (data / "planning" / f"{rid}.quarantine").exists()
    assert not (data / "planning" / f"{rid}.suspect").exists()


@pytest.mark.parametrize("kind", ["symlink", "directory", "fifo"])
def test_damage_at_the_mark_path_is_removed_not_blamed_on_a_file(tmp_path: Path, kind: str) -> None:
    env, tree = _world(tmp_path)
    data = Path(env["ACMS_DATA_DIR"])
    rid = json.loads(run_acms(env, "--json", "resource", "list").stdout)[0]["resource_id"]
    mark = data / "planning" / rid
    mark.parent.mkdir(exist_ok=True)
    if kind == "symlink":
        mark.symlink_to(tmp_path / "elsewhere")
    elif kind == "directory":
        (mark / "inside").mkdir(parents=True)
    else:
        os.mkfifo(mark)
    (tree / "pkg" / "core.py").write_text("def core_entry():\n    return third_call()\n")
    done = run_acms(env, "reindex", "--jobs", "1", timeout=60)
    assert done.returncode == 0, done.stderr
    assert "planning_file_removed" in done.stderr and "file_failed" not in done.stderr
    assert _callees(env, "core_entry") == ["third_call"]
