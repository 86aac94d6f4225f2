"""The profile of an entry point (``bootstrap.entry_profile``) and the names
``open_data_dir`` takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from cleveragents.acms import open_data_dir
from cleveragents.application.container import build_container
from cleveragents.bootstrap import entry_profile
from cleveragents.domain.models.acms.errors import NotFoundError


def test_the_environment_chooses_and_an_explicit_choice_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ACMS_PROFILE", raising=False)
    assert entry_profile() == "local"
    monkeypatch.setenv("ACMS_PROFILE", "")
    assert entry_profile() == "local"
    monkeypatch.setenv("ACMS_PROFILE", "remote")
    assert entry_profile() == "remote"
    assert entry_profile("local") == "local"
    monkeypatch.setenv("ACMS_PROFILE", "bogus")
    assert entry_profile("remote") == "remote"


@pytest.mark.parametrize(
    ("explicit", "env", "message"),
    [
        (None, "bogus", "unknown ACMS_PROFILE 'bogus'; expected one of local, remote"),
        (None, "stub", "ACMS_PROFILE=stub has no indexes"),
        ("Local", "local", "unknown --profile 'Local'; expected one of local, remote"),
        ("stub", "local", "--profile=stub has no indexes"),
    ],
)
def test_an_unknown_profile_or_stub_is_refused(
    monkeypatch: pytest.MonkeyPatch, explicit: str | None, env: str, message: str
) -> None:
    monkeypatch.setenv("ACMS_PROFILE", env)
    with pytest.raises(ValueError) as info:
        entry_profile(explicit)
    assert str(info.value).startswith(message)
    assert "local, remote" in str(info.value)


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data directory whose registry names two projects (no index needed
    to open a session)."""
    monkeypatch.delenv("ACMS_PROFILE", raising=False)
    data = tmp_path / "data"
    c = build_container("stub", data)
    for name, sub in (("local/t", "t"), ("local/u", "u")):
        (tmp_path / sub).mkdir()
        c.project_repository().add(name)
        resource = c.resource_registry().register(str(tmp_path / sub), "directory")
        c.project_repository().link(name, resource.resource_id)
    return data


def test_a_single_project_name_is_one_name(registry: Path) -> None:
    session = open_data_dir(registry, projects="local/t")
    assert set(session.scope.projects) == {"local/t"}
    (rid,) = session.scope.resources
    one = open_data_dir(registry, resources=rid)
    assert one.scope.resources == frozenset({rid})
    assert open_data_dir(registry, projects=("local/t",)).scope == session.scope


@pytest.mark.parametrize(
    ("projects", "message"),
    [
        (b"local/t", "projects must be a name or a list of names, not bytes"),
        (42, "projects must be a name or a list of names, not int"),
        (["local/t", 7], "projects must hold names (str), not int: 7"),
    ],
)
def test_anything_else_is_a_type_error(registry: Path, projects: object, message: str) -> None:
    with pytest.raises(TypeError) as info:
        open_data_dir(registry, projects=projects)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_a_data_directory_that_is_not_there_or_holds_no_project_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mistyped path was made, empty, and the session answered nothing."""
    monkeypatch.delenv("ACMS_PROFILE", raising=False)
    missing = tmp_path / "no" / "such"
    with pytest.raises(NotFoundError, match=r"no data directory at .*no/such"):
        open_data_dir(missing)
    assert not missing.exists() and not missing.parent.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    for given in ({}, {"projects": "local/x"}):
        with pytest.raises(NotFoundError, match="registers no project"):
            open_data_dir(empty, **given)  # type: ignore[arg-type]
    assert list(empty.iterdir()) == []  # refused, it left nothing behind
