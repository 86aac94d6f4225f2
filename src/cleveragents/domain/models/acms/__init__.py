"""ACMS domain model: backend Protocols, result types, scope, URIs, errors.

Pure Python: nothing here imports an engine.
"""

from cleveragents.domain.models.acms.backends import (
    GraphBackend,
    GraphIndex,
    GraphResult,
    IndexUnit,
    Literal,
    TextBackend,
    TextIndex,
    TextResult,
    VectorBackend,
    VectorIndex,
    VectorResult,
)
from cleveragents.domain.models.acms.errors import (
    AcmsError,
    IndexUnavailableError,
    QueryError,
    QueryLimitError,
    ScopeViolationError,
)
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.domain.models.acms.ulids import canonical_ulid, is_ulid, validate_scope

__all__ = [
    "AcmsError",
    "GraphBackend",
    "GraphIndex",
    "GraphResult",
    "IndexUnavailableError",
    "IndexUnit",
    "Literal",
    "QueryError",
    "QueryLimitError",
    "ScopeViolationError",
    "ScopedView",
    "TextBackend",
    "TextIndex",
    "TextResult",
    "VectorBackend",
    "VectorIndex",
    "VectorResult",
    "canonical_ulid",
    "is_ulid",
    "validate_scope",
]
