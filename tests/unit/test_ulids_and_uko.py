"""ULIDs, scope validation and UKO URIs."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ulid import ULID

from cleveragents.domain.models.acms import uko
from cleveragents.domain.models.acms.uko import (
    PREDICATES,
    UKO,
    file_uri,
    module_uri,
    path_of,
    resource_id_of,
    resource_uri,
    unit_uri,
)
from cleveragents.domain.models.acms.ulids import canonical_ulid, is_ulid, validate_scope

ulids = st.builds(lambda: str(ULID())) | st.integers(0, 2**128 - 1).map(
    lambda n: str(ULID.from_int(n))
)


@given(ulids)
def test_generated_ulids_are_valid_in_any_case(value: str) -> None:
    assert is_ulid(value) and is_ulid(value.lower())
    assert canonical_ulid(value.lower()) == value


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "x" * 26,
        "01ARZ3NDEKTSV4RRFFQ69G5FA",
        "01ARZ3NDEKTSV4RRFFQ69G5FAVV",
        "8" + "0" * 25,
        "01ARZ3NDEKTSV4RRFFQ69G5FAI",
        " 01ARZ3NDEKTSV4RRFFQ69G5FA",
    ],
)
def test_invalid_ulids(bad: str) -> None:
    assert not is_ulid(bad)
    with pytest.raises(ValueError):
        canonical_ulid(bad)


def test_scope_validation() -> None:
    u = str(ULID())
    assert validate_scope(frozenset({u.lower()})) == frozenset({u})
    assert validate_scope(frozenset()) == frozenset()
    for bad_type in (u, [u], {u}, (u,), None, 7):
        with pytest.raises(TypeError):
            validate_scope(bad_type)
    with pytest.raises(ValueError):
        validate_scope(frozenset({u, "nope"}))


paths = st.lists(
    st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"),
        min_size=1,
        max_size=12,
    ).filter(lambda s: s not in (".", "..")),
    min_size=1,
    max_size=4,
).map("/".join)


@given(ulids, paths, st.text(min_size=1, max_size=10))
def test_uris_name_their_resource_and_path(rid: str, path: str, fragment: str) -> None:
    for uri in (file_uri(rid, path), unit_uri(rid, path, fragment)):
        assert uri.startswith("uko://" + rid + "/")
        assert resource_id_of(uri) == rid
        assert path_of(uri) == path
        assert " " not in uri and "\n" not in uri


def test_non_utf8_path_round_trips() -> None:
    rid = str(ULID())
    path = b"dir/caf\xe9.py".decode("utf-8", "surrogateescape")
    assert path_of(file_uri(rid, path)) == path


def test_resource_uri_and_foreign_uris() -> None:
    rid = str(ULID())
    assert resource_id_of(resource_uri(rid.lower())) == rid
    assert resource_id_of(module_uri("os.path")) is None
    assert resource_id_of("http://example.org/x") is None
    assert resource_id_of("uko://" + rid + "X/a") is None  # authority is longer than a ULID
    assert resource_id_of("UKO://" + rid.lower() + "/a.py") == rid
    assert path_of(resource_uri(rid)) is None
    with pytest.raises(ValueError):
        file_uri(rid, "/")
    with pytest.raises(ValueError):
        unit_uri(rid, "a.py", "")


def test_the_predicates_are_the_documented_vocabulary() -> None:
    assert uko.__doc__ is not None
    documented = set(re.findall(r"(?<![\w:])uko:(\w+)", uko.__doc__))
    assert set(PREDICATES) == documented
    for local, iri in PREDICATES.items():
        assert iri == UKO + local
    with pytest.raises(TypeError):
        PREDICATES["calls"] = "x"  # type: ignore[index]
