"""``acms`` run as a user runs it: a new process on a data directory.

Shared by the end-to-end tests that drive the console program.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

MODULE = ("-m", "cleveragents.acms")


def cli_env(data: Path) -> dict[str, str]:
    """This environment, with ``data`` as the data directory and none of the
    variables that change the profile or inject faults."""
    env = {**os.environ, "ACMS_DATA_DIR": str(data)}
    for name in ("ACMS_PROFILE", "ACMS_FAULT_AT"):
        env.pop(name, None)
    return env


def run_acms(
    env: Mapping[str, str],
    *args: str,
    program: Sequence[str] = MODULE,
    umask: int | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """``python <program> <args>`` with its output captured as text."""
    return subprocess.run(
        [sys.executable, *program, *args],
        capture_output=True,
        text=True,
        env=dict(env),
        timeout=timeout,
        preexec_fn=None if umask is None else (lambda: os.umask(umask)),
        check=False,
    )


def indexed_projects(
    base: Path, trees: Mapping[str, Mapping[str, str]]
) -> tuple[dict[str, str], dict[str, str]]:
    """Each ``trees`` entry (a name -> {relative path: text}) written under
    ``base/<name>``, registered as project ``local/<name>`` and indexed in
    ``base/data``, through the CLI; the environment and the resource ULIDs
    by name."""
    env = cli_env(base / "data")
    ids: dict[str, str] = {}
    for name, files in trees.items():
        for rel, text in files.items():
            (base / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (base / name / rel).write_text(text)
        for args in (
            ("project", "add", f"local/{name}"),
            ("resource", "add", str(base / name), "--project", f"local/{name}"),
        ):
            done = run_acms(env, *args)
            assert done.returncode == 0, done.stderr
        ids[name] = done.stdout.strip()
    done = run_acms(env, "reindex")
    assert done.returncode == 0, done.stderr
    return env, ids
