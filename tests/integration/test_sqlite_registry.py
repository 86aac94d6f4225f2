"""Projects and resources in SQLite: validation, links, persistence."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from cleveragents.domain.models.acms.errors import (
    ConflictError,
    IndexUnavailableError,
    NotFoundError,
)
from cleveragents.domain.models.acms.registry import Project, validate_project_name
from cleveragents.domain.models.acms.ulids import is_ulid
from cleveragents.infrastructure.acms.sqlite_registry import open_registry


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "data" / "registry.sqlite3"


@pytest.mark.parametrize("name", ["local/my-project", "a/b", "team.x/repo_1-2"])
def test_valid_names(name: str) -> None:
    assert validate_project_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "noslash", "a/b/c", "/x", "x/", "Local/x", "a/ b", "a/-x", "../etc", "a/b\n"]
)
def test_invalid_names(name: str) -> None:
    with pytest.raises(ValueError, match="project name"):
        validate_project_name(name)


def test_project_lifecycle(db: Path, tmp_path: Path) -> None:
    projects, resources = open_registry(db)
    assert projects.add("local/one") == Project("local/one")
    with pytest.raises(ConflictError):
        projects.add("local/one")
    res = resources.register(tmp_path, "directory")
    assert is_ulid(res.resource_id) and res.resource_id == res.resource_id.upper()
    projects.link("local/one", res.resource_id.lower())
    projects.link("local/one", res.resource_id)  # idempotent
    assert projects.get("local/one") == Project("local/one", (res.resource_id,))
    assert projects.get("local/none") is None
    with pytest.raises(NotFoundError):
        projects.link("local/none", res.resource_id)
    with pytest.raises(NotFoundError):
        projects.link("local/one", "01ARZ3NDEKTSV4RRFFQ69G5FAV")

    # A second pair of objects on the same file (another process) sees it all.
    projects2, resources2 = open_registry(db)
    assert projects2.list() == [Project("local/one", (res.resource_id,))]
    assert resources2.get(res.resource_id) == res

    resources2.remove(res.resource_id)
    assert projects.get("local/one") == Project("local/one", ())
    projects.remove("local/one")
    assert projects.list() == []
    with pytest.raises(NotFoundError):
        projects.remove("local/one")


def test_resource_registration_rules(db: Path, tmp_path: Path) -> None:
    _, resources = open_registry(db)
    with pytest.raises(ValueError, match="resource type"):
        resources.register(tmp_path, "svn")
    with pytest.raises(ValueError, match="not a directory"):
        resources.register(tmp_path / "missing", "directory")
    a = resources.register(tmp_path, "git-checkout")
    b = resources.register(tmp_path, "directory")
    assert a.resource_id != b.resource_id
    assert a.location == str(tmp_path.resolve())
    assert [r.resource_id for r in resources.list()] == sorted([a.resource_id, b.resource_id])
    assert resources.get("not-a-ulid") is None
    with pytest.raises(ValueError):
        resources.remove("not-a-ulid")
    resources.mark_indexed(a.resource_id, "2026-01-01T00:00:00+00:00")
    got = resources.get(a.resource_id)
    assert got is not None and got.last_indexed_at == "2026-01-01T00:00:00+00:00"


def test_secret_override_is_stored_and_read_back(db: Path, tmp_path: Path) -> None:
    _, resources = open_registry(db)
    default = resources.register(tmp_path, "directory")
    assert (default.secret_filter, default.secret_allow, default.secrets_skipped) == (
        True,
        (),
        None,
    )
    custom = resources.register(
        tmp_path, "git-checkout", secret_filter=False, secret_allow=("certs/*.pem", ".npmrc")
    )
    again = open_registry(db)[1].get(custom.resource_id)  # a fresh connection
    assert again == custom
    assert again is not None and again.secret_allow == ("certs/*.pem", ".npmrc")
    assert not again.secret_filter
    resources.mark_indexed(custom.resource_id, secrets_skipped=3)
    resources.mark_indexed(custom.resource_id)  # no count given: the last one is kept
    got = resources.get(custom.resource_id)
    assert got is not None and got.secrets_skipped == 3 and got.last_indexed_at
    listed = {r.resource_id: r for r in resources.list()}
    assert listed[default.resource_id].secret_filter
    assert listed[custom.resource_id].secrets_skipped == 3


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"secret_allow": ("",)}, ValueError),
        ({"secret_allow": ("a\x1b",)}, ValueError),
        ({"secret_allow": "*.pem"}, TypeError),
        ({"secret_allow": (3,)}, TypeError),
        ({"secret_filter": "no"}, TypeError),
    ],
)
def test_bad_secret_overrides_are_refused(
    db: Path, tmp_path: Path, kwargs: dict[str, object], error: type[Exception]
) -> None:
    _, resources = open_registry(db)
    with pytest.raises(error):
        resources.register(tmp_path, "directory", **kwargs)  # type: ignore[arg-type]
    assert resources.list() == []
    rid = resources.register(tmp_path, "directory").resource_id
    with pytest.raises(ValueError):
        resources.mark_indexed(rid, secrets_skipped=-1)


def test_secret_policy_can_be_replaced(db: Path, tmp_path: Path) -> None:
    _, resources = open_registry(db)
    res = resources.register(tmp_path, "directory", secret_allow=("*.pem",))
    resources.mark_indexed(res.resource_id, secrets_skipped=4)
    off = resources.set_secret_policy(res.resource_id.lower(), secret_filter=False)
    assert (off.secret_filter, off.secret_allow, off.secrets_skipped) == (False, (), 4)
    assert resources.get(res.resource_id) == off
    back = resources.set_secret_policy(res.resource_id, secret_allow=(".env", ".env"))
    assert (back.secret_filter, back.secret_allow) == (True, (".env",))
    with pytest.raises(NotFoundError):
        resources.set_secret_policy("01ARZ3NDEKTSV4RRFFQ69G5FAV")
    with pytest.raises(ValueError):
        resources.set_secret_policy(res.resource_id, secret_allow=("",))
    with pytest.raises(TypeError):
        resources.set_secret_policy(res.resource_id, secret_allow="*.pem")  # type: ignore[arg-type]
    assert resources.get(res.resource_id) == back  # a refused change changes nothing


def test_a_registry_from_before_the_secret_columns_is_migrated(db: Path, tmp_path: Path) -> None:
    """Rows written by the previous schema keep working, with the default filter."""
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db)
    conn.executescript(
        """
        CREATE TABLE projects (name TEXT PRIMARY KEY, created_at TEXT NOT NULL);
        CREATE TABLE resources (
            resource_id TEXT PRIMARY KEY, location TEXT NOT NULL,
            resource_type TEXT NOT NULL, created_at TEXT NOT NULL, last_indexed_at TEXT
        );
        CREATE TABLE project_resources (
            project TEXT NOT NULL REFERENCES projects(name) ON DELETE CASCADE,
            resource_id TEXT NOT NULL REFERENCES resources(resource_id) ON DELETE CASCADE,
            PRIMARY KEY (project, resource_id)
        );
        """
    )
    conn.execute(
        "INSERT INTO resources VALUES (?, ?, 'git-checkout', '2026-01-01', NULL)",
        ("01JD5TD11B0000000000000000", str(tmp_path)),
    )
    conn.commit()
    conn.close()
    _, resources = open_registry(db)
    [old] = resources.list()
    assert old.resource_id == "01JD5TD11B0000000000000000"
    assert (old.secret_filter, old.secret_allow, old.secrets_skipped) == (True, (), None)
    resources.mark_indexed(old.resource_id, secrets_skipped=2)
    got = resources.get(old.resource_id)
    assert got is not None and got.secrets_skipped == 2


def _garbage(path: Path) -> None:
    path.write_bytes(b"not a database, just garbage\n" * 200)


def _pages_overwritten(path: Path) -> None:
    with path.open("r+b") as fh:
        fh.seek(100)  # past the header: the schema page is garbage
        fh.write(b"\xff" * 3000)


@pytest.mark.parametrize("damage", [_garbage, _pages_overwritten])
def test_a_damaged_registry_cannot_be_opened_and_the_error_says_what_to_do(
    db: Path, damage: Callable[[Path], None]
) -> None:
    """Not "cannot create": it exists. And no rebuild brings it back."""
    projects, _ = open_registry(db)
    projects.add("local/one")
    damage(db)
    with pytest.raises(IndexUnavailableError) as caught:
        open_registry(db)
    message = str(caught.value)
    assert message.startswith(f"cannot open the registry at {db}: ")
    assert "restore it from a backup" in message
    assert "remove it and register" in message and "\n" not in message
    # One that could not be made is not damaged: nothing to restore.
    (db.parent / "other").write_text("a file where a directory goes")
    with pytest.raises(IndexUnavailableError, match="cannot create the registry at") as made:
        open_registry(db.parent / "other" / "registry.sqlite3")
    assert "restore" not in str(made.value)


_OPEN = """
import sys
from cleveragents.infrastructure.acms.sqlite_registry import open_registry
try:
    open_registry(sys.argv[1])
except Exception as exc:
    print(type(exc).__name__, exc)
else:
    print("opened")
"""


def _open_on_a_read_only_directory(db: Path) -> str:
    """Open the registry in a child that sees ``db``'s directory read-only:
    mode 0500 for a non-root user; a read-only bind mount in a private mount
    namespace for root, whom file modes do not stop (skipped where it cannot
    make one)."""
    import os
    import shutil
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    child = [sys.executable, "-c", _OPEN, str(db)]
    directory = db.parent
    if os.geteuid() != 0:
        directory.chmod(0o500)
        try:
            done = subprocess.run(child, capture_output=True, text=True, env=env, timeout=60)
        finally:
            directory.chmod(0o700)
        return done.stdout.strip()
    if shutil.which("unshare") is None:
        pytest.skip("root, and no unshare to make a read-only mount")
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 99; shift; exec "$@"'
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(directory), *child],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if done.returncode != 0:
        pytest.skip(f"root, and no read-only bind mount here: {done.stderr.strip()[:200]}")
    return done.stdout.strip()


def test_a_read_only_data_directory_is_named_in_the_error(db: Path) -> None:
    """SQLite says only "unable to open database file" (it cannot make its
    -wal/-shm files there); the message says why."""
    projects, _ = open_registry(db)
    projects.add("local/one")
    said = _open_on_a_read_only_directory(db)
    assert said.startswith(f"IndexUnavailableError cannot open the registry at {db}: "), said
    assert said.endswith(
        f"(the data directory is read-only: {db.parent}; acms writes there even to answer a query)"
    ), said
    assert "restore" not in said  # not damaged


def test_a_read_only_registry_file_is_named_in_the_error(db: Path) -> None:
    from cleveragents.infrastructure.acms.sqlite_registry import _readonly_hint

    projects, _ = open_registry(db)
    projects.add("local/one")
    # A real SQLITE_READONLY error: the file opened for reading only.
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        with pytest.raises(sqlite3.OperationalError) as caught:
            conn.execute("INSERT INTO projects VALUES ('local/two', 'now')")
    finally:
        conn.close()
    assert caught.value.sqlite_errorcode & 0xFF == sqlite3.SQLITE_READONLY
    assert _readonly_hint(db, caught.value) == (
        f" (the registry is read-only: {db}; acms writes it even to answer a query)"
    )
    assert _readonly_hint(db, sqlite3.OperationalError("database is locked")) == ""
