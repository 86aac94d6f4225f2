"""Graph compaction by a writer that does not hold the graph: record by record vs a load.

Not a test.  Builds one resource's graph file shaped as the indexer writes
it (``--files`` files of ``--triples`` triples each, in change records of
whole files of about 4,096 triples, each file's subjects dropped and added,
every file linked to the resource node), then rewrites ``--changed`` of the
files (a branch switch: every changed file's subjects dropped and added
again), so that most of the log is dead.  Then, each in a fresh process on
its own copy of the store, interleaved (``--repeats`` rounds, medians):

- ``streamed``: :meth:`GraphStore.compact`, what an indexing writer runs now;
- ``loaded``: load the graph and write it whole (``refresh`` +
  ``create_from``), what it ran before.

Reported: wall time and peak RSS above the process's RSS before the
compaction (its imports and the store opened), and the ratio streamed /
loaded.  Both files are checked to load to the same graph.

    python benchmarks/bench_compaction.py [--files 2000] [--triples 400] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RID = "01J00000000000000000000000"
PART = 4096


def _file_adds(i: int, triples: int, tag: str) -> dict[str, set[Any]]:
    f = f"uko://{RID}/file/m{i}.py"
    adds: dict[str, set[Any]] = {f: {("urn:inResource", f"uko://resource/{RID}")}}
    for j in range(triples - 1):
        s = f"{f}#sym{j // 8}"
        adds.setdefault(s, set()).add((f"urn:p{j % 8}", (f"{tag}{j}", None)))
    return adds


def build(root: Path, files: int, triples: int, changed: int) -> None:
    from cleveragents.infrastructure.acms.graph_store import GraphStore, WriteState

    store = GraphStore(root)
    node = f"uko://resource/{RID}"
    state: WriteState | None = None

    def write(indexes: range, tag: str) -> None:
        nonlocal state
        drops: list[str] = []
        adds: dict[str, set[Any]] = {}
        contains: set[Any] = set()
        for i in indexes:
            file_adds = _file_adds(i, triples, tag)
            drops += list(file_adds)
            adds.update(file_adds)
            contains.add(("urn:contains", f"uko://{RID}/file/m{i}.py"))
            if sum(map(len, adds.values())) >= PART or i == indexes[-1]:
                if state is None:
                    state = store.create(RID, (drops, [], adds))
                else:
                    store.append_change(RID, state, (drops, [], adds))
                drops, adds = [], {}
        assert state is not None
        store.append_change(RID, state, ([], [], {node: contains}))

    with store.writer_lock():
        write(range(files), "v")
        write(range(changed), "w")
    store.close()


def child(root: Path, how: str) -> dict[str, Any]:
    from cleveragents.infrastructure.acms.graph_store import GraphStore

    store = GraphStore(root)
    with store.writer_lock():
        state = store.write_state(RID, None)
        assert state is not None
        base = _status_mb("VmRSS:")
        t0 = time.perf_counter()
        if how == "streamed":
            store.compact(RID, state)
        else:
            fresh = store.refresh(RID, None, None)
            assert fresh is not None
            store.create_from(RID, fresh[0])
            del fresh
        wall = time.perf_counter() - t0
    peak = _status_mb("VmHWM:")  # not ru_maxrss: exec keeps the parent's
    return {"wall_s": wall, "peak_above_mb": peak - base, "triples": state.live}


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return 0.0


def _graph(root: Path) -> dict[str, Any]:
    from cleveragents.infrastructure.acms.graph_store import GraphStore

    fresh = GraphStore(root).refresh(RID, None, None)
    assert fresh is not None
    return {s: e for s, e in fresh[0].by_subject.items() if e}


def run(files: int, triples: int, changed: float, repeats: int) -> dict[str, Any]:
    """Both variants, interleaved; medians (see the module doc)."""
    runs: dict[str, list[dict[str, Any]]] = {"streamed": [], "loaded": []}
    with tempfile.TemporaryDirectory(prefix="bench-compact-") as tmp:
        source = Path(tmp) / "source"
        build(source, files, triples, int(files * changed))
        size = sum(p.stat().st_size for p in source.rglob("*.graph")) / 1e6
        results: dict[str, Path] = {}
        for _ in range(repeats):
            for how in runs:
                root = Path(tmp) / how
                shutil.rmtree(root, ignore_errors=True)
                shutil.copytree(source, root)
                out = subprocess.run(
                    [sys.executable, __file__, "--child", str(root), how],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                runs[how].append(json.loads(out))
                results[how] = root
        same = _graph(results["streamed"]) == _graph(results["loaded"])
    rows = {
        how: {
            "wall_s": statistics.median(r["wall_s"] for r in rs),
            "peak_above_mb": statistics.median(r["peak_above_mb"] for r in rs),
        }
        for how, rs in runs.items()
    }
    return {
        "rows": rows,
        "same": same,
        "triples": runs["streamed"][0]["triples"],
        "file_mb": size,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--triples", type=int, default=400)
    parser.add_argument("--changed", type=float, default=0.7, help="share of files rewritten")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=2, metavar=("ROOT", "HOW"))
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(Path(args.child[0]), args.child[1])))
        return 0
    r = run(args.files, args.triples, args.changed, args.repeats)
    rows, same, triples = r["rows"], r["same"], r["triples"]
    size = r["file_mb"]
    print(f"graph file {size:.1f} MB before compaction, {triples} live triples; same graph: {same}")
    print(f"{'variant':10} {'wall s':>8} {'peak above MB':>14}")
    for how, row in rows.items():
        print(f"{how:10} {row['wall_s']:8.2f} {row['peak_above_mb']:14.1f}")
    s, lo = rows["streamed"], rows["loaded"]
    ratio_t = s["wall_s"] / lo["wall_s"]
    ratio_m = s["peak_above_mb"] / max(lo["peak_above_mb"], 1e-9)
    print(f"streamed / loaded: wall {ratio_t:.2f}x, peak memory {ratio_m:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(r))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
