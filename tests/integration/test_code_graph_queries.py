"""Code-graph questions answered by the real graph store on disk."""

from __future__ import annotations

from pathlib import Path

from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend
from codegraph_repo import REPO, RID, sym, triples_of


def test_who_calls_square_through_sparql_on_the_real_graph_store(tmp_path: Path) -> None:
    graph = RdflibGraphBackend(tmp_path / "graph")
    try:
        for path in REPO:
            graph.upsert(RID, triples_of(path))
        rows = graph.sparql_query(
            """
            SELECT ?caller ?p ?sites WHERE {
              ?def uko:name "square" ; uko:named ?n .
              ?caller uko:calls ?n ; uko:callSites ?sites .
              BIND(uko:callSites AS ?p)
            }
            """,
            scope=frozenset({RID}),
        )
    finally:
        graph.close()
    assert {(s, o) for s, _, o in rows.triples} == {
        (sym("pkg/shapes.py", "Circle.area"), "scale:7;square:7")
    }
