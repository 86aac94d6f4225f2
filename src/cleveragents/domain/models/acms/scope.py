"""``ScopedView``: the three backends seen through one scope.

Strategies receive a view, never a backend: the view passes its scope to
every call (including ``get_triples`` and ``traverse``, which take it as an
optional keyword), and as a last line of defence drops and logs any result
whose resource lies outside the scope.  The backends enforce scope inside the
engine; the view's filter only ever fires if one of them has a bug.

A graph backend written to the seed's signatures, ``get_triples(subject)``
and ``traverse(start, *, depth)`` without ``scope``, is called the seed's
way, and the view's filter (the seed's ``resource_filter``) is then what
enforces the scope: ``get_triples`` keeps the in-scope triples, and
``traverse`` keeps those reachable from ``start`` through in-scope triples
alone, within ``depth`` hops (a path through an out-of-scope node is not
followed).  ``predicates`` is applied the same way; ``direction`` other than
``"out"`` needs a backend that takes it.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import TypeVar

from cleveragents._logging import get_logger
from cleveragents.domain.models.acms.backends import (
    GraphBackend,
    GraphResult,
    TextBackend,
    TextResult,
    Triple,
    VectorBackend,
    VectorResult,
)
from cleveragents.domain.models.acms.uko import SCHEME, resource_id_of
from cleveragents.domain.models.acms.ulids import validate_scope

__all__ = ["ScopedView", "make_resource_filter"]

_log = get_logger("cleveragents.acms.scope")

_R = TypeVar("_R", TextResult, VectorResult)


def make_resource_filter(scope: frozenset[str]) -> Callable[[str], bool]:
    """Predicate over URIs: True when the URI names a resource in ``scope``."""
    canonical = validate_scope(scope)

    def resource_filter(uri: str) -> bool:
        return resource_id_of(uri) in canonical

    return resource_filter


def _triple_in_scope(triple: Triple, scope: frozenset[str]) -> bool:
    # Any term that names a resource must name an in-scope one; module URIs and
    # literals name none.
    for term in triple:
        rid = resource_id_of(term)
        if rid is not None and rid not in scope:
            return False
    return True


_ENDS = ("", "/", "#")


def _term_admitted(term: str, scope: frozenset[str]) -> bool:
    """:func:`_triple_in_scope`'s rule for one term, with fast paths of the
    same verdict: a term outside the uko scheme names no resource; a uko://
    term whose authority, upper-cased, is a scope member names that member
    (or, not ASCII, no resource at all)."""
    head = term[:6]
    if head != SCHEME and head.lower() != SCHEME:
        return True
    if term[6:32].upper() in scope and term[32:33] in _ENDS:
        return True
    rid = resource_id_of(term)
    return rid is None or rid in scope


def _triples_in_scope(triples: list[Triple], scope: frozenset[str]) -> list[Triple]:
    """The triples every term of which :func:`_triple_in_scope` admits.

    The same rule, decided once per distinct term: the terms of a walk's
    answer repeat (a subject has many edges), and parsing each occurrence
    was most of a warm ``traverse``.
    """
    refused = {
        term
        for term in {t for triple in triples for t in triple}
        if not _term_admitted(term, scope)
    }
    if not refused:
        return triples
    return [triple for triple in triples if refused.isdisjoint(triple)]


_TAKES_SCOPE: dict[object, bool] = {}


def _takes_scope(method: Callable[..., object]) -> bool:
    """Whether a backend method accepts ``scope=`` (named, or ``**kwargs``);
    cached per function."""
    key = getattr(method, "__func__", method)
    known = _TAKES_SCOPE.get(key)
    if known is None:
        try:
            params = inspect.signature(method).parameters.values()
        except (TypeError, ValueError):  # no signature to read: assume today's Protocol
            known = True
        else:
            known = any(
                p.name == "scope" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params
            )
        if len(_TAKES_SCOPE) < 1024:
            _TAKES_SCOPE[key] = known
    return known


def _reachable(
    triples: list[Triple], start: str, depth: int, predicates: frozenset[str] | None
) -> list[Triple]:
    """The triples an outward breadth-first walk from ``start`` reaches over
    ``triples`` alone within ``depth`` hops (only ``predicates``' edges when
    given), in their given order."""
    edges: dict[str, list[Triple]] = {}
    for triple in triples:
        if predicates is None or triple[1] in predicates:
            edges.setdefault(triple[0], []).append(triple)
    reached: set[Triple] = set()
    seen = {start}
    frontier = [start]
    for _ in range(depth):
        following: list[str] = []
        for node in frontier:
            for triple in edges.get(node, ()):
                reached.add(triple)
                if triple[2] not in seen:
                    seen.add(triple[2])
                    following.append(triple[2])
        frontier = following
        if not frontier:
            break
    return [t for t in triples if t in reached]


class ScopedView:
    """The text, vector and graph backends restricted to one scope."""

    __slots__ = ("_graph", "_scope", "_text", "_vector", "resource_filter")

    def __init__(
        self,
        text: TextBackend,
        vector: VectorBackend,
        graph: GraphBackend,
        scope: frozenset[str],
    ) -> None:
        self._scope = validate_scope(scope)
        self._text = text
        self._vector = vector
        self._graph = graph
        self.resource_filter: Callable[[str], bool] = make_resource_filter(self._scope)

    @property
    def scope(self) -> frozenset[str]:
        """The canonical scope of this view."""
        return self._scope

    def search(
        self,
        query: str,
        *,
        max_results: int = 20,
        syntax: str = "plain",
        path: str | None = None,
        lang: str | None = None,
    ) -> list[TextResult]:
        """Full-text search restricted to the view's scope.

        The seed's call (``query``, ``max_results``) reaches any backend
        unchanged; the options are passed only when one differs from its
        default (see ``TextBackend.search``).
        """
        if syntax == "plain" and path is None and lang is None:
            results = self._text.search(query, scope=self._scope, max_results=max_results)
        else:
            results = self._text.search(
                query,
                scope=self._scope,
                max_results=max_results,
                syntax=syntax,
                path=path,
                lang=lang,
            )
        return self._keep(results, "text")

    def similarity_search(self, embedding: list[float], *, top_k: int = 20) -> list[VectorResult]:
        """Similarity search restricted to the view's scope."""
        results = self._vector.similarity_search(embedding, scope=self._scope, top_k=top_k)
        return self._keep(results, "vector")

    def sparql_query(self, query: str) -> GraphResult:
        """SPARQL over the in-scope graphs only."""
        return self._keep_triples(self._graph.sparql_query(query, scope=self._scope))

    def get_triples(self, subject: str) -> GraphResult:
        """Triples of ``subject`` from in-scope graphs."""
        method = self._graph.get_triples
        if not _takes_scope(method):  # the seed's signature: the view's filter scopes it
            return self._scoped_by_view(method(subject))
        return self._keep_triples(method(subject, scope=self._scope))

    def traverse(
        self,
        start: str,
        *,
        depth: int = 2,
        direction: str = "out",
        predicates: frozenset[str] | None = None,
    ) -> GraphResult:
        """Breadth-first traversal over in-scope triples (see ``GraphBackend.traverse``)."""
        method = self._graph.traverse
        if not _takes_scope(method):
            if direction != "out":
                raise TypeError(
                    f"direction={direction!r} needs a graph backend whose traverse takes it; "
                    f"{type(self._graph).__name__}.traverse has the seed's (start, *, depth)"
                )
            walked = self._scoped_by_view(method(start, depth=depth))
            kept = _reachable(walked.triples, start, depth, predicates)
            return (
                walked
                if len(kept) == len(walked.triples)
                else (dataclasses.replace(walked, triples=kept))
            )
        if direction == "out" and predicates is None:  # the seed's call, for any backend
            return self._keep_triples(self._graph.traverse(start, depth=depth, scope=self._scope))
        return self._keep_triples(
            self._graph.traverse(
                start, depth=depth, scope=self._scope, direction=direction, predicates=predicates
            )
        )

    def _keep(self, results: list[_R], backend: str) -> list[_R]:
        kept = [r for r in results if self.resource_filter(r.uko_uri)]
        if len(kept) != len(results):
            _log.error(
                "acms.scope.dropped_out_of_scope",
                backend=backend,
                dropped=len(results) - len(kept),
            )
        return kept

    def _scoped_by_view(self, result: GraphResult) -> GraphResult:
        """A seed-signature backend's answer, which knows no scope: the
        view's filter keeps the in-scope triples (dropping is its job here,
        not a backend's bug)."""
        kept = _triples_in_scope(result.triples, self._scope)
        if len(kept) == len(result.triples):
            return result
        _log.debug("acms.scope.filtered_by_view", dropped=len(result.triples) - len(kept))
        return dataclasses.replace(result, triples=kept)

    def _keep_triples(self, result: GraphResult) -> GraphResult:
        kept = _triples_in_scope(result.triples, self._scope)
        if len(kept) == len(result.triples):
            return result
        _log.error(
            "acms.scope.dropped_out_of_scope",
            backend="graph",
            dropped=len(result.triples) - len(kept),
        )
        return dataclasses.replace(result, triples=kept)
