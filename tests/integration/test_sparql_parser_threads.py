"""Concurrent first SPARQL parses in one process.

pyparsing (rdflib's SPARQL grammar) finds each parse action's arity on its
first use by trial calls on shared state.  Before ``sparql_guard`` serialised
parsing, threads parsing at once in a fresh process left wrappers with wrong
arities, and every later query of that process failed ("malformed SPARQL
query: Param.postParse2() missing 1 required positional argument").  An agent
host's first concurrent requests did exactly that.  The grammar is only cold
in a fresh process, so each round runs in one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_SCRIPT = r"""
import sys, threading
from cleveragents.infrastructure.acms.sparql_guard import check_query
from cleveragents.infrastructure.acms.sparql_worker import _warm_parser

QUERIES = [
    'SELECT ?s ?p ?o WHERE { ?s ?p ?o FILTER(REGEX(?o, "^(a+)+$")) }',
    "SELECT ?s ?p ?o WHERE { ?s ?p ?o }",
    "PREFIX x: <urn:x:> SELECT ?s WHERE { ?s x:p ?o . OPTIONAL { ?s x:q ?v } } ORDER BY ?s",
    'ASK { ?s ?p "a"@en }',
    "CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o FILTER(?o > 3) }",
    "SELECT (COUNT(?s) AS ?n) WHERE { ?s ?p ?o } GROUP BY ?p HAVING (COUNT(?s) > 1)",
    "DESCRIBE ?s WHERE { ?s ?p ?o VALUES ?o { 1 2 3 } }",
    'SELECT ?s WHERE { { ?s ?p ?o } UNION { ?s ?q "x"^^<urn:t> } MINUS { ?s ?r ?z } }',
]
jobs = [check_query] * len(QUERIES) + [None] * 4   # None: the worker's warm-up
barrier = threading.Barrier(len(jobs))
errors = []

def run(i, job):
    barrier.wait()
    try:
        if job is None:
            _warm_parser()
        else:
            job(QUERIES[i], init_ns={})
    except Exception as exc:
        errors.append(f"{i}: {exc}")

threads = [threading.Thread(target=run, args=(i, job)) for i, job in enumerate(jobs)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for i, q in enumerate(QUERIES):   # and every query still parses afterwards
    try:
        check_query(q, init_ns={})
    except Exception as exc:
        errors.append(f"after {i}: {exc}")
sys.stderr.write("\n".join(errors))
sys.exit(1 if errors else 0)
"""


def test_concurrent_first_parses_leave_the_grammar_intact() -> None:
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    for _ in range(3):  # the race lost 5 rounds of 5 before the fix
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
