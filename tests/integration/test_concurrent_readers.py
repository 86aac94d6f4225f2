"""Concurrent readers: processes querying all three backends while another
process reindexes the same data directory.

Markers make every committed state checkable from a reader:

- resource R1 is rewritten in *generations*: generation ``g`` is exactly the
  files ``v<g>/f0.py .. v<g>/f<n(g)-1>.py``, each one chunk holding the common
  word and a token naming ``g``; the previous generation's directory is
  removed.  The indexer writes a generation's files in one atomic upsert per
  backend and deletes the previous generation's in another, so a reader may
  see one generation or two consecutive ones, each always *complete*
  (``n(g)`` files), never a part of one;
- resource R2 never changes: a reader always sees all of its files;
- resource R3 is removed with ``AcmsOperations.remove_resource`` part way
  through; once that call has returned, no query that starts later may
  return any of it;
- after the writer's reindex of generation ``g`` has returned, no query that
  starts later may see a generation older than ``g`` (no stale snapshot);
- one ``rebuild`` (atomic directory swap) happens in the middle.

Any exception in a reader is a failure.  :func:`run_soak` is shared with
``benchmarks/soak_concurrent.py``, which runs it for minutes.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cleveragents.domain.models.acms.uko import UKO, path_of, resource_id_of, resource_uri

DIM = 32
COMMON = "sharedmarker"
PROJECT = "local/concurrent"
STATIC_FILES = 3
DOOMED_FILES = 2
GRAPH_QUERY = (
    f"PREFIX uko: <{UKO}>\nSELECT ?s ?p ?o WHERE {{ ?s uko:path ?o BIND(uko:path AS ?p) }}"
)


def gen_token(g: int) -> str:
    """A one-token word naming generation ``g`` (letters only: the analyzer
    would split digits off)."""
    return "gen" + "".join("abcdefghij"[int(d)] for d in str(g))


def files_in(g: int) -> int:
    return 1 + g % 4


def write_generation(root: Path, g: int) -> None:
    for old in root.glob("v*"):
        shutil.rmtree(old)
    folder = root / f"v{g}"
    folder.mkdir(parents=True)
    for j in range(files_in(g)):
        (folder / f"f{j}.py").write_text(f'"""{COMMON} {gen_token(g)} file {j}"""\n')


def write_static(root: Path, prefix: str, count: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for j in range(count):
        (root / f"{prefix}{j}.py").write_text(f'"""{COMMON} {prefix} {j}"""\n')


# ---------------------------------------------------------------- reader process


def reader_main(data_dir: str, rids: dict[str, str], stop_at: float, out: str, seed: int) -> None:
    """Query text, vector and graph in a loop until ``stop_at``; write a JSON report."""
    records: list[list[Any]] = []
    errors: list[str] = []
    try:
        warnings.simplefilter("error")
        from cleveragents.application.container import build_container
        from cleveragents.domain.models.acms.scope import ScopedView

        rng = random.Random(seed)
        c = build_container("local", data_dir, embedding_dimension=DIM)
        text, vector, graph = c.text_backend(), c.vector_backend(), c.graph_backend()
        embedding = c.embedder().embed([COMMON])[0].tolist()
        r1, r2, r3 = rids["r1"], rids["r2"], rids["r3"]
        scopes = [
            frozenset({r1}),
            frozenset({r1, r2, r3}),
            frozenset({r3}),
            frozenset({r2, r3}),
            frozenset({r1.lower(), r3.lower()}),
        ]
        while time.time() < stop_at:
            kind = rng.choice(("text", "vector", "graph", "walk"))
            scope = rng.choice(scopes)
            view = ScopedView(text, vector, graph, scope)
            started = time.time()
            try:
                if kind == "text":
                    uris = [r.uko_uri for r in view.search(COMMON, max_results=1000)]
                elif kind == "vector":
                    uris = [r.uko_uri for r in view.similarity_search(embedding, top_k=1000)]
                elif kind == "graph":
                    uris = [t[0] for t in view.sparql_query(GRAPH_QUERY).triples]
                else:  # each resource's files, by a walk (read by subject, not loaded)
                    uris = [
                        o
                        for rid in sorted({r.upper() for r in scope})
                        for _s, p, o in view.traverse(resource_uri(rid), depth=1).triples
                        if p == UKO + "contains"
                    ]
            except Exception:
                errors.append(f"{kind} {sorted(scope)}: {traceback.format_exc()}")
                continue
            records.append([kind, sorted(s.upper() for s in scope), started, time.time(), uris])
    except BaseException:
        errors.append(traceback.format_exc())
    finally:
        Path(out).write_text(json.dumps({"records": records, "errors": errors}))


# ---------------------------------------------------------------- checks


@dataclass
class SoakResult:
    """What a run did and every invariant violation it saw."""

    queries: Counter[str] = field(default_factory=Counter)
    generations: int = 0
    rebuilds: int = 0
    deleted_at: float | None = None
    errors: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        return (
            f"{sum(self.queries.values())} queries {dict(self.queries)}, "
            f"{self.generations} generations, {self.rebuilds} rebuild(s), "
            f"{len(self.errors)} reader errors, {len(self.failures)} invariant failures, "
            f"{self.seconds:.1f} s"
        )


def check_record(
    record: list[Any],
    rids: dict[str, str],
    committed: list[tuple[int, float]],
    deleted_at: float | None,
) -> list[str]:
    """Invariant violations in one reader query (an empty list when none)."""
    kind, scope, started, _ended, uris = record
    r1, r2, r3 = rids["r1"], rids["r2"], rids["r3"]
    where = f"{kind} query started {started:.4f} scope={scope}"
    problems: list[str] = []
    by_rid: dict[str | None, set[str]] = {}
    for uri in uris:
        rid = resource_id_of(uri)
        if rid not in scope:
            problems.append(f"{where}: out-of-scope {uri}")
        by_rid.setdefault(rid, set()).add(path_of(uri) or "")
    if r2 in scope and by_rid.get(r2, set()) != {f"s{j}.py" for j in range(STATIC_FILES)}:
        problems.append(f"{where}: static resource seen as {sorted(by_rid.get(r2, set()))}")
    doomed = by_rid.get(r3, set())
    if doomed and len(doomed) != DOOMED_FILES:
        problems.append(f"{where}: partial resource R3 {sorted(doomed)}")
    if doomed and deleted_at is not None and started > deleted_at:
        problems.append(f"{where}: R3 returned {started - deleted_at:.4f} s after its deletion")
    if r1 in scope:
        gens: dict[int, set[str]] = {}
        for path in by_rid.get(r1, set()):
            folder, _, name = path.partition("/")
            gens.setdefault(int(folder[1:]), set()).add(name)
        for g, names in gens.items():
            if names != {f"f{j}.py" for j in range(files_in(g))}:
                problems.append(f"{where}: generation {g} partially visible: {sorted(names)}")
        seen = sorted(gens)
        if not seen:
            problems.append(f"{where}: no generation of R1 visible")
        elif len(seen) > 2 or seen[-1] - seen[0] > 1:
            problems.append(f"{where}: generations {seen} visible together")
        newest_done = max((g for g, t in committed if t < started), default=None)
        if newest_done is not None and seen and seen[0] < newest_done:
            problems.append(
                f"{where}: stale: saw generations {seen} after generation {newest_done} committed"
            )
    return problems


# ---------------------------------------------------------------- the run


def run_soak(
    base: Path,
    *,
    seconds: float,
    readers: int = 2,
    rebuild_at: float | None = 0.5,
    delete_at: float = 0.35,
) -> SoakResult:
    """Reindex repeatedly for ``seconds`` while ``readers`` processes query."""
    from cleveragents.application.container import build_container
    from cleveragents.application.services.operations import AcmsOperations

    result = SoakResult()
    data_dir, trees = base / "data", base / "trees"
    roots = {"r1": trees / "r1", "r2": trees / "r2", "r3": trees / "r3"}
    write_generation(roots["r1"], 0)
    write_static(roots["r2"], "s", STATIC_FILES)
    write_static(roots["r3"], "d", DOOMED_FILES)
    container = build_container("local", data_dir, embedding_dimension=DIM)
    ops = AcmsOperations.from_container(container)
    ops.add_project(PROJECT)
    rids = {
        key: ops.add_resource(str(root), PROJECT, "directory").resource_id
        for key, root in roots.items()
    }
    ops.reindex()
    committed: list[tuple[int, float]] = [(0, time.time())]

    t0 = time.time()
    stop_at = t0 + seconds
    ctx = multiprocessing.get_context("spawn")
    outs = [base / f"reader{i}.json" for i in range(readers)]
    procs = [
        ctx.Process(target=reader_main, args=(str(data_dir), rids, stop_at, str(out), i))
        for i, out in enumerate(outs)
    ]
    for p in procs:
        p.start()
    g = 0
    rebuilt = rebuild_at is None
    try:
        # Leave the readers a second at the end in which nothing changes.
        while time.time() < stop_at - 1.0:
            elapsed = (time.time() - t0) / seconds
            if result.deleted_at is None and elapsed >= delete_at:
                ops.remove_resource(rids["r3"])
                result.deleted_at = time.time()
                continue
            if not rebuilt and rebuild_at is not None and elapsed >= rebuild_at:
                ops.rebuild()
                result.rebuilds += 1
                committed.append((g, time.time()))
                rebuilt = True
                continue
            g += 1
            write_generation(roots["r1"], g)
            ops.reindex()
            committed.append((g, time.time()))
    finally:
        for p in procs:
            p.join(timeout=max(5.0, stop_at - time.time() + 60.0))
            if p.is_alive():
                p.kill()
                p.join()
                result.errors.append(f"reader {p.pid} did not finish")
        for backend in (
            container.text_backend(),
            container.vector_backend(),
            container.graph_backend(),
        ):
            backend.close()
    result.generations = g
    for p, out in zip(procs, outs, strict=True):
        if p.exitcode != 0:
            result.errors.append(f"reader {p.pid} exited with {p.exitcode}")
        if not out.exists():
            result.errors.append(f"reader {p.pid} wrote no report")
            continue
        report = json.loads(out.read_text())
        result.errors.extend(report["errors"])
        for record in report["records"]:
            result.queries[record[0]] += 1
            result.failures.extend(check_record(record, rids, committed, result.deleted_at))
    result.seconds = time.time() - t0
    return result


# ---------------------------------------------------------------- the test


@pytest.mark.slow
def test_readers_see_only_committed_in_scope_states(tmp_path: Path) -> None:
    seconds = float(os.environ.get("ACMS_CONCURRENT_SECONDS", "20"))
    result = run_soak(tmp_path, seconds=seconds, readers=2)
    print(result.summary())
    assert not result.errors, "\n".join(result.errors[:5])
    assert not result.failures, "\n".join(result.failures[:10])
    # The run really exercised something.
    assert result.generations >= 5
    assert result.rebuilds == 1
    assert result.deleted_at is not None
    assert min(result.queries[k] for k in ("text", "vector", "graph", "walk")) >= 50
