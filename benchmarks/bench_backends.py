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
  filter on one on-disk index of the same documents, built by plain
  tantivy-py (no wrapper: no validation, no view, no result objects).
Only public constructors and methods of the adapters are used, so the rows
keep measuring the same thing while the adapters change inside.

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
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend

# The raw reference builds its own index with its own copy of a code-aware
# analyzer (the adapter's published behaviour: words split at case changes,
# numbers, lower-cased), so it never depends on the adapter's internals or
# its on-disk layout.
RAW_ANALYZER = "bench_code"
RAW_TOKEN_PATTERN = r"\p{Lu}?\p{Ll}+|\p{Lu}+|\p{N}+|\p{L}+"


def raw_analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(RAW_TOKEN_PATTERN))
        .filter(tantivy.Filter.remove_long(100))
        .filter(tantivy.Filter.lowercase())
        .build()
    )


def raw_schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("uko_uri", stored=True, tokenizer_name="raw")
    builder.add_text_field("resource_id", stored=True, tokenizer_name="raw")
    builder.add_text_field("content", stored=True, tokenizer_name=RAW_ANALYZER)
    builder.add_text_field("path", tokenizer_name=RAW_ANALYZER)
    return builder.build()


def raw_index(path: Path | None) -> tantivy.Index:
    index = tantivy.Index(raw_schema(), path=None if path is None else str(path))
    index.register_tokenizer(RAW_ANALYZER, raw_analyzer())
    return index


def raw_add(index: tantivy.Index, rid: str, units: list[IndexUnit]) -> None:
    """One commit of ``units`` through a plain tantivy-py writer."""
    writer = index.writer(50_000_000, 1)
    for u in units:
        writer.add_document(
            tantivy.Document(
                uko_uri=u.uko_uri,
                resource_id=rid,
                content=u.content,
                path=u.metadata.get("path", ""),
            )
        )
    writer.commit()
    writer.wait_merging_threads()


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
    (tmp / "text-raw").mkdir()
    raw_index_ = raw_index(tmp / "text-raw")
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
        raw_add(raw_index_, rid, units)
    query = "parse json OR token"
    out = []
    # Raw reference: one on-disk index of the same documents, plain tantivy-py.
    raw_index_.reload()
    raw_searcher = raw_index_.searcher()
    schema = raw_index_.schema
    fields = ["content", "path"]
    for label, scope_ids in ((f"{k} resource(s)", rids[:k]) for k in scopes):
        scope = frozenset(scope_ids)

        def raw(scope_ids: list[str] = scope_ids) -> list[Any]:
            user = raw_index_.parse_query(query, fields)
            flt = tantivy.Query.const_score_query(
                tantivy.Query.term_set_query(schema, "resource_id", scope_ids), 0.0
            )
            q = tantivy.Query.boolean_query([(tantivy.Occur.Must, user), (tantivy.Occur.Must, flt)])
            hits = raw_searcher.search(q, 20).hits
            return [raw_searcher.doc(addr)["uko_uri"][0] for _, addr in hits]

        # A/B interleaved query by query, so both see the same machine load.
        ours, ref = interleaved(
            [lambda scope=scope: backend.search(query, scope=scope, max_results=20)],
            [raw],
            repeats,
        )
        out.append(
            row(
                f"text search, scope {label}",
                ours,
                ref,
                "raw tantivy-py, one index of the same docs + filter",
            )
        )
        plain, old = interleaved(
            [
                lambda q=q, scope=scope: backend.search(q, scope=scope, max_results=20)
                for q in SYNTAX_QUERIES
            ],
            [
                lambda q=q, scope=scope: backend.search(
                    q, scope=scope, max_results=20, syntax="tantivy"
                )
                for q in SYNTAX_QUERIES
            ],
            repeats,
        )
        out.append(
            row(
                f"text search plain syntax (default), scope {label}",
                plain,
                old,
                "the same backend, same queries, syntax='tantivy' (the previous default)",
            )
        )
    backend.close()
    return out


# Queries both syntaxes accept: the existing one, an identifier, a question.
SYNTAX_QUERIES = ("parse json OR token", "parse_json value", "read the json token stream")


def interleaved(
    a: list[Callable[[], Any]], b: list[Callable[[], Any]], repeats: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Per-round times of running every call of ``a`` and of ``b``, A/B
    interleaved round by round so both see the same machine load."""
    for fn in (*a, *b):
        fn()  # warm up
    samples: tuple[list[float], list[float]] = ([], [])
    for i in range(repeats):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for side in order:
            t0 = time.perf_counter()
            for fn in (a, b)[side]:
                fn()
            samples[side].append((time.perf_counter() - t0) * 1000 / len(a))
    return _stats(samples[0]), _stats(samples[1])


def _stats(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)

    def pct(p: float) -> float:
        return samples[min(len(samples) - 1, int(p * len(samples)))]

    return {
        "p50_ms": statistics.median(samples),
        "p10_ms": pct(0.10),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
    }


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
    out += bench_vector_loading(tmp, backend, rids, data[:per], qlist, repeats)
    backend.close()
    return out


def bench_vector_loading(
    tmp: Path,
    writer: FaissVectorBackend,
    rids: list[str],
    first_rows: np.ndarray,
    qlist: list[float],
    repeats: int,
) -> list[dict]:
    """What opening and foreign commits cost a reader of one resource.

    ``writer`` holds ``len(rids)`` resources of ``len(first_rows)`` rows each
    (``first_rows`` are those of ``rids[0]``).  Another connection plays the
    reader, as a query process beside a reindex process would.
    """
    dim = first_rows.shape[1]
    path = tmp / "vectors"
    alone = tmp / "vectors-one-resource"
    solo = FaissVectorBackend(alone, dimension=dim)
    units = [
        IndexUnit(unit_uri(rids[0], f"f{i}.py", "L1-L9"), f"chunk {i}")
        for i in range(len(first_rows))
    ]
    # Held open during the timing, as ``writer`` holds the other: a closing
    # last connection checkpoints and deletes the WAL, which is not the
    # cost being compared.
    solo.upsert(rids[0], units, first_rows)
    scope = frozenset(rids[:1])

    def cold(at: Path) -> Callable[[], None]:
        def once() -> None:
            with FaissVectorBackend(at, dimension=dim) as b:
                b.similarity_search(qlist, scope=scope, top_k=10)

        return once

    cold_repeats = max(3, repeats // 5)
    out = [
        row(
            f"vector open + first query, scope 1 of {len(rids)} resources",
            timed(cold(path), cold_repeats),
            timed(cold(alone), cold_repeats),
            "same, database holding only that resource",
        )
    ]
    solo.close()
    reader = FaissVectorBackend(path, dimension=dim)
    warm = timed(lambda: reader.similarity_search(qlist, scope=scope, top_k=10), repeats)
    rng = np.random.default_rng(4)
    counter = iter(range(10**9))

    def after_commit(rid: str) -> dict[str, float]:
        samples = []
        for _ in range(repeats):
            n = next(counter)
            unit = IndexUnit(unit_uri(rid, f"new{n}.py", "L1-L1"), "new")
            writer.upsert(rid, [unit], rng.standard_normal((1, dim)).astype(np.float32))
            t0 = time.perf_counter()
            reader.similarity_search(qlist, scope=scope, top_k=10)
            samples.append((time.perf_counter() - t0) * 1000)
        samples.sort()
        return {
            "p50_ms": statistics.median(samples),
            "p10_ms": samples[int(0.1 * len(samples))],
            "p90_ms": samples[min(len(samples) - 1, int(0.9 * len(samples)))],
            "p99_ms": samples[-1],
        }

    out.append(
        row(
            "vector first query after another process's commit to another resource",
            after_commit(rids[1]),
            warm,
            "warm query, same scope",
        )
    )
    out.append(
        row(
            f"vector first query after another process's 1-row commit to its own "
            f"resource ({len(first_rows)} rows)",
            after_commit(rids[0]),
            warm,
            "warm query, same scope",
        )
    )
    reader.close()
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
