"""SPARQL answers in the SPARQL 1.1 JSON results form: any SELECT (any
variables, aggregates), ASK and CONSTRUCT, through the same sandbox and
limits, never naming a resource outside the scope."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cleveragents.domain.models.acms.backends import Literal
from cleveragents.domain.models.acms.errors import QueryError, QueryLimitError
from cleveragents.domain.models.acms.uko import UKO, file_uri, unit_uri
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend

A = "01JD5TD11B0000000000000000"
B = "01JD5TD11B0000000000000001"
XSD_INT = "http://www.w3.org/2001/XMLSchema#integer"


@pytest.fixture
def graph(tmp_path: Path):  # type: ignore[no-untyped-def]
    g = RdflibGraphBackend(tmp_path, max_rows=50)
    for rid, names in ((A, ["alpha", "beta"]), (B, ["gamma"])):
        f = file_uri(rid, "m.py")
        triples = [(f, UKO + "path", Literal("m.py"))]
        for i, name in enumerate(names):
            sym = unit_uri(rid, "m.py", f"sym={name}")
            triples += [
                (f, UKO + "defines", sym),
                (sym, UKO + "name", Literal(name)),
                (sym, UKO + "line", Literal(str(i + 1), XSD_INT)),
            ]
        g.upsert(rid, triples)
    yield g
    g.close()


def test_select_any_variables_and_aggregates(graph: RdflibGraphBackend) -> None:
    got = graph.sparql_select(
        "SELECT ?name ?line WHERE { ?s uko:name ?name ; uko:line ?line } ORDER BY ?line",
        scope=frozenset({A}),
    )
    assert got["head"] == {"vars": ["name", "line"]}
    assert got["results"]["bindings"] == [
        {"name": {"type": "literal", "value": "alpha"},
         "line": {"type": "literal", "value": "1", "datatype": XSD_INT}},
        {"name": {"type": "literal", "value": "beta"},
         "line": {"type": "literal", "value": "2", "datatype": XSD_INT}},
    ]  # fmt: skip
    count = graph.sparql_select(
        "SELECT (COUNT(*) AS ?n) WHERE { ?s uko:name ?x }", scope=frozenset({A, B})
    )
    assert count["head"]["vars"] == ["n"]
    assert count["results"]["bindings"][0]["n"]["value"] == "3"
    one = graph.sparql_select('SELECT ?s WHERE { ?s uko:name "alpha" }', scope=frozenset({A}))
    assert one["results"]["bindings"] == [
        {"s": {"type": "uri", "value": unit_uri(A, "m.py", "sym=alpha")}}
    ]


def test_ask_construct_and_scope(graph: RdflibGraphBackend) -> None:
    ask = 'ASK { ?s uko:name "gamma" }'
    assert graph.sparql_select(ask, scope=frozenset({A})) == {"head": {}, "boolean": False}
    assert graph.sparql_select(ask, scope=frozenset({B}))["boolean"] is True
    built = graph.sparql_select(
        "CONSTRUCT { ?s uko:label ?n } WHERE { ?s uko:name ?n }", scope=frozenset({B})
    )
    assert built["head"]["vars"] == ["s", "p", "o"]
    assert [r["o"]["value"] for r in built["results"]["bindings"]] == ["gamma"]
    # An IRI constant naming another resource brings nothing of it back.
    other = unit_uri(B, "m.py", "sym=gamma")
    leak = graph.sparql_select(f"SELECT ?n WHERE {{ <{other}> uko:name ?n }}", scope=frozenset({A}))
    assert leak["results"]["bindings"] == []
    bound = graph.sparql_select(
        f"SELECT ?x WHERE {{ BIND(<{other}> AS ?x) }}", scope=frozenset({A})
    )
    assert bound["results"]["bindings"] == []


def test_same_sandbox_and_caps(graph: RdflibGraphBackend) -> None:
    with pytest.raises(QueryError, match="GRAPH"):
        graph.sparql_select("SELECT ?s WHERE { GRAPH ?g { ?s ?p ?o } }", scope=frozenset({A}))
    with pytest.raises(QueryLimitError, match="max_rows"):
        graph.sparql_select("SELECT ?a ?b WHERE { ?a ?p ?x . ?b ?q ?y }", scope=frozenset({A, B}))


def test_cli_sparql_results(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "m.py").write_text("def alpha():\n    return 1\n")
    env = {**os.environ, "ACMS_DATA_DIR": str(tmp_path / "data")}
    env.pop("ACMS_PROFILE", None)

    def acms(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cleveragents.acms", *args],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip

    assert acms("project", "add", "local/p").returncode == 0
    assert acms("resource", "add", str(tmp_path / "p"), "--project", "local/p").returncode == 0
    assert acms("reindex").returncode == 0
    query = "SELECT ?n (COUNT(?s) AS ?c) WHERE { ?s uko:name ?n } GROUP BY ?n"
    done = acms("--json", "sparql", "--results", query, "--project", "local/p")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["head"]["vars"] == ["n", "c"]
    assert answer["results"]["bindings"][0]["n"]["value"] == "alpha"
    human = acms("sparql", "--results", query, "--project", "local/p")
    assert human.stdout.splitlines() == ["n  c", "alpha  1"]
