"""Graph store: persistence formats, cold scoped queries, memory while writing.

Not a test.  Builds the code graph of a real tree (default: the running
interpreter's standard library, one resource) and a small project (a few
stdlib packages), then measures, each in a fresh process so load time and
peak RSS are its own:

- formats: loading the big resource's graph into the in-memory structure
  (``subject -> {(predicate, object)}``) from N-Triples parsed by a Python
  regex (the layout before ``graph_store``), a marshal snapshot (the
  ``graph_store`` file, read by its real code), a pickle of the same
  structure, and SQLite (one row per triple); file sizes; the cost of one
  small write (a file's triples replaced) as an append to each;
- cold query: a new process opens the store and runs one SPARQL query and
  one traverse scoped to the small project, in a data dir holding only it
  and in one also holding the big resource (the ratio is what to read);
- memory while writing: peak RSS of a process writing the big resource in
  250k-triple batches, as the indexer does, above the same process's RSS
  with the triples already in memory.

    python benchmarks/bench_graph_store.py [PATH] [--module FILE] [--json out.json]

``--module`` loads ``RdflibGraphBackend`` from another file (for instance
the adapter of an earlier commit, saved with ``git show``) for the cold
query and memory rows, to compare before and after in one run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import marshal
import os
import pickle
import re
import resource
import sqlite3
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

RID_BIG = "01JD5TD11B0000000000000000"
RID_SMALL = "01JD5TD11C0000000000000000"
SMALL_PACKAGES = ("json", "email", "http", "urllib", "logging", "concurrent")
BATCH = 250_000


# ---------------------------------------------------------------- corpus


def code_graph(root: Path, rid: str, packages: tuple[str, ...] = ()) -> list[Any]:
    """The triples the indexer writes for ``root`` (or only its ``packages``)."""
    from cleveragents.application.services.chunking import chunk_text, detect_language
    from cleveragents.application.services.code_graph import (
        ModuleLookup,
        extract_facts,
        file_triples,
    )
    from cleveragents.application.services.resource_files import decode_text, list_files

    files = [
        f
        for f in list_files(root, "directory")
        if not packages or f.rel_path.split("/")[0] in packages
    ]
    modules = ModuleLookup([f.rel_path for f in files])
    out: list[Any] = []
    for f in files:
        try:
            data = (root / f.rel_path).read_bytes()
        except OSError:
            continue
        if b"\0" in data[:8192]:
            continue
        text = decode_text(data)
        lang = detect_language(f.rel_path)
        chunks = chunk_text(text, lang)
        facts = extract_facts(f.rel_path, text, lang)
        out.extend(file_triples(rid, f.rel_path, lang, chunks, facts, modules))
    return out


def by_subject(triples: list[Any]) -> dict[str, set[Any]]:
    from cleveragents.domain.models.acms.backends import Literal

    graph: dict[str, set[Any]] = {}
    for s, p, o in triples:
        obj = (o.value, o.datatype) if isinstance(o, Literal) else o
        graph.setdefault(sys.intern(s), set()).add((sys.intern(p), obj))
    return graph


# ---------------------------------------------------------------- N-Triples (the old layout)

_NT_LINE = re.compile(
    r'<([^<>"\s]*)> <([^<>"\s]*)> '
    r'(?:<([^<>"\s]*)>|"([^"\\]*(?:\\.[^"\\]*)*)"(?:\^\^<([^<>"\s]*)>)?) \.'
)
_ESCAPE_RE = re.compile(r"[\\\"\x00-\x1f\x7f\ud800-\udfff]")
_UNESCAPE_RE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))", re.DOTALL)
_UNESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}


def _nt_line(s: str, p: str, o: Any) -> str:
    if isinstance(o, str):
        return f"<{s}> <{p}> <{o}> .\n"
    lexical = _ESCAPE_RE.sub(lambda m: f"\\u{ord(m.group()):04X}", o[0])
    return f'<{s}> <{p}> "{lexical}"' + (f"^^<{o[1]}>" if o[1] else "") + " .\n"


def _unescape(m: re.Match[str]) -> str:
    code = m.group(1) or m.group(2)
    return chr(int(code, 16)) if code else _UNESCAPES[m.group(3)]


def load_nt(path: Path) -> dict[str, set[Any]]:
    memo: dict[str, str] = {}
    graph: dict[str, set[Any]] = {}
    for line in path.read_bytes().decode("utf-8", "surrogatepass").split("\n"):
        m = _NT_LINE.fullmatch(line)
        if m is None:
            continue
        s, p, iri, lexical, datatype = m.groups()
        s = memo.setdefault(s, s)
        p = memo.setdefault(p, p)
        if iri is not None:
            obj: Any = memo.setdefault(iri, iri)
        else:
            value = _UNESCAPE_RE.sub(_unescape, lexical) if "\\" in lexical else lexical
            obj = (value, None if datatype is None else memo.setdefault(datatype, datatype))
        graph.setdefault(s, set()).add((p, obj))
    return graph


# ---------------------------------------------------------------- SQLite


def write_sqlite(path: Path, graph: dict[str, set[Any]]) -> None:
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (s TEXT, p TEXT, o TEXT, dt TEXT, lit INTEGER)")
    rows = (
        (s, p, o, None, 0) if isinstance(o, str) else (s, p, o[0], o[1], 1)
        for s, edges in graph.items()
        for p, o in edges
    )
    db.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", rows)
    db.commit()
    db.close()


def load_sqlite(path: Path) -> dict[str, set[Any]]:
    db = sqlite3.connect(path)
    graph: dict[str, set[Any]] = {}
    for s, p, o, dt, lit in db.execute("SELECT s, p, o, dt, lit FROM t"):
        graph.setdefault(s, set()).add((p, (o, dt) if lit else o))
    db.close()
    return graph


# ---------------------------------------------------------------- children


def _rss_mb() -> float:
    """This process's peak RSS.  Not ``ru_maxrss``: Linux carries that across
    ``execve`` from the parent, so a child would report the parent's peak."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _backend_class(module: str | None) -> Any:
    if module is None:
        from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend

        return RdflibGraphBackend
    spec = importlib.util.spec_from_file_location("bench_graph_adapter", module)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.RdflibGraphBackend


def child(kind: str, arg: str, module: str | None) -> dict[str, Any]:
    """One measurement in this (fresh) process."""
    base = _rss_mb()
    t0 = time.perf_counter()
    if kind == "load-nt":
        n = len(load_nt(Path(arg)))
    elif kind == "load-marshal":
        from cleveragents.infrastructure.acms.graph_store import GraphStore

        base, t0 = _rss_mb(), time.perf_counter()
        found = GraphStore(Path(arg)).refresh(RID_BIG, None, None)
        assert found is not None
        n = len(found[0].by_subject)
    elif kind == "load-pickle":
        n = len(pickle.loads(Path(arg).read_bytes()))
    elif kind == "load-sqlite":
        n = len(load_sqlite(Path(arg)))
    elif kind == "cold-query":
        base = 0.0  # the whole process, imports included, as a user sees it
        cls = _backend_class(module)
        backend = cls(arg)
        scope = frozenset({RID_SMALL})
        q = 'SELECT ?s ?p ?o WHERE { ?s ?p ?o FILTER(?o = "Message") }'
        n = len(backend.sparql_query(q, scope=scope).triples)
        start = f"uko://{RID_SMALL}/json/__init__.py"
        n += len(backend.traverse(start, depth=2, scope=scope).triples)
    elif kind == "write":
        cls = _backend_class(module)
        triples = pickle.loads(Path(arg).read_bytes())
        base = _rss_mb()
        t0 = time.perf_counter()
        with cls(Path(arg).parent / "write-store") as backend:
            for i in range(0, len(triples), BATCH):
                batch = triples[i : i + BATCH]
                backend.upsert(RID_BIG, batch, delete_subjects={t[0] for t in batch})
        n = len(triples)
    else:
        raise SystemExit(f"unknown child {kind}")
    return {"seconds": time.perf_counter() - t0, "rss_mb": _rss_mb() - base, "n": n}


def run_child(kind: str, arg: Path, module: str | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    cmd = [sys.executable, __file__, "--child", kind, str(arg)]
    if module:
        cmd += ["--module", module]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=os.environ)
    if out.returncode:
        raise SystemExit(f"child {kind} failed:\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_seconds"] = time.perf_counter() - t0
    return result


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", nargs="?", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    parser.add_argument("--module")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--skip-formats", action="store_true")
    parser.add_argument("--corpus-cache", type=Path, help="keep the extracted triples here")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "ARG"))
    args = parser.parse_args(argv)
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.child:
        kind, arg = args.child
        if kind == "writer":
            writer_loop(arg, args.module)
        elif kind == "same-process":
            print(json.dumps(same_process(arg, args.module)))
        else:
            print(json.dumps(child(kind, arg, args.module)))
        return 0
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        t0 = time.perf_counter()
        cache = args.corpus_cache
        if cache is not None and cache.exists():
            big, small = pickle.loads(cache.read_bytes())
        else:
            big = code_graph(args.path, RID_BIG)
            small = code_graph(Path(sysconfig.get_paths()["stdlib"]), RID_SMALL, SMALL_PACKAGES)
            if cache is not None:
                cache.write_bytes(pickle.dumps((big, small), protocol=5))
        print(f"corpus: big {len(big)} triples, small {len(small)} triples", end="")
        print(f" ({time.perf_counter() - t0:.0f} s to extract)")
        graph = by_subject(big)

        if not args.skip_formats:
            report["formats"] = formats(tmp, graph)
            report["write"] = write_costs(tmp, graph)

        # -- cold query, one small project alone and next to the big one
        cls = _backend_class(args.module)
        alone, shared = tmp / "alone", tmp / "shared"
        layouts = ((alone, [(RID_SMALL, small)]), (shared, [(RID_SMALL, small), (RID_BIG, big)]))
        for root, parts in layouts:
            with cls(root, max_rows=1_000_000) as backend:
                for rid, triples in parts:
                    for i in range(0, len(triples), BATCH):
                        backend.upsert(rid, triples[i : i + BATCH])
        cold = {}
        layout = {"alone": alone, "shared": shared}
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in layout}
        for _ in range(5):  # interleaved
            for name, root in layout.items():
                runs[name].append(run_child("cold-query", root, args.module))
        for name in layout:
            cold[name] = round(statistics.median(r["process_seconds"] for r in runs[name]), 3)
            cold[f"{name}_rss_mb"] = round(statistics.median(r["rss_mb"] for r in runs[name]), 1)
        cold["shared_vs_alone"] = round(cold["shared"] / cold["alone"], 3)
        report["cold_query"] = cold
        report["same_process"] = run_child("same-process", shared, args.module)

        # -- memory while writing the big resource in batches
        tri = tmp / "big.pickle"
        tri.write_bytes(pickle.dumps(big, protocol=5))
        w = run_child("write", tri, args.module)
        report["write_big"] = {
            "seconds": round(w["seconds"], 2),
            "rss_above_triples_mb": round(w["rss_mb"], 1),
            "triples": w["n"],
        }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def formats(tmp: Path, graph: dict[str, set[Any]]) -> dict[str, Any]:
    """Load time (best of 3 fresh processes), RSS growth and file size per format."""
    from cleveragents.infrastructure.acms.graph_store import GraphStore, ResourceGraph

    nt = tmp / "g.nt"
    nt.write_text(
        "".join(sorted(_nt_line(s, p, o) for s, e in graph.items() for p, o in e)),
        encoding="utf-8",
        errors="surrogatepass",
    )
    store = GraphStore(tmp / "marshal")
    store.replace(RID_BIG, ResourceGraph(graph))
    pk = tmp / "g.pickle"
    pk.write_bytes(pickle.dumps(graph, protocol=5))
    sq = tmp / "g.sqlite"
    write_sqlite(sq, graph)
    files = {
        "nt": (nt, nt),
        "marshal": (tmp / "marshal", store.path(RID_BIG)),
        "pickle": (pk, pk),
        "sqlite": (sq, sq),
    }
    result: dict[str, Any] = {}
    # Interleaved, best of 3: the load on a shared machine drifts.
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in files}
    for _ in range(3):
        for name, (arg, _file) in files.items():
            runs[name].append(run_child(f"load-{name}", arg, None))
    for name, (_arg, file) in files.items():
        best = min(runs[name], key=lambda r: r["seconds"])
        result[name] = {
            "load_s": round(best["seconds"], 3),
            "load_rss_mb": round(best["rss_mb"], 1),
            "file_mb": round(file.stat().st_size / 1e6, 1),
        }
    ref = result["nt"]["load_s"]
    for row in result.values():
        row["load_vs_nt"] = round(row["load_s"] / ref, 3)
    return result


def _change(rid: str, i: int) -> tuple[list[Any], list[str]]:
    """A one-file change: its 11 subjects replaced."""
    from cleveragents.domain.models.acms.backends import Literal

    f = f"uko://{rid}/bench_{i % 3}.py"
    lines = [f"{f}#L{j}" for j in range(10)]
    triples = [(f, "urn:bench:n", Literal(str(i)))]
    triples += [(line, "urn:bench:line", Literal(str(j))) for j, line in enumerate(lines)]
    return triples, [f, *lines]


def writer_loop(root: str, module: str | None) -> None:
    """Child: commit ``_change(rid, i)`` for each ``rid i`` line on stdin."""
    with _backend_class(module)(root) as writer:
        for line in sys.stdin:
            rid, i = line.split()
            triples, subjects = _change(rid, int(i))
            writer.upsert(rid, triples, delete_subjects=subjects)
            print("ok", flush=True)


def same_process(root: str, module: str | None) -> dict[str, Any]:
    """Child: a warm scoped SPARQL query + traverse on the small project, and
    the first one after another process committed a one-file change to the
    big resource (another resource) or to the small project (its own).
    Medians of 9, as ratios to warm."""
    scope = frozenset({RID_SMALL})
    start = f"uko://{RID_SMALL}/json/__init__.py"
    # A cheap query, so that a reload or a union rebuild would show.
    q = f"SELECT ?s ?p ?o WHERE {{ <{start}> ?p ?o . BIND(<{start}> AS ?s) }}"

    def query(backend: Any) -> float:
        t0 = time.perf_counter()
        backend.sparql_query(q, scope=scope)
        backend.traverse(start, depth=2, scope=scope)
        return time.perf_counter() - t0

    cmd = [sys.executable, __file__, "--child", "writer", root]
    if module:
        cmd += ["--module", module]
    writer = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert writer.stdin is not None and writer.stdout is not None
    try:
        with _backend_class(module)(root, max_rows=1_000_000) as reader:
            query(reader)
            warm = statistics.median(query(reader) for _ in range(9))
            after: dict[str, list[float]] = {"other": [], "own": []}
            for i in range(9):
                for name, rid in (("other", RID_BIG), ("own", RID_SMALL)):
                    writer.stdin.write(f"{rid} {i}\n")
                    writer.stdin.flush()
                    assert writer.stdout.readline().strip() == "ok"
                    after[name].append(query(reader))
    finally:
        writer.stdin.close()
        writer.wait(60)
    return {
        "warm_ms": round(warm * 1000, 2),
        "after_other_commit_ms": round(statistics.median(after["other"]) * 1000, 2),
        "after_own_commit_ms": round(statistics.median(after["own"]) * 1000, 2),
        "other_vs_warm": round(statistics.median(after["other"]) / warm, 3),
        "own_vs_warm": round(statistics.median(after["own"]) / warm, 3),
    }


def write_costs(tmp: Path, graph: dict[str, set[Any]]) -> dict[str, Any]:
    """One small change (12 triples: a file's subjects replaced) appended to each
    format, median of 30: the marshal log through ``graph_store``, an N-Triples
    log line block plus the old global generation bump, and a SQLite
    transaction."""
    from cleveragents.infrastructure.acms import graph_store
    from cleveragents.infrastructure.acms.graph_store import GraphStore, ResourceGraph

    subject = next(iter(graph))
    change: list[Any] = [(True, subject, "urn:p", ("v", None))] * 12

    def timed(fn: Any) -> float:
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1000

    store = GraphStore(tmp / "w-marshal")
    cursor = store.replace(RID_BIG, ResourceGraph({subject: set(graph[subject])}))
    marshal_ms = timed(lambda: store.append(RID_BIG, cursor, change))

    log, gen = tmp / "w.log", tmp / "generation"

    def nt_append() -> None:
        text = "".join("+" + _nt_line(s, p, o) for _, s, p, o in change) + "C\n"
        graph_store._append(log, os.stat(log).st_ino, text.encode())
        graph_store._write_new(gen, [b"1\n"])

    log.touch()
    nt_ms = timed(nt_append)

    db = sqlite3.connect(tmp / "w.sqlite")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (s TEXT, p TEXT, o TEXT, dt TEXT, lit INTEGER)")

    def sqlite_txn() -> None:
        with db:
            db.execute("DELETE FROM t WHERE s = ?", (subject,))
            rows = [(subject, "urn:p", "v")] * 12
            db.executemany("INSERT INTO t VALUES (?, ?, ?, NULL, 1)", rows)

    sqlite_ms = timed(sqlite_txn)
    stat_us = timed(lambda: os.stat(store.path(RID_BIG))) * 1000
    return {
        "marshal_append_ms": round(marshal_ms, 3),
        "nt_append_and_generation_ms": round(nt_ms, 3),
        "sqlite_txn_ms": round(sqlite_ms, 3),
        "change_check_stat_us": round(stat_us, 2),
        "marshal_vs_nt": round(marshal_ms / nt_ms, 3),
        "payload_bytes_marshal": len(marshal.dumps(change)),
    }


if __name__ == "__main__":
    sys.exit(main())
