"""Indexing a real source tree: throughput and peak memory, 1 vs 2 jobs vs today's.

Not a test.  The tree is a copy of the running interpreter's standard library
(``sysconfig.get_paths()["stdlib"]``) without ``site-packages``,
``__pycache__``, ``config-*`` and ``lib-dynload`` (build files and compiled
extensions, not source); ``test/`` is kept.  ``--quick`` indexes a few
packages only (about 4 MB).

Every run is a fresh subprocess that registers the tree in an empty data
directory and runs ``AcmsOperations.reindex`` (what ``acms reindex`` runs),
then no-change re-runs alternating with bare ``os.walk`` + ``stat`` passes
over the tree (wall and CPU time of this process, medians).  The
parent samples the RSS of the run's whole process tree (the indexing process
and its worker processes, summed) from ``/proc`` every 20 ms, and the CPU
seconds of each process (the writer's apart): on cores other work keeps
busy, wall time is noise, while ``max(writer CPU, total CPU / 2)`` bounds
the wall time on two idle cores.

Peak memory is reported three ways: the sum of the processes' RSS (shared
pages, such as the modules a fork server shares with its workers, count once
per process), the sum of their PSS (``/proc/<pid>/smaps_rollup``: a shared
page is split among the processes that map it, so the sum is the memory the
tree actually occupies), and the sum of their anonymous RSS (``RssAnon``:
without code and Tantivy's memory-mapped segments, which a merge reads in
and the kernel can drop).

Variants, interleaved (``--repeats`` rounds, medians reported):

- ``today``: the code of the reference commit (``--base``, default the
  pre-change main ``3498579``), checked out into a temporary worktree; with
  ``--base-jobs 1,2`` one variant per job count instead (``base/jobs=N``;
  the base must know ``jobs``);
- ``jobs=1`` and ``jobs=2``: this tree's code.

    python benchmarks/bench_index.py [--quick] [--repeats N] [--json out.json]
    python benchmarks/bench_index.py --base b2926f6 --base-jobs 1,2 --repeats 2
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
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BASE_COMMIT = "3498579"
SKIP = ("__pycache__", "site-packages", "config-*", "lib-dynload", ".git")
# Alternating no-change re-runs and bare walks per indexing run (medians).
NO_CHANGE_RUNS = 9
_SLOW_EVERY = 10  # samples of 20 ms
QUICK_PACKAGES = ("json", "email", "asyncio", "http", "xml", "importlib", "logging", "unittest")


def make_tree(target: Path, quick: bool) -> Path:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    ignore = shutil.ignore_patterns(*SKIP)
    if not quick:
        shutil.copytree(stdlib, target, symlinks=True, ignore=ignore)
        return target
    target.mkdir(parents=True)
    for name in QUICK_PACKAGES:
        shutil.copytree(stdlib / name, target / name, symlinks=True, ignore=ignore)
    for module in sorted(stdlib.glob("*.py"))[:60]:
        shutil.copy2(module, target / module.name)
    return target


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


# ---------------------------------------------------------------- the child


def bare_walk(root: Path) -> int:
    n = 0
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git", "__pycache__", "node_modules")]
        for name in files:
            os.lstat(os.path.join(dirpath, name))
            n += 1
    return n


def child(tree: Path, data: Path, jobs: int | None) -> dict[str, Any]:
    """One indexing run in this (fresh) process."""
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    # What `acms reindex` imports, no more (the entry points' lean import;
    # older base commits have none).
    try:
        from cleveragents.bootstrap import lean_container_import
    except ImportError:
        pass
    else:
        lean_container_import()
    from cleveragents.application.container import build_container
    from cleveragents.application.services.operations import AcmsOperations

    ops = AcmsOperations.from_container(build_container("local", data))
    ops.add_project("local/bench")
    rid = ops.add_resource(str(tree), "local/bench", "directory").resource_id
    kwargs: dict[str, Any] = {} if jobs is None else {"jobs": jobs}
    t0 = time.perf_counter()
    report = ops.reindex(resources=[rid], **kwargs)
    full = time.perf_counter() - t0
    total = report.as_dict()["total"]
    reruns, walks, rerun_cpu, walk_cpu = [], [], [], []
    cpu = time.process_time  # this process's CPU: less noisy than wall on busy cores
    for _ in range(NO_CHANGE_RUNS):
        c0, t0 = cpu(), time.perf_counter()
        bare_walk(tree)
        walks.append(time.perf_counter() - t0)
        walk_cpu.append(cpu() - c0)
        c0, t0 = cpu(), time.perf_counter()
        again = ops.reindex(resources=[rid], **kwargs).as_dict()["total"]
        reruns.append(time.perf_counter() - t0)
        rerun_cpu.append(cpu() - c0)
        assert again["files_indexed"] == 0, again
    return {
        "full_s": full,
        "bytes_read": total["bytes_read"],
        "files": total["files_seen"],
        "units": total["units_written"],
        "no_change_s": statistics.median(reruns),
        "bare_walk_s": statistics.median(walks),
        "no_change_cpu_s": statistics.median(rerun_cpu),
        "bare_walk_cpu_s": statistics.median(walk_cpu),
    }


# ---------------------------------------------------------------- the parent


def _tree_pids(root: int) -> list[int]:
    """``root`` and its descendants (from /proc/*/stat parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(children.get(pid, []))
    return out


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _rss_kb(pid: int) -> tuple[int, int]:
    """``(VmRSS, RssAnon)`` of ``pid`` in KB: all resident pages, and those
    not backed by a file (the rest are code and Tantivy's mapped segments,
    which the kernel can drop and re-read)."""
    rss = anon = 0
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("RssAnon:"):
                    anon = int(line.split()[1])
    except OSError:
        pass
    return rss, anon


def measure(src: Path, tree: Path, data: Path, jobs: int | None) -> dict[str, Any]:
    """Run one child on ``src``'s code; its result plus the tree's peak RSS."""
    shutil.rmtree(data, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, __file__, "--child", str(tree), str(data)]
    if jobs is not None:
        cmd += ["--jobs", str(jobs)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    peak = peak_pss = peak_anon = 0
    cpu: dict[int, float] = {}  # cumulative per process: the last sample counts
    # The sampler shares the two cores with the run it measures, so it keeps
    # to what is cheap every 20 ms (VmRSS and RssAnon are counters); the
    # process list and PSS (a walk of every page table) are read every
    # _SLOW_EVERY samples (processes start with the run, and its memory
    # peaks last longer than that).  Sampling all of it every 20 ms took
    # 3.1 s of CPU during a 17 s run at jobs 2 (18% of a core, taken from
    # the run); this takes ~0.7 s.
    sampler_cpu = time.process_time()
    pids: list[int] = []
    sample = 0
    while proc.poll() is None:
        if sample % _SLOW_EVERY == 0:
            pids = _tree_pids(proc.pid)
            peak_pss = max(peak_pss, sum(_pss_kb(p) for p in pids))
        sample += 1
        for p in pids:
            cpu[p] = max(cpu.get(p, 0.0), _cpu_s(p))
        sizes = [_rss_kb(p) for p in pids]
        peak = max(peak, sum(rss for rss, _ in sizes))
        peak_anon = max(peak_anon, sum(anon for _, anon in sizes))
        time.sleep(0.02)
    sampler_cpu = time.process_time() - sampler_cpu
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise RuntimeError(f"indexing run failed ({proc.returncode}): {cmd}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    # /proc counts KiB; sizes here are MB (10^6 bytes), as the source's are.
    result["peak_rss_mb"] = peak * 1024 / 1e6
    result["peak_pss_mb"] = peak_pss * 1024 / 1e6
    result["peak_anon_mb"] = peak_anon * 1024 / 1e6
    # CPU of the whole run (indexing and the re-runs; the writer's share
    # apart): on a machine that other work keeps busy, wall time says little,
    # and max(writer, total / cores) is the floor on dedicated cores.
    result["sampler_cpu_s"] = sampler_cpu
    result["cpu_s"] = sum(cpu.values())
    result["writer_cpu_s"] = cpu.get(proc.pid, 0.0)
    return result


def base_worktree(commit: str, where: Path) -> Path:
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), commit],
        check=True,
        capture_output=True,
    )
    return where / "src"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--base", default=BASE_COMMIT, help="the 'today' commit")
    parser.add_argument(
        "--base-jobs", default="", help="job counts to run the base with (e.g. 1,2)"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=2, type=Path, metavar=("TREE", "DATA"))
    parser.add_argument("--jobs", type=int)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.jobs)))
        return 0
    base_jobs = [int(j) for j in args.base_jobs.split(",") if j]
    rows = run(args.quick, args.repeats or (1 if args.quick else 3), args.base, base_jobs)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    print_rows(rows)
    return 0


def run(quick: bool, repeats: int, base: str, base_jobs: list[int]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        tree = make_tree(tmp / "tree", quick)
        source_mb = tree_bytes(tree) / 1e6
        base_src = base_worktree(base, tmp / "base")
        try:
            variants: dict[str, tuple[Path, int | None]] = (
                {f"base/jobs={j}": (base_src, j) for j in base_jobs}
                if base_jobs
                else {"today": (base_src, None)}
            )
            variants["jobs=1"] = (REPO / "src", 1)
            variants["jobs=2"] = (REPO / "src", 2)
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
            for _ in range(repeats):  # interleaved: the noise hits every variant alike
                for name, (src, jobs) in variants.items():
                    runs[name].append(measure(src, tree, tmp / "data", jobs))
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tmp / "base")],
                check=False,
                capture_output=True,
            )
    out: dict[str, Any] = {
        "source_mb": source_mb,
        "repeats": repeats,
        "base": base,
        "variants": list(variants),
    }
    for name, results in runs.items():
        med = {k: statistics.median(r[k] for r in results) for k in results[0]}
        indexed_mb = med["bytes_read"] / 1e6
        out[name] = {
            **med,
            "indexed_mb": indexed_mb,
            "mb_per_s": indexed_mb / med["full_s"],
            "rss_over_source": med["peak_rss_mb"] / source_mb,
            # Over the bytes the indexer read (the "37 MB of source"
            # for the stdlib): the tree also holds files it skips (binaries).
            "rss_over_read": med["peak_rss_mb"] / indexed_mb,
            "pss_over_source": med["peak_pss_mb"] / source_mb,
            "anon_over_source": med["peak_anon_mb"] / source_mb,
            "no_change_vs_walk": med["no_change_s"] / med["bare_walk_s"],
            "no_change_cpu_vs_walk": med["no_change_cpu_s"] / med["bare_walk_cpu_s"],
            # Throughput if the run had 2 cores to itself: the writer and
            # the total CPU over 2 cores bound it.
            "mb_per_s_2_idle_cores": indexed_mb / max(med["writer_cpu_s"], med["cpu_s"] / 2),
        }
    # The reference: the base with the same job count when it ran with one.
    for name in variants:
        jobs = name.rsplit("=", 1)[-1]
        ref = out.get(f"base/jobs={jobs}") or out.get("today") or out[next(iter(variants))]
        out[name]["throughput_vs_today"] = out[name]["mb_per_s"] / ref["mb_per_s"]
        out[name]["idle_cores_vs_today"] = (
            out[name]["mb_per_s_2_idle_cores"] / ref["mb_per_s_2_idle_cores"]
        )
    out["jobs2_vs_jobs1"] = out["jobs=2"]["mb_per_s"] / out["jobs=1"]["mb_per_s"]
    return out


def print_rows(rows: dict[str, Any]) -> None:
    print(
        f"source {rows['source_mb']:.1f} MB, {rows['repeats']} interleaved round(s), "
        f"today = {rows['base']}"
    )
    print(
        f"{'variant':<11} {'full s':>8} {'MB/s':>6} {'vs base':>8} {'peak RSS MB':>11} "
        f"{'RSS/src':>7} {'PSS MB':>7} {'PSS/src':>7} {'anon/src':>8} {'no-change s':>11} "
        f"{'vs walk':>7}"
    )
    names = rows["variants"]
    for name in names:
        r = rows[name]
        print(
            f"{name:<11} {r['full_s']:>8.2f} {r['mb_per_s']:>6.2f} "
            f"{r['throughput_vs_today']:>7.2f}x {r['peak_rss_mb']:>11.0f} "
            f"{r['rss_over_source']:>6.1f}x {r['peak_pss_mb']:>7.0f} "
            f"{r['pss_over_source']:>6.1f}x {r['anon_over_source']:>7.1f}x "
            f"{r['no_change_s']:>11.3f} "
            f"{r['no_change_vs_walk']:>6.2f}x"
        )
    print(
        "peak RSS / bytes read ("
        + ", ".join(f"{n} {rows[n]['rss_over_read']:.1f}x" for n in names)
        + f"; {rows[names[0]]['indexed_mb']:.1f} MB read of the tree's {rows['source_mb']:.1f})"
    )
    print(f"jobs=2 / jobs=1 throughput: {rows['jobs2_vs_jobs1']:.2f}x")
    print(
        f"no-change re-run vs bare walk ({NO_CHANGE_RUNS} alternating runs each, medians), "
        "wall / CPU: "
        + ", ".join(
            f"{n} {rows[n]['no_change_vs_walk']:.2f}x / {rows[n]['no_change_cpu_vs_walk']:.2f}x"
            for n in names
        )
    )
    head = "MB/s on 2 idle cores"
    print(
        f"{'variant':<11} {'CPU s':>7} {'writer CPU s':>12} {head:>20} {'vs base':>8} "
        f"{'sampler CPU s':>13}"
    )
    for name in names:
        r = rows[name]
        print(
            f"{name:<11} {r['cpu_s']:>7.1f} {r['writer_cpu_s']:>12.1f} "
            f"{r['mb_per_s_2_idle_cores']:>20.2f} {r['idle_cores_vs_today']:>7.2f}x "
            f"{r['sampler_cpu_s']:>13.2f}"
        )
    print("targets (issue 10): RSS/src <= 4x; jobs=2 vs today >= 2x; no-change <= 2x walk")
    print("'vs base': against the base with the same job count (or 'today')")


if __name__ == "__main__":
    sys.exit(main())
