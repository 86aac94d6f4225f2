"""20 HTTP clients for 20 s while ``acms watch`` reindexes: no error, and no
answer older than a change already seen searchable before the request began."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

CLIENTS = 20
SECONDS = 20.0
_VALUE = re.compile(r"value_(\d+)")


def _acms(env: dict[str, str], *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cleveragents.acms", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _generation(answer: dict) -> int:
    values = [
        int(m.group(1))
        for hit in answer["results"]
        for line in hit.get("lines", [])
        for m in _VALUE.finditer(line["text"])
    ]
    return max(values, default=-1)


@pytest.mark.slow
def test_concurrent_clients_while_the_watcher_reindexes(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    target = repo / "gen.py"
    target.write_text("generation_marker = 1\nvalue_0 = 0\n")
    staged = tmp_path / "gen.py.new"  # outside the resource, on its file system
    env = {**os.environ, "ACMS_DATA_DIR": str(tmp_path / "data")}
    env.pop("ACMS_PROFILE", None)
    _acms(env, "project", "add", "local/c")
    _acms(env, "resource", "add", str(repo), "--project", "local/c")
    _acms(env, "reindex")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}/api/search_text"
    logs = [(tmp_path / n).open("wb") for n in ("serve.log", "watch.log")]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cleveragents.cli.serve",
                "--http",
                f"127.0.0.1:{port}",
                "--project",
                "local/c",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=logs[0],
        ),
        subprocess.Popen(
            [sys.executable, "-m", "cleveragents.cli.watch", "--debounce", "0.1"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=logs[1],
        ),
    ]
    query = {"query": "generation_marker", "max_results": 3, "budget": 2000}
    confirmed = [0]  # the newest generation seen searchable
    errors: list[str] = []
    stale: list[tuple[int, int]] = []
    answered = [0]
    lock = threading.Lock()
    stop = threading.Event()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.post(base, json=query, timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        time.sleep(1.0)  # the watcher is up

        def client() -> None:
            with httpx.Client(timeout=30) as http:
                while not stop.is_set():
                    with lock:
                        floor = confirmed[0]
                    try:
                        r = http.post(base, json=query)
                    except httpx.HTTPError as exc:
                        errors.append(repr(exc))
                        continue
                    if r.status_code != 200:
                        errors.append(f"{r.status_code} {r.text[:200]}")
                        continue
                    seen = _generation(r.json())
                    with lock:
                        answered[0] += 1
                    if seen < floor:
                        stale.append((seen, floor))

        threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for t in threads:
            t.start()
        t_end = time.monotonic() + SECONDS
        generation = 0
        with httpx.Client(timeout=30) as http:
            while time.monotonic() < t_end:
                generation += 1
                # Replaced whole, as an editor saving atomically does: a file
                # truncated then written is empty in between, and a watcher
                # that reads it then rightly indexes it empty (under load the
                # gap was long enough: 0 hits for 0.2 s, counted as stale).
                staged.write_text(f"generation_marker = 1\nvalue_{generation} = 0\n")
                os.replace(staged, target)
                while time.monotonic() < t_end + 30:
                    if _generation(http.post(base, json=query).json()) >= generation:
                        with lock:
                            confirmed[0] = generation
                        break
                    time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join(timeout=60)
    finally:
        stop.set()
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
        for log in logs:
            log.close()
    assert errors == []
    assert stale == []
    assert generation >= 3 and confirmed[0] == generation
    assert answered[0] >= CLIENTS
