"""Backend Abstraction Layer: the Protocols, their result types, and the
argument checks every implementation shares.

Read side (the seed contract): :class:`TextBackend`, :class:`VectorBackend`,
:class:`GraphBackend`.  Every query takes a *scope*, a ``frozenset`` of
resource ULIDs, and nothing outside it may come back.  ``get_triples`` and
``traverse`` have no scope in the seed; here they take a keyword ``scope``
that implementations over real data require (``None`` is refused with
``TypeError``, never read as "every graph"; the seed's stubs accept it and
return nothing) and
:class:`~cleveragents.domain.models.acms.scope.ScopedView` always passes one.

Write side (used by the indexer): :class:`TextIndex`, :class:`VectorIndex`,
:class:`GraphIndex` add ``upsert`` and ``delete`` per resource.  Each call is
atomic, visible to the next search when it returns, and durable when the
backend has a path.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from cleveragents.domain.models.acms.errors import WalkLimitError
from cleveragents.domain.models.acms.uko import resource_id_of

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "MAX_WALK_TRIPLES",
    "TRAVERSAL_DIRECTIONS",
    "CountedUnits",
    "GraphBackend",
    "GraphIndex",
    "GraphResult",
    "GroupedWrites",
    "IndexUnit",
    "Literal",
    "PreparedWrites",
    "StagedWrites",
    "StoredUnits",
    "TextBackend",
    "TextIndex",
    "TextResult",
    "TraversalDirection",
    "Triple",
    "VectorBackend",
    "VectorIndex",
    "VectorResult",
    "WriteTriple",
    "validate_depth",
    "validate_embedding",
    "validate_non_empty",
    "validate_positive_int",
    "validate_traversal",
    "walk_limit_error",
]

Triple = tuple[str, str, str]


def _check_score(score: object) -> None:
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise TypeError(f"score must be a float, not {type(score).__name__}")
    if not 0.0 <= score <= 1.0:  # also rejects NaN
        raise ValueError(f"score must lie in 0.0..1.0, got {score!r}")


def _check_metadata(metadata: object) -> None:
    if not isinstance(metadata, dict):
        raise TypeError("metadata must be a dict[str, str]")
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError("metadata keys and values must be str")


@dataclass(frozen=True, slots=True)
class TextResult:
    """One full-text match: a unit, its content and a 0..1 relevance score."""

    uko_uri: str
    content: str
    score: float
    metadata: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.uko_uri, str) or not self.uko_uri:
            raise ValueError("uko_uri must be a non-empty string")
        if not isinstance(self.content, str):
            raise TypeError("content must be a str")
        _check_score(self.score)
        _check_metadata(self.metadata)


@dataclass(frozen=True, slots=True)
class VectorResult:
    """One similarity match: a chunk, its content and its cosine similarity."""

    uko_uri: str
    content: str
    score: float
    metadata: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.uko_uri, str) or not self.uko_uri:
            raise ValueError("uko_uri must be a non-empty string")
        if not isinstance(self.content, str):
            raise TypeError("content must be a str")
        _check_score(self.score)
        _check_metadata(self.metadata)


@dataclass(frozen=True, slots=True)
class GraphResult:
    """Triples from a graph query.

    IRIs are plain strings, literals their lexical form, blank nodes ``_:id``.
    ``metadata["boolean"]`` carries the answer of an ASK query.
    """

    triples: list[Triple] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.triples, list):
            raise TypeError("triples must be a list of (subject, predicate, object)")
        for triple in self.triples:
            if (
                not isinstance(triple, tuple)
                or len(triple) != 3
                or not all(isinstance(term, str) for term in triple)
            ):
                raise TypeError("each triple must be a tuple of three str")
        _check_metadata(self.metadata)


# ---------------------------------------------------------------- argument checks


def validate_non_empty(value: object, name: str) -> str:
    """A non-empty ``str`` argument (query, subject, start)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name} must be a non-empty string")
    return value


def validate_positive_int(value: object, name: str) -> int:
    """A positive ``int`` argument; ``bool`` is not an int here."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return value


def validate_depth(value: object) -> int:
    """A non-negative ``int`` traversal depth; ``bool`` is not an int here."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"depth must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"depth must be a non-negative integer, got {value}")
    return value


#: A traversal direction (the type the service's tool schema lists; this
#: module's ``Literal`` is an RDF literal).
TraversalDirection = typing.Literal["out", "in", "both"]
TRAVERSAL_DIRECTIONS: tuple[TraversalDirection, ...] = typing.get_args(TraversalDirection)

#: The most triples a walk may gather before it is stopped (a backend's
#: ``max_rows``): past a hub node (a resource's ``contains`` edges) a walk of
#: depth 4 reaches a whole code base, 911k triples of the standard library.
#: The first hop, the start's own edges, is one node's edges (as
#: ``get_triples``) and is not stopped by local backends.
MAX_WALK_TRIPLES = 10_000


def walk_limit_error(start: str, max_rows: int, hop: int) -> WalkLimitError:
    """The error of a walk stopped at ``hop`` (1-based) with more than
    ``max_rows`` triples: it names the depth that answers, the one before
    the hop that passed the limit."""
    fits = (
        f"ask for depth {hop - 1} or less"
        if hop > 1
        else "the start's own edges are more than that"
    )
    return WalkLimitError(
        f"traverse from {start[:200]!r} passed the limit of {max_rows:,} triples at hop "
        f"{hop}: {fits}, or narrow the walk by direction or predicates",
        start=start,
        max_rows=max_rows,
        hop=hop,
    )


def validate_traversal(direction: object, predicates: object) -> frozenset[str] | None:
    """A traversal ``direction`` (``"out"``, ``"in"`` or ``"both"``) and an
    optional set of predicate IRIs to follow; the predicates as a frozenset
    (``None``: every predicate)."""
    if not isinstance(direction, str):
        raise TypeError(f"direction must be a str, not {type(direction).__name__}")
    if direction not in TRAVERSAL_DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(TRAVERSAL_DIRECTIONS)}")
    if predicates is None:
        return None
    if isinstance(predicates, str) or not isinstance(predicates, set | frozenset | list | tuple):
        raise TypeError("predicates must be a set of predicate IRIs")
    chosen = frozenset(predicates)
    if not chosen:
        raise ValueError("predicates must not be empty (pass None to follow every predicate)")
    for p in chosen:
        if not isinstance(p, str) or not p:
            raise TypeError("every predicate must be a non-empty IRI string")
    return chosen


def validate_embedding(embedding: object, dimension: int | None = None) -> list[float]:
    """A non-empty list of finite floats, of ``dimension`` entries when given.

    Accepts a ``list`` or ``tuple`` of real numbers (not ``bool``), or a 1-D
    numpy array; returns a plain list of floats.
    """
    values: list[object]
    if isinstance(embedding, list | tuple):
        values = list(embedding)
    elif hasattr(embedding, "ndim") and hasattr(embedding, "tolist"):
        if embedding.ndim != 1:
            raise ValueError(f"embedding must be one-dimensional, got ndim={embedding.ndim}")
        values = embedding.tolist()
    else:
        raise TypeError(f"embedding must be a list of floats, not {type(embedding).__name__}")
    if not values:
        raise ValueError("embedding must be a non-empty list of floats")
    out: list[float] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise TypeError(f"embedding values must be floats, not {type(v).__name__}")
        try:
            f = float(v)
        except OverflowError:  # an int beyond the float range
            raise ValueError("embedding values must be finite floats") from None
        if not math.isfinite(f):
            raise ValueError("embedding must not contain NaN or infinity")
        out.append(f)
    if dimension is not None and len(out) != dimension:
        raise ValueError(f"embedding has dimension {len(out)}, the index expects {dimension}")
    return out


# ---------------------------------------------------------------- read side


@runtime_checkable
class TextBackend(Protocol):
    """Full-text search over indexed resource content."""

    def search(
        self,
        query: str,
        *,
        scope: frozenset[str],
        max_results: int = 20,
        syntax: str = "plain",
        path: str | None = None,
        lang: str | None = None,
    ) -> list[TextResult]:
        """Search units of the resources in ``scope``.

        Args:
            query: non-empty query text.  With ``syntax="plain"`` (default)
                any string is valid: it is analysed into terms and never
                parsed, so punctuation is never an error (a string without
                an analysable term finds nothing).  ``syntax="tantivy"``:
                the engine's query language, with its limits.
            scope: frozenset of resource ULIDs; empty selects nothing.
            max_results: positive cap on the number of results.
            syntax: ``"plain"`` or ``"tantivy"`` (see
                :mod:`~cleveragents.domain.models.acms.text_query`).
            path: a glob over the unit's file path (``pkg/**/*.py``): only
                matching units are searched.
            lang: a language name (``python``): only units of that language.

        Returns:
            Results by descending ``score``, each of a resource in ``scope``
            (and matching ``path``/``lang``); ``metadata["match_lines"]`` holds
            the comma-separated file line numbers of the chunk lines holding
            a query term (empty when none, at most 20).

        Raises:
            TypeError: an argument has the wrong type (``scope`` not a frozenset).
            ValueError: empty query, non-positive ``max_results``, a scope member
                that is not a ULID, an unknown syntax or a bad filter, or (tantivy
                syntax) a query the engine cannot parse (:class:`QueryError`).
            IndexUnavailableError: the index cannot be read.
        """
        ...


@runtime_checkable
class VectorBackend(Protocol):
    """Embedding similarity search over chunked resource content."""

    def similarity_search(
        self, embedding: list[float], *, scope: frozenset[str], top_k: int = 20
    ) -> list[VectorResult]:
        """Return the ``top_k`` chunks in ``scope`` most similar to ``embedding``.

        Args:
            embedding: non-empty list of finite floats of the index dimension.
            scope: frozenset of resource ULIDs; empty selects nothing.
            top_k: positive cap on the number of results.

        Returns:
            Results by descending cosine similarity (clamped to 0..1).

        Raises:
            TypeError: an argument has the wrong type.
            ValueError: empty, non-finite or wrong-dimension embedding,
                non-positive ``top_k``, or a scope member that is not a ULID.
            IndexUnavailableError: the index cannot be read.
        """
        ...


@runtime_checkable
class GraphBackend(Protocol):
    """Knowledge-graph queries and traversals over UKO triples."""

    def sparql_query(self, query: str, *, scope: frozenset[str]) -> GraphResult:
        """Evaluate a SPARQL query over the union of the in-scope graphs only.

        CONSTRUCT/DESCRIBE give their triples; SELECT must project exactly three
        variables, read as (s, p, o) rows; ASK gives no triples and
        ``metadata["boolean"]``.

        Raises:
            TypeError: an argument has the wrong type.
            ValueError: empty query, a scope member that is not a ULID, or a query
                that is malformed, an update, or uses a forbidden form
                (``SERVICE``, ``FROM``, ``FROM NAMED``, ``GRAPH``): :class:`QueryError`.
            QueryLimitError: the query ran into its time limit or row cap.
        """
        ...

    def get_triples(self, subject: str, *, scope: frozenset[str] | None = None) -> GraphResult:
        """Triples whose subject is ``subject``, from in-scope graphs only.

        ``scope`` is required by implementations over real data; maintenance
        that means every graph passes all resource ULIDs explicitly.

        Raises:
            TypeError: no scope (real implementations), or a wrong type.
            ValueError: empty subject or a scope member that is not a ULID.
        """
        ...

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

        Returns the triples found within ``depth`` hops (depth 0 = none),
        following only triples of in-scope graphs (``scope`` required as for
        :meth:`get_triples`).  ``direction``: ``"out"`` (the default, the
        seed's walk) follows subject -> IRI object, ``"in"`` object ->
        subject, ``"both"`` either; ``predicates``, a set of predicate IRIs,
        limits the edges followed and returned (``None``: all).  Exact:
        each triple once, each node's edges in sorted order.

        Raises:
            TypeError: no scope (real implementations), or a wrong type.
            ValueError: empty start, negative depth, a scope member not a ULID,
                an unknown direction, an empty predicate set.
            QueryLimitError: past its first hop, the walk gathered more than
                the backend's ``max_rows`` triples (``MAX_WALK_TRIPLES`` by
                default); it stops there, so its cost follows the limit, not
                the graph.
        """
        ...


# ---------------------------------------------------------------- write side


@dataclass(frozen=True, slots=True)
class IndexUnit:
    """One unit to index: a chunk (or file) with its URI, text and metadata.

    The owning resource is the one its ``uko_uri`` names.
    """

    uko_uri: str
    content: str
    metadata: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if resource_id_of(self.uko_uri) is None:
            raise ValueError(f"not a UKO unit URI: {self.uko_uri[:80]!r}")
        if not isinstance(self.content, str):
            raise TypeError("content must be a str")
        for key, value in self.metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError("metadata keys and values must be str")

    @property
    def resource_id(self) -> str:
        """Canonical ULID of the resource that owns this unit."""
        rid = resource_id_of(self.uko_uri)
        assert rid is not None  # checked in __post_init__
        return rid

    def __reduce__(self) -> tuple[object, tuple[str, str, Mapping[str, str]]]:
        # Planning workers send units back by the ten thousand; the default
        # for a slotted dataclass (``fields()`` per object) cost the writer
        # more than the unit's own checks.
        return (_unit_from_pickle, (self.uko_uri, self.content, self.metadata))


def _unit_from_pickle(uko_uri: str, content: str, metadata: Mapping[str, str]) -> IndexUnit:
    """A pickled unit, rebuilt without checking it again: it was checked when
    it was made, and unpickling trusts its input anyway."""
    unit = object.__new__(IndexUnit)
    object.__setattr__(unit, "uko_uri", uko_uri)
    object.__setattr__(unit, "content", content)
    object.__setattr__(unit, "metadata", metadata)
    return unit


@dataclass(frozen=True, slots=True)
class Literal:
    """A literal object in a triple written to the graph (IRIs are plain str)."""

    value: str
    datatype: str | None = None

    def __reduce__(self) -> tuple[type[Literal], tuple[str, str | None]]:
        return (Literal, (self.value, self.datatype))  # see IndexUnit.__reduce__


WriteTriple = tuple[str, str, "str | Literal"]


@runtime_checkable
class TextIndex(TextBackend, Protocol):
    """A :class:`TextBackend` the indexer can write to."""

    def upsert(
        self, resource_id: str, units: Sequence[IndexUnit], *, delete_uris: Iterable[str] = ()
    ) -> None:
        """Atomically delete ``delete_uris`` and add or replace ``units``.

        A unit whose URI is already indexed replaces it.  Every URI must name
        ``resource_id``.

        Raises:
            ValueError: a unit or URI of another resource, or an invalid ULID.
            IndexUnavailableError: the change could not be written.
        """
        ...

    def delete(self, resource_id: str, uris: Iterable[str] | None = None) -> None:
        """Delete the given units of a resource, or all of them when ``uris`` is None."""
        ...

    def unit_uris(self, resource_id: str) -> set[str]:
        """URIs of the units indexed for a resource."""
        ...

    def resource_ids(self) -> set[str]:
        """ULIDs of the resources that have at least one unit."""
        ...

    def close(self) -> None:
        """Release the index's files and memory; further calls fail."""
        ...


@runtime_checkable
class CountedUnits(Protocol):
    """An index that counts a resource's units from its own records, without
    reading the units (``status`` over a large resource)."""

    def unit_count(self, resource_id: str) -> int:
        """``len(unit_uris(resource_id))`` as of the index's last commit.

        Raises:
            ValueError: an invalid ULID.
            IndexUnavailableError: the index cannot be read.
        """
        ...


@runtime_checkable
class StoredUnits(Protocol):
    """A text index that reads its units back (a change of embedder re-embeds
    them without re-reading a file)."""

    def units(self, resource_id: str) -> Iterator[IndexUnit]:
        """Every unit stored for a resource: URI, content and metadata as written.

        Raises:
            NotImplementedError: this index cannot read its units back.
            IndexUnavailableError: the index cannot be read.
        """
        ...


@runtime_checkable
class GroupedWrites(Protocol):
    """A text index that can group the writes of one resource's session."""

    def grouped_writes(self, resource_id: str) -> AbstractContextManager[None]:
        """Within the block, the resource's writes may share engine state
        (Tantivy keeps its writer, so segment merges run in the background
        between commits instead of after each one).  Each write is still
        committed when it returns; leaving the block waits for background
        work and releases what was kept.
        """
        ...


@runtime_checkable
class StagedWrites(Protocol):
    """A text index whose writes of a block become durable together.

    Within ``staged_writes(resource_id)``, each write of the resource is
    applied to the engine but neither committed nor visible to readers until
    ``commit_staged(resource_id)``; leaving the block normally commits what
    is left, leaving it with an exception discards it, as a crash would.
    Fewer commits make fewer, larger segments (Tantivy then merges far less).
    """

    def staged_writes(self, resource_id: str) -> AbstractContextManager[None]:
        """The block (it also groups the writes, as ``grouped_writes`` does).

        Raises:
            ValueError: an invalid ULID, or the resource's writes are
                already grouped.
        """
        ...

    def commit_staged(self, resource_id: str) -> None:
        """Commit the resource's writes staged so far (none: nothing happens).

        Raises:
            IndexUnavailableError: the commit failed; the staged writes are lost.
        """
        ...


@runtime_checkable
class PreparedWrites(Protocol):
    """A text index whose per-unit analysis can be done ahead of the write.

    ``preparer`` is a picklable function of a unit's content (a planning
    worker process runs it); ``upsert_prepared`` writes units with what it
    returned, so the one writer process does not analyse the text itself.
    """

    @property
    def preparer(self) -> Callable[[str], object]:
        """The function to run on each unit's content before the write."""
        ...

    def upsert_prepared(
        self,
        resource_id: str,
        units: Sequence[IndexUnit],
        prepared: Sequence[object],
        *,
        delete_uris: Iterable[str] = (),
    ) -> None:
        """:meth:`TextIndex.upsert` with ``preparer(unit.content)`` (or None,
        to analyse here) for each unit, in order.

        Raises:
            TypeError / ValueError: as ``upsert``, or ``prepared`` is not one
                entry per unit of the preparer's shape.
        """
        ...


@runtime_checkable
class VectorIndex(VectorBackend, Protocol):
    """A :class:`VectorBackend` the indexer can write to."""

    @property
    def dimension(self) -> int:
        """Embedding dimension of the index."""
        ...

    def upsert(
        self,
        resource_id: str,
        units: Sequence[IndexUnit],
        embeddings: npt.NDArray[np.float32],
        *,
        delete_uris: Iterable[str] = (),
    ) -> None:
        """Atomically delete ``delete_uris`` and add or replace ``units``.

        ``embeddings`` has one row per unit, shape ``(len(units), dimension)``;
        rows are L2-normalised by the index.

        Raises:
            ValueError: wrong shape, non-finite or zero rows, or a unit of
                another resource.
            IndexUnavailableError: the change could not be written.
        """
        ...

    def delete(self, resource_id: str, uris: Iterable[str] | None = None) -> None:
        """Delete the given units of a resource, or all of them when ``uris`` is None."""
        ...

    def unit_uris(self, resource_id: str) -> set[str]:
        """URIs of the units indexed for a resource."""
        ...

    def resource_ids(self) -> set[str]:
        """ULIDs of the resources that have at least one unit."""
        ...

    def close(self) -> None:
        """Release the index's files and memory; further calls fail."""
        ...


@runtime_checkable
class GraphIndex(GraphBackend, Protocol):
    """A :class:`GraphBackend` the indexer can write to (one graph per resource)."""

    def upsert(
        self,
        resource_id: str,
        triples: Iterable[WriteTriple],
        *,
        delete_subjects: Iterable[str] = (),
        delete_triples: Iterable[WriteTriple] = (),
    ) -> None:
        """Atomically change one resource's graph.

        Removes every triple whose subject is in ``delete_subjects`` and each
        exact triple in ``delete_triples``, then adds ``triples``; other
        processes see all of it or none of it.

        Raises:
            ValueError: an invalid ULID, or a triple naming another resource.
            IndexUnavailableError: the change could not be written.
        """
        ...

    def delete(self, resource_id: str, subjects: Iterable[str] | None = None) -> None:
        """Remove the triples of the given subjects, or the whole resource graph."""
        ...

    def subjects(self, resource_id: str) -> set[str]:
        """Distinct subjects in a resource's graph."""
        ...

    def resource_ids(self) -> set[str]:
        """ULIDs of the resources that have a non-empty graph."""
        ...

    def close(self) -> None:
        """Release the index's files and memory; further calls fail."""
        ...
