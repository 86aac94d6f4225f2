"""Full index of a real source tree, then the re-runs.

Not a test.  Default tree: the running interpreter's standard library.
Driven through ``AcmsOperations`` (what ``acms reindex`` runs), never the
indexer or an engine directly, so it measures the same thing while those
are rewritten.

    python benchmarks/bench_hydrate.py [PATH] [--jobs N] [--json out.json]

Prints, in one run: the full pass (wall time, MB/s of source read), the
no-change re-run next to a bare ``os.walk`` + ``stat`` pass over the same tree
(and as a fraction of the full pass), and a one-file-changed re-run next to
the no-change one.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cold import open_operations

try:
    from cleveragents.application.services.resource_files import SKIP_DIRS
except ImportError:  # moved: the usual suspects
    SKIP_DIRS = frozenset({".git", "__pycache__", "node_modules", ".venv", "venv"})


def bare_walk(root: Path) -> int:
    """The floor for a no-change re-run: list and stat every file, read none."""
    n = 0
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for name in files:
            os.lstat(os.path.join(dirpath, name))
            n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", nargs="?", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--jobs", type=int, default=None, help="default: one per core")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory() as d:
        # Work on a copy so the one-file change does not touch the real tree.
        tree = Path(d) / "tree"
        shutil.copytree(args.path, tree, symlinks=True, ignore=shutil.ignore_patterns(*SKIP_DIRS))
        ops = open_operations(Path(d) / "data")
        ops.add_project("local/bench")
        rid = ops.add_resource(str(tree), "local/bench", "directory").resource_id

        def reindex() -> tuple[float, dict[str, int]]:
            t0 = time.perf_counter()
            report = ops.reindex(resources=[rid], jobs=args.jobs)
            return time.perf_counter() - t0, report.as_dict()["total"]

        full, total = reindex()
        indexed_bytes = total["bytes_read"]
        files = total["files_seen"]

        walks = []
        reruns = []
        for _ in range(5):
            t0 = time.perf_counter()
            bare_walk(tree)
            walks.append(time.perf_counter() - t0)
            seconds, again = reindex()
            reruns.append(seconds)
            assert again["files_read"] == 0 and again["index_writes"] == 0, again
        walk, rerun = sorted(walks)[2], sorted(reruns)[2]

        target = tree / "json" / "decoder.py"
        if not target.is_file():  # not the stdlib: any Python file will do
            target = min(tree.rglob("*.py"))
        target.write_text(target.read_text() + "\n# changed\n")
        one, changed = reindex()
        assert changed["files_indexed"] == 1, changed

    rows = {
        "tree": str(args.path),
        "files": files,
        "indexed_mb": indexed_bytes / 1e6,
        "full_s": full,
        "full_mb_per_s": indexed_bytes / 1e6 / full,
        "no_change_s": rerun,
        "no_change_fraction_of_full": rerun / full,
        "bare_walk_s": walk,
        "no_change_vs_walk": rerun / walk,
        "one_file_changed_s": one,
        "one_file_vs_no_change": one / rerun,
    }
    frac, vs_walk = rows["no_change_fraction_of_full"], rows["no_change_vs_walk"]
    print(f"tree: {rows['tree']}  files: {files}  indexed: {rows['indexed_mb']:.1f} MB")
    print(f"full index            {full:8.2f} s  {rows['full_mb_per_s']:.2f} MB/s")
    print(f"no-change re-run      {rerun:8.3f} s  {frac:.2%} of full, {vs_walk:.2f}x a bare walk")
    print(f"bare os.walk + stat   {walk:8.3f} s")
    print(f"one file changed      {one:8.3f} s  {rows['one_file_vs_no_change']:.2f}x no-change")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
