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

import json
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
