"""``acms reindex --jobs`` and ``scripts/reindex.py --jobs`` as a user runs them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
STDLIB = Path(sysconfig.get_paths()["stdlib"])


class Cli:
    def __init__(self, data_dir: Path) -> None:
        self.env = {**os.environ, "ACMS_DATA_DIR": str(data_dir)}
        self.env.pop("ACMS_PROFILE", None)

    def _run(self, argv: list[str], ok: bool) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, *argv], capture_output=True, text=True, env=self.env, timeout=300
        )
        if ok:
            assert done.returncode == 0, done.stderr
        return done

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run(["-m", "cleveragents.acms", *args], ok)

    def json(self, *args: str) -> Any:
        return json.loads(self.run("--json", *args).stdout)

    def reindex(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run([str(REPO / "scripts" / "reindex.py"), *args], ok=False)


@pytest.mark.parametrize("bad", ["0", "-1", "two"])
def test_a_bad_jobs_value_exits_2_with_one_line(tmp_path: Path, bad: str) -> None:
    done = Cli(tmp_path / "data").run("reindex", "--jobs", bad, ok=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--jobs must be a positive integer" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_two_jobs_index_a_tree_the_script_then_verifies(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for package in ("json", "email", "asyncio", "xml"):  # over one worker batch (1 MB)
        shutil.copytree(
            STDLIB / package, tree / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    cli = Cli(tmp_path / "data")
    cli.run("project", "add", "local/std")
    rid = cli.run("resource", "add", str(tree), "--project", "local/std").stdout.strip()
    done = cli.run("--json", "--log-level", "info", "reindex", "--jobs", "2")
    assert "indexer.workers_started" in done.stderr
    report = json.loads(done.stdout)
    assert report["resources"][rid]["files_indexed"] > 20
    assert report["resources"][rid]["skipped"] == {}
    hits = cli.json("search", "text", "JSONDecodeError", "--project", "local/std")
    assert any("json/decoder.py" in h["uko_uri"] for h in hits)
    rebuilt = cli.reindex("--rebuild", "--jobs", "2")
    assert rebuilt.returncode == 0, rebuilt.stderr
    verified = cli.reindex("--verify")
    assert verified.returncode == 0, verified.stderr
    refused = cli.reindex("--verify", "--jobs", "2")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
