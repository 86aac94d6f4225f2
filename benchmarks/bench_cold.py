"""What a query costs when it is cold, or when other data shares the data dir.

Not a test.  Everything goes through the ``acms`` command line (a new process
per query, ``--json``) and ``AcmsOperations`` (the API the CLI itself uses),
never through an engine adapter or a private name, so these rows keep
measuring the same thing while the engines are rewritten under them.

    python benchmarks/bench_cold.py            # P = email, others = the whole stdlib
    python benchmarks/bench_cold.py --quick    # P = json, others = three stdlib packages
    python benchmarks/bench_cold.py --json out.json

Rows (each a median with p10..p90, next to a reference measured in the same
run, the two interleaved so that load drift hits both alike):

- cold CLI query for project P in a data dir that also holds other projects
  at least 20x P's size, vs the same command in a data dir holding only P:
  text, vector, SPARQL and traverse (target <= 1.25x);
- cold CLI text query over a large project vs the same command over a
  one-file project (target <= 2x);
- cold CLI ``symbols`` and ``triples`` of one file of the largest resource
  vs the same file in a project of its own (no target in the issue: before
  the graph store's subject index, these loaded the whole resource's graph);
- in one process: the first query after a commit to another resource (by
  this process, and by another ``acms reindex``) vs a warm query (target
  <= 1.5x), and vs the first query after an idle pause as long as the
  commit took, without a commit (what the commit itself costs: on a shared
  machine a pause alone makes the next query slower, see
  ``bench_after_commit``), and vs the first query after a busy spell as
  long (64 MiB of memory walked: the commit's effect on the CPU's caches
  alone); after a commit to its own resource, for P and
  for a resource 20x P's size (target: O(change), so the two alike);
- indexing as a child process (``acms reindex``): peak RSS vs the bytes of
  source read (target <= 4x), throughput, and 2 jobs vs 1 when the CLI has
  ``--jobs``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

STDLIB = Path(sysconfig.get_paths()["stdlib"])
UKO = "https://cleveragents.dev/ns/uko#"
IGNORE = shutil.ignore_patterns("__pycache__", "site-packages", "*.pyc", "*.whl", "*.exe")

# The same queries for every project: a hit or not, each costs what its engine
# does over the scope.
TEXT_QUERY = "decode"
VECTOR_QUERY = "decode a document from a string"
SPARQL_QUERY = (
    f"SELECT ?f ?p ?n WHERE {{ ?f <{UKO}defines> ?s . ?s <{UKO}name> ?n . "
    f'FILTER(CONTAINS(?n, "decode")) BIND(<{UKO}defines> AS ?p) }}'
)
KINDS = ("text", "vector", "SPARQL", "traverse")
# The memory a "busy spell" walks: more than this machine's caches hold.
_BUSY_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Corpus:
    """P and the other projects, as stdlib directories ('.' = all of it)."""

    p: str
    others: tuple[str, ...]
    repeats: int


QUICK = Corpus("json", ("email", "asyncio", "xml"), repeats=3)
FULL = Corpus("email", (".",), repeats=7)


# ---------------------------------------------------------------- measuring


def stats(samples_s: list[float]) -> dict[str, float]:
    """Median, p10, p90 and max of samples in seconds, as milliseconds."""
    ms = sorted(s * 1000 for s in samples_s)

    def pct(p: float) -> float:
        return ms[min(len(ms) - 1, int(p * len(ms)))]

    return {
        "p50_ms": statistics.median(ms),
        "p10_ms": pct(0.10),
        "p90_ms": pct(0.90),
        "p99_ms": ms[-1],
    }


def row(
    what: str,
    ours: dict[str, float],
    ref: dict[str, float],
    reference: str,
    target: float | None = None,
    note: str = "",
) -> dict[str, Any]:
    ratio = ours["p50_ms"] / ref["p50_ms"] if ref["p50_ms"] else float("inf")
    if target is not None:
        verdict = "met" if ratio <= target else "MISSED"
        note = f"target <= {target}x: {verdict}" + (f"; {note}" if note else "")
    return {
        "what": what,
        "ours": ours,
        "reference": reference,
        "ref": ref,
        "ratio_p50": ratio,
        "note": note,
    }


@dataclass
class Child:
    seconds: float
    max_rss: int
    stdout: str


# A small process starts each measured one: on Linux a child's peak RSS
# counts what it inherited at fork, so forking from this (large) process
# would report this process's size.  The launcher times the child itself, so
# its own start-up is not counted.
LAUNCHER = """
import json, os, subprocess, sys, time
cmd = json.loads(sys.argv[1])
with open(sys.argv[2], "wb") as out, open(sys.argv[3], "wb") as err:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
print(json.dumps([seconds, proc.returncode, usage.ru_maxrss * 1024]))
"""


def run_child(cmd: list[str], env: dict[str, str]) -> Child:
    """Run ``cmd`` to completion; its wall time and its own peak RSS (wait4)."""
    with tempfile.TemporaryDirectory() as d:
        out, err = Path(d) / "out", Path(d) / "err"
        launched = subprocess.run(
            [sys.executable, "-S", "-c", LAUNCHER, json.dumps(cmd), str(out), str(err)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        seconds, code, max_rss = json.loads(launched.stdout)
        if code != 0:
            raise RuntimeError(
                f"{' '.join(cmd[3:])[:200]} exited {code}: {err.read_text(errors='replace')[-500:]}"
            )
        return Child(seconds, max_rss, out.read_text(errors="replace"))


def interleaved(
    a: Callable[[], Child], b: Callable[[], Child], repeats: int
) -> tuple[list[Child], list[Child]]:
    """Both once to warm the page cache, then alternately, order swapped each round."""
    a()
    b()
    got_a: list[Child] = []
    got_b: list[Child] = []
    for i in range(repeats):
        if i % 2:
            got_b.append(b())
            got_a.append(a())
        else:
            got_a.append(a())
            got_b.append(b())
    return got_a, got_b


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} KB"


# ---------------------------------------------------------------- data dirs


class DataDir:
    """One data directory, driven through the ``acms`` CLI."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.env = {**os.environ, "ACMS_DATA_DIR": str(path)}

    def cmd(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "cleveragents.acms", "--json", *args]

    def run(self, *args: str) -> Any:
        out = run_child(self.cmd(*args), self.env).stdout
        return json.loads(out) if out.strip() else None

    def add(self, project: str, trees: list[Path]) -> list[str]:
        self.run("project", "add", project)
        return [
            self.run("resource", "add", str(t), "--project", project, "--type", "directory")[
                "resource_id"
            ]
            for t in trees
        ]

    def reindex(self, *extra: str) -> Child:
        return run_child(self.cmd("reindex", *extra), self.env)

    def query(self, kind: str, project: str, start: str) -> list[str]:
        scope = ["--project", project]
        if kind == "text":
            return self.cmd("search", "text", TEXT_QUERY, *scope)
        if kind == "vector":
            return self.cmd("search", "vector", VECTOR_QUERY, *scope)
        if kind == "SPARQL":
            return self.cmd("sparql", SPARQL_QUERY, *scope)
        return self.cmd("traverse", start, "--depth", "2", *scope)


def first_file(tree: Path) -> str:
    """A file at the top of a tree, as a path relative to it (a traverse start)."""
    return sorted(p.name for p in tree.glob("*.py"))[0]


def copy_tree(name: str, into: Path) -> Path:
    source = STDLIB if name == "." else STDLIB / name
    target = into / ("stdlib" if name == "." else name)
    shutil.copytree(source, target, symlinks=True, ignore=IGNORE)
    return target


def source_bytes(trees: list[Path]) -> int:
    return sum(p.stat().st_size for t in trees for p in t.rglob("*") if p.is_file())


def supports_jobs() -> bool:
    out = subprocess.run(
        [sys.executable, "-m", "cleveragents.acms", "reindex", "--help"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return "--jobs" in out


@dataclass
class World:
    """The data dirs and trees every row below uses, built once."""

    alone: DataDir
    multi: DataDir
    p_tree: Path
    big_tree: Path
    scratch_tree: Path
    one_tree: Path
    p_rid: dict[str, str]  # data dir name -> P's ULID there
    big_rid: str
    one_big_rid: str  # the largest resource's first file alone
    scratch_rid: str
    p_bytes: int
    others_bytes: int
    big_bytes: int
    index_rows: list[dict[str, Any]]


def build(tmp: Path, corpus: Corpus) -> World:
    trees = tmp / "trees"
    trees.mkdir(parents=True)
    p_tree = copy_tree(corpus.p, trees)
    others = [copy_tree(name, trees) for name in corpus.others]
    scratch = copy_tree("tomllib", trees)
    one = trees / "one-file"
    one.mkdir()
    shutil.copy(p_tree / first_file(p_tree), one / first_file(p_tree))
    sizes = {t: source_bytes([t]) for t in others}
    big = max(others, key=lambda t: sizes[t])
    # The largest resource's first file alone: what a question about that
    # file would cost if the resource held nothing else.
    one_big = trees / "one-big-file"
    one_big.mkdir()
    shutil.copy(big / first_file(big), one_big / first_file(big))

    alone = DataDir(tmp / "data-alone")
    (alone_rid,) = alone.add("local/p", [p_tree])
    alone.reindex()

    multi = DataDir(tmp / "data-multi")
    (multi_rid,) = multi.add("local/p", [p_tree])
    other_rids = multi.add("local/others", others)
    (scratch_rid,) = multi.add("local/scratch", [scratch])
    multi.add("local/one", [one])
    (one_big_rid,) = multi.add("local/one-big", [one_big])
    indexed = multi.reindex()
    total_read = json.loads(indexed.stdout)["total"]["bytes_read"]

    # What a process holding the engines costs before it reads any source.
    baseline = run_child(
        [sys.executable, "-c", "import numpy, faiss, tantivy, rdflib, cleveragents.cli.main"],
        multi.env,
    ).max_rss
    index_rows = [indexing_row(indexed, total_read, "default jobs", baseline)]
    if supports_jobs():
        # The same trees again, with 1 and 2 jobs, each into a fresh data dir.
        runs = {}
        for jobs in (1, 2):
            d = DataDir(tmp / f"data-jobs{jobs}")
            d.add("local/all", [p_tree, *others, scratch, one])
            runs[jobs] = d.reindex("--jobs", str(jobs))
            shutil.rmtree(d.path)
        index_rows += [indexing_row(runs[j], total_read, f"--jobs {j}", baseline) for j in (1, 2)]
        index_rows.append(
            row(
                f"indexing {mb(total_read)}, --jobs 2",
                stats([runs[2].seconds]),
                stats([runs[1].seconds]),
                "--jobs 1, same trees",
                note="target: 2 jobs faster than 1 (ratio < 1)",
            )
        )
    return World(
        alone=alone,
        multi=multi,
        p_tree=p_tree,
        big_tree=big,
        scratch_tree=scratch,
        one_tree=one,
        p_rid={"alone": alone_rid, "multi": multi_rid},
        big_rid=other_rids[others.index(big)],
        one_big_rid=one_big_rid,
        scratch_rid=scratch_rid,
        p_bytes=source_bytes([p_tree]),
        others_bytes=sum(sizes.values()),
        big_bytes=sizes[big],
        index_rows=index_rows,
    )


def indexing_row(run: Child, bytes_read: int, label: str, baseline: int) -> dict[str, Any]:
    above = run.max_rss - baseline
    return {
        "what": f"indexing {mb(bytes_read)} of stdlib source ({label}), peak RSS",
        "ours": {"p50_ms": float("nan")},
        "reference": "bytes of source read",
        "ref": {"p50_ms": float("nan")},
        "ratio_p50": run.max_rss / bytes_read,
        "note": (
            f"peak RSS {mb(run.max_rss)} = {run.max_rss / bytes_read:.1f}x the source "
            f"(target <= 4x; {above / bytes_read:.1f}x above the {mb(baseline)} of a process "
            f"that only imports the engines); {run.seconds:.1f} s, "
            f"{bytes_read / 1e6 / run.seconds:.2f} MB/s"
        ),
    }


# ---------------------------------------------------------------- cold CLI rows


def bench_multi_tenant(world: World, repeats: int) -> list[dict[str, Any]]:
    """P's query in a data dir with only P vs one with 20x more beside it."""
    out = []
    times = world.others_bytes / world.p_bytes
    for kind in KINDS:
        cmds = {
            name: d.query(kind, "local/p", f"uko://{world.p_rid[name]}/{first_file(world.p_tree)}")
            for name, d in (("alone", world.alone), ("multi", world.multi))
        }
        multi, alone = interleaved(
            lambda cmds=cmds: run_child(cmds["multi"], world.multi.env),
            lambda cmds=cmds: run_child(cmds["alone"], world.alone.env),
            repeats,
        )
        rss_m = statistics.median(c.max_rss for c in multi)
        rss_a = statistics.median(c.max_rss for c in alone)
        out.append(
            row(
                f"cold CLI {kind}, P = {mb(world.p_bytes)}, data dir also holds {times:.0f}x P",
                stats([c.seconds for c in multi]),
                stats([c.seconds for c in alone]),
                "same command, data dir holding only P",
                target=1.25,
                note=f"peak RSS {mb(rss_m)} vs {mb(rss_a)}",
            )
        )
    return out


def bench_scope_size(world: World, repeats: int) -> list[dict[str, Any]]:
    """A cold text query over a large project vs over a one-file project;
    the graph questions about one file of the largest resource vs the same
    file in a project of its own."""
    path = first_file(world.big_tree)
    cases = [
        (
            f"cold CLI text, project of {mb(world.others_bytes)}",
            ("search", "text", TEXT_QUERY, "--project", "local/others"),
            ("search", "text", TEXT_QUERY, "--project", "local/one"),
            "same command, one-file project",
            2.0,
        ),
        (
            f"cold CLI symbols of one file, in a resource of {mb(world.big_bytes)}",
            ("symbols", path, "--project", "local/others"),
            ("symbols", path, "--project", "local/one-big"),
            "same file, one-file project",
            None,
        ),
        (
            f"cold CLI triples of one file, in a resource of {mb(world.big_bytes)}",
            ("triples", f"uko://{world.big_rid}/{path}", "--project", "local/others"),
            ("triples", f"uko://{world.one_big_rid}/{path}", "--project", "local/one-big"),
            "same file, one-file project",
            None,
        ),
    ]
    out = []
    for what, big_args, one_args, reference, target in cases:
        big, one = world.multi.cmd(*big_args), world.multi.cmd(*one_args)
        ours, ref = interleaved(
            lambda big=big: run_child(big, world.multi.env),
            lambda one=one: run_child(one, world.multi.env),
            repeats,
        )
        rss_o = statistics.median(c.max_rss for c in ours)
        rss_r = statistics.median(c.max_rss for c in ref)
        out.append(
            row(
                what,
                stats([c.seconds for c in ours]),
                stats([c.seconds for c in ref]),
                reference,
                target=target,
                note=f"peak RSS {mb(rss_o)} vs {mb(rss_r)}",
            )
        )
    return out


# ---------------------------------------------------------------- in-process rows


def open_operations(data_dir: Path) -> Any:
    """The operations object the CLI builds for a data dir."""
    try:
        from cleveragents.cli.main import operations_for

        return operations_for(argparse.Namespace(data_dir=str(data_dir)))
    except (ImportError, AttributeError):
        from cleveragents.application.container import build_container
        from cleveragents.application.services.operations import AcmsOperations

        return AcmsOperations.from_container(build_container("local", data_dir))


def bench_after_commit(
    world: World, repeats: int, kinds: tuple[str, ...] = KINDS
) -> list[dict[str, Any]]:
    """First query after a commit (to another resource, to its own) vs warm.

    Besides the warm (back-to-back) query, each "another resource" row has a
    second reference: the first query after an idle pause as long as the
    commit took, with no commit at all.  On a shared machine any pause lets
    other processes evict this one's caches, and the next query pays for it
    whatever the engines do (a plain dict walk was 7x slower after 0.3 s of
    sleep here); the ratio to that reference is what the commit itself costs.
    A third reference works as long instead of sleeping, walking more memory
    than the caches hold: a commit's effect on the CPU's caches without any
    index touched (the query then makes the very calls a warm one makes:
    ``test_after_commit_invariants``).
    """
    ops = open_operations(world.multi.path)
    p_rid, big_rid = world.p_rid["multi"], world.big_rid
    embedding = ops.embed_query(VECTOR_QUERY)
    views = {rid: ops.view(frozenset({rid})) for rid in (p_rid, big_rid)}
    starts = {
        p_rid: f"uko://{p_rid}/{first_file(world.p_tree)}",
        big_rid: f"uko://{big_rid}/{first_file(world.big_tree)}",
    }
    counter = iter(range(10**9))

    def commit(tree: Path, rid: str) -> None:
        # One file changed, then the reindex that commits it (not timed).
        target = tree / first_file(tree)
        with target.open("a") as f:
            f.write(f"\n# benchmark change {next(counter)}\n")
        ops.reindex(resources=[rid])

    def commit_elsewhere(tree: Path, rid: str) -> None:
        # The same, committed by another process (``acms reindex``).
        target = tree / first_file(tree)
        with target.open("a") as f:
            f.write(f"\n# benchmark change {next(counter)}\n")
        world.multi.reindex("--resource", rid)

    def query(kind: str, rid: str) -> Callable[[], object]:
        view = views[rid]
        if kind == "text":
            return lambda: view.search(TEXT_QUERY, max_results=20)
        if kind == "vector":
            return lambda: view.similarity_search(embedding, top_k=20)
        if kind == "SPARQL":
            return lambda: view.sparql_query(SPARQL_QUERY)
        return lambda: view.traverse(starts[rid], depth=2)

    sizes: dict[str, set[int]] = {}

    def size_of(result: object) -> int:
        triples = getattr(result, "triples", None)
        return len(triples) if triples is not None else len(result)  # type: ignore[arg-type]

    took: dict[str, list[float]] = {}

    def first_after(
        change: Callable[[], None], fn: Callable[[], object], key: str
    ) -> dict[str, float]:
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            change()
            took.setdefault(key, []).append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            result = fn()
            samples.append(time.perf_counter() - t0)
            sizes.setdefault(key, set()).add(size_of(result))
        return stats(samples)

    def pause_like(key: str) -> Callable[[], None]:
        """Sleep as long as the ``key`` changes took (median so far)."""
        return lambda: time.sleep(statistics.median(took[key]))

    scratch = bytearray(_BUSY_BYTES)

    def busy_like(key: str) -> Callable[[], None]:
        """Work as long as the ``key`` changes took, walking :data:`_BUSY_BYTES`
        of memory over and over: what a commit does to the CPU's caches,
        without touching an index."""

        def busy() -> None:
            end = time.perf_counter() + statistics.median(took[key])
            view, step = memoryview(scratch), 1 << 20
            while time.perf_counter() < end:
                for start in range(0, len(scratch) - step, step):
                    view[start : start + step] = view[start + 1 : start + 1 + step]
                    if time.perf_counter() >= end:
                        break

        return busy

    def warm(fn: Callable[[], object], key: str) -> dict[str, float]:
        fn()
        samples = []
        for _ in range(max(5, 3 * repeats)):
            t0 = time.perf_counter()
            result = fn()
            samples.append(time.perf_counter() - t0)
        sizes[key] = {size_of(result)}
        return stats(samples)

    def results(*keys: str) -> str:
        return "results " + " vs ".join("/".join(str(n) for n in sorted(sizes[k])) for k in keys)

    out = []
    size = mb(world.big_bytes)
    for kind in kinds:
        sizes.clear()
        fn_p, fn_big = query(kind, p_rid), query(kind, big_rid)
        warm_p = warm(fn_p, "warm")
        # The same reindex of another resource with nothing to commit: what
        # the reindex alone does to caches, without a commit.
        idle = first_after(lambda: ops.reindex(resources=[world.scratch_rid]), fn_p, "idle")
        other = first_after(lambda: commit(world.scratch_tree, world.scratch_rid), fn_p, "other")
        foreign = first_after(
            lambda: commit_elsewhere(world.scratch_tree, world.scratch_rid), fn_p, "foreign"
        )
        paused = first_after(pause_like("other"), fn_p, "paused")
        busy = first_after(busy_like("other"), fn_p, "busy")
        paused_long = first_after(pause_like("foreign"), fn_p, "paused_long")
        own = first_after(lambda: commit(world.p_tree, p_rid), fn_p, "own")
        warm_big = warm(fn_big, "warm_big")
        own_big = first_after(lambda: commit(world.big_tree, big_rid), fn_big, "own_big")
        out += [
            row(
                f"in-process {kind}, first query after a commit to another resource",
                other,
                warm_p,
                "warm query, same scope",
                target=1.5,
                note=results("other", "warm"),
            ),
            row(
                f"in-process {kind}, first query after a commit to another resource",
                other,
                idle,
                "first query after a no-change reindex of it",
            ),
            row(
                f"in-process {kind}, first query after a commit to another resource",
                other,
                paused,
                "first query after an idle pause as long, no commit",
            ),
            row(
                f"in-process {kind}, first query after a commit to another resource",
                other,
                busy,
                f"first query after a busy spell as long ({mb(_BUSY_BYTES)} of memory "
                "walked), no commit",
            ),
            row(
                f"in-process {kind}, first query after another process commits to another resource",
                foreign,
                warm_p,
                "warm query, same scope",
                target=1.5,
                note=results("foreign", "warm"),
            ),
            row(
                f"in-process {kind}, first query after another process commits to another resource",
                foreign,
                paused_long,
                "first query after an idle pause as long, no commit",
            ),
            row(
                f"in-process {kind}, first query after a commit to its own resource (P)",
                own,
                warm_p,
                "warm query, same scope",
                note=results("own", "warm"),
            ),
            row(
                f"in-process {kind}, first query after a commit to its own resource ({size})",
                own_big,
                warm_big,
                "warm query, same scope",
                note=f"O(change) if alike the P row above (P is {mb(world.p_bytes)}); "
                + results("own_big", "warm_big"),
            ),
        ]
    return out


# ---------------------------------------------------------------- entry point


def bench_all(tmp: Path, quick: bool) -> list[dict[str, Any]]:
    corpus = QUICK if quick else FULL
    t0 = time.perf_counter()
    world = build(tmp, corpus)
    print(f"(bench_cold: data dirs built in {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    rows = list(world.index_rows)
    rows += bench_multi_tenant(world, corpus.repeats)
    rows += bench_scope_size(world, corpus.repeats)
    rows += bench_after_commit(world, max(11, corpus.repeats))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a minute or two)")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory() as d:
        rows = bench_all(Path(d), args.quick)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import print_table

    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
