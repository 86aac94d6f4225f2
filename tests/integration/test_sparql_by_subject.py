"""SPARQL over graphs read by subject (not loaded), with loading as the fallback.

Oracle: the same query over the same files by a backend that loaded every
graph (the path every SPARQL query took before).  A query whose patterns
all bind a subject, an IRI object, or a literal object along ``uko:name``
or ``uko:path`` must answer from the subject indexes alone (nothing
loaded); one with a pattern by predicate alone, or of every triple, must
fall back to loading (when the data makes it ask such a pattern) and
answer the same.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cleveragents.domain.models.acms.backends import Literal
from cleveragents.domain.models.acms.uko import UKO, file_uri
from cleveragents.infrastructure.acms import graph_store
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend

RIDS = ["01J0000000000000000000000A", "01J0000000000000000000000B"]
SHARED = "http://x/shared"  # a subject outside uko: in both resources
LIB = "http://x/lib"
P = f"PREFIX uko: <{UKO}>\n"


def _subjects(rid: str) -> list[str]:
    return [file_uri(rid, f"m{i}.py") for i in range(3)] + [SHARED]


def _triples(rid: str) -> st.SearchStrategy[list[tuple[str, str, object]]]:
    objects = st.sampled_from([*_subjects(rid)[:2], LIB, Literal("1"), Literal("a")])
    predicates = st.sampled_from([UKO + "calls", UKO + "defines", UKO + "line", UKO + "name"])
    return st.lists(st.tuples(st.sampled_from(_subjects(rid)), predicates, objects), max_size=8)


S0 = file_uri(RIDS[0], "m0.py")
# (query, answered by subject alone)
QUERIES = [
    (P + f"SELECT ?s ?p ?o WHERE {{ ?s uko:calls <{LIB}> . ?s ?p ?o }}", True),
    (P + f"SELECT ?s ?p ?o WHERE {{ ?s ?p <{S0}> . BIND(<{S0}> AS ?o) }}", True),
    (P + f"SELECT ?s ?p ?o WHERE {{ <{SHARED}> ?p ?o . BIND(<{SHARED}> AS ?s) }}", True),
    (P + f"ASK {{ ?s uko:defines <{LIB}> }}", True),
    (P + f"DESCRIBE <{S0}>", True),
    (
        P + f"SELECT ?s ?p ?o WHERE {{ ?s ?p <{LIB}> FILTER EXISTS {{ ?s uko:line ?l }} "
        "BIND(1 AS ?unused) }",
        True,
    ),
    # A literal object along a predicate whose literals the index keys.
    (P + 'SELECT ?s ?p ?o WHERE { ?s uko:name "a" . ?s ?p ?o }', True),
    (P + 'ASK { ?s uko:name "1" . ?s uko:calls ?o }', True),
    # Along one it does not key (line numbers): a load.
    (P + 'SELECT ?s ?p ?o WHERE { ?s uko:line "1" . ?s ?p ?o }', False),
    (P + "SELECT ?s ?p ?o WHERE { ?s ?p ?o }", False),
    (P + "CONSTRUCT { ?s ?p ?o } WHERE { ?s uko:calls ?o . ?s ?p ?o }", False),
    (
        P + f'SELECT ?s ?p ?o WHERE {{ ?s ?p <{LIB}> FILTER NOT EXISTS {{ ?x uko:line "a" }} }}',
        False,
    ),
]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 1), _triples(RIDS[0]), _triples(RIDS[1])), max_size=4))
# The same triple of a subject outside uko: in both resources: given once.
@example([(1, [(SHARED, UKO + "calls", LIB)], [(SHARED, UKO + "calls", LIB)])])
def test_sparql_by_subject_answers_as_over_loaded_graphs(
    writes: list[tuple[int, list[tuple[str, str, object]], list[tuple[str, str, object]]]],
) -> None:
    scope = frozenset(RIDS)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with RdflibGraphBackend(root) as writer:
            for i, a, b in writes:  # several records per file
                if i:
                    writer.upsert(RIDS[0], a)
                    writer.upsert(RIDS[1], b)
                else:
                    writer.upsert(RIDS[0], a, delete_subjects=[SHARED])
        with RdflibGraphBackend(root) as whole:
            for rid in RIDS:
                whole.subjects(rid)  # loaded
            for query, selective in QUERIES:
                with RdflibGraphBackend(root) as fresh:
                    expected = whole.sparql_query(query, scope=scope)
                    assert fresh.sparql_query(query, scope=scope) == expected, query
                    if selective:
                        assert fresh.loaded_resource_ids() == set(), query
                with RdflibGraphBackend(root) as fresh:
                    got = fresh.sparql_select(query, scope=scope)
                    assert got == whole.sparql_select(query, scope=scope), query


def test_a_query_by_predicate_alone_loads_and_answers(tmp_path: Path) -> None:
    with RdflibGraphBackend(tmp_path) as writer:
        writer.upsert(RIDS[0], [(S0, UKO + "line", Literal("1")), (S0, UKO + "calls", LIB)])
    scope = frozenset(RIDS[:1])
    with RdflibGraphBackend(tmp_path) as fresh:
        by_subject = fresh.sparql_query(QUERIES[0][0], scope=scope)
        assert by_subject.triples and fresh.loaded_resource_ids() == set()
        scan = fresh.sparql_query(
            P + "SELECT ?s ?p ?o WHERE { ?s uko:line ?l . ?s ?p ?o }", scope=scope
        )
        assert fresh.loaded_resource_ids() == {RIDS[0]}
    assert sorted(scan.triples) == sorted([(S0, UKO + "line", "1"), (S0, UKO + "calls", LIB)])


def test_loading_between_the_two_tries_is_not_counted_in_the_time_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query by predicate tries by subject, then loads in this process
    (not interruptible) and runs again: the time limit counts the workers,
    as it did when every query loaded first."""
    with RdflibGraphBackend(tmp_path) as writer:
        writer.upsert(RIDS[0], [(S0, UKO + "line", Literal("1"))])
    union = RdflibGraphBackend._union

    def slow_load(self: RdflibGraphBackend, scope: frozenset[str]) -> object:
        time.sleep(1.5)  # a load longer than the whole time limit
        return union(self, scope)

    monkeypatch.setattr(RdflibGraphBackend, "_union", slow_load)
    with RdflibGraphBackend(tmp_path, query_timeout=1.0) as fresh:
        got = fresh.sparql_query(
            P + "SELECT ?s ?p ?o WHERE { ?s uko:line ?o . BIND(uko:line AS ?p) }",
            scope=frozenset(RIDS[:1]),
        )
    assert got.triples == [(S0, UKO + "line", "1")]


NO_STDIO = """
import json, os, sys
from pathlib import Path
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend
root, rid, query, out = sys.argv[1:5]
for fd in (0, 1, 2):
    os.close(fd)
with RdflibGraphBackend(Path(root)) as fresh:
    try:
        got = fresh.sparql_query(query, scope=frozenset({rid})).triples
        loaded = sorted(fresh.loaded_resource_ids())
    except Exception as exc:
        got, loaded = repr(exc), []
Path(out).write_text(json.dumps([got, loaded]))
"""


def test_a_process_without_stdio_reads_by_subject(tmp_path: Path) -> None:
    """Graph file descriptors a SPARQL worker keeps are never 0-2, which the
    worker points at /dev/null (a host process may have closed its stdio)."""
    with RdflibGraphBackend(tmp_path) as writer:  # two records
        writer.upsert(RIDS[0], [(S0, UKO + "line", Literal("1"))])
        writer.upsert(RIDS[0], [(S0, UKO + "calls", LIB)])
    out = tmp_path / "out.json"
    query = P + f"SELECT ?s ?p ?o WHERE {{ <{S0}> ?p ?o . BIND(<{S0}> AS ?s) }}"
    subprocess.run(
        [sys.executable, "-c", NO_STDIO, str(tmp_path), RIDS[0], query, str(out)],
        check=True,
        timeout=120,
    )
    got, loaded = json.loads(out.read_text())
    assert sorted(map(tuple, got)) == [(S0, UKO + "calls", LIB), (S0, UKO + "line", "1")]
    assert loaded == []


def test_a_damaged_record_read_by_subject_answers_as_a_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record the subject index names fails its CRC in the worker: the
    query loads, and answers as a load does (the graph ends at the damaged
    record), never as a query error."""
    monkeypatch.setattr(graph_store, "INDEX_TAIL_SHARE", 1 << 40)  # index every write
    monkeypatch.setattr(graph_store, "INDEX_MIN_TAIL", 0)
    with RdflibGraphBackend(tmp_path) as writer:
        writer.upsert(RIDS[0], [(S0, UKO + "line", Literal("1"))])
        writer.upsert(RIDS[0], [(S0, UKO + "calls", LIB)])
    path = tmp_path / "graphs" / f"{RIDS[0]}.graph"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the last record's payload: same size, bad CRC
    path.write_bytes(bytes(data))
    query = P + f"SELECT ?s ?p ?o WHERE {{ <{S0}> ?p ?o . BIND(<{S0}> AS ?s) }}"
    scope = frozenset(RIDS[:1])
    with RdflibGraphBackend(tmp_path) as whole:
        whole.subjects(RIDS[0])
        expected = whole.sparql_query(query, scope=scope)
    with RdflibGraphBackend(tmp_path) as fresh:
        assert fresh.sparql_query(query, scope=scope) == expected
    assert expected.triples == [(S0, UKO + "line", "1")]
