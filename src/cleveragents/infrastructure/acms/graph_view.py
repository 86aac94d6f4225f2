"""SPARQL reads the in-scope resource graphs in place, through an rdflib store.

rdflib evaluates SPARQL over a :class:`rdflib.Graph`, which asks its store
for the triples matching one pattern at a time.  :class:`ScopeStore` answers
those lookups from the loaded :class:`~.graph_store.ResourceGraph` objects
themselves (plain strings), turning only the matches into rdflib terms.
Before it, every query scope was copied into an rdflib ``Memory`` store
first: over a stdlib-sized resource (911k triples) that copy took 17-37 s and
~1 GB in a new process, before the query was even parsed.

Lookups by pattern:

- subject bound: that subject's edges (``by_subject``);
- subject free, IRI object bound: the object's incoming edges (along the
  predicate, if bound);
- subject free, predicate and literal object bound: the subjects with that
  edge (a reader answers for the predicates its index keys literals of:
  ``uko:name``, ``uko:path``);
- subject free, predicate bound: the subjects having that predicate;
- otherwise: every triple.

A member may also be a :class:`~.graph_store.SubjectReader` (a graph read
by subject from its file, not loaded): it answers the first three kinds, and
a lookup of the last two raises :class:`WholeGraphNeeded`, upon which the
caller loads the graphs and asks again.  A selective query over a large
resource then costs the records it touches, not a load.

The last two indexes live on each :class:`ResourceGraph` (built once, kept
up to date by its writes in O(1) each): :meth:`ScopeStore.prepare` builds
them in the caller, before the query's worker process is forked (with the
backend's lock held, so the child sees no half-applied write), and a
long-lived process builds them once per loaded graph, not once per query.

A union of several resources holds each triple once, as a ``Memory`` union
did: a triple found in an earlier member graph is not given again.  Only
subjects present in more than one member need that check (a uko subject
belongs to one resource); the store keeps a superset of those subjects
(over readers, which cannot list their subjects: every subject outside
``uko:``).

Read-only: the store is read by the forked worker, never written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import cast

from rdflib import Literal, URIRef
from rdflib.store import Store

from cleveragents._process import one_question
from cleveragents.domain.models.acms.uko import resource_id_of
from cleveragents.infrastructure.acms.graph_store import (
    Obj,
    Readable,
    ResourceGraph,
    SubjectReader,
)

__all__ = ["ScopeStore", "WholeGraphNeeded"]

_Key = tuple[str, str, Obj]
_NO_CONTEXTS: tuple[()] = ()


class _NoMatch(Exception):
    """A pattern term no stored triple holds (a blank node, a tagged literal)."""


class WholeGraphNeeded(Exception):
    """A lookup a graph read by subject cannot answer (by predicate alone,
    or of every triple): the query must run over loaded graphs."""


def _rdf_literal(o: tuple[str, str | None]) -> Literal:
    """The rdflib literal of a stored literal; ``normalize=False`` keeps the
    lexical form exactly as written."""
    return Literal(o[0], datatype=None if o[1] is None else URIRef(o[1]), normalize=False)


def _key_of(term: object) -> Obj | None:
    """A pattern term as the stored value it matches (``None``: any).

    Raises:
        _NoMatch: no stored triple holds such a term.
    """
    if term is None:
        return None
    if isinstance(term, URIRef):
        return str(term)
    if isinstance(term, Literal) and term.language is None:
        return (str(term), None if term.datatype is None else str(term.datatype))
    raise _NoMatch


def _iri_key(term: object) -> str | None:
    key = _key_of(term)
    if key is not None and not isinstance(key, str):
        raise _NoMatch  # a literal never is a subject or a predicate
    return key


def _matches(graph: Readable, s: str | None, p: str | None, o: Obj | None) -> Iterator[_Key]:
    """The triples of one graph matching a pattern of stored values (None: any).

    Raises:
        WholeGraphNeeded: neither the subject nor an object ``graph``
            keys is bound, and ``graph`` is not loaded.
    """
    if s is not None:
        edges = graph.by_subject.get(s)
        if not edges:
            return
        if p is not None and o is not None:
            if (p, o) in edges:
                yield s, p, o
            return
        for pp, oo in edges:
            if (p is None or pp == p) and (o is None or oo == o):
                yield s, pp, oo
        return
    if isinstance(o, str):
        for ss, pp in graph.incoming_of(o, None if p is None else frozenset((p,))):
            yield ss, pp, o  # along ``p`` only, if bound
        return
    if not isinstance(graph, ResourceGraph):
        if (
            p is not None
            and o is not None
            and isinstance(graph, SubjectReader)
            and graph.keys_literals(p)
        ):  # ``?s uko:name "Graph"``: the records adding that edge
            for ss in graph.subjects_with_literal(p, o):
                yield ss, p, o
            return
        raise WholeGraphNeeded
    by_subject = graph.by_subject
    if p is not None:
        for ss in graph.subjects_with(p):
            if o is not None:
                if (p, o) in by_subject[ss]:
                    yield ss, p, o
                continue
            for pp, oo in by_subject[ss]:
                if pp == p:
                    yield ss, p, oo
        return
    for ss, edges in by_subject.items():
        for pp, oo in edges:
            if o is None or oo == o:
                yield ss, pp, oo


class ScopeStore(Store):
    """A read-only rdflib store over the graphs of one query scope."""

    context_aware = False
    formula_aware = False
    graph_aware = False
    transaction_aware = False

    def __init__(self, graphs: Sequence[Readable]) -> None:
        super().__init__()
        self._graphs = tuple(graphs)
        # Every member loaded (else some are read by subject).
        self._loaded = all(isinstance(g, ResourceGraph) for g in self._graphs)
        # Subjects that may be in more than one member (a superset).
        self._shared: set[str] = set()
        self.reshare()
        self._iris: dict[str, URIRef] = {}

    @property
    def graphs(self) -> tuple[Readable, ...]:
        return self._graphs

    def prepare(self) -> None:
        """Build the loaded members' predicate and incoming-edge indexes (in
        the caller, so that the forked worker inherits them and later
        queries keep them).  Not in a process that asks one question (the
        CLI): there the worker builds only what its query needs, ~0.5 s and
        ~50 MB less of a stdlib-sized graph's 1.7 s and 366 MB."""
        if one_question():
            return
        for graph in self._graphs:
            if isinstance(graph, ResourceGraph):
                graph.build_indexes()

    def reshare(self) -> None:
        """Find the subjects in more than one member anew (O(subjects)): for
        a view that may have missed an :meth:`added`."""
        shared: set[str] = set()
        if len(self._graphs) > 1 and self._loaded:
            seen: set[str] = set()
            for graph in self._graphs:
                assert isinstance(graph, ResourceGraph)
                for s in graph.by_subject:
                    if s in seen:
                        shared.add(s)
                    else:
                        seen.add(s)
        self._shared = shared

    def added(self, graph: ResourceGraph, subjects: Iterable[str]) -> None:
        """A member gained triples of ``subjects``: keep the shared set a superset."""
        if len(self._graphs) < 2 or not self._loaded:
            return
        for s in subjects:
            if s not in self._shared and any(
                other is not graph and s in other.by_subject for other in self._graphs
            ):
                self._shared.add(s)

    def _iri(self, value: str) -> URIRef:
        iri = self._iris.get(value)
        if iri is None:
            iri = self._iris[value] = URIRef(value)
        return iri

    def _match(self, s: str | None, p: str | None, o: Obj | None) -> Iterator[_Key]:
        shared = self._shared
        for i, graph in enumerate(self._graphs):
            earlier = self._graphs[:i]
            for key in _matches(graph, s, p, o):
                if (
                    earlier
                    and (key[0] in shared if self._loaded else resource_id_of(key[0]) is None)
                    and any((key[1], key[2]) in g.by_subject.get(key[0], ()) for g in earlier)
                ):
                    continue  # given by an earlier member
                yield key

    def triples(
        self, triple_pattern: tuple[object, object, object], context: object = None
    ) -> Iterator[tuple[tuple[URIRef, URIRef, URIRef | Literal], Iterator[None]]]:
        try:
            s, p, o = (
                _iri_key(triple_pattern[0]),
                _iri_key(triple_pattern[1]),
                _key_of(triple_pattern[2]),
            )
        except _NoMatch:
            return
        iri = self._iri
        for ss, pp, oo in self._match(s, p, o):
            obj = iri(oo) if isinstance(oo, str) else _rdf_literal(oo)
            yield (iri(ss), iri(pp), obj), iter(_NO_CONTEXTS)

    def __len__(self, context: object = None) -> int:
        if not self._loaded:
            raise WholeGraphNeeded
        if len(self._graphs) == 1:
            return cast(ResourceGraph, self._graphs[0]).size
        return sum(1 for _ in self._match(None, None, None))

    def add(self, triple: object, context: object, quoted: bool = False) -> None:
        raise TypeError("a query scope's graph is read-only")

    def remove(self, triple: object, context: object = None) -> None:
        raise TypeError("a query scope's graph is read-only")
