"""``GraphIndex`` over any SPARQL 1.1 endpoint (Oxigraph server, Fuseki,
GraphDB, Virtuoso, Neptune): the Protocol for queries and updates, the Graph
Store Protocol for bulk writes.

One named graph per resource, named ``uko://<ULID>``.

Reading a model-written query:

1. :func:`~.sparql_guard.check_query` parses it here first and refuses
   updates, ``SERVICE``, ``GRAPH``, ``FROM`` and ``FROM NAMED``.  ``SERVICE``
   would make the *server* fetch a URL of the query's choosing (an SSRF hole
   no endpoint setting reliably closes), so it never leaves this process.
2. The query is POSTed with the in-scope graphs as ``default-graph-uri`` (the
   default graph is their merge) and ``named-graph-uri``; an empty scope
   names one graph nothing ever writes (``urn:acms:no-graph``), never none
   (none would mean the server's own default graph).
3. The answer is read under a deadline and a byte cap
   (:mod:`.sparql_endpoint_http`), counted against ``max_rows``, and triples
   naming an out-of-scope resource (only IRI constants in the query can make
   them) are dropped, as the rdflib adapter does.

``get_triples`` and ``traverse`` are SPARQL of our own, with ``LIMIT``
``max_rows + 1`` per request; ``traverse`` asks one query per hop for the
whole frontier (``VALUES``), in batches.

Writes: additions alone are one Graph Store ``POST`` of N-Triples; a change
that also deletes is one SPARQL Update request (``DELETE WHERE`` by subject,
``DELETE DATA``, ``INSERT DATA``), which Oxigraph applies in one transaction;
a whole resource is one ``DROP SILENT GRAPH`` (SPARQL Update).  Not a
Graph Store ``DELETE``: its 404 means "no such graph" and also "no such
endpoint", so a mistyped store URL would make every prune a silent no-op;
only a 2xx answer is a success here (:mod:`.sparql_endpoint_http`).

An empty answer is checked, when the owner gives ``expected`` (the remote
profile: the catalog's count of a resource's graph subjects): an endpoint
that lost its data (an in-memory server restarted, a dataset wiped, URLs
naming another dataset) would otherwise answer every walk and query with
nothing and exit 0.  One ``SELECT`` asks which in-scope graphs hold no
triple; a resource among them that the catalog says has subjects is an
:class:`IndexUnavailableError` naming the endpoint and ``acms reindex`` (a
session that finds its resource's graph lost writes it again).
Graphs found present (or rightly empty) are not asked about again for
``_CONFIRMED_FOR`` seconds, so the session calls that make many small
lookups (``callers``: a walk per candidate) pay one round trip, not one
per empty lookup.  A non-empty answer is checked too when its scope holds
more than one resource (the others may have given it alone: a count, or
rows of one resource, answered without the lost one exit 0); over one
resource it costs nothing.

Literals are kept as the server returns them: Oxigraph stores typed literals
by value, so ``"010"^^xsd:integer`` reads back as ``"10"`` (the rdflib
adapter keeps ``"010"``).
"""

from __future__ import annotations

import functools
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from cleveragents._logging import get_logger
from cleveragents.domain.models.acms.backends import (
    GraphResult,
    Literal,
    Triple,
    WriteTriple,
    validate_depth,
    validate_non_empty,
    validate_positive_int,
    validate_traversal,
    walk_limit_error,
)
from cleveragents.domain.models.acms.errors import (
    IndexUnavailableError,
    QueryError,
    QueryLimitError,
    QueryTimeoutError,
)
from cleveragents.domain.models.acms.uko import UKO, resource_id_of, resource_uri
from cleveragents.domain.models.acms.ulids import canonical_ulid, validate_scope
from cleveragents.infrastructure.acms.sparql_endpoint_http import BoundedHttp
from cleveragents.infrastructure.acms.sparql_guard import check_query

__all__ = ["NO_GRAPH", "SparqlEndpointGraphBackend", "lost_graph_error"]

_log = get_logger("cleveragents.acms.sparql_endpoint")

# The prefixes a query may use undeclared, as with the rdflib adapter.
_INIT_NS = {"uko": UKO}
_PROLOGUE_NS = {
    "uko": UKO,
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
    "xsd": "http://www.w3.org/2001/XMLSchema#",
    "owl": "http://www.w3.org/2002/07/owl#",
}
# A SPARQL code point escape (``\\u0022``, ``\\U0001F600``), anywhere in a query.
_CODEPOINT_ESCAPE = re.compile(r"\\[uU][0-9A-Fa-f]{4}")
_PROLOGUE = "".join(f"PREFIX {p}: <{iri}>\n" for p, iri in _PROLOGUE_NS.items())

NO_GRAPH = "urn:acms:no-graph"
_RESULTS_JSON = "application/sparql-results+json"
_N_TRIPLES = "application/n-triples"
_INTERNAL_MAX_BYTES = 1 << 30
_VALUES_BATCH = 200
# Seconds an in-scope graph found present (or rightly empty) is not asked
# about again by the empty-answer check.
_CONFIRMED_FOR = 5.0

# An absolute IRI that N-Triples and SPARQL can hold verbatim.
_IRI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\x00-\x20\x7f<>\"{}|^`\\\ud800-\udfff]*")
_ESCAPE_RE = re.compile(r"[\\\"\x00-\x1f\x7f]")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NT_TERM = r'(<[^<>"\s]*>|_:\S+|"(?:[^"\\]|\\.)*"(?:\^\^<[^<>"\s]*>|@[A-Za-z0-9\-]+)?)'
_NT_LINE = re.compile(rf"{_NT_TERM}\s+{_NT_TERM}\s+{_NT_TERM}\s*\.")
_UNESCAPE_RE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))", re.DOTALL)
_UNESCAPES = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}


def _escape(value: str) -> str:
    return _ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(), f"\\u{ord(m.group()):04X}"), value)


def _unescape(m: re.Match[str]) -> str:
    code = m.group(1) or m.group(2)
    if code is not None:
        return chr(int(code, 16))
    return _UNESCAPES.get(m.group(3), m.group(3))


def _nt_term(term: str) -> str:
    """The ``str`` form of an N-Triples term: IRI, ``_:id`` or lexical form."""
    if term.startswith("<"):
        iri = term[1:-1]
        return _UNESCAPE_RE.sub(_unescape, iri) if "\\" in iri else iri
    if term.startswith("_:"):
        return term
    lexical = term[1 : term.rindex('"')]
    return _UNESCAPE_RE.sub(_unescape, lexical) if "\\" in lexical else lexical


def _json_term(binding: dict[str, str]) -> str:
    if binding.get("type") == "bnode":
        return "_:" + binding["value"]
    return binding["value"]


def _in_scope(triple: Triple, scope: frozenset[str]) -> bool:
    # The rule ScopedView applies: any term naming a resource names one in scope.
    for term in triple:
        rid = resource_id_of(term)
        if rid is not None and rid not in scope:
            return False
    return True


class _RowCapError(QueryLimitError):
    """One query's answer held more than ``max_rows`` triples (not the byte
    cap, not the time limit): a walk reports it as its own limit."""


def _graph_of(rid: str) -> str:
    return resource_uri(rid)


def lost_graph_error(query_url: str, resource_id: str, subjects: int) -> IndexUnavailableError:
    """The error of an endpoint holding no triple of a resource whose graph
    the catalog records ``subjects`` subjects of (scheme, host and path only:
    a query string may hold a key)."""
    from cleveragents.infrastructure.acms.milvus_common import redact_userinfo

    where = redact_userinfo(query_url.partition("?")[0].partition("#")[0])
    return IndexUnavailableError(
        f"the SPARQL endpoint {where} holds no triple of resource {resource_id}, "
        f"while the catalog records {subjects} graph subjects (the endpoint lost its "
        "data, or ACMS_SPARQL_* name another dataset): run `acms reindex` to "
        "write the remote indexes again"
    )


def _validate_timeout(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not 0 < value < math.inf:
        raise ValueError(f"{name} must be positive and finite, got {value}")
    return float(value)


def _validate_url(value: object, name: str) -> str:
    url = validate_non_empty(value, name)
    if not re.match(r"https?://", url):
        raise ValueError(f"{name} must be an http(s) URL")
    # httpx logs every request's URL: credentials go in user / password.
    if re.match(r"https?://[^/?#]*@", url):
        raise ValueError(f"{name} must not hold credentials; give user and password")
    return url


class SparqlEndpointGraphBackend:
    """A :class:`~cleveragents.domain.models.acms.backends.GraphIndex` on a SPARQL endpoint.

    Args:
        query_url: the SPARQL 1.1 query endpoint (Oxigraph: ``/query``).
        update_url: the SPARQL 1.1 update endpoint (Oxigraph: ``/update``).
        store_url: the Graph Store Protocol endpoint (Oxigraph: ``/store``).
        user / password: HTTP basic credentials, both or neither; never logged.
        timeout: seconds a read (query, traversal hop, listing) may take.
        write_timeout: seconds a write may take.
        max_response_bytes: the largest answer a caller's query may return.
        max_rows: the most triples a query, ``get_triples`` or ``traverse``
            may give; more is a :class:`QueryLimitError`, never a truncation.
        expected: ``expected(rid, still_missing)``: a resource's graph
            subjects as its owner's records (the catalog) count them, asked
            when the endpoint was found to hold none of its graph; 0 when a
            write under way explains it (``still_missing()`` asks the
            endpoint again).  Given, an empty scoped answer is checked
            against it (see the module docstring).

    Raises:
        TypeError / ValueError: invalid arguments, a URL with user info.
    """

    def __init__(
        self,
        query_url: str,
        *,
        update_url: str,
        store_url: str,
        user: str | None = None,
        password: str | None = None,
        timeout: float = 10.0,
        write_timeout: float = 120.0,
        max_response_bytes: int = 16 << 20,
        max_rows: int = 10_000,
        expected: Callable[[str, Callable[[], bool]], int] | None = None,
    ) -> None:
        self._query_url = _validate_url(query_url, "query_url")
        self._update_url = _validate_url(update_url, "update_url")
        self._store_url = _validate_url(store_url, "store_url")
        self._timeout = _validate_timeout(timeout, "timeout")
        self._write_timeout = _validate_timeout(write_timeout, "write_timeout")
        self._max_bytes = validate_positive_int(max_response_bytes, "max_response_bytes")
        self._max_rows = validate_positive_int(max_rows, "max_rows")
        self._http = BoundedHttp(timeout=self._timeout, user=user, password=password)
        self._closed = False
        self._expected = expected
        # Resource -> when the empty-answer check last found its graph sound.
        self._confirmed: dict[str, float] = {}
        self._confirmed_lock = threading.Lock()

    def close(self) -> None:
        """Close the HTTP client; later calls raise IndexUnavailableError."""
        if not self._closed:
            self._closed = True
            self._http.close()

    # ------------------------------------------------------------ read side

    def sparql_query(self, query: str, *, scope: frozenset[str]) -> GraphResult:
        """Evaluate a sandboxed SPARQL query on the endpoint over the in-scope graphs.

        CONSTRUCT/DESCRIBE give their triples (sorted, distinct); SELECT must
        project exactly three variables, read as (s, p, o), rows with an
        unbound one skipped, the server's order kept only under an outer
        ORDER BY (else sorted); ASK gives ``metadata["boolean"]``.

        Raises:
            TypeError / ValueError: empty query or invalid scope.
            QueryError: refused by the guard (malformed, update, SERVICE,
                FROM, FROM NAMED, GRAPH), a SELECT of other than three
                variables, or refused by the server.
            QueryTimeoutError: no answer within ``timeout``.
            QueryLimitError: an answer over ``max_response_bytes`` or over
                ``max_rows`` triples.
            IndexUnavailableError: the endpoint cannot be reached or failed.
        """
        validate_non_empty(query, "query")
        canonical = validate_scope(scope)
        if _CODEPOINT_ESCAPE.search(query):
            # SPARQL expands them across the whole text before parsing, as the
            # guard's parser (rdflib) does; an endpoint that expands them only
            # inside strings and IRIs (Oxigraph) reads another query: SERVICE
            # hidden in what the guard took for a string ran on the server.
            raise QueryError(
                "\\u and \\U escapes are refused in a query sent to the SPARQL endpoint "
                "(servers read them differently): write the character itself"
            )
        checked = check_query(query, init_ns=_INIT_NS)
        if checked.form == "SELECT" and len(checked.projection) != 3:
            raise QueryError(
                "a SELECT query must project exactly three variables (subject, predicate, "
                f"object), got {len(checked.projection)}"
            )
        self._check_open()
        graphs = sorted(_graph_of(r) for r in canonical) or [NO_GRAPH]
        form = [("query", _PROLOGUE + query)]
        form += [("default-graph-uri", g) for g in graphs]
        form += [("named-graph-uri", g) for g in graphs]
        rdf = checked.form in ("CONSTRUCT", "DESCRIBE")
        answer = self._http.request(
            "POST",
            self._query_url,
            what="SPARQL query",
            max_bytes=self._max_bytes,
            form=form,
            headers={"accept": _N_TRIPLES if rdf else _RESULTS_JSON},
            on_timeout=QueryTimeoutError,
            on_refused=QueryError,
        )
        if rdf:
            triples = sorted(set(self._parse_n_triples(answer.body)))
        else:
            data = _load_json(answer.body)
            if "boolean" in data:
                self._check_answer(canonical, empty=not data["boolean"])
                boolean = str(bool(data["boolean"])).lower()
                return GraphResult(metadata={"boolean": boolean, "rows": "0"})
            triples = self._rows(data, checked.projection)
            if not checked.ordered:
                triples.sort()
        self._check_answer(canonical, empty=not triples)
        kept = [t for t in triples if _in_scope(t, canonical)]
        metadata = {"rows": str(len(kept))}
        if len(kept) != len(triples):
            metadata["dropped_out_of_scope"] = str(len(triples) - len(kept))
        return GraphResult(triples=kept, metadata=metadata)

    def get_triples(self, subject: str, *, scope: frozenset[str] | None = None) -> GraphResult:
        """Triples whose subject is ``subject`` from the in-scope graphs, sorted.

        ``scope=None`` reads every resource graph (maintenance use only).

        Raises:
            TypeError / ValueError: empty subject or invalid scope.
            QueryLimitError: more than ``max_rows`` triples.
            IndexUnavailableError: the endpoint cannot be reached or failed.
        """
        validate_non_empty(subject, "subject")
        canonical = None if scope is None else validate_scope(scope)
        self._check_open()
        if (canonical is not None and not canonical) or _IRI_RE.fullmatch(subject) is None:
            return GraphResult(metadata={"rows": "0"})
        triples = sorted({t for t, _ in self._edges([subject], canonical)})
        if canonical is not None:
            triples = [t for t in triples if _in_scope(t, canonical)]
        self._check_answer(canonical, empty=not triples)
        return GraphResult(triples=triples, metadata={"rows": str(len(triples))})

    def traverse(
        self,
        start: str,
        *,
        depth: int = 2,
        scope: frozenset[str] | None = None,
        direction: str = "out",
        predicates: frozenset[str] | None = None,
    ) -> GraphResult:
        """Breadth-first walk from ``start`` (see ``GraphBackend.traverse``).

        ``direction`` ``"out"`` follows subject -> IRI object, ``"in"`` object
        -> subject, ``"both"`` either; ``predicates`` (IRIs, checked before
        they enter a query) limits the edges.  Depth 0 gives no triples, depth
        1 the edges of ``start``, and so on; each triple comes once and nodes
        are visited once.  One query per hop and direction.

        Raises:
            TypeError / ValueError: empty start, negative depth, invalid scope,
                direction or predicate.
            QueryLimitError: more than ``max_rows`` triples in all.
            IndexUnavailableError: the endpoint cannot be reached or failed.
        """
        validate_non_empty(start, "start")
        validate_depth(depth)
        canonical = None if scope is None else validate_scope(scope)
        chosen = validate_traversal(direction, predicates)
        for predicate in chosen or ():
            if _IRI_RE.fullmatch(predicate) is None:
                raise ValueError(f"predicate {predicate!r} is not an IRI")
        self._check_open()
        if (canonical is not None and not canonical) or _IRI_RE.fullmatch(start) is None:
            return GraphResult(metadata={"rows": "0"})
        out: list[Triple] = []
        seen: set[Triple] = set()
        visited = {start}
        frontier = [start]
        for hop in range(1, depth + 1):
            by_node: dict[str, set[tuple[Triple, str]]] = {}
            fresh: set[Triple] = set()

            def count(
                rows: list[tuple[Triple, bool]], hop: int = hop, fresh: set[Triple] = fresh
            ) -> None:
                # Stop as the hop's answers come, not after all of them.
                fresh.update(t for t, _ in rows if t not in seen)
                if len(out) + len(fresh) > self._max_rows:
                    raise walk_limit_error(start, self._max_rows, hop)

            try:
                if direction in ("out", "both"):
                    for triple, to_iri in self._edges(frontier, canonical, "s", chosen, count):
                        target = triple[2] if to_iri else ""
                        by_node.setdefault(triple[0], set()).add((triple, target))
                if direction in ("in", "both"):
                    for triple, _ in self._edges(frontier, canonical, "o", chosen, count):
                        by_node.setdefault(triple[2], set()).add((triple, triple[0]))
            except _RowCapError as exc:  # one query's answer alone passed it
                raise walk_limit_error(start, self._max_rows, hop) from exc
            reached: list[str] = []
            for node in frontier:
                for triple, target in sorted(by_node.get(node, ())):
                    if triple not in seen:
                        seen.add(triple)
                        out.append(triple)
                    if target and target not in visited:
                        visited.add(target)
                        reached.append(target)
            if len(out) > self._max_rows:
                raise walk_limit_error(start, self._max_rows, hop)
            if not reached:
                break
            frontier = reached
        if canonical is not None:
            out = [t for t in out if _in_scope(t, canonical)]
        self._check_answer(canonical, empty=not out)
        return GraphResult(triples=out, metadata={"rows": str(len(out))})

    # ------------------------------------------------------------ write side

    def upsert(
        self,
        resource_id: str,
        triples: Iterable[WriteTriple],
        *,
        delete_subjects: Iterable[str] = (),
        delete_triples: Iterable[WriteTriple] = (),
    ) -> None:
        """Drop the triples of ``delete_subjects`` and each of ``delete_triples``,
        then add ``triples``: one request, so other readers see all or none.

        Every ``uko://`` IRI in a triple must name ``resource_id``.

        Raises:
            TypeError: a triple or subject of the wrong type.
            ValueError: an invalid ULID, IRI, or an IRI of another resource.
            IndexUnavailableError: the change could not be written.
        """
        rid = canonical_ulid(resource_id)
        add = [_nt_line(t, rid) for t in _materialise(triples, "triples")]
        subjects = [
            _check_iri(s, "delete_subjects member", rid)
            for s in _materialise(delete_subjects, "delete_subjects")
        ]
        drop = [_nt_line(t, rid) for t in _materialise(delete_triples, "delete_triples")]
        self._check_open()
        graph = _graph_of(rid)
        if not subjects and not drop:
            if add:
                self._write(
                    "POST",
                    self._store_url,
                    params={"graph": graph},
                    content="".join(add).encode("utf-8"),
                    headers={"content-type": _N_TRIPLES},
                )
            return
        parts = [_delete_subjects(graph, batch) for batch in _batches(subjects)]
        if drop:
            parts.append(f"DELETE DATA {{ GRAPH <{graph}> {{\n{''.join(drop)}}} }}")
        if add:
            parts.append(f"INSERT DATA {{ GRAPH <{graph}> {{\n{''.join(add)}}} }}")
        self._update(" ;\n".join(parts))

    def delete(self, resource_id: str, subjects: Iterable[str] | None = None) -> None:
        """Remove the triples of ``subjects``, or the whole graph when ``None``.

        Raises:
            TypeError / ValueError: an invalid ULID or subject.
            IndexUnavailableError: the change could not be written.
        """
        rid = canonical_ulid(resource_id)
        graph = _graph_of(rid)
        if subjects is None:
            self._check_open()
            self._update(f"DROP SILENT GRAPH <{graph}>")
            return
        doomed = [_check_iri(s, "subjects member", rid) for s in _materialise(subjects, "subjects")]
        self._check_open()
        if doomed:
            self._update(" ;\n".join(_delete_subjects(graph, b) for b in _batches(doomed)))

    def subjects(self, resource_id: str) -> set[str]:
        """Distinct subjects in a resource's graph; empty if it has none."""
        rid = canonical_ulid(resource_id)
        self._check_open()
        q = f"SELECT DISTINCT ?s WHERE {{ GRAPH <{_graph_of(rid)}> {{ ?s ?p ?o }} }}"
        return {_json_term(row["s"]) for row in self._select(q) if "s" in row}

    def resource_ids(self) -> set[str]:
        """ULIDs of the resources whose graph is non-empty."""
        self._check_open()
        q = "SELECT ?g WHERE { GRAPH ?g { } FILTER EXISTS { GRAPH ?g { ?s ?p ?o } } }"
        out = set()
        for row in self._select(q):
            g = row.get("g", {}).get("value", "")
            rid = resource_id_of(g)
            if rid is not None and g == _graph_of(rid):
                out.add(rid)
        return out

    def ping(self) -> None:
        """Ask the query endpoint one trivial question (``ASK {}`` over no
        graph): ``acms status`` fails while the endpoint is unreachable.

        Raises:
            IndexUnavailableError: the endpoint cannot be reached, failed,
                answered other than 2xx, or is not a SPARQL endpoint.
        """
        self._ask("ASK {}", [])

    def holds(self, resource_id: str) -> bool:
        """Whether the endpoint holds any triple in the resource's graph (one
        ``ASK``): ``acms status`` tells a dataset that lost its data from one
        that was never written.

        Raises:
            IndexUnavailableError: as :meth:`ping`.
        """
        graph = _graph_of(canonical_ulid(resource_id))
        return self._ask(f"ASK {{ GRAPH <{graph}> {{ ?s ?p ?o }} }}", [("named-graph-uri", graph)])

    def _lacks(self, resource_id: str) -> bool:
        return not self.holds(resource_id)

    def _ask(self, query: str, graphs: list[tuple[str, str]]) -> bool:
        """The endpoint's answer to the ``ASK`` ``query`` over ``graphs`` only."""
        self._check_open()
        answer = self._http.request(
            "POST",
            self._query_url,
            what="SPARQL query",
            max_bytes=1 << 16,
            form=[("query", query), ("default-graph-uri", NO_GRAPH), *graphs],
            headers={"accept": _RESULTS_JSON},
        )
        found = _load_json(answer.body).get("boolean")
        if not isinstance(found, bool):
            raise IndexUnavailableError("the SPARQL endpoint gave no answer to ASK")
        return found

    @property
    def query_url(self) -> str:
        """The query endpoint's address (no credentials: they are never in it)."""
        return self._query_url

    # ------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise IndexUnavailableError("the SPARQL endpoint backend is closed")

    def _check_answer(self, scope: frozenset[str] | None, *, empty: bool) -> None:
        """After an answer over ``scope``: a resource in it whose graph the
        endpoint lacks while ``expected`` counts subjects is an error.  An
        empty answer is checked; so is any answer over more than one
        resource, which the others may have given alone (a count, rows of
        one resource: an answer without the lost one)."""
        if empty or (scope is not None and len(scope) > 1):
            self._check_empty(scope)

    def _check_empty(self, scope: frozenset[str] | None) -> None:
        """Whether a resource of ``scope`` lost its graph (see :meth:`_check_answer`)."""
        if self._expected is None or not scope:
            return
        now = time.monotonic()
        with self._confirmed_lock:
            since = self._confirmed
            asked = sorted(r for r in scope if now - since.get(r, -math.inf) >= _CONFIRMED_FOR)
        if not asked:
            return
        missing: set[str] = set()
        for batch in _batches(asked):
            values = " ".join(f"<{_graph_of(r)}>" for r in batch)
            query = (
                f"SELECT ?g WHERE {{ VALUES ?g {{ {values} }} "
                "FILTER NOT EXISTS { GRAPH ?g { ?s ?p ?o } } }"
            )
            for row in self._select(query, max_bytes=1 << 20):
                rid = resource_id_of(row.get("g", {}).get("value", ""))
                if rid is not None:
                    missing.add(rid)
        for rid in sorted(missing):
            # Asked again after the catalog: a session empties a graph before
            # the catalog rows follow (see ManagedIndexStore._recorded).
            subjects = self._expected(rid, functools.partial(self._lacks, rid))
            if subjects:
                raise lost_graph_error(self._query_url, rid, subjects)
        with self._confirmed_lock:
            if len(self._confirmed) > 4 * _VALUES_BATCH:
                self._confirmed.clear()  # bounded: scopes come and go
            self._confirmed.update((r, now) for r in asked)

    def _edges(
        self,
        nodes: Sequence[str],
        scope: frozenset[str] | None,
        position: str = "s",
        predicates: frozenset[str] | None = None,
        on_batch: Callable[[list[tuple[Triple, bool]]], None] | None = None,
    ) -> list[tuple[Triple, bool]]:
        """Triples whose subject (``position`` ``"s"``) or object (``"o"``)
        is one of ``nodes`` (IRIs), in the scope's graphs, with a predicate
        of ``predicates`` when given (IRIs, checked by the caller); each with
        whether its object is an IRI (a node a traversal may follow).
        ``on_batch`` sees the triples of each query as it comes (a walk
        stops there once it holds too many)."""
        out: list[tuple[Triple, bool]] = []
        iris = [s for s in nodes if _IRI_RE.fullmatch(s)]
        only = (
            "VALUES ?p { " + " ".join(f"<{p}>" for p in sorted(predicates)) + " } "
            if predicates
            else ""
        )
        for batch in _batches(iris):
            values = " ".join(f"<{s}>" for s in batch)
            limit = self._max_rows + 1
            if scope is None:
                # Our own query: GRAPH ?g ranges over every named graph.
                pattern = f"GRAPH ?g {{ VALUES ?{position} {{ {values} }} {only}?s ?p ?o }}"
                graphs: list[str] = []
            else:
                pattern = f"VALUES ?{position} {{ {values} }} {only}?s ?p ?o"
                graphs = sorted(_graph_of(r) for r in scope)
            body = f"SELECT DISTINCT ?s ?p ?o WHERE {{ {pattern} }} LIMIT {limit}"
            rows = self._select(body, graphs=graphs, max_bytes=self._max_bytes)
            got: list[tuple[Triple, bool]] = []
            for row in rows:
                try:
                    triple = (_json_term(row["s"]), _json_term(row["p"]), _json_term(row["o"]))
                except KeyError:
                    continue
                got.append((triple, row["o"].get("type") == "uri"))
            if on_batch is not None:
                on_batch(got)
            if len(rows) > self._max_rows:
                raise _RowCapError(f"more than {self._max_rows} triples")
            out += got
        return out

    def _select(
        self, query: str, *, graphs: Sequence[str] = (), max_bytes: int = _INTERNAL_MAX_BYTES
    ) -> list[dict[str, dict[str, str]]]:
        form = [("query", query)] + [("default-graph-uri", g) for g in graphs]
        answer = self._http.request(
            "POST",
            self._query_url,
            what="SPARQL query",
            max_bytes=max_bytes,
            form=form,
            headers={"accept": _RESULTS_JSON},
        )
        data = _load_json(answer.body)
        try:
            rows = data["results"]["bindings"]
        except (KeyError, TypeError) as exc:
            raise IndexUnavailableError("the SPARQL endpoint gave no result rows") from exc
        return list(rows)

    def _rows(self, data: dict[str, Any], projection: Sequence[str]) -> list[Triple]:
        try:
            bindings = data["results"]["bindings"]
        except (KeyError, TypeError) as exc:
            raise IndexUnavailableError("the SPARQL endpoint gave no result rows") from exc
        if len(bindings) > self._max_rows:
            raise QueryLimitError(
                f"the answer holds {len(bindings)} rows; the cap is {self._max_rows}"
            )
        s, p, o = projection
        out: list[Triple] = []
        for row in bindings:
            if s in row and p in row and o in row:
                out.append((_json_term(row[s]), _json_term(row[p]), _json_term(row[o])))
        return out

    def _parse_n_triples(self, body: bytes) -> Iterator[Triple]:
        count = 0
        for line in body.decode("utf-8", "replace").splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = _NT_LINE.fullmatch(line)
            if m is None:
                raise IndexUnavailableError("the SPARQL endpoint sent a line that is not N-Triples")
            count += 1
            if count > self._max_rows:
                raise QueryLimitError(f"the answer holds more than {self._max_rows} triples")
            yield (_nt_term(m.group(1)), _nt_term(m.group(2)), _nt_term(m.group(3)))

    def _update(self, update: str) -> None:
        self._write(
            "POST",
            self._update_url,
            content=update.encode("utf-8"),
            headers={"content-type": "application/sparql-update"},
        )

    def _write(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, str] | None = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._http.request(
            method,
            url,
            what="SPARQL write",
            max_bytes=1 << 20,
            timeout=self._write_timeout,
            params=params,
            content=content,
            headers=headers,
        )


def _load_json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise IndexUnavailableError("the SPARQL endpoint sent an answer that is not JSON") from exc
    if not isinstance(data, dict):
        raise IndexUnavailableError("the SPARQL endpoint sent an unexpected answer")
    return data


def _batches(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), _VALUES_BATCH):
        yield items[i : i + _VALUES_BATCH]


def _delete_subjects(graph: str, subjects: Sequence[str]) -> str:
    values = " ".join(f"<{s}>" for s in subjects)
    return (
        f"DELETE {{ GRAPH <{graph}> {{ ?s ?p ?o }} }} "
        f"WHERE {{ GRAPH <{graph}> {{ VALUES ?s {{ {values} }} ?s ?p ?o }} }}"
    )


def _materialise(items: object, name: str) -> list[object]:
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise TypeError(f"{name} must be an iterable of items, not {type(items).__name__}")
    return list(items)


def _check_iri(value: object, name: str, rid: str) -> str:
    iri = validate_non_empty(value, name)
    if _IRI_RE.fullmatch(iri) is None:
        raise ValueError(f"{name} is not an absolute IRI: {iri[:80]!r}")
    owner = resource_id_of(iri)
    if owner is not None and owner != rid:
        raise ValueError(f"{name} {iri[:80]!r} names resource {owner}, not {rid}")
    return iri


def _nt_line(triple: object, rid: str) -> str:
    if not isinstance(triple, tuple) or len(triple) != 3:
        raise TypeError("each triple must be a tuple (subject, predicate, object)")
    s, p, o = triple
    subject = _check_iri(s, "subject", rid)
    predicate = _check_iri(p, "predicate", rid)
    if isinstance(o, Literal):
        if not isinstance(o.value, str):
            raise TypeError(f"a literal value must be a str, not {type(o.value).__name__}")
        value = o.value.encode("utf-8", "replace").decode("utf-8")
        obj = f'"{_escape(value)}"'
        if o.datatype is not None:
            obj += f"^^<{_check_iri(o.datatype, 'datatype', rid)}>"
    elif isinstance(o, str):
        obj = f"<{_check_iri(o, 'object', rid)}>"
    else:
        raise TypeError(f"an object must be an IRI str or a Literal, not {type(o).__name__}")
    return f"<{subject}> <{predicate}> {obj} .\n"
