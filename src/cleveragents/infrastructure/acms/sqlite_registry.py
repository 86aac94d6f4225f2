"""Projects and resources persisted in one SQLite database.

``NamespacedProjectRepository`` and ``ResourceRegistryService`` share the file
``<data_dir>/registry.sqlite3``.  Each operation opens a short connection
(WAL, a busy timeout), so several processes (agent hosts, ``reindex``) can use
the same database safely.

The secret-filter columns (``secret_filter``, ``secret_allow`` as a JSON list,
``secrets_skipped``) are added to a registry created before they existed the
first time it is opened; old rows get the default filter.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from cleveragents.domain.models.acms.errors import (
    ConflictError,
    IndexUnavailableError,
    NotFoundError,
)
from cleveragents.domain.models.acms.registry import (
    RESOURCE_TYPES,
    Project,
    Resource,
    validate_project_name,
)
from cleveragents.domain.models.acms.secret_filter import validate_allow_patterns
from cleveragents.domain.models.acms.ulids import canonical_ulid, new_ulid

__all__ = ["NamespacedProjectRepository", "ResourceRegistryService", "open_registry"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS projects (
    name TEXT PRIMARY KEY,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS resources (
    resource_id TEXT PRIMARY KEY,
    location TEXT NOT NULL,
    resource_type TEXT NOT NULL,
    created_at TEXT NOT NULL,
    last_indexed_at TEXT,
    secret_filter INTEGER NOT NULL DEFAULT 1,
    secret_allow TEXT NOT NULL DEFAULT '[]',
    secrets_skipped INTEGER
);
CREATE TABLE IF NOT EXISTS project_resources (
    project TEXT NOT NULL REFERENCES projects(name) ON DELETE CASCADE,
    resource_id TEXT NOT NULL REFERENCES resources(resource_id) ON DELETE CASCADE,
    PRIMARY KEY (project, resource_id)
);
"""


# Columns added after the first release: (name, declaration) for ALTER TABLE.
_ADDED_COLUMNS = (
    ("secret_filter", "INTEGER NOT NULL DEFAULT 1"),
    ("secret_allow", "TEXT NOT NULL DEFAULT '[]'"),
    ("secrets_skipped", "INTEGER"),
)
_RESOURCE_COLUMNS = (
    "resource_id, location, resource_type, last_indexed_at, "
    "secret_filter, secret_allow, secrets_skipped"
)


def _migrate(conn: sqlite3.Connection) -> None:
    have = {row[1] for row in conn.execute("PRAGMA table_info(resources)")}
    for name, declaration in _ADDED_COLUMNS:
        if name not in have:
            conn.execute(f"ALTER TABLE resources ADD COLUMN {name} {declaration}")


def _resource(row: tuple[object, ...]) -> Resource:
    rid, location, rtype, indexed, enabled, allow, skipped = row
    try:
        patterns = tuple(str(p) for p in json.loads(str(allow)))
    except (ValueError, TypeError):
        patterns = ()  # a hand-edited row: the default list still applies
    return Resource(
        str(rid),
        str(location),
        str(rtype),
        None if indexed is None else str(indexed),
        secret_filter=bool(enabled),
        secret_allow=patterns,
        secrets_skipped=None if skipped is None else int(str(skipped)),
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


#: What to do with a registry SQLite finds damaged: unlike the indexes, no
#: rebuild brings back the projects and resources it holds.
_DAMAGED_HINT = (
    " (it holds the projects and resources, which no reindex rebuilds: restore it from "
    "a backup, or remove it and register the projects and resources again)"
)
_DAMAGE_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


def _damage_hint(exc: BaseException) -> str:
    """:data:`_DAMAGED_HINT` when ``exc`` says the file is damaged, else ''."""
    code = getattr(exc, "sqlite_errorcode", None)
    return _DAMAGED_HINT if code is not None and code & 0xFF in _DAMAGE_CODES else ""


def _readonly_hint(path: Path, exc: BaseException) -> str:
    """Why a registry cannot be written, when it is read-only, else ''.

    SQLite says only "unable to open database file" when it cannot create its
    ``-wal``/``-shm`` files beside the registry (a read-only mount, a
    directory the user cannot write), and "attempt to write a readonly
    database" for a file it could open only for reading.
    """
    directory = path.parent
    if directory.is_dir() and not os.access(directory, os.W_OK):
        return (
            f" (the data directory is read-only: {directory}; acms writes there "
            "even to answer a query)"
        )
    code = getattr(exc, "sqlite_errorcode", None)
    if (code is not None and code & 0xFF == sqlite3.SQLITE_READONLY) or (
        "readonly database" in str(exc)
    ):
        return f" (the registry is read-only: {path}; acms writes it even to answer a query)"
    return ""


def _hints(path: Path, exc: BaseException) -> str:
    return f"{_damage_hint(exc)}{_readonly_hint(path, exc)}"


class _Database:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        existed = self.path.exists()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(_SCHEMA)
                _migrate(conn)
            finally:
                conn.close()
        except (OSError, sqlite3.Error) as exc:
            verb = "open" if existed else "create"
            raise IndexUnavailableError(
                f"cannot {verb} the registry at {self.path}: {exc}{_hints(self.path, exc)}"
            ) from exc

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        try:
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        except sqlite3.Error as exc:
            raise IndexUnavailableError(
                f"cannot open the registry at {self.path}: {exc}{_hints(self.path, exc)}"
            ) from exc
        try:
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("BEGIN IMMEDIATE")
            yield conn
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error) and not isinstance(exc, sqlite3.IntegrityError):
                raise IndexUnavailableError(
                    f"registry {self.path}: {exc}{_hints(self.path, exc)}"
                ) from exc
            raise
        finally:
            conn.close()


def open_registry(
    db_path: str | os.PathLike[str],
) -> tuple[NamespacedProjectRepository, ResourceRegistryService]:
    """The project repository and resource registry over one database file."""
    return NamespacedProjectRepository(db_path), ResourceRegistryService(db_path)


class NamespacedProjectRepository:
    """Projects with namespaced names (``local/my-project``) and their links."""

    def __init__(self, db_path: str | os.PathLike[str]) -> None:
        self._db = _Database(db_path)

    def add(self, name: str) -> Project:
        """Create a project.

        Raises:
            ValueError: invalid name; :class:`ConflictError` if it exists.
        """
        validate_project_name(name)
        with self._db.connect() as conn:
            try:
                conn.execute("INSERT INTO projects VALUES (?, ?)", (name, _now()))
            except sqlite3.IntegrityError:
                raise ConflictError(f"project {name!r} already exists") from None
        return Project(name)

    def get(self, name: str) -> Project | None:
        """The project called ``name`` with its resource ULIDs, or None."""
        try:
            validate_project_name(name)
        except (TypeError, ValueError):
            return None  # no stored project can have an invalid name
        with self._db.connect() as conn:
            if conn.execute("SELECT 1 FROM projects WHERE name = ?", (name,)).fetchone() is None:
                return None
            rows = conn.execute(
                "SELECT resource_id FROM project_resources WHERE project = ? ORDER BY resource_id",
                (name,),
            ).fetchall()
        return Project(name, tuple(r[0] for r in rows))

    def list(self) -> list[Project]:
        """Every project, by name."""
        with self._db.connect() as conn:
            names = [r[0] for r in conn.execute("SELECT name FROM projects ORDER BY name")]
            links = conn.execute(
                "SELECT project, resource_id FROM project_resources ORDER BY resource_id"
            ).fetchall()
        by_name: dict[str, list[str]] = {n: [] for n in names}
        for project, rid in links:
            by_name[project].append(rid)
        return [Project(n, tuple(by_name[n])) for n in names]

    def remove(self, name: str) -> None:
        """Delete a project and its links (the resources stay registered).

        Raises:
            TypeError / ValueError: an invalid name.  NotFoundError: no such project.
        """
        validate_project_name(name)
        with self._db.connect() as conn:
            if conn.execute("DELETE FROM projects WHERE name = ?", (name,)).rowcount == 0:
                raise NotFoundError(f"no project named {name!r}")

    def link(self, name: str, resource_id: str) -> None:
        """Link a registered resource to a project (idempotent).

        Raises:
            NotFoundError: unknown project or resource.
        """
        validate_project_name(name)
        rid = canonical_ulid(resource_id)
        with self._db.connect() as conn:
            if conn.execute("SELECT 1 FROM projects WHERE name = ?", (name,)).fetchone() is None:
                raise NotFoundError(f"no project named {name!r}")
            known = conn.execute("SELECT 1 FROM resources WHERE resource_id = ?", (rid,))
            if known.fetchone() is None:
                raise NotFoundError(f"no resource {rid}")
            conn.execute("INSERT OR IGNORE INTO project_resources VALUES (?, ?)", (name, rid))


class ResourceRegistryService:
    """Registered resources: location on disk and type, under a fresh ULID."""

    def __init__(self, db_path: str | os.PathLike[str]) -> None:
        self._db = _Database(db_path)

    def register(
        self,
        location: str | os.PathLike[str],
        resource_type: str,
        *,
        secret_filter: bool = True,
        secret_allow: tuple[str, ...] = (),
    ) -> Resource:
        """Register a directory and return it with its new ULID.

        Args:
            location: The directory (resolved to an absolute path).
            resource_type: One of ``RESOURCE_TYPES``.
            secret_filter: False turns the secret deny-list off for it.
            secret_allow: Globs of files to let through the deny-list.

        Raises:
            ValueError: unknown resource type, ``location`` is not a directory,
                or a bad allow-pattern.  TypeError: a pattern that is not a str.
        """
        if resource_type not in RESOURCE_TYPES:
            known = ", ".join(RESOURCE_TYPES)
            raise ValueError(f"unknown resource type {resource_type!r}; expected one of {known}")
        if not isinstance(secret_filter, bool):
            raise TypeError(f"secret_filter must be a bool, not {type(secret_filter).__name__}")
        if isinstance(secret_allow, str):
            raise TypeError("secret_allow must be a sequence of globs, not one str")
        allow = validate_allow_patterns(secret_allow)
        path = Path(location).expanduser().resolve()
        if not path.is_dir():
            raise ValueError(f"not a directory: {path}")
        resource = Resource(
            new_ulid(),
            str(path),
            resource_type,
            secret_filter=secret_filter,
            secret_allow=allow,
        )
        with self._db.connect() as conn:
            conn.execute(
                f"INSERT INTO resources ({_RESOURCE_COLUMNS}, created_at) "
                "VALUES (?, ?, ?, NULL, ?, ?, NULL, ?)",
                (
                    resource.resource_id,
                    resource.location,
                    resource_type,
                    int(secret_filter),
                    json.dumps(list(allow)),
                    _now(),
                ),
            )
        return resource

    def get(self, resource_id: str) -> Resource | None:
        """The resource with this ULID (any case), or None if unknown or malformed."""
        try:
            rid = canonical_ulid(resource_id)
        except (TypeError, ValueError):
            return None
        with self._db.connect() as conn:
            row = conn.execute(
                f"SELECT {_RESOURCE_COLUMNS} FROM resources WHERE resource_id = ?",
                (rid,),
            ).fetchone()
        return None if row is None else _resource(row)

    def list(self) -> list[Resource]:
        """Every registered resource, by ULID (so by registration time)."""
        with self._db.connect() as conn:
            rows = conn.execute(
                f"SELECT {_RESOURCE_COLUMNS} FROM resources ORDER BY resource_id"
            ).fetchall()
        return [_resource(r) for r in rows]

    def remove(self, resource_id: str) -> None:
        """Forget a resource and its project links.

        Raises:
            ValueError: malformed ULID; :class:`NotFoundError`: unknown resource.
        """
        rid = canonical_ulid(resource_id)
        with self._db.connect() as conn:
            if conn.execute("DELETE FROM resources WHERE resource_id = ?", (rid,)).rowcount == 0:
                raise NotFoundError(f"no resource {rid}")

    def set_secret_policy(
        self, resource_id: str, *, secret_filter: bool = True, secret_allow: tuple[str, ...] = ()
    ) -> Resource:
        """Replace a resource's secret override (the default list when called
        with no keyword) and return the updated resource.

        Raises:
            ValueError: malformed ULID or bad allow-pattern.  TypeError: a
            pattern or flag of the wrong type.  NotFoundError: unknown resource.
        """
        rid = canonical_ulid(resource_id)
        if not isinstance(secret_filter, bool):
            raise TypeError(f"secret_filter must be a bool, not {type(secret_filter).__name__}")
        if isinstance(secret_allow, str):
            raise TypeError("secret_allow must be a sequence of globs, not one str")
        allow = validate_allow_patterns(secret_allow)
        with self._db.connect() as conn:
            updated = conn.execute(
                "UPDATE resources SET secret_filter = ?, secret_allow = ? WHERE resource_id = ?",
                (int(secret_filter), json.dumps(list(allow)), rid),
            )
            if updated.rowcount == 0:
                raise NotFoundError(f"no resource {rid}")
            row = conn.execute(
                f"SELECT {_RESOURCE_COLUMNS} FROM resources WHERE resource_id = ?", (rid,)
            ).fetchone()
        return _resource(row)

    def mark_indexed(
        self, resource_id: str, when: str | None = None, *, secrets_skipped: int | None = None
    ) -> None:
        """Record when a resource was last indexed (ISO 8601, UTC), and how many
        files that run left out as secrets (kept as it was when None)."""
        rid = canonical_ulid(resource_id)
        if when is not None and not isinstance(when, str):
            raise TypeError(f"when must be an ISO 8601 str, not {type(when).__name__}")
        if secrets_skipped is not None and (
            not isinstance(secrets_skipped, int)
            or isinstance(secrets_skipped, bool)
            or secrets_skipped < 0
        ):
            raise ValueError(f"secrets_skipped must be an int >= 0, got {secrets_skipped!r}")
        with self._db.connect() as conn:
            conn.execute(
                "UPDATE resources SET last_indexed_at = ?, "
                "secrets_skipped = COALESCE(?, secrets_skipped) WHERE resource_id = ?",
                (when or _now(), secrets_skipped, rid),
            )
