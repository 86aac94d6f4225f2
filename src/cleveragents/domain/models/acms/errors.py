"""Errors raised by the ACMS backend layer.

Caller misuse raises the built-in ``ValueError`` / ``TypeError`` the seed
contract names.  Failures inside an engine are translated into this tree, so
no engine exception type ever leaks out of an adapter::

    AcmsError                      root of everything this package raises itself
    ├── QueryError (ValueError)    a query the engine cannot accept (bad syntax,
    │                              forbidden SPARQL form, over a limit)
    │   └── QueryLimitError        a query stopped by a time or row limit
    │       └── QueryTimeoutError  stopped at its time limit (or no worker was
    │                              free before it): too slow now, try again
    ├── CallCancelledError         the caller cancelled the call or went away,
    │                              or the service is stopping
    ├── IndexUnavailableError      an index cannot be opened, read or written
    ├── ResourceListingError       a git resource's files cannot be listed (git
    │                              refused the checkout, is missing, timed out)
    ├── ModelUnavailableError      an embedding model is not installed, fails its
    │                              digest check, or cannot be loaded or run
    ├── BusyError                  another writer holds the data directory
    ├── NotFoundError (LookupError)   an unknown project or resource
    ├── ConflictError (ValueError)    a project or link that already exists
    ├── ScopeError (ValueError)    a call asked for a project, resource or URI
    │                              outside the scope it was given
    └── ScopeViolationError        a result outside the scope reached a check
                                   that must never see one (a bug, never input)

``QueryError`` derives from ``ValueError`` because the seed contract promises a
``ValueError`` for bad query arguments; callers may catch either.
"""

from __future__ import annotations

__all__ = [
    "AcmsError",
    "BusyError",
    "CallCancelledError",
    "ConflictError",
    "IndexUnavailableError",
    "ModelUnavailableError",
    "NotFoundError",
    "QueryError",
    "QueryLimitError",
    "QueryTimeoutError",
    "RepairNeededError",
    "ResourceListingError",
    "ScopeError",
    "ScopeViolationError",
    "WalkLimitError",
]


class AcmsError(Exception):
    """Root of the errors raised by this package."""


class QueryError(AcmsError, ValueError):
    """The query was rejected: bad syntax, a forbidden form, or over a limit."""


class QueryLimitError(QueryError):
    """The query ran into its time limit or row cap and was stopped."""


class QueryTimeoutError(QueryLimitError):
    """The query was stopped at its time limit, or waited that long for a
    free worker: the service was too slow for it now (a service answers 503:
    try again later, or ask less), unlike a row or size cap, which the same
    query reaches every time."""


class CallCancelledError(AcmsError):
    """The call was cancelled: its caller cancelled it or went away, or the
    service is stopping.  Nobody waits for its answer."""


class WalkLimitError(QueryLimitError):
    """A walk passed its triple limit at ``hop`` (1-based): the depth before
    it answers.  ``max_rows`` is the limit, ``start`` the walk's start."""

    # Defaults, so that pickle and copy (message only, then __dict__) work.
    def __init__(self, message: str, *, start: str = "", max_rows: int = 0, hop: int = 0) -> None:
        super().__init__(message)
        self.start = start
        self.max_rows = max_rows
        self.hop = hop


class IndexUnavailableError(AcmsError):
    """An index could not be opened, read or written."""


class RepairNeededError(IndexUnavailableError):
    """An index that only an operator's act makes usable again (a rebuild,
    the right profile): trying again later cannot help, so a long-lived
    writer (``acms watch``) stops on it instead of retrying."""


#: Appended to a message about an index that cannot be opened: what an
#: operator can do when it is damaged.
REBUILD_HINT = (
    " (if it is damaged, `acms reindex --rebuild` builds every index again from the files)"
)


class ResourceListingError(AcmsError):
    """A resource registered as git could not be listed by git.

    Never answered by walking the tree instead: a walk would read the files
    ``.gitignore`` keeps out (build output, local configuration, secrets).
    """


class ScopeError(AcmsError, ValueError):
    """A call named a project, resource or URI outside the scope it was given."""


class ScopeViolationError(AcmsError):
    """A result outside the scope reached a place that must never see one."""


class NotFoundError(AcmsError, LookupError):
    """A project or resource that the registry does not know."""


class ConflictError(AcmsError, ValueError):
    """A project or link that already exists."""


class BusyError(AcmsError):
    """Another reindex holds the data directory's lock."""


class ModelUnavailableError(AcmsError):
    """An embedding model is missing, fails its digest check, or cannot run."""
