"""Projects and resources in SQLite: validation, links, persistence."""

from __future__ import annotations

from pathlib import Path

import pytest

from cleveragents.domain.models.acms.errors import ConflictError, NotFoundError
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
