"""The DI container: stub defaults, overrides by name, profile switch."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dependency_injector import providers

from cleveragents.application.container import (
    Container,
    build_container,
    get_container,
    override_providers,
    reset_container,
    reset_overrides,
)
from cleveragents.domain.models.acms.stubs import (
    InMemoryGraphBackend,
    InMemoryTextBackend,
    InMemoryVectorBackend,
)


@pytest.fixture(autouse=True)
def fresh_container(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("ACMS_PROFILE", raising=False)
    monkeypatch.delenv("ACMS_DATA_DIR", raising=False)
    monkeypatch.delenv("ACMS_EMBEDDING_DIM", raising=False)
    reset_container()
    yield
    reset_container()


def test_stub_profile_is_the_default() -> None:
    c = get_container()
    assert c.config.profile() == "stub"
    assert isinstance(c.text_backend(), InMemoryTextBackend)
    assert isinstance(c.vector_backend(), InMemoryVectorBackend)
    assert isinstance(c.graph_backend(), InMemoryGraphBackend)


def test_backends_are_singletons_and_container_is_process_wide() -> None:
    c = get_container()
    assert c.text_backend() is c.text_backend()
    assert get_container() is c


def test_declared_providers_are_singletons_of_the_stubs() -> None:
    assert isinstance(Container.text_backend, providers.Singleton)
    assert Container.text_backend.provides is InMemoryTextBackend
    assert Container.vector_backend.provides is InMemoryVectorBackend
    assert Container.graph_backend.provides is InMemoryGraphBackend


def test_stub_vector_backend_takes_any_length_unless_a_dimension_is_configured() -> None:
    """The seed's stub validates only a non-empty list of floats."""
    backend = get_container().vector_backend()
    assert isinstance(backend, InMemoryVectorBackend)
    assert backend.similarity_search([0.1, 0.2, 0.3], scope=frozenset()) == []
    assert Container().vector_backend().similarity_search([0.5], scope=frozenset()) == []
    checked = build_container("stub", embedding_dimension=4).vector_backend()
    with pytest.raises(ValueError, match="dimension"):
        checked.similarity_search([0.1] * 3, scope=frozenset())


def test_stub_vector_backend_checks_the_configured_dimension(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACMS_EMBEDDING_DIM", "4")
    backend = get_container().vector_backend()
    assert backend.similarity_search([0.1] * 4, scope=frozenset()) == []
    with pytest.raises(ValueError, match="dimension"):
        backend.similarity_search([0.1] * 5, scope=frozenset())


def test_override_with_instance_and_provider_then_reset() -> None:
    mine = InMemoryTextBackend()
    override_providers(text_backend=mine, graph_backend=providers.Singleton(InMemoryGraphBackend))
    c = get_container()
    assert c.text_backend() is mine
    graph = c.graph_backend()
    assert isinstance(graph, InMemoryGraphBackend)
    reset_overrides()
    assert c.text_backend() is not mine
    assert isinstance(c.text_backend(), InMemoryTextBackend)


def test_unknown_provider_name_is_rejected_and_nothing_changes() -> None:
    mine = InMemoryTextBackend()
    with pytest.raises(ValueError, match="unknown provider"):
        override_providers(text_backend=mine, txet_backend=mine)
    assert get_container().text_backend() is not mine


@pytest.mark.parametrize(
    ("env", "value", "message"),
    [
        ("ACMS_PROFILE", "production", "ACMS_PROFILE"),
        ("ACMS_EMBEDDING_DIM", "many", "ACMS_EMBEDDING_DIM"),
        ("ACMS_EMBEDDING_DIM", "0", "within 1..32768"),
    ],
)
def test_bad_configuration_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, message: str
) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ValueError, match=message):
        build_container()


def test_importing_the_container_loads_no_engine() -> None:
    code = (
        "import sys, cleveragents.application.container as c\n"
        "c.get_container().text_backend()\n"
        "print(sorted(m for m in ('tantivy', 'faiss', 'rdflib') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "[]"


def test_a_configured_data_directory_never_silently_means_the_stubs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from cleveragents.application.container import build_container
    from cleveragents.domain.models.acms.stubs import InMemoryTextBackend

    monkeypatch.delenv("ACMS_PROFILE", raising=False)
    monkeypatch.delenv("ACMS_DATA_DIR", raising=False)
    assert build_container().config.profile() == "stub"
    monkeypatch.setenv("ACMS_DATA_DIR", str(tmp_path / "data"))
    assert build_container().config.profile() == "local"
    monkeypatch.delenv("ACMS_DATA_DIR")
    assert build_container(data_dir=tmp_path / "d2").config.profile() == "local"
    monkeypatch.setenv("ACMS_PROFILE", "stub")  # an explicit choice still wins
    stub = build_container(data_dir=tmp_path / "d3")
    assert isinstance(stub.text_backend(), InMemoryTextBackend)


def test_operations_over_a_query_only_backend_say_which_protocol_it_lacks(
    tmp_path: Path,
) -> None:
    """A host's read-only text backend wired into a local container: the
    refusal said the text index "is only wired in the 'local' profile",
    which it was; it now names the backend and the Protocol it lacks."""
    from cleveragents.application.services.operations import AcmsOperations
    from cleveragents.domain.models.acms.errors import AcmsError

    class QueryOnlyText:
        def search(
            self, query: str, *, scope: frozenset[str], max_results: int = 20
        ) -> list[object]:
            return []

    c = build_container("local", tmp_path / "data", embedding_dimension=16)
    c.text_backend.override(providers.Object(QueryOnlyText()))
    ops = AcmsOperations.from_container(c)
    try:
        with pytest.raises(AcmsError, match=r"QueryOnlyText wired is not one.*TextIndex"):
            ops.view(frozenset({"01JD5TD11B0000000000000000"})).search("parse")
    finally:
        ops.close()
