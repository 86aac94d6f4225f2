"""Soak: a long-lived ``acms serve --http`` answers every tool for minutes
while ``acms watch`` reindexes a file rewritten every 0.3 s (not run by CI).

What an agent host sees over hours, in minutes: errors (any non-200) and
the service's memory (RSS sampled every 15 s; the slope over the second half
of the run, when caches have filled, is what a leak would show as).

    python benchmarks/soak_service.py [--seconds 600] [--json out.json]

Exit status 0 when every call answered 200, 1 otherwise; the samples and a
summary line are printed either way.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from service_harness import free_port, indexed, wait_serving

REPO = Path(__file__).resolve().parent.parent
WORDS = [
    *("graph", "index", "scope", "parse", "query", "resource", "vector", "token"),
    *("tantivy", "commit", "session", "budget", "fusion", "symbol", "catalog"),
]
TARGET = "cleveragents/_soak_target.py"


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _memory_parts(pid: int) -> dict[str, float]:
    """RSS split as a leak hunt needs it (MiB): anonymous memory (heaps,
    arenas), file-backed pages, and pages of files already deleted (an
    engine that keeps an old segment or snapshot mapped), with the count of
    such mappings."""
    anon = deleted = 0
    maps = 0
    current_deleted = False
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            head = line.split(maxsplit=1)[0]
            if not head.endswith(":"):  # a mapping's header line
                current_deleted = line.rstrip().endswith("(deleted)")
                maps += current_deleted
            elif head == "Rss:" and current_deleted:
                deleted += int(line.split()[1])
            elif head == "Anonymous:":
                anon += int(line.split()[1])
    rss = _rss_mb(pid)
    return {
        "anon_mb": round(anon / 1024, 1),
        "file_mb": round(rss - anon / 1024, 1),
        "deleted_mb": round(deleted / 1024, 1),
        "deleted_maps": maps,
    }


def _calls() -> list[tuple[str, Any]]:
    """Each tool with arguments that vary, so no answer cache hides work."""
    return [
        ("search", lambda: {"query": " ".join(random.sample(WORDS, 2)), "budget": 4000}),
        ("search_text", lambda: {"query": f"soak_fn_{random.randint(0, 3000)}_1", "budget": 3000}),
        ("search_vector", lambda: {"query": " ".join(random.sample(WORDS, 3)), "budget": 3000}),
        (
            "sparql",
            lambda: {
                "query": f"SELECT ?s WHERE {{ ?s ?p ?o }} LIMIT {random.randint(1, 50)}",
                "budget": 3000,
            },
        ),
        ("traverse", lambda: {"start": TARGET, "depth": 2, "budget": 3000}),
        ("callers", lambda: {"target": f"helper_{random.randint(0, 49)}", "budget": 3000}),
        ("read", lambda: {"uri": TARGET + "#L1-L20", "budget": 3000}),
        ("context", lambda: {"task": "how the scope restricts " + random.choice(WORDS)}),
    ]


def _write_target(root: Path, i: int) -> None:
    (root / TARGET).write_text(
        "".join(f"def soak_fn_{i}_{j}(x):\n    return helper_{j}(x) + {i}\n" for j in range(50))
    )


def _edit(root: Path, until: float) -> None:
    """Rewrite one file every 0.3 s; every 20th round add or delete another."""
    i = 0
    while time.time() < until:
        i += 1
        _write_target(root, i)
        if i % 20 == 0:
            extra = root / f"cleveragents/_soak_extra_{i % 3}.py"
            if extra.exists():
                extra.unlink()
            else:
                extra.write_text(f"class Extra{i}:\n    def run(self):\n        return 2\n")
        time.sleep(0.3)


def soak(
    tmp: Path, seconds: float, tools: list[str] | None = None, edit: bool = True
) -> dict[str, Any]:
    src = tmp / "src"
    shutil.copytree(REPO / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _write_target(src, 0)  # indexed before the first call reads it
    env = indexed(tmp / "data", src, "local/soak")
    port = free_port()
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    server = subprocess.Popen(
        [sys.executable, "-m", "cleveragents.cli.serve", "--http", f"127.0.0.1:{port}"],
        env=env,
        **quiet,  # type: ignore[call-overload]
    )
    watcher = subprocess.Popen(
        [sys.executable, "-m", "cleveragents.cli.watch"],
        env=env,
        **quiet,  # type: ignore[call-overload]
    )
    samples: list[dict[str, float]] = []
    errors: dict[str, int] = {}
    calls = 0
    try:
        url = f"http://127.0.0.1:{port}/api"
        with httpx.Client(timeout=30) as http:
            wait_serving(http, url)
            start = time.time()
            until = start + seconds
            if edit:
                threading.Thread(target=_edit, args=(src, until), daemon=True).start()
            calls_made = [c for c in _calls() if tools is None or c[0] in tools]
            sampled = 0.0
            while time.time() < until:
                name, args = random.choice(calls_made)
                try:
                    answer = http.post(f"{url}/{name}", json=args())
                    status, why = answer.status_code, answer.text[:160]
                except httpx.HTTPError as exc:
                    status, why = 0, f"{type(exc).__name__}: {exc}"[:160]
                if status != 200:
                    key = f"{name}: {status} {why}"
                    errors[key] = errors.get(key, 0) + 1
                calls += 1
                if time.time() - sampled >= 15:
                    sampled = time.time()
                    samples.append(
                        {
                            "s": round(sampled - start),
                            "calls": calls,
                            "serve_mb": round(_rss_mb(server.pid), 1),
                            "watch_mb": round(_rss_mb(watcher.pid), 1),
                            **_memory_parts(server.pid),
                        }
                    )
                    print(json.dumps(samples[-1]), flush=True)
    finally:
        for proc in (server, watcher):
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    half = [s for s in samples if s["s"] >= seconds / 2]
    slope = (
        (half[-1]["serve_mb"] - half[0]["serve_mb"]) / ((half[-1]["s"] - half[0]["s"]) / 60)
        if len(half) > 1 and half[-1]["s"] > half[0]["s"]
        else 0.0
    )
    return {
        "seconds": seconds,
        "calls": calls,
        "errors": errors,
        "serve_mb_first": samples[0]["serve_mb"] if samples else None,
        "serve_mb_last": samples[-1]["serve_mb"] if samples else None,
        "serve_mb_per_min_second_half": round(slope, 2),
        "samples": samples,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--tools",
        default=None,
        help="comma-separated tools to call (default: all), to tell which one holds memory",
    )
    parser.add_argument(
        "--no-edit", action="store_true", help="no file rewrites: calls without the watch's commits"
    )
    args = parser.parse_args()
    known = [name for name, _ in _calls()]
    tools = None if args.tools is None else [t for t in args.tools.split(",") if t]
    if tools is not None and (not tools or set(tools) - set(known)):
        parser.error(f"--tools takes some of: {', '.join(known)}")
    with tempfile.TemporaryDirectory(prefix="acms-soak-service-") as tmp:
        result = soak(Path(tmp), args.seconds, tools, edit=not args.no_edit)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"calls {result['calls']}  errors {sum(result['errors'].values())} {result['errors']}  "
        f"serve RSS {result['serve_mb_first']} -> {result['serve_mb_last']} MB "
        f"({result['serve_mb_per_min_second_half']} MB/min over the second half)"
    )
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
