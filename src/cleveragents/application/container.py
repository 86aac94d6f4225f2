"""Dependency-injection container: the composition root of the ACMS backends.

``Container`` registers ``text_backend``, ``vector_backend`` and
``graph_backend`` as Singletons defaulting to the in-memory stubs, as the seed
says.  The profile switch selects real engines:

- ``ACMS_PROFILE=stub``: the stubs (the default when no data directory is
  configured).
- ``ACMS_PROFILE=local`` (the default when a data directory is configured,
  by argument or ``ACMS_DATA_DIR``: a host that names its data never
  silently gets the empty stubs): Tantivy, FAISS and rdflib on disk under
  ``ACMS_DATA_DIR`` (default ``./data``), all owned by one ``index_store``
  (``infrastructure.acms.index_store``: the layout, the write protocol and
  its crash repair), plus the ``embedder`` and the ``indexer`` (a planner)
  that feeds the store.

Entry points build this through :func:`cleveragents.bootstrap.bootstrap`.

In every profile ``project_repository`` and ``resource_registry`` live in
``<data dir>/registry.sqlite3`` and ``context_tier_service`` is in memory.

Engine modules are imported only when a real backend is first built, so
importing the container (or the stub profile) loads no engine.  Only this
module reads configuration from the environment; adapters take explicit
arguments.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dependency_injector import containers, providers

from cleveragents.domain.models.acms.backends import (
    GraphIndex,
    PreparedWrites,
    TextIndex,
    VectorIndex,
)
from cleveragents.domain.models.acms.embedding import Embedder
from cleveragents.domain.models.acms.errors import IndexUnavailableError
from cleveragents.domain.models.acms.registry import ProjectRepository, ResourceRegistry
from cleveragents.domain.models.acms.stubs import (
    InMemoryGraphBackend,
    InMemoryTextBackend,
    InMemoryVectorBackend,
)

if TYPE_CHECKING:
    # Imported where built: the indexer pulls in numpy and the parsers, the
    # tier service pydantic, and a query command needs neither.
    from cleveragents.application.services.context_tier_service import ContextTierService
    from cleveragents.application.services.indexer import Indexer
    from cleveragents.infrastructure.acms.index_store import ManagedIndexStore

__all__ = [
    "DEFAULT_EMBEDDING_DIMENSION",
    "EMBEDDERS",
    "PROFILES",
    "Container",
    "build_container",
    "get_container",
    "override_providers",
    "reset_container",
    "reset_overrides",
]

PROFILES = ("stub", "local", "remote")
DEFAULT_EMBEDDING_DIMENSION = 384
# Milvus's largest vector dimension; far past any embedding model's.
MAX_EMBEDDING_DIMENSION = 32_768


def _index_store(data_dir: str, dimension: int) -> ManagedIndexStore:
    # The one owner of the data directory's layout and write protocol; it
    # opens each engine on first use.
    from cleveragents.infrastructure.acms.index_store import ManagedIndexStore

    return ManagedIndexStore.open(data_dir, dimension=int(dimension))


def _text(store: ManagedIndexStore) -> TextIndex:
    return store.text


def _vector(store: ManagedIndexStore) -> VectorIndex:
    return store.vector


def _graph(store: ManagedIndexStore) -> GraphIndex:
    return store.graph


def _hashing_embedder(dimension: int) -> Embedder:
    from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder

    return HashingEmbedder(int(dimension))


def _minilm_embedder() -> Embedder:
    """MiniLM over the compact text of each unit (and query): see ``embedding_text``."""
    from cleveragents.application.services.embedding_text import CompactTextEmbedder
    from cleveragents.infrastructure.acms.minilm_embedder import MiniLMEmbedder

    return CompactTextEmbedder(MiniLMEmbedder())


EMBEDDERS = ("hashing", "minilm")


def _embedder_factory(kind: str, dimension: int) -> tuple[Callable[[], Embedder], str]:
    """A picklable factory of the configured embedder (what a worker builds)
    and the ``name:dimension`` identity of what it builds."""
    if kind == "minilm":
        from cleveragents.application.services.embedding_text import DEFAULT_MAX_WORDS
        from cleveragents.infrastructure.acms.minilm_embedder import (
            MINILM_DIMENSION,
            MINILM_NAME,
        )

        return _minilm_embedder, f"{MINILM_NAME}+compact{DEFAULT_MAX_WORDS}:{MINILM_DIMENSION}"
    from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder

    hashing = HashingEmbedder(int(dimension))
    return functools.partial(HashingEmbedder, int(dimension)), f"{hashing.name}:{dimension}"


def _indexer(store: ManagedIndexStore, embedder: Embedder, kind: str = "hashing") -> Indexer:
    from cleveragents.application.services.indexer import Indexer, PlannerSpec

    # An indexer is built to write: open its four stores now, as the indexer
    # of the first round did, so a hydration opens no module or file of
    # ours once it has started.
    try:
        store.open_all()
    except IndexUnavailableError as exc:
        # A damaged live index: a rebuild (which writes fresh ones beside
        # it) must still be possible; a reindex meets the same error on its
        # first use of that index.
        from cleveragents._logging import get_logger

        get_logger("cleveragents.acms.indexer").info(
            "indexer.live_index_unavailable", error=str(exc)
        )
    from cleveragents.infrastructure.acms.tree_sitter_code import TreeSitterCodeParser

    # Worker processes build their own parser and embedder from the spec.
    factory, identity = _embedder_factory(kind, embedder.dimension)
    try:
        text: object = store.text
    except IndexUnavailableError:
        text = None  # as above; a rebuild's writer then prepares the text itself
    preparer = text.preparer if isinstance(text, PreparedWrites) else None
    spec = PlannerSpec(
        factory, TreeSitterCodeParser, embedder_identity=identity, text_preparer=preparer
    )
    return Indexer(store, embedder, code_parser=TreeSitterCodeParser(), spec=spec)


def _context_tier_service() -> ContextTierService:
    from cleveragents.application.services.context_tier_service import ContextTierService

    return ContextTierService()


def _project_repository(data_dir: str) -> ProjectRepository:
    from cleveragents.infrastructure.acms.sqlite_registry import NamespacedProjectRepository

    return NamespacedProjectRepository(Path(data_dir) / "registry.sqlite3")


def _resource_registry(data_dir: str) -> ResourceRegistry:
    from cleveragents.infrastructure.acms.sqlite_registry import ResourceRegistryService

    return ResourceRegistryService(Path(data_dir) / "registry.sqlite3")


class Container(containers.DeclarativeContainer):
    """The ACMS providers.  Stubs by default; see :func:`build_container`."""

    config = providers.Configuration()

    text_backend = providers.Singleton(InMemoryTextBackend)
    # The stub takes any length, as the seed's does, unless a dimension is
    # configured explicitly (ACMS_EMBEDDING_DIM or build_container's argument).
    vector_backend = providers.Singleton(InMemoryVectorBackend, dimension=config.stub_dimension)
    graph_backend = providers.Singleton(InMemoryGraphBackend)

    # No indexes to feed in the stub profile; the local profile wires these.
    index_store: providers.Provider[ManagedIndexStore | None] = providers.Object(None)
    embedder: providers.Provider[Embedder | None] = providers.Object(None)
    indexer: providers.Provider[Indexer | None] = providers.Object(None)

    context_tier_service = providers.Singleton(_context_tier_service)
    project_repository = providers.Singleton(_project_repository, config.data_dir)
    resource_registry = providers.Singleton(_resource_registry, config.data_dir)


def build_container(
    profile: str | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    embedding_dimension: int | None = None,
    embedder: str | None = None,
) -> Container:
    """Build a container for a profile; arguments default to the environment
    (``ACMS_PROFILE``, ``ACMS_DATA_DIR``, ``ACMS_EMBEDDING_DIM``, ``ACMS_EMBEDDER``).

    Raises:
        ValueError: unknown profile or embedder, a non-positive embedding
            dimension, or one the embedder does not have.
    """
    embedder = embedder or os.environ.get("ACMS_EMBEDDER", "hashing")
    if embedder not in EMBEDDERS:
        raise ValueError(
            f"unknown ACMS_EMBEDDER {embedder!r}; expected one of {', '.join(EMBEDDERS)}"
        )
    # A configured data directory means real data: never silently the stubs.
    configured = data_dir is not None or bool(os.environ.get("ACMS_DATA_DIR"))
    profile = profile or os.environ.get("ACMS_PROFILE") or ("local" if configured else "stub")
    if profile not in PROFILES:
        raise ValueError(f"unknown ACMS_PROFILE {profile!r}; expected one of {', '.join(PROFILES)}")
    data_dir = data_dir or os.environ.get("ACMS_DATA_DIR", "data")
    explicit = embedding_dimension is not None or "ACMS_EMBEDDING_DIM" in os.environ
    if embedding_dimension is None:
        raw = os.environ.get("ACMS_EMBEDDING_DIM", str(DEFAULT_EMBEDDING_DIMENSION))
        try:
            embedding_dimension = int(raw)
        except ValueError:
            raise ValueError(f"ACMS_EMBEDDING_DIM must be an integer, got {raw!r}") from None
    if not 0 < embedding_dimension <= MAX_EMBEDDING_DIMENSION:
        # Past it, the first embedding's allocation fails (99999999999: "Unable
        # to allocate 745 GiB"): a setting's error, said as one.
        raise ValueError(
            f"the embedding dimension must be within 1..{MAX_EMBEDDING_DIMENSION}, "
            f"got {embedding_dimension} (ACMS_EMBEDDING_DIM)"
        )
    if embedder == "minilm" and embedding_dimension != DEFAULT_EMBEDDING_DIMENSION:
        raise ValueError(f"the minilm embedder has dimension 384, not {embedding_dimension}")

    container = Container()
    container.config.from_dict(
        {
            "profile": profile,
            "data_dir": str(Path(data_dir).resolve()),
            "embedding_dimension": embedding_dimension,
            "stub_dimension": embedding_dimension if explicit else None,
        }
    )
    if profile == "local":
        cfg = container.config
        container.index_store.override(
            providers.Singleton(_index_store, cfg.data_dir, cfg.embedding_dimension)
        )
        container.text_backend.override(providers.Singleton(_text, container.index_store))
        container.vector_backend.override(providers.Singleton(_vector, container.index_store))
        container.graph_backend.override(providers.Singleton(_graph, container.index_store))
        container.embedder.override(
            providers.Singleton(_minilm_embedder)
            if embedder == "minilm"
            else providers.Singleton(_hashing_embedder, cfg.embedding_dimension)
        )
        container.indexer.override(
            providers.Singleton(_indexer, container.index_store, container.embedder, embedder)
        )
    elif profile == "remote":
        from cleveragents.application.remote_profile import wire_remote

        wire_remote(container, embedder=embedder)
    return container


_lock = threading.Lock()
_container: Container | None = None


def get_container() -> Container:
    """The process-wide container, built from the environment on first use."""
    global _container
    with _lock:
        if _container is None:
            _container = build_container()
        return _container


def reset_container() -> None:
    """Forget the process-wide container; the next ``get_container`` rebuilds it."""
    global _container
    with _lock:
        _container = None


_PROFILE_WIRED = (
    "index_store",
    "text_backend",
    "vector_backend",
    "graph_backend",
    "embedder",
    "indexer",
)


def override_providers(**overrides: object) -> None:
    """Override providers of the process-wide container by name.

    Each value is a provider, or an instance (wrapped in ``providers.Object``).
    Overrides stack; :func:`reset_overrides` removes them all.

    Raises:
        ValueError: a name that is not a provider of the container.
    """
    container = get_container()
    unknown = sorted(name for name in overrides if name not in container.providers)
    if unknown:
        known = ", ".join(sorted(container.providers))
        raise ValueError(f"unknown provider(s) {', '.join(unknown)}; known: {known}")
    for name, value in overrides.items():
        replacement = value if isinstance(value, providers.Provider) else providers.Object(value)
        container.providers[name].override(replacement)


def reset_overrides() -> None:
    """Remove every override made with :func:`override_providers`.

    The profile's own wiring (``ACMS_PROFILE=local``) is kept.
    """
    container = get_container()
    for name in _override_names(container):
        provider = container.providers[name]
        while len(provider.overridden) > _profile_depth(container, name):
            provider.reset_last_overriding()


def _override_names(container: Container) -> list[str]:
    """Names of the container's providers that can be overridden."""
    return [n for n in container.providers if n != "config"]


def _profile_depth(container: Container, name: str) -> int:
    # The local and remote profiles override each backend exactly once; stub none.
    local = container.config.profile() in ("local", "remote")
    return 1 if local and name in _PROFILE_WIRED else 0
