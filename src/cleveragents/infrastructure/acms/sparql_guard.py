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
changes what rdflib does for other callers (no ``CUSTOM_EVALS``, no
``SPARQL_LOAD_GRAPHS``).

Bounded cost.  A query longer than :data:`MAX_QUERY_BYTES` is refused before
any parsing (:func:`check_query_size`), and the rdflib backend parses only in
its killable worker (:mod:`.sparql_worker`).  rdflib's algebra translation
re-sorts a basic graph pattern once per triple, quadratic in its length (a
4,000-item object list took 42 s); while :func:`check_query` runs, patterns
longer than :data:`_EXACT_REORDER_MAX` are ordered with one sort by rdflib's
own first-step key instead.  The swap is guarded by a context variable, so
other rdflib users in the process, and other threads, keep rdflib's order.

Engine warnings.  rdflib logs a warning *with a traceback* when a literal's
lexical form does not fit its datatype (``"abc"^^xsd:integer``, a malformed
``rdf:XMLLiteral``); unconfigured, Python prints it with install paths on
stderr.  Importing this module attaches a filter to the ``rdflib.term``
logger alone that drops the traceback and lowers such records to DEBUG; no
other logger of the host is touched.
"""

from __future__ import annotations

import contextvars
import logging
import os
import re
import sys
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import rdflib.plugins.sparql.algebra as rdflib_algebra
from rdflib import BNode, Literal, Variable
from rdflib.plugins.sparql.algebra import translateQuery
from rdflib.plugins.sparql.parser import parseQuery, parseUpdate
from rdflib.plugins.sparql.parserutils import CompValue
from rdflib.plugins.sparql.sparql import Query

from cleveragents.domain.models.acms.errors import QueryError

__all__ = [
    "MAX_QUERY_BYTES",
    "CheckedQuery",
    "check_query",
    "check_query_size",
    "parser_lock",
]

# rdflib's SPARQL grammar is pyparsing, which is not thread-safe: each parse
# action finds its arity on first use by trial calls on shared state, and
# two threads parsing at once can leave a wrapper with a wrong arity for the
# rest of the process (every later query then fails "missing 1 required
# positional argument"); the packrat cache is shared too.  Every parse in a
# process goes through this lock.  A fork holds it (``parser_lock``) so that
# no child starts with a grammar caught mid-parse; the child gets a new lock.
_PARSER_LOCK = threading.Lock()


def parser_lock() -> threading.Lock:
    """The lock every SPARQL parse of this process holds (take it around ``fork``)."""
    return _PARSER_LOCK


def _new_parser_lock() -> None:
    global _PARSER_LOCK
    _PARSER_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_parser_lock)

# The longest query text accepted, in UTF-8 bytes.  Every query shape the
# issue names as legitimate fits (1,000 UNION branches ~47 KB, a 4,000-item
# object list ~31 KB, a 1,000-term FILTER(a||b||...) ~19 KB); rdflib's parser
# reads 15-45 KB/s on this machine kind, so 128 KiB parses in a few seconds,
# inside the default 10 s limit.  A 2 MB VALUES block would need ~45 s to
# parse: it could never be answered in time, so it is refused by size, at once
# and with a message that says why, rather than by the clock.
MAX_QUERY_BYTES = 128 * 1024

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

# Only a text holding one of these words can parse as an update.
_UPDATE_WORD = re.compile(r"\b(?:INSERT|DELETE|LOAD|CLEAR|DROP|CREATE|ADD|MOVE|COPY|WITH)\b", re.I)
# A variable: ? or $ and a name (SPARQL VARNAME characters).
_VARIABLE = re.compile(r"[?$]([\w\u00b7\u0300-\u036f\u203f\u2040]+)")
# Error text kept from the parser: enough to locate the fault, never the query.
_MESSAGE_CHARS = 500


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


def check_query_size(query: str) -> None:
    """Refuse a query text longer than :data:`MAX_QUERY_BYTES` (UTF-8), without parsing it.

    Raises:
        QueryError: the text is over the cap.
    """
    # Characters first: a huge text is refused without encoding it.
    if len(query) > MAX_QUERY_BYTES or (
        len(query) * 4 > MAX_QUERY_BYTES
        and len(query.encode("utf-8", "surrogatepass")) > MAX_QUERY_BYTES
    ):
        raise QueryError(
            f"the SPARQL query is longer than {MAX_QUERY_BYTES} bytes (the query size cap, "
            "MAX_QUERY_BYTES); shorten it or split it into several queries"
        )


def check_query(query: str, *, init_ns: Mapping[str, str]) -> CheckedQuery:
    """Parse ``query`` and refuse it unless it is a read-only, self-contained query.

    Parsing runs in the calling thread: bounded in size here, but only a
    killable process bounds its time (the rdflib backend calls this in its
    worker; see :mod:`.sparql_worker`).

    Args:
        query: SPARQL query text.
        init_ns: prefixes made available without a PREFIX declaration.

    Returns:
        The prepared query with its form.

    Raises:
        QueryError: the query is over :data:`MAX_QUERY_BYTES`, does not parse,
            nests deeper than the recursion limit, is an update, or uses
            SERVICE, FROM, FROM NAMED or GRAPH.
    """
    check_query_size(query)
    try:
        with _linear_pattern_order():
            with _PARSER_LOCK:
                parsed = parseQuery(query)
            prepared = translateQuery(parsed, None, dict(init_ns))
    except RecursionError as exc:
        raise QueryError(
            "the SPARQL query nests too deeply to be read (the interpreter's recursion "
            "limit); flatten it"
        ) from exc
    except Exception as exc:
        if _UPDATE_WORD.search(query) and _is_update(query):
            raise QueryError(
                "SPARQL updates (INSERT, DELETE, LOAD, CLEAR, DROP, ...) are refused: "
                "the graph is read-only"
            ) from exc
        raise QueryError(f"malformed SPARQL query: {str(exc)[:_MESSAGE_CHARS]}") from exc

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
            first = _first_uses(query)
            end = len(query)
            projection = tuple(sorted(projection, key=lambda name: (first.get(name, end), name)))
    return CheckedQuery(
        prepared=prepared, form=form, projection=projection, ordered=_is_ordered(algebra)
    )


def _first_uses(query: str) -> dict[str, int]:
    """Each variable name's first position in the text, in one pass."""
    first: dict[str, int] = {}
    for m in _VARIABLE.finditer(query):
        first.setdefault(m.group(1), m.start())
    return first


def _is_update(query: str) -> bool:
    try:
        with _PARSER_LOCK:
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
            if node.name == "Slice":
                for clause, key in (("OFFSET", "start"), ("LIMIT", "length")):
                    value = dict.get(node, key)
                    if isinstance(value, int) and value > sys.maxsize:
                        raise QueryError(
                            f"SPARQL {clause} {value} is too large (at most {sys.maxsize})"
                        )
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


# ---------------------------------------------------------------- pattern order

# Patterns up to this length keep rdflib's exact (quadratic) greedy order.
_EXACT_REORDER_MAX = 64
_LINEAR_ORDER: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "cleveragents_sparql_linear_order", default=False
)
_Triple = tuple[Any, Any, Any]


@contextmanager
def _linear_pattern_order() -> Iterator[None]:
    token = _LINEAR_ORDER.set(True)
    try:
        yield
    finally:
        _LINEAR_ORDER.reset(token)


def _one_sort(patterns: list[_Triple]) -> list[_Triple]:
    """rdflib's first ordering step alone: fewest free variables, most shared, literals last."""
    counts: defaultdict[Any, int] = defaultdict(int)
    for pattern in patterns:
        for term in pattern:
            if isinstance(term, Variable | BNode):
                counts[term] += 1

    def key(pattern: _Triple) -> tuple[int, int, bool]:
        free = sum(1 for term in pattern if isinstance(term, Variable | BNode))
        return (
            free,
            -sum(counts.get(term, 0) for term in pattern),
            not isinstance(pattern[2], Literal),
        )

    return sorted(patterns, key=key)


def _install_pattern_order() -> None:
    """Wrap rdflib's ``reorderTriples``/``triples`` once; the wrappers defer to
    rdflib's own unless :func:`_linear_pattern_order` is active."""
    if getattr(rdflib_algebra.reorderTriples, "_cleveragents", False):
        return
    exact_reorder = rdflib_algebra.reorderTriples
    exact_triples = rdflib_algebra.triples
    exact_add_vars = rdflib_algebra._addVars

    def reorder(patterns: Iterable[_Triple]) -> list[_Triple]:
        if not _LINEAR_ORDER.get():
            return exact_reorder(patterns)
        listed = list(patterns)
        if len(listed) <= _EXACT_REORDER_MAX:
            return exact_reorder(listed)
        return _one_sort(listed)

    def triples(blocks: list[list[Any]]) -> list[_Triple]:
        if not _LINEAR_ORDER.get():
            return exact_triples(blocks)
        # rdflib concatenates the blocks pairwise (quadratic in their number).
        flat = [term for block in blocks for term in block]
        if len(flat) % 3:
            raise ValueError("a triples block does not hold whole triples")
        return reorder(tuple(flat[i : i + 3]) for i in range(0, len(flat), 3))

    def add_vars(node: object, children: list[set[Any]]) -> set[Any]:
        if not _LINEAR_ORDER.get():
            found: set[Any] = exact_add_vars(node, children)
            return found
        return _add_vars(node, children)

    reorder._cleveragents = True  # type: ignore[attr-defined]
    # rdflib's annotations name its term classes; the wrappers take any term.
    rdflib_algebra.reorderTriples = reorder  # type: ignore[assignment]
    rdflib_algebra.triples = triples  # type: ignore[assignment]
    rdflib_algebra._addVars = add_vars  # type: ignore[assignment]


def _union(sets: Iterable[set[Any]]) -> set[Any]:
    out: set[Any] = set()
    for one in sets:
        out.update(one)
    return out


def _add_vars(node: object, children: list[set[Any]]) -> set[Any]:
    """rdflib's ``_addVars`` with one growing set instead of a fold of copies
    (quadratic in the number of children)."""
    if isinstance(node, Variable):
        return {node}
    if not isinstance(node, CompValue):
        return _union(children)
    if node.name == "RelationalExpression":
        node["_vars"] = set()
    elif node.name == "Extend":
        # rdflib's own pairing of children and keys; the BIND expression's
        # variables are not bound by it.
        node["_vars"] = _union(c for c, part in zip(children, node, strict=False) if part != "expr")
    else:
        node["_vars"] = _union(children)
        if node.name == "SubSelect":
            projection = node.projection
            return {v.var or v.evar for v in projection} if projection else set()
    found: set[Any] = node["_vars"]
    return found


_install_pattern_order()


# ---------------------------------------------------------------- engine warnings


class _EngineWarningFilter(logging.Filter):
    """Drop the traceback of an rdflib term warning and lower it to DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        if record.levelno > logging.DEBUG:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def _contain_engine_warnings() -> None:
    logger = logging.getLogger("rdflib.term")
    if not any(isinstance(f, _EngineWarningFilter) for f in logger.filters):
        logger.addFilter(_EngineWarningFilter())


_contain_engine_warnings()
