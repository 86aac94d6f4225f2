"""Full hydrate + index of a real source tree, then the re-runs.

Not a test.  Default tree: the running interpreter's standard library.

    python benchmarks/bench_hydrate.py [PATH] [--json out.json]

Prints, in one run: the full pass (wall time, MB/s of source indexed), the
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

from cleveragents.application.container import build_container
from cleveragents.application.services.context_tier_hydrator import hydrate_tiers_from_project
from cleveragents.application.services.resource_files import SKIP_DIRS

RID = "01JD5TD11B0000000000000000"


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
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory() as d:
        # Work on a copy so the one-file change does not touch the real tree.
        tree = Path(d) / "tree"
        shutil.copytree(args.path, tree, symlinks=True, ignore=shutil.ignore_patterns(*SKIP_DIRS))
        c = build_container("local", Path(d) / "data")
        ix = c.indexer()
        t0 = time.perf_counter()
        fragments = hydrate_tiers_from_project(
            c.context_tier_service(), "local/bench", RID, str(tree), "directory", indexer=ix
        )
        full = time.perf_counter() - t0
        indexed_bytes = sum(r.size for r in ix.catalog.records(RID).values() if r.unit_uris)
        files = len(ix.catalog.records(RID))

        walks = []
        reruns = []
        for _ in range(5):
            t0 = time.perf_counter()
            bare_walk(tree)
            walks.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            stats = ix.index_resource(RID, tree, "directory")
            reruns.append(time.perf_counter() - t0)
            assert stats.files_read == 0 and stats.index_writes == 0, stats
        walk, rerun = sorted(walks)[2], sorted(reruns)[2]

        target = tree / "json" / "decoder.py"
        target.write_text(target.read_text() + "\n# changed\n")
        t0 = time.perf_counter()
        changed = ix.index_resource(RID, tree, "directory")
        one = time.perf_counter() - t0
        assert changed.files_indexed == 1, changed
        for backend in (c.text_backend(), c.vector_backend(), c.graph_backend()):
            backend.close()

    rows = {
        "tree": str(args.path),
        "files": files,
        "indexed_mb": indexed_bytes / 1e6,
        "fragments": fragments,
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
    print(f"full hydrate + index  {full:8.2f} s  {rows['full_mb_per_s']:.2f} MB/s")
    print(f"no-change re-run      {rerun:8.3f} s  {frac:.2%} of full, {vs_walk:.2f}x a bare walk")
    print(f"bare os.walk + stat   {walk:8.3f} s")
    print(f"one file changed      {one:8.3f} s  {rows['one_file_vs_no_change']:.2f}x no-change")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
