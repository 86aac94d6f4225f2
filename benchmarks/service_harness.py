"""What the service benchmarks share: a data directory with one project
indexed through the CLI, a free loopback port, a wait for the server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def acms(env: dict[str, str], *args: str) -> str:
    """Run ``python -m cleveragents.acms ARGS``; its stdout (an error raises)."""
    done = subprocess.run(
        [sys.executable, "-m", "cleveragents.acms", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    return done.stdout.strip()


def indexed(data: Path, src: Path, project: str) -> dict[str, str]:
    """The environment of a local data directory ``data`` whose ``project``
    holds ``src``, registered and indexed."""
    env = {**os.environ, "ACMS_DATA_DIR": str(data)}
    env.pop("ACMS_PROFILE", None)
    acms(env, "project", "add", project)
    acms(env, "resource", "add", str(src), "--project", project)
    acms(env, "reindex")
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_serving(http: httpx.Client, api: str) -> None:
    """Until ``api``/status answers (at most a minute)."""
    for _ in range(600):
        try:
            http.post(f"{api}/status")
        except httpx.HTTPError:
            time.sleep(0.1)
        else:
            return
