"""Crash soak: edit files, SIGKILL reindexes and rebuilds at random moments,
crash on top of crash, and check after every kill that nothing was lost.

    python benchmarks/soak_crash.py [--iterations 200] [--seed N]
                                    [--packages json wsgiref http] [--rebuild-every 7]
                                    [--settle-every 10] [--keep]

Each iteration makes random edits (edit, revert, touch, delete, restore with
the old mtime, add) to the resources (copies of stdlib packages), starts
``scripts/reindex.py`` (every ``--rebuild-every``-th time with ``--rebuild``)
and kills it with SIGKILL after a random delay.  Then:

- the indexes must open (``acms --json status`` exits 0);
- every file an index held before the kill and still on disk after the edits
  must still be in that index (units in text and vector, its subjects in the
  graph): old or new content, never lost.

Every ``--settle-every`` iterations (and at the end) a reindex runs to
completion: it must succeed without waiting for a writer lock, and
``scripts/reindex.py --verify`` must pass.  A summary is printed; the exit
status is 1 when any check failed.  Not run by CI (see
``tests/integration/test_crash_safety.py`` for the short version).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REINDEX = REPO / "scripts" / "reindex.py"
STDLIB = Path(sysconfig.get_paths()["stdlib"])


def run(args: list[str], env: dict[str, str], timeout: float = 300):
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout
    )


class Soak:
    def __init__(self, root: Path, packages: list[str], seed: int) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.env = {**os.environ, "ACMS_DATA_DIR": str(root / "data")}
        for name in ("ACMS_PROFILE", "ACMS_FAULT_AT"):
            self.env.pop(name, None)
        self.packages = packages
        self.rids: dict[str, str] = {}
        self.counter = 0
        self.failures: list[str] = []
        self.stats = {"killed": 0, "finished": 0, "rebuilds": 0, "settles": 0}
        self.pristine = root / "pristine"

    # ------------------------------------------------------------ setup

    def setup(self) -> None:
        self.must(run(["-m", "cleveragents.acms", "project", "add", "local/soak"], self.env))
        for name in self.packages:
            ignore = shutil.ignore_patterns("__pycache__", "test*")
            shutil.copytree(STDLIB / name, self.pristine / name, ignore=ignore)
            shutil.copytree(self.pristine / name, self.src(name))
            done = self.must(
                run(
                    [
                        "-m",
                        "cleveragents.acms",
                        "resource",
                        "add",
                        str(self.src(name)),
                        "--project",
                        "local/soak",
                    ],
                    self.env,
                )
            )
            self.rids[name] = done.stdout.strip()
        self.must(run([str(REINDEX)], self.env))

    def src(self, name: str) -> Path:
        return self.root / "src" / name

    def must(self, done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
        if done.returncode != 0:
            raise SystemExit(f"setup step failed: {done.stderr[-2000:]}")
        return done

    # ------------------------------------------------------------ edits

    def files(self, name: str) -> list[Path]:
        return sorted(p for p in self.src(name).rglob("*") if p.is_file())

    def edit(self) -> None:
        for name in self.packages:
            for _ in range(self.rng.randint(0, 4)):
                self.counter += 1
                files = self.files(name)
                kind = self.rng.choice(["edit", "edit", "revert", "touch", "delete", "add"])
                target = self.rng.choice(files) if files else None
                if kind == "add" or target is None:
                    (self.src(name) / f"soak_{self.counter}.py").write_text(
                        f"def soak_{self.counter}():\n    return {self.counter}\n"
                    )
                elif kind == "edit":
                    text = target.read_text(errors="replace")
                    at = self.rng.randint(0, len(text))
                    target.write_text(f"{text[:at]}\n# soak {self.counter}\n{text[at:]}")
                elif kind == "touch":
                    now = time.time_ns() + self.counter
                    os.utime(target, ns=(now, now))
                elif kind == "delete":
                    target.unlink()
                else:  # revert: pristine bytes and mtime, or delete an added file
                    original = self.pristine / name / target.relative_to(self.src(name))
                    if original.exists():
                        shutil.copy2(original, target)
                    else:
                        target.unlink()
            if self.rng.random() < 0.2:  # restore a deleted file with its old mtime
                for original in sorted((self.pristine / name).rglob("*.py")):
                    copy = self.src(name) / original.relative_to(self.pristine / name)
                    if not copy.exists():
                        shutil.copy2(original, copy)
                        break

    def listing(self) -> dict[str, set[str]]:
        return {
            name: {p.relative_to(self.src(name)).as_posix() for p in self.files(name)}
            for name in self.packages
        }

    # ------------------------------------------------------------ kill and check

    def kill_one(self, rebuild: bool) -> None:
        args = [sys.executable, str(REINDEX), *(["--rebuild"] if rebuild else [])]
        delay = self.rng.uniform(0.3, 3.0)
        proc = subprocess.Popen(
            args, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            self.stats["killed"] += 1
        else:
            self.stats["finished"] += 1

    def probe(self, label: str) -> dict[str, dict[str, set[str]]] | None:
        """Per resource and index, the paths it holds units (subjects) of."""
        done = run(["-c", _PROBE, json.dumps(self.rids)], self.env)
        if done.returncode != 0:
            self.failures.append(f"{label}: the indexes did not open: {done.stderr[-500:]}")
            return None
        held = json.loads(done.stdout)
        return {n: {i: set(paths) for i, paths in idx.items()} for n, idx in held.items()}

    def check_open_and_kept(
        self, held: dict[str, dict[str, set[str]]], on_disk: dict[str, set[str]], label: str
    ) -> dict[str, dict[str, set[str]]]:
        """Each index still holds every file it held that is still on disk."""
        status = run(["-m", "cleveragents.acms", "--json", "status"], self.env)
        if status.returncode != 0:
            self.failures.append(f"{label}: status failed: {status.stderr[-500:]}")
        now = self.probe(label)
        if now is None:
            return held
        for name, indexes in held.items():
            for index, paths in indexes.items():
                lost = sorted((paths & on_disk[name]) - now[name][index])
                if lost:
                    self.failures.append(f"{label}: {name} {index} lost {lost[:3]}")
        return now

    def settle(self, label: str) -> None:
        self.stats["settles"] += 1
        started = time.perf_counter()
        done = run([str(REINDEX), "--log-level", "info", "--lock-timeout", "10"], self.env)
        if done.returncode != 0:
            self.failures.append(f"{label}: settling reindex failed: {done.stderr[-500:]}")
            return
        if "writer_lock_busy" in done.stderr:
            self.failures.append(f"{label}: waited for a stale writer lock")
        verify = run([str(REINDEX), "--verify"], self.env)
        if verify.returncode != 0:
            self.failures.append(f"{label}: verify failed: {verify.stdout[-500:]}")
        print(f"{label}: settled in {time.perf_counter() - started:.1f} s", file=sys.stderr)


# Run in a fresh interpreter so this script imports nothing from the project.
_PROBE = """
import json, logging, sys
import structlog
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
from cleveragents.application.container import build_container
from cleveragents.domain.models.acms.uko import path_of
c = build_container("local")
out = {}
for name, rid in json.loads(sys.argv[1]).items():
    out[name] = {
        "text": sorted({path_of(u) for u in c.text_backend().unit_uris(rid)} - {None}),
        "vector": sorted({path_of(u) for u in c.vector_backend().unit_uris(rid)} - {None}),
        "graph": sorted({path_of(s) for s in c.graph_backend().subjects(rid)} - {None}),
    }
print(json.dumps(out))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--packages", nargs="+", default=["json", "wsgiref", "http"])
    parser.add_argument("--rebuild-every", type=int, default=7)
    parser.add_argument("--settle-every", type=int, default=10)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="acms-soak-"))
    started = time.perf_counter()
    soak = Soak(root, args.packages, args.seed)
    try:
        soak.setup()
        held = soak.probe("setup")
        assert held is not None
        for i in range(1, args.iterations + 1):
            soak.edit()
            rebuild = args.rebuild_every > 0 and i % args.rebuild_every == 0
            soak.stats["rebuilds"] += rebuild
            soak.kill_one(rebuild)
            held = soak.check_open_and_kept(held, soak.listing(), f"iteration {i}")
            if i % args.settle_every == 0 or i == args.iterations:
                soak.settle(f"iteration {i}")
                held = soak.probe(f"iteration {i}") or held
    finally:
        seconds = time.perf_counter() - started
        summary = {
            "seed": args.seed,
            "iterations": args.iterations,
            **soak.stats,
            "failures": len(soak.failures),
            "seconds": round(seconds, 1),
            "work_dir": str(root) if args.keep else None,
        }
        for failure in soak.failures:
            print(failure)
        print(json.dumps(summary, indent=2))
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if soak.failures else 0


if __name__ == "__main__":
    sys.exit(main())
