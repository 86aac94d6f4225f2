"""Remote engines against the local ones on the same data: p50 and p99 as ratios.

    python benchmarks/bench_remote.py            # ~1-2 minutes on 2 cores
    python benchmarks/bench_remote.py --quick    # small sizes, a smoke run
    python benchmarks/bench_remote.py --json out.json

Starts ``milvus-lite server`` and ``oxigraph serve`` on 127.0.0.1 (free ports,
temporary directories), writes the same synthetic corpus (resources of
code-like chunks with embeddings, and UKO triples) through the write ports to
Milvus + the SPARQL endpoint and to Tantivy + FAISS + rdflib, then times the
same queries on both in the same process: text search, vector search, a
SPARQL pattern and a depth-2 traversal, each scoped to one resource and to
all of them.  Every remote call is a round trip over loopback, so the ratio
is the cost of leaving the process on one machine (a real cluster adds the
network).  Also measured: ingest time and disk per chunk and per triple (the
figures docs/scale-out.md sizes with).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import structlog

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from cleveragents.domain.models.acms.backends import IndexUnit, Literal  # noqa: E402
from cleveragents.domain.models.acms.uko import UKO, file_uri, resource_uri, unit_uri  # noqa: E402
from cleveragents.infrastructure.acms.faiss_vector import FaissVectorBackend  # noqa: E402
from cleveragents.infrastructure.acms.milvus_text import MilvusTextBackend  # noqa: E402
from cleveragents.infrastructure.acms.milvus_vector import MilvusVectorBackend  # noqa: E402
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend  # noqa: E402
from cleveragents.infrastructure.acms.sparql_endpoint_graph import (  # noqa: E402
    SparqlEndpointGraphBackend,
)
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend  # noqa: E402
from remote_servers import ServerProcess  # noqa: E402

DIM = 384
WORDS = [
    f"{stem}{suffix}"
    for stem in ("parse", "json", "read", "write", "http", "server", "cache", "index", "token")
    for suffix in ("", "Data", "File", "Node", "Error", "Value", "List", "Map")
]


def ulid(i: int) -> str:
    return f"01JD5TD11B{i:016d}"


def corpus(resources: int, chunks: int, seed: int = 7) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    data: dict[str, Any] = {}
    for r in range(resources):
        rid = ulid(r)
        units, triples = [], []
        res = resource_uri(rid)
        for c in range(chunks):
            path = f"pkg/m{c // 10}.py"
            words = rng.choice(WORDS, size=60)
            units.append(
                IndexUnit(
                    unit_uri(rid, path, f"L{c * 10 + 1}-L{c * 10 + 10}"),
                    "def " + " ".join(words) + "():\n    return None\n",
                    {"path": path},
                )
            )
            f = file_uri(rid, path)
            if c % 10 == 0:
                triples += [
                    (res, UKO + "contains", f),
                    (f, UKO + "inResource", res),
                    (f, UKO + "path", Literal(path)),
                    (
                        f,
                        UKO + "imports",
                        file_uri(rid, f"pkg/m{(c // 10 + 1) % (chunks // 10)}.py"),
                    ),
                ]
            chunk = units[-1].uko_uri
            sym = unit_uri(rid, path, f"sym=f{c}")
            triples += [
                (f, UKO + "hasChunk", chunk),
                (
                    chunk,
                    UKO + "startLine",
                    Literal(str(c * 10 + 1), "http://www.w3.org/2001/XMLSchema#integer"),
                ),
                (f, UKO + "defines", sym),
                (sym, UKO + "name", Literal(f"f{c}")),
                (sym, UKO + "kind", Literal("function")),
            ]
        emb = rng.normal(size=(chunks, DIM)).astype(np.float32)
        data[rid] = {"units": units, "emb": emb, "triples": triples}
    return data


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    fn()  # warm up (scope caches, connections)
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    resources, chunks, repeats = (4, 50, 15) if args.quick else (20, 150, 40)

    tmp = Path(tempfile.mkdtemp(prefix="acms-bench-remote-"))
    milvus = ServerProcess("milvus", tmp / "milvus")
    oxigraph = ServerProcess("oxigraph", tmp / "oxigraph")
    milvus.start()
    oxigraph.start()
    rows: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    try:
        data = corpus(resources, chunks)
        n_chunks = resources * chunks
        n_triples = sum(len(d["triples"]) for d in data.values())
        local = {
            "text": TantivyTextBackend(tmp / "local" / "text"),
            "vector": FaissVectorBackend(tmp / "local" / "vectors", dimension=DIM),
            "graph": RdflibGraphBackend(tmp / "local" / "graph"),
        }
        remote = {
            "text": MilvusTextBackend(milvus.uri, collection="bench_text", timeout=60),
            "vector": MilvusVectorBackend(
                milvus.uri, dimension=DIM, collection="bench_vectors", timeout=60
            ),
            "graph": SparqlEndpointGraphBackend(
                oxigraph.uri + "/query",
                update_url=oxigraph.uri + "/update",
                store_url=oxigraph.uri + "/store",
                timeout=60,
                max_rows=1_000_000,
            ),
        }
        ingest: dict[str, dict[str, float]] = {}
        for side, b in (("local", local), ("remote", remote)):
            t = {"text": 0.0, "vector": 0.0, "graph": 0.0}
            for rid, d in data.items():
                t0 = time.perf_counter()
                b["text"].upsert(rid, d["units"])
                t1 = time.perf_counter()
                b["vector"].upsert(rid, d["units"], d["emb"])
                t2 = time.perf_counter()
                b["graph"].upsert(rid, d["triples"])
                t3 = time.perf_counter()
                t["text"] += t1 - t0
                t["vector"] += t2 - t1
                t["graph"] += t3 - t2
            ingest[side] = t
        # Seal Milvus's in-memory segment, as a server does on its own once
        # segments fill: searches then use the sealed segment's index.
        for name in ("text", "vector"):
            coll = remote[name]._coll  # type: ignore[attr-defined]
            coll.call("flush", coll.name)
        extra = {
            "chunks": n_chunks,
            "triples": n_triples,
            "ingest_ms_per_chunk": {
                side: {k: round(v / n_chunks * 1e3, 3) for k, v in t.items() if k != "graph"}
                for side, t in ingest.items()
            },
            "ingest_us_per_triple": {
                side: round(t["graph"] / n_triples * 1e6, 2) for side, t in ingest.items()
            },
            "disk_bytes_per_chunk_milvus_lite": round(du(milvus.data_dir) / n_chunks),
            "disk_bytes_per_triple_oxigraph": round(du(oxigraph.data_dir) / n_triples, 1),
            "disk_bytes_per_chunk_local_text_vectors": round(
                (du(tmp / "local" / "text") + du(tmp / "local" / "vectors")) / n_chunks
            ),
            "disk_bytes_per_triple_local_graph": round(du(tmp / "local" / "graph") / n_triples, 1),
        }

        rng = np.random.default_rng(11)
        one = frozenset({ulid(0)})
        every = frozenset(data)
        qvec = rng.normal(size=DIM).tolist()
        start = resource_uri(ulid(0))
        sparql = (
            f"PREFIX uko: <{UKO}> SELECT ?s ?p ?o WHERE {{ ?f uko:defines ?s . "
            "?s uko:name ?o BIND(uko:name AS ?p) }"
        )
        cases: list[tuple[str, frozenset[str], Callable[[dict[str, Any], frozenset[str]], Any]]] = [
            (
                "text search 'parseData cache'",
                one,
                lambda b, s: b["text"].search("parseData cache", scope=s),
            ),
            (
                "text search 'parseData cache'",
                every,
                lambda b, s: b["text"].search("parseData cache", scope=s),
            ),
            (
                "vector search top 20",
                one,
                lambda b, s: b["vector"].similarity_search(qvec, scope=s),
            ),
            (
                "vector search top 20",
                every,
                lambda b, s: b["vector"].similarity_search(qvec, scope=s),
            ),
            ("SPARQL 2-pattern join", one, lambda b, s: b["graph"].sparql_query(sparql, scope=s)),
            ("traverse depth 2", one, lambda b, s: b["graph"].traverse(start, depth=2, scope=s)),
        ]
        for name, scope, fn in cases:
            got = {}
            for side, b in (("local", local), ("remote", remote)):
                got[side] = timed(lambda b=b, fn=fn, scope=scope: fn(b, scope), repeats)
            row = {
                "what": name,
                "scope": f"{len(scope)}/{resources} resources",
                "local_p50_ms": round(statistics.median(got["local"]), 3),
                "remote_p50_ms": round(statistics.median(got["remote"]), 3),
                "local_p99_ms": round(pct(got["local"], 0.99), 3),
                "remote_p99_ms": round(pct(got["remote"], 0.99), 3),
            }
            row["p50_ratio"] = round(row["remote_p50_ms"] / row["local_p50_ms"], 2)
            row["p99_ratio"] = round(row["remote_p99_ms"] / row["local_p99_ms"], 2)
            rows.append(row)
        for b in (*local.values(), *remote.values()):
            b.close()
    finally:
        milvus.stop()
        oxigraph.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"corpus: {resources} resources x {chunks} chunks, {extra['triples']} triples, dim {DIM}")
    print(
        "| what | scope | local p50 | remote p50 | p50 ratio | local p99 | remote p99 | p99 ratio |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['what']} | {r['scope']} | {r['local_p50_ms']} ms | {r['remote_p50_ms']} ms | "
            f"{r['p50_ratio']}x | {r['local_p99_ms']} ms | {r['remote_p99_ms']} ms | "
            f"{r['p99_ratio']}x |"
        )
    print(json.dumps(extra, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "costs": extra}, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
