"""The SPARQL sandbox: parse a model-written query and refuse every escape route.

Queries come from a model, so this module is a security boundary.  A query is
accepted only if it parses as a SPARQL *query* (updates are refused) and its
algebra holds none of the forms that reach beyond the graph it is evaluated
against:

- ``SERVICE`` (any endpoint, ``SILENT`` or not, constant or variable): rdflib
  would make an HTTP request and has no switch to stop it;
- ``FROM`` / ``FROM NAMED``: rdflib would load the named IRI, local files
  included (``file:///etc/passwd``);
- ``GRAPH``: names graphs, which a scoped union graph must not expose.

The check walks the whole algebra tree, so the forms are found wherever they
hide (OPTIONAL, UNION, MINUS, FILTER EXISTS, subqueries).  Nothing here
touches rdflib's global state (no ``CUSTOM_EVALS``, no ``SPARQL_LOAD_GRAPHS``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from rdflib.plugins.sparql.algebra import translateQuery
from rdflib.plugins.sparql.parser import parseQuery, parseUpdate
from rdflib.plugins.sparql.parserutils import CompValue
from rdflib.plugins.sparql.sparql import Query

from cleveragents.domain.models.acms.errors import QueryError

__all__ = ["CheckedQuery", "check_query"]

# Algebra node name -> the SPARQL form a refusal names.  ``GraphGraphPattern``
# and ``ServiceGraphPattern``'s untranslated body are parse-tree names that can
# sit inside the algebra; refusing them too costs nothing.
_FORBIDDEN_NODES = {
    "ServiceGraphPattern": "SERVICE",
    "Graph": "GRAPH",
    "GraphGraphPattern": "GRAPH",
    "DatasetClause": "FROM / FROM NAMED",
}

_FORMS = {
    "SelectQuery": "SELECT",
    "ConstructQuery": "CONSTRUCT",
    "DescribeQuery": "DESCRIBE",
    "AskQuery": "ASK",
}

# Modifiers that rdflib stacks above an ORDER BY of the outer query.
_ORDER_WRAPPERS = frozenset({"Slice", "Distinct", "Reduced", "Project"})


@dataclass(frozen=True, slots=True)
class CheckedQuery:
    """A query that passed the sandbox, ready to evaluate.

    ``form`` is ``SELECT``, ``CONSTRUCT``, ``DESCRIBE`` or ``ASK``;
    ``projection`` the projected variable names of a SELECT (empty otherwise),
    for ``SELECT *`` in order of first appearance in the query text;
    ``ordered`` whether the outer query has an ORDER BY.
    """

    prepared: Query
    form: str
    projection: tuple[str, ...]
    ordered: bool


def check_query(query: str, *, init_ns: Mapping[str, str]) -> CheckedQuery:
    """Parse ``query`` and refuse it unless it is a read-only, self-contained query.

    Args:
        query: SPARQL query text.
        init_ns: prefixes made available without a PREFIX declaration.

    Returns:
        The prepared query with its form.

    Raises:
        QueryError: the query does not parse, is an update, or uses SERVICE,
            FROM, FROM NAMED or GRAPH.
    """
    try:
        parsed = parseQuery(query)
        prepared = translateQuery(parsed, None, dict(init_ns))
    except Exception as exc:
        if _is_update(query):
            raise QueryError(
                "SPARQL updates (INSERT, DELETE, LOAD, CLEAR, DROP, ...) are refused: "
                "the graph is read-only"
            ) from exc
        raise QueryError(f"malformed SPARQL query: {exc}") from exc

    algebra = prepared.algebra
    if dict.get(algebra, "datasetClause"):
        raise QueryError("SPARQL FROM / FROM NAMED (dataset clauses) are refused")
    _refuse_forbidden_nodes(algebra)

    form = _FORMS.get(algebra.name)
    if form is None:  # pragma: no cover - the query grammar has only four forms
        raise QueryError(f"unsupported SPARQL query form: {algebra.name}")
    projection: tuple[str, ...] = ()
    if form == "SELECT":
        projection = tuple(str(var) for var in dict.get(algebra, "PV") or ())
        if dict.get(parsed[1], "projection") is None:
            # SELECT *: rdflib lists the variables in set order, which is
            # arbitrary; read them in the order they first appear instead.
            projection = tuple(sorted(projection, key=lambda name: (_first_use(query, name), name)))
    return CheckedQuery(
        prepared=prepared, form=form, projection=projection, ordered=_is_ordered(algebra)
    )


def _first_use(query: str, name: str) -> int:
    m = re.search(rf"[?$]{re.escape(name)}(?!\w)", query)
    return len(query) if m is None else m.start()


def _is_update(query: str) -> bool:
    try:
        parseUpdate(query)
    except Exception:
        return False
    return True


def _refuse_forbidden_nodes(root: CompValue) -> None:
    # Iterative, so a deeply nested query cannot exhaust the Python stack here.
    # ``dict.values`` reads raw values: CompValue.__getitem__ would resolve
    # them against an evaluation context.
    stack: list[object] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, CompValue):
            form = _FORBIDDEN_NODES.get(node.name)
            if form is not None:
                raise QueryError(f"SPARQL {form} is refused: queries see only the scoped graph")
            stack.extend(dict.values(node))
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list | tuple | set | frozenset):
            stack.extend(node)


def _is_ordered(algebra: CompValue) -> bool:
    node = dict.get(algebra, "p")
    while isinstance(node, CompValue) and node.name in _ORDER_WRAPPERS:
        node = dict.get(node, "p")
    return isinstance(node, CompValue) and node.name == "OrderBy"
