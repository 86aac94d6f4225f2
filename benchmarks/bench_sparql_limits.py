"""What bounding SPARQL costs and saves, in one run (issue 9, findings 2 and 3).

Not a test.  Each row is a median next to a reference measured in the same
process on the same data; read the ratio (these machines are shared and noisy).

    python benchmarks/bench_sparql_limits.py [--repeat N] [--json out.json]

Rows:
- check_object_list_N: ``sparql_guard.check_query`` (linear pattern order)
  vs rdflib's own ``parseQuery`` + ``translateQuery`` on the issue's object
  list shape (``?s ?p ?v0, ?v1, ...``), which re-sorts once per pattern.
- plain_query: one small SELECT through ``RdflibGraphBackend.sparql_query``
  (size check, fork, parse in the worker, big-stack thread, decode) vs the same
  query prepared and evaluated by rdflib in-process (no isolation at all).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rdflib import Graph, URIRef
from rdflib.plugins.sparql.algebra import translateQuery
from rdflib.plugins.sparql.evaluate import evalQuery
from rdflib.plugins.sparql.parser import parseQuery
from ulid import ULID

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cleveragents.domain.models.acms.uko import file_uri
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend
from cleveragents.infrastructure.acms.sparql_guard import check_query


def _median(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _object_list(n: int) -> str:
    return "SELECT ?s ?p ?v0 WHERE { ?s ?p " + ", ".join(f"?v{i}" for i in range(n)) + " }"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows: dict[str, dict[str, float]] = {}

    for n in (500, 1000, 2000):
        query = _object_list(n)
        ours = _median(lambda q=query: check_query(q, init_ns={}), args.repeat)
        rdflib_own = _median(lambda q=query: translateQuery(parseQuery(q)), args.repeat)
        rows[f"check_object_list_{n}"] = {
            "ours_s": ours,
            "rdflib_s": rdflib_own,
            "ratio": ours / rdflib_own,
        }

    rid = str(ULID())
    triples = [(file_uri(rid, f"f{i}"), "urn:p", file_uri(rid, f"f{i + 1}")) for i in range(200)]
    plain = "SELECT ?s ?p ?o WHERE { ?s <urn:p> ?o BIND(<urn:p> AS ?p) } LIMIT 50"
    with tempfile.TemporaryDirectory() as tmp:
        backend = RdflibGraphBackend(Path(tmp) / "g")
        backend.upsert(rid, triples)
        scope = frozenset({rid})
        backend.sparql_query(plain, scope=scope)  # union built and cached
        graph = Graph()
        for s, p, o in triples:
            graph.add((URIRef(s), URIRef(p), URIRef(o)))

        def in_process() -> object:
            return list(evalQuery(graph, translateQuery(parseQuery(plain)), {}, None)["bindings"])

        repeat = max(20, args.repeat * 10)
        ours = _median(lambda: backend.sparql_query(plain, scope=scope), repeat)
        reference = _median(in_process, repeat)
        backend.close()
    rows["plain_query"] = {"ours_s": ours, "rdflib_s": reference, "ratio": ours / reference}

    for name, row in rows.items():
        ours_ms, rdflib_ms = row["ours_s"] * 1000, row["rdflib_s"] * 1000
        print(
            f"{name:24} ours {ours_ms:9.1f} ms   rdflib {rdflib_ms:9.1f} ms"
            f"   ratio {row['ratio']:.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
