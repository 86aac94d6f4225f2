"""``GraphIndex`` over rdflib: per-resource graphs, loaded lazily, queried per scope.

Persistence is :mod:`.graph_store`'s: one file per resource (a snapshot and
an append-only change log), so this module keeps only scope, traversal and
SPARQL.  Opening the backend reads no graph.  A SPARQL query over graphs
not held is first evaluated over them read by subject (a query whose
patterns each bind a subject, an IRI object or a literal of ``uko:name`` or
``uko:path`` costs the records it touches);
if it asks what only a loaded graph answers (a pattern by predicate alone,
or of every triple), it loads the graphs of its in-scope resources and
keeps them, and is evaluated again, within the same time limit.  Before
each use a held graph is checked against its file (one ``stat`` when nothing
changed) and follows another process's appends by reading only them.
``get_triples`` and ``traverse`` load nothing: a graph not held is read
through a :class:`~.graph_store.SubjectReader` (the records of the subjects
asked about, via the file's subject index), made anew when its file
changes.  A commit to one resource therefore never reloads another
resource's graph, nor drops a SPARQL view that does not read it.  Graphs
and readers not used by the latest operation are dropped least recently
used first once they exceed ``cache_triples`` (with the views reading
them), so a process's memory follows the resources it works on, not the
store.

Resource graphs are held as plain strings (subject -> {(predicate, object)}),
not rdflib stores: loading is faster, memory smaller (so forking the SPARQL
worker is cheaper) and ``traverse`` runs on them directly.  SPARQL from a model
is checked by :mod:`.sparql_guard` and evaluated only against an rdflib
``Graph`` whose store reads the in-scope resource graphs in place
(:mod:`.graph_view`; cached per scope), never against a Dataset, so no query
can name another resource's graph.
Evaluation runs in a forked child process killed at the time limit, with a row
cap (:mod:`.sparql_worker`).  Literals keep their lexical form exactly
(rdflib's parser would normalise ``"010"^^xsd:integer`` to ``"10"``).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

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
from cleveragents.domain.models.acms.errors import IndexUnavailableError
from cleveragents.domain.models.acms.uko import UKO, resource_id_of
from cleveragents.domain.models.acms.ulids import canonical_ulid, validate_scope
from cleveragents.infrastructure.acms.graph_store import (
    Change,
    Cursor,
    Edge,
    GraphStore,
    Obj,
    Op,
    Readable,
    ResourceGraph,
    SubjectReader,
    UnreadableRecord,
    WriteState,
)
from cleveragents.infrastructure.acms.graph_store import (
    sorted_edges as _sorted_edges,
)
from cleveragents.infrastructure.acms.graph_store import (
    term_str as _term_str,
)

if TYPE_CHECKING:
    from rdflib import Graph

    from cleveragents.infrastructure.acms.sparql_worker import WorkerAnswer

# rdflib (and the SPARQL sandbox over it) is imported by the first SPARQL
# query: writing, traversal and triple lookups run on plain strings, so an
# indexer or a traversal never pays its ~25 MB and its import time.

__all__ = ["RdflibGraphBackend"]

_log = get_logger("cleveragents.acms.rdflib_graph")

_T = TypeVar("_T")

# Prefixes a query may use without declaring them (rdflib adds rdf, rdfs, xsd, ...).
_INIT_NS = {"uko": UKO}

# An absolute IRI that a store file can hold verbatim: a scheme, then no space,
# control character, surrogate or any of <>"{}|^`\ .
_IRI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\x00-\x20\x7f<>\"{}|^`\\\ud800-\udfff]*")


def _in_scope(triple: Triple, scope: frozenset[str]) -> bool:
    # The rule ScopedView applies: any term naming a resource names one in scope.
    for term in triple:
        rid = resource_id_of(term)
        if rid is not None and rid not in scope:
            return False
    return True


def _json_iri_or_literal(term: str) -> dict[str, str]:
    """A CONSTRUCT term (a plain string here) as a SPARQL JSON term."""
    if term.startswith("_:"):
        return {"type": "bnode", "value": term[2:]}
    if _IRI_RE.fullmatch(term):
        return {"type": "uri", "value": term}
    return {"type": "literal", "value": term}


def _result(triples: list[Triple], metadata: dict[str, str]) -> GraphResult:
    """A GraphResult of triples built here (three ``str`` each, by construction)."""
    result = object.__new__(GraphResult)
    object.__setattr__(result, "triples", triples)
    object.__setattr__(result, "metadata", metadata)
    return result


# Subject readers kept at most (each holds its graph file open), beyond the
# graph cache budget that also bounds them.
_READERS = 256
# A deletion by a writer that does not hold the graph loads a graph the
# write counts say holds at most this many triples (small: it is held after),
# and appends to a bigger one, then compacts it (an exact count, and the file
# removed if the graph is empty) if at most this many may be left.
_EXACT_BELOW = 4096


def _required_scope(scope: frozenset[str] | None, method: str) -> frozenset[str]:
    """The canonical scope; ``None`` is refused, never read as "every graph"."""
    if scope is None:
        raise TypeError(
            f"{method} needs scope=, a frozenset of resource ULIDs; to read every graph "
            "(maintenance), pass scope=frozenset(backend.resource_ids())"
        )
    return validate_scope(scope)


def _validate_timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"query_timeout must be a number of seconds, not {type(value).__name__}")
    if not 0 < value < math.inf:
        raise ValueError(f"query_timeout must be positive and finite, got {value}")
    return float(value)


def _walk(
    graphs: Mapping[str, Readable],
    index: _SubjectIndex,
    start: str,
    depth: int,
    direction: str,
    predicates: frozenset[str] | None,
    max_rows: int,
) -> list[Triple]:
    """The general breadth-first walk: any direction, optional predicate set;
    stopped with :func:`walk_limit_error` past ``max_rows`` triples after
    the first hop."""
    out: list[Triple] = []
    seen: set[Triple] = set()
    visited = {start}
    frontier = [start]
    for hop in range(1, depth + 1):
        reached: list[str] = []
        for node in frontier:
            edges: set[tuple[Triple, str | None]] = set()
            if direction in ("out", "both"):
                for rid in index.get(node) or ():
                    for p, o in graphs[rid].by_subject.get(node, ()):
                        if predicates is None or p in predicates:
                            iri = o if isinstance(o, str) else None
                            edges.add(((node, p, _term_str(o)), iri))
            if direction in ("in", "both"):
                for res in graphs.values():
                    for s, p in res.incoming_of(node, predicates):  # filtered there
                        edges.add(((s, p, node), s))
            for triple, nxt in sorted(edges, key=lambda e: (e[0], e[1] or "")):
                if triple not in seen:
                    seen.add(triple)
                    out.append(triple)
                if nxt is not None and nxt not in visited:
                    visited.add(nxt)
                    reached.append(nxt)
            if hop > 1 and len(out) > max_rows:
                raise walk_limit_error(start, max_rows, hop)
        if not reached:
            break
        frontier = reached
    return out


class _SubjectIndex:
    """Which of the given graphs hold a subject (the ``traverse`` adjacency).

    A ``uko://<ULID>/...`` subject can only be in its own resource's graph
    (writes reject IRIs of other resources), so only other IRIs are looked
    up in every graph, and remembered.
    """

    __slots__ = ("_graphs", "_memo")

    def __init__(self, graphs: Mapping[str, Readable]) -> None:
        self._graphs = graphs
        self._memo: dict[str, set[str]] = {}

    def get(self, subject: str) -> set[str] | None:
        owner = resource_id_of(subject)
        if owner is not None:
            res = self._graphs.get(owner)
            return {owner} if res is not None and subject in res.by_subject else None
        found = self._memo.get(subject)
        if found is None:
            found = {rid for rid, res in self._graphs.items() if subject in res.by_subject}
            self._memo[subject] = found
        return found or None


class RdflibGraphBackend:
    """A :class:`~cleveragents.domain.models.acms.backends.GraphIndex` on rdflib.

    Args:
        store_path: directory of the store (created if missing); ``None`` keeps
            everything in memory.
        union_cache_size: how many per-scope SPARQL views to keep.
        query_timeout: seconds a SPARQL query may run (positive, finite); the
            evaluation runs in a forked child process that is killed then.
        max_rows: the most triples a SPARQL answer or a walk past its first
            hop may hold; more is a :class:`QueryLimitError`, never a silent
            truncation (a walk stops as soon as it has more, so its cost
            follows the limit; the first hop is the start's own edges).
        cache_triples: how many triples of loaded graphs to keep beyond those
            the latest operation used (on disk only; in memory every graph
            is kept).  SPARQL views copy none; the indexes SPARQL and walks
            backwards build on a graph count as 0.4 triple per triple.
        expected: ``expected(rid, still_missing)``: a resource's graph
            subjects as its owner's records (the index store's catalog) count
            them, asked when its graph file was found missing; 0 when a
            write under way explains it (``still_missing()`` looks at the
            file again).  Given, a question over a
            resource whose graph file is missing while it counts subjects is
            an :class:`IndexUnavailableError` (the file was deleted, or a
            restore left it out), not an answer without that resource.
        extent: ``extent(rid, settled)``: the graph file's name and the end
            of its last commit as its owner recorded them (the index store's
            catalog; ``None``: nothing recorded, or with ``settled`` a write
            of the resource may be under way).  Given, a question over a
            resource whose file ends its whole records before that (cut
            short, or a damaged record in its log, which ends what a load
            reads) is an :class:`IndexUnavailableError`, not an answer from
            the part left; a write to such a file removes it (what it lost
            cannot be told from what it holds) and raises the error, and the
            owner's next session writes the graph again.

    Raises:
        TypeError / ValueError: an invalid ``union_cache_size``,
            ``query_timeout``, ``max_rows`` or ``cache_triples``.
        IndexUnavailableError: the store cannot be created or opened.
    """

    def __init__(
        self,
        store_path: str | os.PathLike[str] | None = None,
        *,
        union_cache_size: int = 8,
        query_timeout: float = 10.0,
        max_rows: int = 10_000,
        cache_triples: int = 500_000,
        expected: Callable[[str, Callable[[], bool]], int] | None = None,
        extent: Callable[[str, bool], tuple[bytes, int] | None] | None = None,
    ) -> None:
        self._expected = expected
        self._extent = extent
        self._union_cache_size = validate_positive_int(union_cache_size, "union_cache_size")
        self._query_timeout = _validate_timeout(query_timeout)
        self._max_rows = validate_positive_int(max_rows, "max_rows")
        self._cache_triples = validate_positive_int(cache_triples, "cache_triples")
        self._lock = threading.RLock()
        # Loaded graphs, least recently used first; on disk each has a cursor.
        self._graphs: OrderedDict[str, ResourceGraph] = OrderedDict()
        self._cursors: dict[str, Cursor] = {}
        # Resources this process writes without holding their graph.
        self._writes: dict[str, WriteState] = {}
        self._unions: OrderedDict[frozenset[str], Graph] = OrderedDict()
        # Graphs not loaded, read by subject from their files (most recent last).
        self._readers: OrderedDict[str, SubjectReader] = OrderedDict()
        self._closed = False
        self._store: GraphStore | None = None
        if store_path is not None:
            self._store = GraphStore(Path(store_path))

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Release the store; later calls raise :class:`IndexUnavailableError`."""
        with self._lock:
            self._closed = True
            self._graphs.clear()
            self._cursors.clear()
            self._writes.clear()
            self._unions.clear()
            for reader in self._readers.values():
                reader.close()
            self._readers.clear()
            if self._store is not None:
                self._store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def loaded_resource_ids(self) -> frozenset[str]:
        """ULIDs whose graphs this instance holds in memory (for observability)."""
        with self._lock:
            return frozenset(self._graphs)

    # ------------------------------------------------------------ read side

    def sparql_query(self, query: str, *, scope: frozenset[str]) -> GraphResult:
        """Evaluate a sandboxed SPARQL query over the union of the in-scope graphs.

        CONSTRUCT/DESCRIBE give their triples (sorted); SELECT must project
        exactly three variables, read as (s, p, o), rows with an unbound one
        skipped, engine order kept only under an outer ORDER BY (else sorted);
        ASK gives no triples and ``metadata["boolean"]``.  ``metadata["rows"]``
        counts the triples returned.  Triples that name a resource outside
        ``scope`` (possible only through IRI constants in the query) are dropped.

        A text over ``sparql_guard.MAX_QUERY_BYTES`` is refused unread; parsing,
        checking and evaluation run in a forked child process (see
        :mod:`.sparql_worker`) that is killed at ``query_timeout``.  An answer
        over ``max_rows`` triples (counted before out-of-scope ones are dropped)
        or over ``sparql_worker.MAX_RESULT_BYTES`` is refused, not truncated.

        Raises:
            TypeError / ValueError: empty query or invalid scope.
            QueryLimitError: the query ran past ``query_timeout``, or its answer
                holds more than ``max_rows`` triples or ``MAX_RESULT_BYTES``.
            QueryError: a query over ``MAX_QUERY_BYTES``, malformed, an update,
                SERVICE / FROM / FROM NAMED / GRAPH, a SELECT of other than three
                variables, or an error raised while evaluating.
            IndexUnavailableError: the store cannot be read.
        """
        from cleveragents.infrastructure.acms.sparql_guard import check_query_size

        validate_non_empty(query, "query")
        check_query_size(query)
        canonical = validate_scope(scope)
        # Parsing and checking run in the worker too, inside the time limit.
        answer = self._evaluate(canonical, query, bindings=False)
        if answer.boolean is not None:
            return GraphResult(metadata={"boolean": str(answer.boolean).lower(), "rows": "0"})
        triples = answer.triples
        kept = [t for t in triples if _in_scope(t, canonical)]
        metadata = {"rows": str(len(kept))}
        if len(kept) != len(triples):
            metadata["dropped_out_of_scope"] = str(len(triples) - len(kept))
        return GraphResult(triples=kept, metadata=metadata)

    def sparql_select(self, query: str, *, scope: frozenset[str]) -> dict[str, Any]:
        """A sandboxed query's answer in the SPARQL 1.1 JSON results form: a
        SELECT with any variables gives ``{"head": {"vars": [...]}, "results":
        {"bindings": [...]}}``, ASK ``{"head": {}, "boolean": ...}``, CONSTRUCT
        and DESCRIBE their triples as ``s``/``p``/``o`` bindings.  The same
        sandbox, time limit and caps as :meth:`sparql_query`; a row naming a
        resource outside ``scope`` is dropped.

        Raises:
            as :meth:`sparql_query`, less the three-variable rule.
        """
        from cleveragents.infrastructure.acms.sparql_guard import check_query_size

        validate_non_empty(query, "query")
        check_query_size(query)
        canonical = validate_scope(scope)
        answer = self._evaluate(canonical, query, bindings=True)
        if answer.boolean is not None:
            return {"head": {}, "boolean": answer.boolean}
        if answer.bindings is None:  # CONSTRUCT / DESCRIBE
            names = ["s", "p", "o"]
            rows = [
                {n: _json_iri_or_literal(v) for n, v in zip(names, t, strict=True)}
                for t in answer.triples
                if _in_scope(t, canonical)
            ]
        else:
            names = answer.variables or []
            rows = [
                b
                for b in answer.bindings
                if all(
                    (rid := resource_id_of(term["value"])) is None or rid in canonical
                    for term in b.values()
                )
            ]
        return {"head": {"vars": names}, "results": {"bindings": rows}}

    def get_triples(self, subject: str, *, scope: frozenset[str] | None = None) -> GraphResult:
        """Triples whose subject is ``subject`` from the in-scope graphs, sorted.

        ``scope`` is required: without it nothing is read (maintenance that
        means every graph says so with ``scope=frozenset(self.resource_ids())``).

        Raises:
            TypeError: no scope, or an argument of the wrong type.
            ValueError: empty subject or a scope member that is not a ULID.
            IndexUnavailableError: the store cannot be read.
        """
        validate_non_empty(subject, "subject")
        canonical = _required_scope(scope, "get_triples")

        def read() -> tuple[set[Triple], bool]:
            self._refresh()
            found: set[Triple] = set()
            foreign = False
            for res in self._holders(subject, canonical):
                found.update(res.edges_of(subject)[0])
                foreign = foreign or res.foreign
            return found, foreign

        found, foreign = self._reading(read)
        triples = sorted(found)
        if canonical is not None and foreign:
            triples = [t for t in triples if _in_scope(t, canonical)]
        return _result(triples, {"rows": str(len(triples))})

    def traverse(
        self,
        start: str,
        *,
        depth: int = 2,
        scope: frozenset[str] | None = None,
        direction: str = "out",
        predicates: frozenset[str] | None = None,
    ) -> GraphResult:
        """Breadth-first walk from ``start``.

        ``direction`` ``"out"`` (the seed's walk) follows edges from subject to
        IRI object, ``"in"`` from object back to subject, ``"both"`` either
        way; ``predicates`` (a set of predicate IRIs) limits the edges
        followed and returned.  Depth 0 gives no triples, depth 1 the edges
        of ``start``, depth 2 adds the edges of the nodes those reach, and so
        on.  Each triple comes once, in the order found (each node's edges
        sorted); nodes are visited once, so cycles end.  Only in-scope graphs
        are followed; ``scope`` is required, as for :meth:`get_triples`.

        Raises:
            TypeError: no scope, or an argument of the wrong type.
            ValueError: empty start, negative depth, a scope member not a ULID,
                an unknown direction.
            QueryLimitError: past its first hop, the walk gathered more than
                ``max_rows`` triples (counted before out-of-scope ones are
                dropped); the message names the depth that answers.
            IndexUnavailableError: the store cannot be read.
        """
        validate_non_empty(start, "start")
        validate_depth(depth)
        canonical = _required_scope(scope, "traverse")
        chosen = validate_traversal(direction, predicates)
        if direction != "out" or chosen is not None:

            def walk() -> list[Triple]:
                graphs, index = self._readable_adjacency(canonical)
                return _walk(graphs, index, start, depth, direction, chosen, self._max_rows)

            walked = [t for t in self._reading(walk) if _in_scope(t, canonical)]
            return _result(walked, {"rows": str(len(walked))})
        out, foreign = self._reading(lambda: self._walk_out(start, depth, canonical))
        if canonical is not None and foreign:
            out = [t for t in out if _in_scope(t, canonical)]
        return _result(out, {"rows": str(len(out))})

    def _walk_out(
        self, start: str, depth: int, canonical: frozenset[str] | None
    ) -> tuple[list[Triple], bool]:
        """The seed's walk (outgoing edges, every predicate): the triples, and
        whether a graph read holds IRIs of other resources.  Call with
        ``self._lock`` held."""
        out: list[Triple] = []
        foreign = False
        graphs, index = self._readable_adjacency(canonical)
        seen: set[Triple] | None = None  # needed once a subject is in two graphs
        visited = {start}
        frontier = [start]
        for hop in range(1, depth + 1):
            reached: list[str] = []
            for current in frontier:
                if hop > 1 and len(out) > self._max_rows:
                    raise walk_limit_error(start, self._max_rows, hop)
                rids = index.get(current)
                if not rids:
                    continue
                if len(rids) == 1:
                    (rid,) = rids
                    if canonical is not None and rid not in canonical:
                        continue
                    res = graphs[rid]
                    foreign = foreign or res.foreign
                    triples, targets = res.edges_of(current)
                    if seen is None:
                        out.extend(triples)
                    else:
                        for triple in triples:
                            if triple not in seen:
                                seen.add(triple)
                                out.append(triple)
                else:
                    if seen is None:
                        seen = set(out)
                    pairs: set[tuple[Triple, bool]] = set()
                    for rid in rids if canonical is None else rids & canonical:
                        res = graphs[rid]
                        foreign = foreign or res.foreign
                        pairs.update(res.edges_pairs(current))
                    triples, targets = _sorted_edges(pairs)
                    for triple in triples:
                        if triple not in seen:
                            seen.add(triple)
                            out.append(triple)
                for target in targets:
                    if target not in visited:
                        visited.add(target)
                        reached.append(target)
            if hop > 1 and len(out) > self._max_rows:
                raise walk_limit_error(start, self._max_rows, hop)
            if not reached:
                break
            frontier = reached
        return out, foreign

    # ------------------------------------------------------------ write side

    def upsert(
        self,
        resource_id: str,
        triples: Iterable[WriteTriple],
        *,
        delete_subjects: Iterable[str] = (),
        delete_triples: Iterable[WriteTriple] = (),
    ) -> None:
        """Atomically drop the triples of ``delete_subjects``, then add ``triples``.

        Subjects and predicates are absolute IRIs; an object is an IRI ``str``
        or a :class:`Literal`.  Every ``uko://`` IRI in a triple must name
        ``resource_id``, so a resource graph never links into another one.
        ``delete_triples`` (an extension of the Protocol) names single triples
        to drop in the same change, before ``triples`` are added.

        Raises:
            TypeError: a triple or subject of the wrong type.
            ValueError: an invalid ULID, IRI, or an IRI of another resource.
            IndexUnavailableError: the change could not be written.
        """
        rid = canonical_ulid(resource_id)
        checked: dict[str, str] = {}
        to_add = [_check_triple(t, rid, checked) for t in _materialise(triples, "triples")]
        doomed = set(_check_subjects(delete_subjects, "delete_subjects"))
        drop = [
            _check_triple(t, rid, checked) for t in _materialise(delete_triples, "delete_triples")
        ]
        with self._lock, self._writer_lock():
            self._change(rid, doomed, to_add, drop)
            self._trim({rid})

    def delete(self, resource_id: str, subjects: Iterable[str] | None = None) -> None:
        """Remove the triples of ``subjects``, or the whole graph when ``None``.

        Raises:
            TypeError / ValueError: an invalid ULID or subject.
            IndexUnavailableError: the change could not be written.
        """
        rid = canonical_ulid(resource_id)
        doomed = None if subjects is None else set(_check_subjects(subjects, "subjects"))
        with self._lock, self._writer_lock():
            if doomed is not None:
                self._change(rid, doomed, [])
                self._trim({rid})
                return
            self._check_open()
            if self._store is not None:
                self._store.remove(rid)
            self._forget(rid)

    def subjects(self, resource_id: str) -> set[str]:
        """Distinct subjects (IRIs) in a resource's graph; empty if it has none."""
        rid = canonical_ulid(resource_id)
        with self._lock:
            self._check_open()
            store = self._store
            if store is not None and rid not in self._graphs:
                # Not held: read record by record (verify and the repair
                # sweep ask this of every resource; a load peaks at its graph).
                return store.live_subjects(rid) or set()
            res = self._load([rid], queried=False).get(rid)
            found = set() if res is None else {s for s, edges in res.by_subject.items() if edges}
            self._trim({rid})
            return found

    def resource_ids(self) -> set[str]:
        """ULIDs of the resources whose graph is non-empty (reads no graph)."""
        with self._lock:
            self._check_open()
            if self._store is None:
                return set(self._graphs)
            return self._store.resource_ids()

    # ------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise IndexUnavailableError("the graph store is closed")

    def _refresh(self) -> None:
        """Reads check each graph they use against its file; nothing to do up front."""
        self._check_open()

    def _load(self, rids: Iterable[str], *, queried: bool = True) -> dict[str, ResourceGraph]:
        """The current graphs of ``rids`` that have one, loading or following each.

        ``queried``: for a question, so a graph file missing while
        ``expected`` counts subjects is an error (writes and maintenance
        pass False: a full reindex of the resource writes it again).  Call
        with ``self._lock`` held.
        """
        self._check_open()
        store = self._store
        found: dict[str, ResourceGraph] = {}
        for rid in rids:
            res = self._graphs.get(rid)
            self._drop_reader(rid)  # held from now on: read in memory
            if store is not None:
                fresh = store.refresh(rid, res, self._cursors.get(rid))
                if fresh is None:
                    if res is not None:
                        self._forget(rid)
                    if queried:
                        self._check_lost(store, rid)
                    continue
                loaded, cursor, changes = fresh
                short = changes is None and queried
                if short and self._cut_before(rid, cursor.nonce, cursor.offset) is not None:
                    loaded, cursor = self._load_confirmed(store, rid, loaded, cursor)
                self._cursors[rid] = cursor
                if changes is None:
                    self._drop_unions(rid)
                elif changes:
                    self._update_views(rid, changes)
                if loaded is not res:
                    self._graphs[rid] = res = loaded
            if res is not None:
                self._graphs.move_to_end(rid)
                found[rid] = res
        return found

    def _check_lost(self, store: GraphStore, rid: str) -> None:
        """``rid`` has no graph file: an error if ``expected`` counts subjects."""
        if self._expected is None:
            return
        # Looked at again after the catalog (a session deletes the graph
        # before the catalog rows follow).
        subjects = self._expected(rid, lambda: not store.check(rid))
        if subjects:
            raise IndexUnavailableError(
                f"the graph of resource {rid} ({store.path(rid)}) is missing while the "
                f"catalog records {subjects} subjects of it: `acms reindex --resource "
                f"{rid}` writes it again (`acms reindex --rebuild`: every index)"
            )

    def _cut_before(self, rid: str, nonce: bytes, end: int, *, settled: bool = True) -> int | None:
        """The end of the last commit ``extent`` recorded of the file named
        ``nonce`` if the file ends its whole records before it, at ``end``
        (a file only grows between two commits: a torn append is past the
        last one, a compaction is a new file); else ``None``."""
        if self._extent is None:
            return None
        recorded = self._extent(rid, settled)
        if recorded is None or recorded[0] != nonce or end >= recorded[1]:
            return None
        return recorded[1]

    # A file found ending before the recorded commit may only have been read
    # before another process appended and recorded a commit (a reviewer saw
    # one query in 55 fail so beside `acms watch`): the file only grows
    # between two commits, so the record is read first and the file again
    # after, and only a file shorter than a commit recorded before it was
    # read is damaged.  These run only on such a mismatch: a healthy read
    # costs one catalog question, on a fresh load or a new subject reader.

    def _recorded_first(self, rid: str) -> tuple[bytes, int] | None:
        return None if self._extent is None else self._extent(rid, True)

    @staticmethod
    def _short_of(recorded: tuple[bytes, int] | None, nonce: bytes, end: int) -> bool:
        return recorded is not None and recorded[0] == nonce and end < recorded[1]

    def _load_confirmed(
        self, store: GraphStore, rid: str, loaded: ResourceGraph, cursor: Cursor
    ) -> tuple[ResourceGraph, Cursor]:
        """A fresh load of ``rid`` ended before its recorded last commit:
        load it again after reading the record (see above)."""
        recorded = self._recorded_first(rid)
        again = store.refresh(rid, None, None)
        if again is None:
            return loaded, cursor  # gone meanwhile: the next read says so
        graph, fresh, _ = again
        if self._short_of(recorded, fresh.nonce, fresh.offset):
            assert recorded is not None
            raise self._cut_error(store, rid, fresh.offset, recorded[1])
        return graph, fresh

    def _reader_confirmed(
        self, store: GraphStore, rid: str, reader: SubjectReader
    ) -> SubjectReader | None:
        """A new subject reader of ``rid`` ended before its recorded last
        commit: open another after reading the record (see above)."""
        reader.close()
        recorded = self._recorded_first(rid)
        again = store.subject_reader(rid, None)
        if again is not None and self._short_of(recorded, again.nonce, again.end):
            assert recorded is not None
            end = again.end
            again.close()
            raise self._cut_error(store, rid, end, recorded[1])
        return again

    @staticmethod
    def _cut_error(store: GraphStore, rid: str, end: int, committed: int) -> IndexUnavailableError:
        return IndexUnavailableError(
            f"the graph of resource {rid} ({store.path(rid)}) ends at byte {end}, before "
            f"its last commit at byte {committed}: the file was cut short or damaged; "
            f"`acms reindex --full --resource {rid}` writes it again "
            "(`acms reindex --rebuild`: every index)"
        )

    def _file_short(self, store: GraphStore, rid: str) -> tuple[int, int] | None:
        """``(size, committed)`` when ``rid``'s graph file is shorter than its
        recorded last commit, confirmed as above; else ``None``."""
        found = store.extent(rid)
        if found is None or self._cut_before(rid, *found) is None:
            return None
        recorded = self._recorded_first(rid)
        found = store.extent(rid)
        if found is None or not self._short_of(recorded, *found):
            return None
        assert recorded is not None
        return found[1], recorded[1]

    def cut_short(self, resource_id: str) -> bool:
        """Whether the resource's graph file is shorter than its last commit
        as ``extent`` recorded it (one ``stat`` and its header: no record is
        read, so a damaged record within the file is found by a load).

        Raises:
            ValueError: an invalid ULID.
            IndexUnavailableError: the file cannot be read.
        """
        rid = canonical_ulid(resource_id)
        with self._lock:
            self._check_open()
            store = self._store
            if store is None or self._extent is None:
                return False
            return self._file_short(store, rid) is not None

    def _refuse_damaged(self, store: GraphStore, rid: str, cursor: Cursor) -> None:
        """Before a write appends to ``cursor``'s file: if it ends its whole
        records before its last commit, the records past the damage would be
        cut as a torn tail and the file go on without them.  It is removed
        instead, and the write refused: its owner's session stays marked,
        and the next one finds every file's subjects missing and writes
        them."""
        committed = self._cut_before(rid, cursor.nonce, cursor.offset, settled=False)
        if committed is None:
            return
        _log.warning(
            "rdflib_graph.damaged_graph_removed", resource=rid, end=cursor.offset, commit=committed
        )
        store.remove(rid)
        self._forget(rid)
        raise IndexUnavailableError(
            f"the graph of resource {rid} ({store.path(rid)}) ended at byte {cursor.offset}, "
            f"before its last commit at byte {committed}: the file was cut short or damaged, "
            "and is removed; the next `acms reindex` writes it again"
        )

    def written_extent(self, resource_id: str) -> tuple[bytes, int] | None:
        """The name of the resource's graph file and the end of its whole
        records, as this process last wrote or read it (what a writer
        records for :meth:`_cut_before`); ``None`` if it has not, or the
        graph is in memory."""
        rid = canonical_ulid(resource_id)
        with self._lock:
            # A read after a write holds the newer cursor (a write without
            # the graph drops it; one with the graph drops the write state).
            cursor = self._cursors.get(rid)
            if cursor is None:
                state = self._writes.get(rid)
                cursor = None if state is None else state.cursor
            return None if cursor is None else (cursor.nonce, cursor.offset)

    def holds(self, resource_id: str) -> bool:
        """Whether the resource has a graph (on disk: its file, whose head is
        checked; no graph is read).

        Raises:
            ValueError: an invalid ULID.
            IndexUnavailableError: the file is damaged or cannot be read.
        """
        rid = canonical_ulid(resource_id)
        with self._lock:
            self._check_open()
            store = self._store
            if store is None:
                return bool(self._graphs.get(rid))
            return store.check(rid)

    def check_readable(self, resource_id: str) -> None:
        """Check the resource's graph file as far as a load reads before the
        graph (``acms status``): see :meth:`GraphStore.check`.

        Raises:
            ValueError: an invalid ULID.
            IndexUnavailableError: the file is damaged, missing while
                ``expected`` counts subjects of it, or shorter than its last
                commit as ``extent`` recorded it.
        """
        rid = canonical_ulid(resource_id)
        with self._lock:
            self._check_open()
            store = self._store
            if store is None:
                return
            if not store.check(rid):
                self._check_lost(store, rid)
            elif self._extent is not None and (short := self._file_short(store, rid)) is not None:
                raise self._cut_error(store, rid, *short)

    def _scope_rids(self, scope: frozenset[str] | None) -> Iterable[str]:
        if scope is not None:
            return sorted(scope)
        if self._store is None:
            return list(self._graphs)
        return sorted(self._store.resource_ids() | set(self._graphs))

    def _reading(self, read: Callable[[], _T]) -> _T:
        """``read()`` under the lock.  A record a subject reader could not
        read (damaged bytes the subject index names) makes that graph load
        and ``read`` run again, as SPARQL does: the load ends the graph at a
        damaged record, as every load does, or reports the store unreadable.
        Each graph loads at most once so."""
        with self._lock:
            loaded: set[str] = set()
            while True:
                try:
                    return read()
                except UnreadableRecord as exc:
                    rid = next(
                        (r for r, reader in self._readers.items() if reader.path == exc.path),
                        None,
                    )
                    if rid is None or rid in loaded:
                        raise
                    _log.warning("rdflib_graph.record_unreadable", resource=rid, error=str(exc))
                    loaded.add(rid)
                    self._load([rid])

    def _readable_adjacency(
        self, scope: frozenset[str] | None
    ) -> tuple[dict[str, Readable], _SubjectIndex]:
        """The in-scope graphs and an index of their subjects, for
        ``traverse``: the graphs not held are read by subject (and by
        object, for walks backwards), not loaded."""
        graphs = self._readable(self._scope_rids(scope))
        return graphs, _SubjectIndex(graphs)

    def _holders(self, subject: str, scope: frozenset[str] | None) -> list[Readable]:
        """The in-scope graphs holding ``subject`` (held, else read by subject)."""
        owner = resource_id_of(subject)
        if owner is not None:
            candidates: Iterable[str] = [owner] if scope is None or owner in scope else []
        else:
            candidates = self._scope_rids(scope)
        graphs = self._readable(candidates)
        return [res for res in graphs.values() if subject in res.by_subject]

    def _readable(self, rids: Iterable[str]) -> dict[str, Readable]:
        """The current graphs of ``rids`` for reading by subject: a held graph
        (followed as :meth:`_load` does), else a reader of its file's subject
        index (a question about a few subjects of a large graph costs those
        subjects' records, not a load), else the graph loaded.  Call with
        ``self._lock`` held."""
        self._check_open()
        store = self._store
        found: dict[str, Readable] = {}
        load: list[str] = []
        for rid in rids:
            if store is None or rid in self._graphs:
                load.append(rid)
                continue
            reader = self._readers.get(rid)
            if reader is None or not reader.current():
                stale = self._readers.pop(rid, None)
                try:
                    reader = store.subject_reader(rid, stale)
                finally:
                    if stale is not None:
                        stale.close()
                if reader is None:
                    load.append(rid)
                    continue
                if self._cut_before(rid, reader.nonce, reader.end) is not None:
                    reader = self._reader_confirmed(store, rid, reader)
                    if reader is None:
                        load.append(rid)  # the load confirms it in turn
                        continue
                self._readers[rid] = reader
            self._readers.move_to_end(rid)
            found[rid] = reader
        if load:
            found.update(self._load(load))
        self._trim(set(found))
        for rid in list(self._readers):  # each holds a file open
            if len(self._readers) <= _READERS:
                break
            if rid not in found:
                self._drop_reader(rid)
        return found

    def _evaluate(self, scope: frozenset[str], query: str, *, bindings: bool) -> WorkerAnswer:
        """Evaluate ``query`` in a worker: first over the in-scope graphs read
        by subject, if some are not loaded (a selective query then costs the
        records it touches); over loaded graphs if the query asks what only
        they answer (a pattern by predicate alone, or of every triple), or
        if every member is loaded.  One time limit for both workers; the
        loading between them is not counted, as a load never was."""
        from cleveragents.infrastructure.acms.graph_view import WholeGraphNeeded
        from cleveragents.infrastructure.acms.sparql_worker import evaluate

        limits: dict[str, Any] = {
            "init_ns": _INIT_NS,
            "timeout": self._query_timeout,
            "max_rows": self._max_rows,
            "bindings": bindings,
        }
        spent = 0.0  # in a worker; loading, in this process, is not counted
        by_subject = self._by_subject_view(scope)
        if by_subject is not None:
            view, readers = by_subject
            started = time.monotonic()
            try:
                return evaluate(
                    view,
                    query,
                    hold=self._forking_with(readers),
                    keep_fds=[reader.fileno() for reader in readers],
                    **limits,
                )
            except (WholeGraphNeeded, IndexUnavailableError):
                # A record the subject index names could not be read: the
                # load decides (it ends the graph at a damaged record, as
                # every load does, or reports the store unreadable).
                spent = time.monotonic() - started
        union = self._union(scope)
        return evaluate(
            union,
            query,
            hold=self._between_writes(union),
            started=time.monotonic() - spent,
            **limits,
        )

    def _by_subject_view(self, scope: frozenset[str]) -> tuple[Graph, list[SubjectReader]] | None:
        """An rdflib graph over the in-scope graphs, those not loaded read by
        subject, and their readers; ``None`` if every one is loaded."""
        if self._store is None:
            return None
        from rdflib import Graph

        from cleveragents.infrastructure.acms.graph_view import ScopeStore

        with self._lock:
            self._refresh()
            if all(rid in self._graphs for rid in scope):
                return None
            found = self._readable(sorted(scope))
            readers = [g for g in found.values() if isinstance(g, SubjectReader)]
            if not readers:
                return None
            view = ScopeStore([found[rid] for rid in sorted(found)])
            view.prepare()
            return Graph(store=view), readers

    @contextlib.contextmanager
    def _forking_with(self, readers: list[SubjectReader]) -> Iterator[None]:
        """Entered around the worker's fork over graphs read by subject: under
        the backend's lock, with every reader's file still open (another
        thread may have closed one since: the query then loads)."""
        from cleveragents.infrastructure.acms.graph_view import WholeGraphNeeded

        with self._lock:
            if not all(reader.is_open() for reader in readers):
                raise WholeGraphNeeded
            yield

    def _union(self, scope: frozenset[str]) -> Graph:
        """An rdflib graph reading the in-scope graphs in place (no copy; see
        :mod:`.graph_view`), kept per scope while its members are held."""
        from rdflib import Graph

        from cleveragents.infrastructure.acms.graph_view import ScopeStore

        with self._lock:
            graphs = self._load(sorted(scope))
            present = frozenset(graphs)
            union = self._unions.get(present)
            if union is not None:
                self._unions.move_to_end(present)
            else:
                view = ScopeStore([graphs[rid] for rid in sorted(present)])
                view.prepare()
                union = Graph(store=view)
                self._unions[present] = union
                while len(self._unions) > self._union_cache_size:
                    self._unions.popitem(last=False)
            self._trim(set(graphs))
            return union

    @contextlib.contextmanager
    def _between_writes(self, union: Graph) -> Iterator[None]:
        """Entered around the SPARQL worker's fork: the view reads the live
        graphs, so the fork happens under the backend's lock, between writes.

        Another thread may have dropped the view from the cache since
        :meth:`_union` gave it (by evicting or reloading a member); the view
        then missed the subjects its live members gained since, and finds
        its shared subjects anew, so that no triple is given twice.
        """
        from cleveragents.infrastructure.acms.graph_view import ScopeStore

        with self._lock:
            if all(cached is not union for cached in self._unions.values()):
                view = union.store
                if isinstance(view, ScopeStore):
                    view.reshare()
            yield

    def held_triples(self) -> int:
        """The loaded graphs and subject readers in triples' worth, indexes
        included (:meth:`ResourceGraph.weight`, :meth:`SubjectReader.weight`):
        what ``cache_triples`` bounds, beyond the latest operation's own
        (SPARQL reads the graphs in place, copying none)."""
        with self._lock:
            return self._held()

    def _held(self) -> int:
        graphs = sum(res.weight() for res in self._graphs.values())
        return graphs + sum(reader.weight() for reader in self._readers.values())

    def _trim(self, keep: set[str]) -> None:
        """On disk, beyond the budget, drop the least recently used subject
        readers, then graphs (and the SPARQL views reading them), outside
        ``keep``."""
        if self._store is None:
            return
        held = self._held()
        for rid in list(self._readers):  # least recently used first
            if held <= self._cache_triples:
                return
            if rid not in keep:
                reader = self._readers.pop(rid)
                held -= reader.weight()
                reader.close()
        for rid in list(self._graphs):
            if held <= self._cache_triples:
                break
            if rid not in keep:
                held -= self._graphs[rid].weight()
                self._forget(rid)

    def _forget(self, rid: str) -> None:
        self._drop_reader(rid)
        self._writes.pop(rid, None)
        self._graphs.pop(rid, None)
        self._cursors.pop(rid, None)
        self._drop_unions(rid)

    def _drop_reader(self, rid: str) -> None:
        reader = self._readers.pop(rid, None)
        if reader is not None:
            reader.close()

    def _drop_unions(self, rid: str) -> None:
        for key in [key for key in self._unions if rid in key]:
            del self._unions[key]

    def _update_views(self, rid: str, done: list[Op]) -> None:
        """``rid``'s graph changed in place (``done``): the SPARQL views reading
        it see the change already; each learns the subjects it gained, for
        its duplicate check.  O(change)."""
        keys = [key for key in self._unions if rid in key]
        if not keys:
            return  # (and a process that never ran SPARQL never imports rdflib here)
        from cleveragents.infrastructure.acms.graph_view import ScopeStore

        graph = self._graphs.get(rid)
        added = [s for add, s, _, _ in done if add]
        for key in keys:
            view = self._unions[key].store
            if graph is None or not isinstance(view, ScopeStore) or graph not in view.graphs:
                del self._unions[key]  # it reads another graph object: build it anew
                continue
            if added:
                view.added(graph, added)

    def _change(
        self,
        rid: str,
        doomed: set[str],
        to_add: list[tuple[str, str, Obj]],
        drop: Sequence[tuple[str, str, Obj]] = (),
    ) -> None:
        """Apply one write; on a failed write, undo it and re-raise.

        Only the change is written (appended to the resource's file), so a
        write costs about its size, not the resource's.  Readers are safe:
        every read of resource graphs holds ``self._lock``, and a SPARQL
        query's worker (which reads them in place) is forked with it held.
        Call with both locks held.
        """
        store = self._store
        if store is not None and rid not in self._graphs:
            if to_add:
                self._append_change(store, rid, doomed, to_add, drop)
                return
            # A deletion: appended to a big graph; a small one (by the write
            # counts) is loaded and held, as a write that empties it must
            # remove its file and the counts are not exact.
            state = store.write_state(rid, self._writes.get(rid))
            if state is None:
                self._writes.pop(rid, None)
                return  # no graph to delete from
            if state.live > _EXACT_BELOW:
                self._append_change(store, rid, doomed, to_add, drop, state)
                return
        self._writes.pop(rid, None)  # this process follows the file through the graph
        res = self._load([rid], queried=False).get(rid)
        cursor = self._cursors.get(rid)
        if store is not None and cursor is not None:
            self._refuse_damaged(store, rid, cursor)
            store.cut_torn_tail(rid, cursor)
        ops: list[Op] = []
        if res is not None:
            for s in doomed:
                ops.extend((False, s, p, o) for p, o in res.by_subject.get(s, ()))
            ops.extend((False, s, p, o) for s, p, o in dict.fromkeys(drop) if s not in doomed)
        ops.extend((True, s, p, o) for s, p, o in dict.fromkeys(to_add))
        if res is None:
            res = ResourceGraph()
        done = res.apply(ops)
        if not done:
            return
        if store is None:
            if res.size:
                self._graphs[rid] = res
                self._update_views(rid, done)
            else:
                self._forget(rid)
            return
        try:
            if not res.size:
                store.remove(rid)
                self._forget(rid)
                return
            if cursor is None:
                cursor = store.replace(rid, res)
            else:
                store.append(rid, cursor, done)
        except IndexUnavailableError:
            res.apply([(not add, s, p, o) for add, s, p, o in reversed(done)])
            raise
        self._graphs[rid], self._cursors[rid] = res, cursor
        self._update_views(rid, done)
        if store.compaction_due(cursor):
            try:
                self._cursors[rid] = store.replace(rid, res)
            except IndexUnavailableError as exc:  # the data is safe in the log: retry later
                _log.warning("rdflib_graph.compaction_failed", resource=rid, error=str(exc))

    def _append_change(
        self,
        store: GraphStore,
        rid: str,
        doomed: set[str],
        to_add: list[tuple[str, str, Obj]],
        drop: Sequence[tuple[str, str, Obj]],
        state: WriteState | None = None,
    ) -> None:
        """Write a change without loading the resource's graph (``state``:
        the resource's, current, if the caller has it).

        The change goes to the file as one record naming the subjects to
        drop (their triples need not be known).  Only the per-subject counts
        of :class:`WriteState` are held, so an indexer's memory follows its
        batch, not the resource.  A compaction, when enough of the log is
        dead, reads it record by record (:meth:`GraphStore.compact`).

        A change that only deletes (from a graph the counts say is big) may
        leave it empty, and a resource with an empty graph has no file.  The
        counts are not exact (see :class:`WriteState`), so when they say at
        most :data:`_EXACT_BELOW` triples may be left, the file is compacted,
        which counts them exactly, and removed if none is; the compacted
        file is small, so the next deletions load it (:meth:`_change`).
        Call with both locks held.
        """
        adds: dict[str, set[Edge]] = {}
        for s, p, o in to_add:
            edges = adds.get(s)
            if edges is None:
                edges = adds[s] = set()
            edges.add((p, o))
        removes = [t for t in dict.fromkeys(drop) if t[0] not in doomed]
        change: Change = (sorted(doomed), removes, adds)
        if state is None:
            state = store.write_state(rid, self._writes.get(rid))
        if state is None:
            if not adds:
                return  # no graph to delete from
            state = store.create(rid, change)
        else:
            self._refuse_damaged(store, rid, state.cursor)
            store.cut_torn_tail(rid, state.cursor)
            store.append_change(rid, state, change)
        self._writes[rid] = state
        self._drop_unions(rid)
        self._cursors.pop(rid, None)
        maybe_empty = not adds and state.live - state.uncertain <= _EXACT_BELOW
        if state.compaction_due() or maybe_empty:
            try:  # record by record: this writer never holds the graph
                state = self._writes[rid] = store.compact(rid, state)
            except IndexUnavailableError as exc:  # the data is safe in the log: retry later
                _log.warning("rdflib_graph.compaction_failed", resource=rid, error=str(exc))
                return
            if not state.live:
                store.remove(rid)
                self._forget(rid)

    def _writer_lock(self) -> contextlib.AbstractContextManager[None]:
        self._check_open()
        if self._store is None:
            return contextlib.nullcontext()
        return self._store.writer_lock()


def _materialise(items: object, name: str) -> list[object]:
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise TypeError(f"{name} must be an iterable of items, not {type(items).__name__}")
    return list(items)


def _check_subjects(subjects: object, name: str) -> list[str]:
    out = []
    for s in _materialise(subjects, name):
        out.append(validate_non_empty(s, f"{name} member"))
    return out


def _check_iri(value: object, name: str, rid: str, checked: dict[str, str]) -> str:
    # ``checked`` memoises the IRIs of one write: subjects and predicates repeat.
    if isinstance(value, str) and value in checked:
        return checked[value]
    iri = validate_non_empty(value, name)
    if _IRI_RE.fullmatch(iri) is None:
        raise ValueError(f"{name} is not an absolute IRI: {iri[:80]!r}")
    owner = resource_id_of(iri)
    if owner is not None and owner != rid:
        raise ValueError(f"{name} {iri[:80]!r} names resource {owner}, not {rid}")
    # A plain str (not a subclass) so the stored graphs hold only plain strings;
    # interned, so equal IRIs are one object in memory and once in a snapshot.
    checked[iri] = sys.intern(str(iri))
    return checked[iri]


def _check_triple(triple: object, rid: str, checked: dict[str, str]) -> tuple[str, str, Obj]:
    if not isinstance(triple, tuple) or len(triple) != 3:
        raise TypeError("each triple must be a tuple (subject, predicate, object)")
    s, p, o = triple
    subject = _check_iri(s, "subject", rid, checked)
    predicate = _check_iri(p, "predicate", rid, checked)
    obj: Obj
    if isinstance(o, Literal):
        if not isinstance(o.value, str):
            raise TypeError(f"a literal value must be a str, not {type(o.value).__name__}")
        datatype = None if o.datatype is None else _check_iri(o.datatype, "datatype", rid, checked)
        obj = (str(o.value), datatype)
    elif isinstance(o, str):
        obj = _check_iri(o, "object", rid, checked)
    else:
        raise TypeError(f"an object must be an IRI str or a Literal, not {type(o).__name__}")
    return subject, predicate, obj
