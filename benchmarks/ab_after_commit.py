"""The after-commit rows of ``bench_cold.py`` for two source trees, interleaved.

Not a test.  Builds the quick (or full) world of ``bench_cold.py`` once, with
the code this script's interpreter imports, then runs
``bench_cold.bench_after_commit`` in child processes that import the engines
from ``--before`` and from ``--after`` (each a ``src`` directory: a worktree
of an earlier commit, and this one), alternating, the order swapped each
round, so load drift on a shared machine hits both alike.  Prints, per row,
the median over rounds of each version's ratio.

    git worktree add --detach /tmp/before 3498579
    python benchmarks/ab_after_commit.py --before /tmp/before/src --after src --rounds 4
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import structlog

HERE = Path(__file__).resolve().parent

CHILD = """
import json, logging, os, pickle, sys
import structlog
sys.path.insert(0, sys.argv[1])
import bench_cold
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
world = pickle.loads(open(sys.argv[2], "rb").read())
for d in (world.alone, world.multi):  # another process's commits: the same code
    d.env["PYTHONPATH"] = os.environ["PYTHONPATH"]
kinds = tuple(sys.argv[4].split(","))
print(json.dumps(bench_cold.bench_after_commit(world, int(sys.argv[3]), kinds)))
"""


def child(src: Path, world: Path, repeats: int, kinds: str) -> list[dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(HERE), str(world), str(repeats), kinds],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="src dir of the old code")
    parser.add_argument("--after", type=Path, required=True, help="src dir of the new code")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=11, help="samples per row per child")
    parser.add_argument("--kinds", default="text,vector,SPARQL,traverse")
    parser.add_argument("--full", action="store_true", help="the full world (slow)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    sys.path.insert(0, str(HERE))
    import bench_cold

    versions = {"before": args.before.resolve(), "after": args.after.resolve()}
    got: dict[str, list[list[dict[str, object]]]] = {v: [] for v in versions}
    with tempfile.TemporaryDirectory() as d:
        world = bench_cold.build(Path(d), bench_cold.FULL if args.full else bench_cold.QUICK)
        pickled = Path(d) / "world.pkl"
        pickled.write_bytes(pickle.dumps(world))
        for i in range(args.rounds):
            order = list(versions) if i % 2 == 0 else list(versions)[::-1]
            for name in order:
                got[name].append(child(versions[name], pickled, args.repeats, args.kinds))
                print(f"(round {i + 1} {name} done)", file=sys.stderr)
    summary = []
    for j, first in enumerate(got["before"][0]):
        line = {"what": first["what"], "reference": first["reference"]}
        for name in versions:
            rows = [run[j] for run in got[name]]
            line[name] = {
                "ratio_p50": statistics.median(float(r["ratio_p50"]) for r in rows),  # type: ignore[arg-type]
                "ours_ms": statistics.median(r["ours"]["p50_ms"] for r in rows),  # type: ignore[index]
                "ref_ms": statistics.median(r["ref"]["p50_ms"] for r in rows),  # type: ignore[index]
                "ratios": [round(float(r["ratio_p50"]), 2) for r in rows],  # type: ignore[arg-type]
            }
        summary.append(line)
        b, a = line["before"], line["after"]
        print(
            f"{line['what']}\n    vs {line['reference']}: before {b['ratio_p50']:.2f}x"  # type: ignore[index]
            f" ({b['ours_ms']:.3f} / {b['ref_ms']:.3f} ms)  after {a['ratio_p50']:.2f}x"  # type: ignore[index]
            f" ({a['ours_ms']:.3f} / {a['ref_ms']:.3f} ms)"  # type: ignore[index]
        )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
