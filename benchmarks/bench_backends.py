"""Scoped search latency of each backend next to its raw engine, in one run.

Not a test.  Every figure is a median over repeated queries, next to a
reference doing the same work in the same process on the same data, and the
ratio between the two is what to read (these machines are shared and noisy).

    python benchmarks/bench_backends.py            # default sizes, a few minutes
    python benchmarks/bench_backends.py --quick    # small sizes, seconds
    python benchmarks/bench_backends.py --json out.json

Rows:
- text: ``TantivyTextBackend.search`` with a 1-resource and a 10-resource scope
  vs raw tantivy-py running the same parsed query plus the same resource
  filter on one on-disk index holding every resource's documents (no
  wrapper: no validation, no shards, no result objects).
- vector: ``FaissVectorBackend.similarity_search`` at 1% / 10% / 100% scope vs
  a raw FAISS flat index holding only the in-scope rows, and numpy brute force
  over the same rows (recall 1.0 against numpy is asserted).
- graph: ``RdflibGraphBackend.sparql_query`` (2-hop join) with a 1% scope vs the
  same query on a plain rdflib Graph holding only the in-scope triples; and
  ``traverse`` depth 2 vs a dict-of-sets BFS over the same triples.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import rdflib
import structlog
import tantivy
from ulid import ULID

from cleveragents.domain.models.acms.backends import IndexUnit, Literal
from cleveragents.domain.models.acms.uko import UKO, file_uri, resource_uri, unit_uri
from cleveragents.infrastructure.acms.faiss_vector import FaissVectorBackend
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend
from cleveragents.infrastructure.acms.tantivy_text import (
    ANALYZER_NAME,
    TantivyTextBackend,
    _analyzer,
    _document,
    _schema,
)

WORDS = [
    "parse",
    "json",
    "value",
    "token",
    "stream",
    "buffer",
    "index",
    "query",
    "scope",
    "graph",
    "node",
    "edge",
    "vector",
    "search",
    "result",
    "score",
    "cache",
    "file",
    "path",
    "module",
    "import",
    "class",
    "function",
    "return",
    "error",
    "config",
    "loader",
    "writer",
    "reader",
    "commit",
    "segment",
    "merge",
    "thread",
    "lock",
    "queue",
    "batch",
]


def timed(fn: Callable[[], Any], repeats: int) -> dict[str, float]:
    """Median, p10, p90 and p99 of ``repeats`` calls, in milliseconds."""
    fn()  # warm up
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()

    def pct(p: float) -> float:
        return samples[min(len(samples) - 1, int(p * len(samples)))]

    return {
        "p50_ms": statistics.median(samples),
        "p10_ms": pct(0.10),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
    }


def row(name: str, ours: dict[str, float], ref: dict[str, float], ref_name: str) -> dict[str, Any]:
    return {
        "what": name,
        "ours": ours,
        "reference": ref_name,
        "ref": ref,
        "ratio_p50": ours["p50_ms"] / ref["p50_ms"] if ref["p50_ms"] else float("inf"),
    }


def bench_text(
    tmp: Path,
    n_resources: int,
    docs_per_resource: int,
    repeats: int,
    scopes: tuple[int, ...] = (1, 10),
) -> list[dict]:
    rng = np.random.default_rng(1)
    rids = [str(ULID()) for _ in range(n_resources)]
    backend = TantivyTextBackend(tmp / "text")
    # Raw reference: every resource's documents in one plain tantivy-py index.
    (tmp / "raw-text").mkdir()
    raw_index = tantivy.Index(_schema(), path=str(tmp / "raw-text"))
    raw_index.register_tokenizer(ANALYZER_NAME, _analyzer())
    raw_writer = raw_index.writer(heap_size=50_000_000, num_threads=1)
    for rid in rids:
        units = []
        for i in range(docs_per_resource):
            words = rng.choice(WORDS, size=60)
            units.append(
                IndexUnit(
                    unit_uri(rid, f"src/m{i}.py", "L1-L30"),
                    " ".join(words),
                    {"path": f"src/m{i}.py"},
                )
            )
        backend.upsert(rid, units)
        for u in units:
            raw_writer.add_document(_document(u.uko_uri, rid, u.content, u.metadata))
    raw_writer.commit()
    raw_writer.wait_merging_threads()
    query = "parse json OR token"
    out = []
    raw_index.reload()
    raw_searcher = raw_index.searcher()
    schema = raw_index.schema
    fields = ["content", "path"]
    for label, scope_ids in ((f"{k} resource(s)", rids[:k]) for k in scopes):
        scope = frozenset(scope_ids)
        ours = timed(
            lambda scope=scope: backend.search(query, scope=scope, max_results=20), repeats
        )

        def raw(scope_ids: list[str] = scope_ids) -> list[Any]:
            user = raw_index.parse_query(query, fields)
            flt = tantivy.Query.const_score_query(
                tantivy.Query.term_set_query(schema, "resource_id", scope_ids), 0.0
            )
            q = tantivy.Query.boolean_query([(tantivy.Occur.Must, user), (tantivy.Occur.Must, flt)])
            hits = raw_searcher.search(q, 20).hits
            return [raw_searcher.doc(addr)["uko_uri"][0] for _, addr in hits]

        ref = timed(raw, repeats)
        out.append(
            row(f"text search, scope {label}", ours, ref, "raw tantivy-py, one index + filter")
        )
    backend.close()
    return out


def bench_vector(tmp: Path, n: int, dim: int, n_resources: int, repeats: int) -> list[dict]:
    rng = np.random.default_rng(2)
    data = rng.standard_normal((n, dim)).astype(np.float32)
    faiss.normalize_L2(data)
    rids = [str(ULID()) for _ in range(n_resources)]
    per = n // n_resources
    backend = FaissVectorBackend(tmp / "vectors", dimension=dim)
    for r, rid in enumerate(rids):
        rows = data[r * per : (r + 1) * per]
        units = [
            IndexUnit(unit_uri(rid, f"f{i}.py", "L1-L9"), f"chunk {i}") for i in range(len(rows))
        ]
        backend.upsert(rid, units, rows)
    query = rng.standard_normal(dim).astype(np.float32)
    query /= np.linalg.norm(query)
    qlist = query.tolist()
    out = []
    faiss.omp_set_num_threads(1)
    for frac in (0.01, 0.10, 1.0):
        k_res = max(1, round(frac * n_resources))
        scope = frozenset(rids[:k_res])
        subset = data[: k_res * per]
        flat = faiss.IndexFlatIP(dim)
        flat.add(subset)
        ours_res = backend.similarity_search(qlist, scope=scope, top_k=10)
        exact = np.argsort(-(subset @ query), kind="stable")[:10]
        expected = {unit_uri(rids[i // per], f"f{i % per}.py", "L1-L9") for i in exact}
        recall = len(expected & {r.uko_uri for r in ours_res}) / 10
        assert recall == 1.0, f"recall {recall} at scope {frac:.0%}"
        ours = timed(
            lambda scope=scope: backend.similarity_search(qlist, scope=scope, top_k=10), repeats
        )
        ref_flat = timed(lambda flat=flat: flat.search(query[None, :], 10), repeats)
        ref_np = timed(lambda subset=subset: np.argpartition(-(subset @ query), 10)[:10], repeats)
        label = f"vector search {n}x{dim}, scope {frac:.0%}"
        out.append(row(label, ours, ref_flat, "faiss flat index of only the in-scope rows"))
        out.append(row(label, ours, ref_np, "numpy brute force on the in-scope rows"))
    backend.close()
    return out


def bench_graph(
    tmp: Path,
    n_resources: int,
    files_per_resource: int,
    repeats: int,
    depths: tuple[int, ...] = (2,),
) -> list[dict]:
    rng = np.random.default_rng(3)
    rids = [str(ULID()) for _ in range(n_resources)]
    # The 2-hop join returns ~11k rows at 1M triples: above the default row cap.
    backend = RdflibGraphBackend(tmp / "graph", max_rows=1_000_000)
    in_scope: list[tuple[str, str, str | Literal]] = []
    for r, rid in enumerate(rids):
        res = resource_uri(rid)
        files = [file_uri(rid, f"pkg/m{i}.py") for i in range(files_per_resource)]
        triples: list[tuple[str, str, str | Literal]] = []
        for i, f in enumerate(files):
            triples.append((res, UKO + "contains", f))
            triples.append((f, UKO + "path", Literal(f"pkg/m{i}.py")))
            for j in rng.choice(files_per_resource, size=3, replace=False):
                triples.append((f, UKO + "imports", files[j]))
            for s in range(3):
                triples.append((f, UKO + "defines", unit_uri(rid, f"pkg/m{i}.py", f"sym=f{s}")))
        backend.upsert(rid, triples)
        if r == 0:
            in_scope = triples
    total = sum(len(backend.subjects(r)) for r in rids[:1])  # touch the index
    del total
    scope = frozenset(rids[:1])
    query = (
        f"SELECT ?a ?p ?c WHERE {{ ?a <{UKO}imports> ?b . ?b <{UKO}imports> ?c . "
        f"BIND(<{UKO}imports2> AS ?p) }}"
    )
    g = rdflib.Graph()
    for s, p, o in in_scope:
        g.add(
            (
                rdflib.URIRef(s),
                rdflib.URIRef(p),
                rdflib.Literal(o.value) if isinstance(o, Literal) else rdflib.URIRef(o),
            )
        )
    pattern = f"SELECT ?s ?p ?o WHERE {{ ?s ?p ?o . FILTER(?p = <{UKO}defines>) }}"
    n_triples = n_resources * files_per_resource * 8
    out = []
    for label, q in (("pattern", pattern), ("2-hop join", query)):
        ours = timed(lambda q=q: backend.sparql_query(q, scope=scope), repeats)
        ref = timed(lambda q=q: list(g.query(q)), repeats)
        out.append(
            row(
                f"SPARQL {label}, {n_triples} triples, scope 1%",
                ours,
                ref,
                "rdflib Graph of only the in-scope triples",
            )
        )
    adj: dict[str, set[tuple[str, str]]] = {}
    for s, p, o in in_scope:
        if not isinstance(o, Literal):
            adj.setdefault(s, set()).add((p, o))
    start = resource_uri(rids[0])

    def dict_bfs(depth: int) -> set[tuple[str, str, str]]:
        seen, frontier, found = {start}, [start], set()
        for _ in range(depth):
            nxt = []
            for node in frontier:
                for p, o in adj.get(node, ()):
                    found.add((node, p, o))
                    if o not in seen:
                        seen.add(o)
                        nxt.append(o)
            frontier = nxt
        return found

    for depth in depths:
        ours_t = timed(
            lambda depth=depth: backend.traverse(start, depth=depth, scope=scope), repeats
        )
        ref_t = timed(lambda depth=depth: dict_bfs(depth), repeats)
        out.append(row(f"traverse depth {depth}, scope 1%", ours_t, ref_t, "dict-of-sets BFS"))
    backend.close()
    return out


def main(argv: list[str] | None = None) -> int:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    q = args.quick
    repeats = 30 if q else 200
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows += bench_text(
            tmp, n_resources=20 if q else 100, docs_per_resource=50 if q else 200, repeats=repeats
        )
        rows += bench_vector(
            tmp, n=10_000 if q else 200_000, dim=384, n_resources=100, repeats=repeats if q else 50
        )
        rows += bench_graph(
            tmp, n_resources=100, files_per_resource=20 if q else 200, repeats=repeats if q else 30
        )
    width = max(len(r["what"]) for r in rows)
    head = f"{'ours p50':>9}  {'ours p99':>9}  {'ref p50':>9}  {'ratio':>6}"
    print(f"{'what':<{width}}  {head}  reference")
    for r in rows:
        print(
            f"{r['what']:<{width}}  {r['ours']['p50_ms']:>7.3f}ms  {r['ours']['p99_ms']:>7.3f}ms  "
            f"{r['ref']['p50_ms']:>7.3f}ms  {r['ratio_p50']:>5.2f}x  {r['reference']}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
