"""Projects and resources: the records the hydrator reads.

A *project* has a namespaced name (``local/my-project``) and links to
resources.  A *resource* is a directory or git checkout on disk, identified
by a ULID assigned when it is registered.  The hydrator duck-types its
collaborators: ``project_repository.get(name)`` returns a :class:`Project`
or None, ``resource_registry.get(resource_id)`` a :class:`Resource` or None.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "RESOURCE_TYPES",
    "Project",
    "ProjectRepository",
    "Resource",
    "ResourceRegistry",
    "validate_project_name",
]

RESOURCE_TYPES = ("git-checkout", "git", "directory")

# namespace/name: lower-case letters, digits, '.', '_', '-'; each part starts
# with a letter or digit.
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}/[a-z0-9][a-z0-9._-]{0,126}")


def validate_project_name(name: object) -> str:
    """Check a namespaced project name such as ``local/my-project``.

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: it is not ``namespace/name`` in lower case letters, digits,
            ``.``, ``_`` and ``-``.
    """
    if not isinstance(name, str):
        raise TypeError(f"a project name must be a str, not {type(name).__name__}")
    if _NAME_RE.fullmatch(name) is None:
        raise ValueError(
            f"invalid project name {name[:80]!r}: expected 'namespace/name' "
            "(lower-case letters, digits, '.', '_', '-'), e.g. 'local/my-project'"
        )
    return name


@dataclass(frozen=True, slots=True)
class Project:
    """A namespaced project and the ULIDs of its linked resources."""

    name: str
    resource_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Resource:
    """A registered resource: where it lives and how to list its files.

    ``secret_filter`` and ``secret_allow`` are the operator's override of the
    default secret deny-list (off entirely, or globs let through);
    ``secrets_skipped`` is how many files the last indexing left out as
    secrets (None before the first).
    """

    resource_id: str
    location: str
    resource_type: str
    last_indexed_at: str | None = None
    secret_filter: bool = True
    secret_allow: tuple[str, ...] = ()
    secrets_skipped: int | None = None


@runtime_checkable
class ProjectRepository(Protocol):
    """Namespaced projects and their links to resources."""

    def add(self, name: str) -> Project:
        """Create a project; ``ConflictError`` if it exists, ``ValueError`` if the name is bad."""
        ...

    def get(self, name: str) -> Project | None:
        """The project called ``name``, or None."""
        ...

    def list(self) -> list[Project]:
        """Every project, by name."""
        ...

    def remove(self, name: str) -> None:
        """Delete a project and its links; ``NotFoundError`` if unknown."""
        ...

    def link(self, name: str, resource_id: str) -> None:
        """Link a registered resource to a project; ``NotFoundError`` if either is unknown."""
        ...


@runtime_checkable
class ResourceRegistry(Protocol):
    """Registered resources under their ULIDs."""

    def register(
        self,
        location: str | os.PathLike[str],
        resource_type: str,
        *,
        secret_filter: bool = True,
        secret_allow: tuple[str, ...] = (),
    ) -> Resource:
        """Register a directory under a fresh ULID; ``ValueError`` on a bad path,
        type or allow-pattern."""
        ...

    def get(self, resource_id: str) -> Resource | None:
        """The resource with this ULID, or None."""
        ...

    def list(self) -> list[Resource]:
        """Every resource, by ULID."""
        ...

    def remove(self, resource_id: str) -> None:
        """Forget a resource; ``NotFoundError`` if unknown."""
        ...

    def set_secret_policy(
        self, resource_id: str, *, secret_filter: bool = True, secret_allow: tuple[str, ...] = ()
    ) -> Resource:
        """Replace a resource's secret override; ``NotFoundError`` if unknown,
        ``ValueError`` on a bad allow-pattern."""
        ...

    def mark_indexed(
        self, resource_id: str, when: str | None = None, *, secrets_skipped: int | None = None
    ) -> None:
        """Record when the resource was last indexed (and how many secret files
        that run left out, when given)."""
        ...
