"""A change of embedder: re-embedding the stored units vs re-indexing in full.

    PYTHONPATH=src python benchmarks/bench_embedder_switch.py [TREE] [--reps N]

For each repetition, a fresh data directory indexes TREE (default: the
stdlib ``json`` package) with hashing, then ``acms reindex`` runs with
``ACMS_EMBEDDER=minilm``: A re-embeds (the default now), B adds ``--full``
(what every embedder change did before: read, parse, chunk, write text,
graph and vectors).  A and B alternate; the medians and their ratio are
printed.  Only the ratio measured in one run means anything (shared cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path


def acms(data: Path, *args: str, **env: str) -> tuple[float, dict[str, object]]:
    run_env = {**os.environ, "ACMS_DATA_DIR": str(data), **env}
    run_env.pop("ACMS_PROFILE", None)
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "cleveragents.acms", "--json", *args],
        capture_output=True,
        text=True,
        env=run_env,
        check=True,
    )
    seconds = time.perf_counter() - t0
    return seconds, json.loads(done.stdout) if done.stdout.strip() else {}


def fresh(tree: Path, base: Path, name: str) -> Path:
    data = base / name
    shutil.rmtree(data, ignore_errors=True)
    acms(data, "project", "add", "bench/e")
    acms(data, "resource", "add", str(tree), "--project", "bench/e", "--type", "directory")
    acms(data, "reindex", "--jobs", "1")
    return data


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "tree", nargs="?", default=str(Path(sysconfig.get_paths()["stdlib"]) / "json")
    )
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        tree = base / "tree"
        shutil.copytree(args.tree, tree, ignore=shutil.ignore_patterns("__pycache__"))
        past = time.time_ns() - 60 * 1_000_000_000  # not racily clean
        for path in tree.rglob("*"):
            os.utime(path, ns=(past, past))
        times: dict[str, list[float]] = {"reembed": [], "full": []}
        units = 0
        for rep in range(args.reps):
            order = ("reembed", "full") if rep % 2 == 0 else ("full", "reembed")
            for kind in order:
                data = fresh(tree, base, kind)
                extra = ("--full",) if kind == "full" else ()
                seconds, report = acms(
                    data, "reindex", "--jobs", "1", *extra, ACMS_EMBEDDER="minilm"
                )
                times[kind].append(seconds)
                stats = next(iter(report["resources"].values()))  # type: ignore[call-overload]
                if kind == "reembed":
                    units = stats["units_reembedded"]
                    assert stats["files_read"] == 0, stats
        a, b = statistics.median(times["reembed"]), statistics.median(times["full"])
        print(f"tree: {args.tree}  units: {units}  reps: {args.reps}")
        print(
            f"re-embed median {a:.2f} s  full re-index median {b:.2f} s  full/re-embed {b / a:.2f}x"
        )
        print(f"raw: {json.dumps(times)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
