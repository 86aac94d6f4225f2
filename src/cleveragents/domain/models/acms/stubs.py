"""In-memory stub backends: validate every argument, return empty results.

They are the default providers of the DI container, for development and for
tests of code that only needs the Protocols.
"""

from __future__ import annotations

from cleveragents.domain.models.acms.backends import (
    GraphResult,
    TextResult,
    VectorResult,
    validate_depth,
    validate_embedding,
    validate_non_empty,
    validate_positive_int,
    validate_traversal,
)
from cleveragents.domain.models.acms.text_query import text_options
from cleveragents.domain.models.acms.ulids import validate_scope

__all__ = ["InMemoryGraphBackend", "InMemoryTextBackend", "InMemoryVectorBackend"]


def _optional_scope(scope: object) -> None:
    if scope is not None:
        validate_scope(scope)


class InMemoryTextBackend:
    """:class:`TextBackend` stub: returns an empty list; validates args.

    It holds no documents, so the ``syntax``/``path``/``lang`` options are
    validated (an unknown syntax or a bad filter raises as in every backend)
    and have nothing to apply to.
    """

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
        """Validate the arguments and return no results."""
        validate_non_empty(query, "query")
        validate_positive_int(max_results, "max_results")
        validate_scope(scope)
        text_options(syntax, path, lang)
        return []


class InMemoryVectorBackend:
    """:class:`VectorBackend` stub: returns an empty list; validates args.

    ``dimension`` (optional) makes it reject embeddings of another length.
    """

    def __init__(self, dimension: int | None = None) -> None:
        if dimension is not None:
            validate_positive_int(dimension, "dimension")
        self._dimension = dimension

    def similarity_search(
        self, embedding: list[float], *, scope: frozenset[str], top_k: int = 20
    ) -> list[VectorResult]:
        """Validate the arguments and return no results."""
        validate_embedding(embedding, self._dimension)
        validate_positive_int(top_k, "top_k")
        validate_scope(scope)
        return []


class InMemoryGraphBackend:
    """:class:`GraphBackend` stub: returns an empty ``GraphResult``; validates args."""

    def sparql_query(self, query: str, *, scope: frozenset[str]) -> GraphResult:
        """Validate the arguments and return no triples."""
        validate_non_empty(query, "query")
        validate_scope(scope)
        return GraphResult()

    def get_triples(self, subject: str, *, scope: frozenset[str] | None = None) -> GraphResult:
        """Validate the arguments and return no triples."""
        validate_non_empty(subject, "subject")
        _optional_scope(scope)
        return GraphResult()

    def traverse(
        self,
        start: str,
        *,
        depth: int = 2,
        scope: frozenset[str] | None = None,
        direction: str = "out",
        predicates: frozenset[str] | None = None,
    ) -> GraphResult:
        """Validate the arguments and return no triples."""
        validate_non_empty(start, "start")
        validate_depth(depth)
        validate_traversal(direction, predicates)
        _optional_scope(scope)
        return GraphResult()
