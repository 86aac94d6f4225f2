"""The operations behind the ``acms`` command line and ``scripts/reindex.py``.

The CLI parses arguments and prints; everything it does goes through
:class:`AcmsOperations`, built from the container (``local`` profile), so the
same behaviour is available to an agent host in Python.

Crash safety of ``rebuild``: fresh indexes are built in ``.rebuild/`` (never
opened as live), then each live index is exchanged with its fresh copy, the
catalog last.  A crash before the first exchange leaves the live indexes
untouched; a crash between exchanges leaves each live index complete (old or
new) but possibly from different generations.  Every write path holds the
reindex lock, and a finished rebuild renames ``.rebuild/`` to ``.previous/``,
so a ``.rebuild/`` seen under the lock is always the remains of a killed
rebuild: ``reindex`` and ``hydrate`` then mark every resource dirty in the
live catalog (its next session checks it against the indexes and sweeps
orphans) and delete ``.rebuild/``; ``rebuild`` deletes it before it starts.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import structlog
from ulid import ULID

from cleveragents.application.container import (
    INDEX_NAMES,
    Container,
    build_index_set,
    collect_index_garbage,
    install_index,
)
from cleveragents.application.services.fault_injection import checkpoint
from cleveragents.application.services.reindex_lock import ReindexLock
from cleveragents.domain.models.acms.backends import (
    GraphBackend,
    GraphIndex,
    TextBackend,
    TextIndex,
    VectorBackend,
    VectorIndex,
)
from cleveragents.domain.models.acms.embedding import Embedder
from cleveragents.domain.models.acms.errors import (
    AcmsError,
    NotFoundError,
    ResourceListingError,
)
from cleveragents.domain.models.acms.indexing import IndexStats
from cleveragents.domain.models.acms.registry import (
    RESOURCE_TYPES,
    Project,
    ProjectRepository,
    Resource,
    ResourceRegistry,
)
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.domain.models.acms.secret_filter import secret_filter_of
from cleveragents.domain.models.acms.uko import path_of
from cleveragents.domain.models.acms.ulids import canonical_ulid

if TYPE_CHECKING:
    # Imported where used: a query command needs neither the indexer (numpy,
    # parsers) nor the tier service (pydantic).
    from cleveragents.application.services.context_tier_service import ContextTierService
    from cleveragents.application.services.indexer import Indexer

__all__ = ["AcmsOperations", "ReindexReport", "VerifyProblem", "detect_resource_type"]

_log = structlog.get_logger("cleveragents.acms.operations")
_T = TypeVar("_T")

_STAGING = ".rebuild"
_PREVIOUS = ".previous"


def detect_resource_type(path: str | os.PathLike[str]) -> str:
    """``git-checkout`` when ``path`` is inside a git work tree, else ``directory``.

    Raises:
        ResourceListingError: git refuses the checkout ("dubious ownership"):
            guessing ``directory`` would index what ``.gitignore`` excludes.
    """
    try:
        out = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "directory"
    if out.returncode != 0 and "dubious ownership" in out.stderr:
        raise ResourceListingError(
            f"git refuses the checkout {path} (dubious ownership: it belongs to another user) "
            f"(fix: git config --global --add safe.directory {shlex.quote(os.fspath(path))}, "
            "or pass --type directory to index every file, .gitignore ignored)"
        )
    return "git-checkout" if out.returncode == 0 and out.stdout.strip() == "true" else "directory"


@dataclass(slots=True)
class ReindexReport:
    """What a reindex did, per resource and in total."""

    resources: dict[str, IndexStats] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def total(self) -> IndexStats:
        """The counters of every resource added up."""
        total = IndexStats()
        for stats in self.resources.values():
            total.add(stats)
        return total

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready summary."""
        return {
            "resources": {rid: s.as_dict() for rid, s in self.resources.items()},
            "missing_locations": self.missing,
            "pruned": self.pruned,
            "failed": self.failed,
            "total": self.total.as_dict(),
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True, slots=True)
class VerifyProblem:
    """One disagreement between the catalog and an index."""

    resource_id: str
    index: str
    missing: int
    extra: int
    sample: str


class AcmsOperations:
    """Projects, resources, reindexing, scoped queries and status over one data dir."""

    def __init__(
        self,
        *,
        data_dir: Path,
        projects: ProjectRepository,
        resources: ResourceRegistry,
        text: Callable[[], TextIndex],
        vector: Callable[[], VectorIndex],
        graph: Callable[[], GraphIndex],
        embedder: Callable[[], Embedder],
        indexer: Callable[[], Indexer],
        index_set: Callable[[Path, Embedder], tuple[Indexer, Callable[[], None]]] | None = None,
        install: Callable[[Path, str, Path, str], Path | None] | None = None,
        collect_garbage: Callable[[Path], None] | None = None,
    ) -> None:
        # Backends are built on first use, so commands that do not need an
        # engine (project list, resource add) do not import or open it.
        self.data_dir = data_dir
        self.projects = projects
        self.resources = resources
        self._text = text
        self._vector = vector
        self._graph = graph
        self._embedder = embedder
        self._indexer = indexer
        self._index_set = index_set
        self._install = install
        self._collect_garbage = collect_garbage

    @classmethod
    def from_container(cls, container: Container) -> AcmsOperations:
        """Operations over a container built for the ``local`` profile."""
        return cls(
            data_dir=Path(container.config.data_dir()),
            projects=container.project_repository(),
            resources=container.resource_registry(),
            text=_writable(container.text_backend, TextIndex, "a text index"),
            vector=_writable(container.vector_backend, VectorIndex, "a vector index"),
            graph=_writable(container.graph_backend, GraphIndex, "a graph index"),
            embedder=_required(container.embedder, "an embedder"),
            indexer=_required(container.indexer, "an indexer"),
            index_set=build_index_set,
            install=install_index,
            collect_garbage=collect_index_garbage,
        )

    # ------------------------------------------------------------ projects

    def add_project(self, name: str) -> Project:
        """Create a project (``namespace/name``)."""
        return self.projects.add(name)

    def list_projects(self) -> list[Project]:
        """Every project with its resource ULIDs."""
        return self.projects.list()

    def remove_project(self, name: str) -> None:
        """Delete a project; its resources stay registered."""
        self.projects.remove(name)

    def project(self, name: str) -> Project:
        """The project called ``name``.

        Raises:
            NotFoundError: unknown project.
        """
        project = self.projects.get(name)
        if project is None:
            raise NotFoundError(f"no project named {name!r} (see 'acms project list')")
        return project

    # ------------------------------------------------------------ resources

    def add_resource(
        self,
        path: str,
        project: str,
        resource_type: str | None = None,
        *,
        secret_filter: bool = True,
        secret_allow: Iterable[str] = (),
    ) -> Resource:
        """Register ``path`` and link it to ``project``.

        ``secret_filter=False`` turns the secret deny-list off for it;
        ``secret_allow`` globs let matching files through it.

        Raises:
            NotFoundError: unknown project.  ValueError: bad path, type or
            allow-pattern.  ResourceListingError: git refuses the checkout.
        """
        self.project(project)
        if resource_type is not None and resource_type not in RESOURCE_TYPES:
            raise ValueError(f"unknown resource type {resource_type!r}")
        resource = self.resources.register(
            path,
            resource_type or detect_resource_type(path),
            secret_filter=secret_filter,
            secret_allow=tuple(secret_allow),
        )
        self.projects.link(project, resource.resource_id)
        return resource

    def set_secret_policy(
        self, resource_id: str, *, secret_filter: bool = True, secret_allow: Iterable[str] = ()
    ) -> Resource:
        """Replace a resource's secret override; the next reindex applies it
        (names at once; content of unchanged files on ``--full``).

        Raises:
            ValueError: malformed ULID or bad pattern.  NotFoundError: unknown resource.
        """
        return self.resources.set_secret_policy(
            canonical_ulid(resource_id),
            secret_filter=secret_filter,
            secret_allow=tuple(secret_allow),
        )

    def list_resources(self, project: str | None = None) -> list[Resource]:
        """Registered resources, all or those of one project."""
        resources = self.resources.list()
        if project is None:
            return resources
        linked = set(self.project(project).resource_ids)
        return [r for r in resources if r.resource_id in linked]

    def remove_resource(self, resource_id: str) -> None:
        """Forget a resource and delete all its index units.

        Raises:
            ValueError: malformed ULID.  NotFoundError: unknown resource.
        """
        rid = canonical_ulid(resource_id)
        if self.resources.get(rid) is None:
            raise NotFoundError(f"no resource {rid} (see 'acms resource list')")
        with ReindexLock(self.data_dir):
            self._indexer().delete_resource(rid)
            self.resources.remove(rid)

    # ------------------------------------------------------------ scope and queries

    def scope(self, projects: Iterable[str] = (), resources: Iterable[str] = ()) -> frozenset[str]:
        """The scope named by projects and resource ULIDs.

        Raises:
            ValueError: nothing named, or a malformed ULID.
            NotFoundError: an unknown project or resource.
        """
        projects, resources = list(projects), list(resources)
        if not projects and not resources:
            raise ValueError("a query needs a scope: give --project NAME and/or --resource ULID")
        ids: set[str] = set()
        for name in projects:
            ids.update(self.project(name).resource_ids)
        for rid in resources:
            canonical = canonical_ulid(rid)
            if self.resources.get(canonical) is None:
                raise NotFoundError(f"no resource {canonical} (see 'acms resource list')")
            ids.add(canonical)
        return frozenset(ids)

    def view(self, scope: frozenset[str]) -> ScopedView:
        """The three backends seen through ``scope``.

        Each backend is built (and its engine imported) on the view's first
        call to it: ``search`` opens only the text index, ``similarity_search``
        only the vector index, the graph queries only the graph.
        """
        return ScopedView(
            cast(TextBackend, _LazyBackend(self._text)),
            cast(VectorBackend, _LazyBackend(self._vector)),
            cast(GraphBackend, _LazyBackend(self._graph)),
            scope,
        )

    def embed_query(self, text: str) -> list[float]:
        """Embed a query text with the configured embedder."""
        if not text.strip():
            raise ValueError("the text to embed must not be empty")
        embedder = self._embedder()
        row: list[float] = embedder.embed([text])[0].tolist()
        return row

    # ------------------------------------------------------------ reindex

    def reindex(
        self,
        projects: Iterable[str] = (),
        resources: Iterable[str] = (),
        *,
        full: bool = False,
        lock_timeout: float = 60.0,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> ReindexReport:
        """Index the named resources (all when none named), incrementally.

        Indexing every resource also deletes the units of resources that are
        no longer registered.  Only one reindex runs per data directory at a
        time: another waits up to ``lock_timeout`` seconds.  A git resource
        git cannot list is recorded in ``report.failed`` (its units stay as
        they were) and the other resources are still indexed.
        """
        projects, resources = list(projects), list(resources)
        everything = not projects and not resources
        targets = (
            [r.resource_id for r in self.resources.list()]
            if everything
            else sorted(self.scope(projects, resources))
        )
        report = ReindexReport()
        t0 = time.perf_counter()
        with ReindexLock(self.data_dir, timeout=lock_timeout):
            indexer = self._indexer()
            self._recover_interrupted_rebuild(indexer)
            for rid in targets:
                resource = self.resources.get(rid)
                if resource is None:
                    continue
                if not os.path.isdir(resource.location):
                    _log.warning(
                        "context_hydrator.skip_missing_location",
                        resource_id=rid,
                        location=resource.location,
                    )
                    report.missing.append(rid)
                    continue
                try:
                    stats = indexer.index_resource(
                        rid,
                        resource.location,
                        resource.resource_type,
                        full=full,
                        progress=_per_resource(progress, rid),
                        secrets=secret_filter_of(resource),
                    )
                except ResourceListingError as exc:
                    _log.info("reindex.resource_failed", resource_id=rid, error=str(exc))
                    report.failed[rid] = str(exc)
                    continue
                report.resources[rid] = stats
                self.resources.mark_indexed(rid, secrets_skipped=stats.skipped.get("secret", 0))
            if everything:
                report.pruned = indexer.prune(r.resource_id for r in self.resources.list())
        report.seconds = time.perf_counter() - t0
        return report

    def rebuild(
        self,
        *,
        lock_timeout: float = 60.0,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> ReindexReport:
        """Build fresh indexes of every resource beside the live ones, then swap
        each one in with an atomic exchange.

        Readers see the old index or the new one, never a half-built one; a
        reader that has an index open picks the new one up on its next query.
        The previous indexes are kept in ``.previous/`` until the next rebuild,
        so a reader in the middle of a query is never pulled from under.
        """
        if self._index_set is None or self._install is None or self._collect_garbage is None:
            raise AcmsError("rebuild needs the local profile's index factory")
        report = ReindexReport()
        t0 = time.perf_counter()
        with ReindexLock(self.data_dir, timeout=lock_timeout):
            staging = self.data_dir / _STAGING
            previous = self.data_dir / _PREVIOUS
            for stale in (staging, previous):
                shutil.rmtree(stale, ignore_errors=True)
            # Generations no live link points into: the one the last rebuild
            # replaced, and any left by a killed one.
            self._collect_garbage(self.data_dir)
            staging.mkdir(parents=True)
            indexer, close = self._index_set(staging, self._embedder())
            try:
                for resource in self.resources.list():
                    if not os.path.isdir(resource.location):
                        report.missing.append(resource.resource_id)
                        continue
                    try:
                        report.resources[resource.resource_id] = indexer.index_resource(
                            resource.resource_id,
                            resource.location,
                            resource.resource_type,
                            full=True,
                            progress=_per_resource(progress, resource.resource_id),
                            secrets=secret_filter_of(resource),
                        )
                    except ResourceListingError as exc:
                        # Swapping in indexes without this resource would drop its
                        # units: stop before the first swap, the live ones untouched.
                        raise ResourceListingError(
                            f"rebuild stopped, live indexes unchanged: resource "
                            f"{resource.resource_id}: {exc}"
                        ) from exc
            finally:
                close()
            checkpoint("rebuild.staged")
            # INDEX_NAMES ends with the catalog: until it is swapped, the live
            # catalog is the old one, and a swapped index that is ahead of it
            # is repaired as after any interrupted session (see the module doc).
            generation = str(ULID())
            for name in INDEX_NAMES:
                displaced = self._install(self.data_dir, name, staging / name, generation)
                if displaced is not None:  # a real directory of the older layout
                    os.replace(displaced, staging / name)
                checkpoint("rebuild.swap")
            os.replace(staging, previous)
            checkpoint("rebuild.done")
            for rid, stats in report.resources.items():
                self.resources.mark_indexed(rid, secrets_skipped=stats.skipped.get("secret", 0))
        report.seconds = time.perf_counter() - t0
        _log.info("reindex.rebuilt", resources=len(report.resources), seconds=report.seconds)
        return report

    def hydrate(self, tier_service: ContextTierService, projects: Iterable[str]) -> int:
        """Hydrate a tier service (and the indexes) for projects, as a plan does."""
        from cleveragents.application.services.context_tier_hydrator import (
            hydrate_tiers_from_project,
        )

        total = 0
        with ReindexLock(self.data_dir):
            self._recover_interrupted_rebuild(self._indexer())
            for name in projects:
                for rid in self.project(name).resource_ids:
                    resource = self.resources.get(rid)
                    if resource is not None:
                        total += hydrate_tiers_from_project(
                            tier_service,
                            name,
                            rid,
                            resource.location,
                            resource.resource_type,
                            indexer=self._indexer(),
                            secrets=secret_filter_of(resource),
                        )
        return total

    def _recover_interrupted_rebuild(self, indexer: Indexer) -> None:
        """After a killed rebuild: mark every resource dirty, drop ``.rebuild/``.

        Call with the reindex lock held (see the module doc).
        """
        staging = self.data_dir / _STAGING
        if not staging.exists():
            return
        rids = [r.resource_id for r in self.resources.list()]
        indexer.mark_dirty(rids)
        shutil.rmtree(staging, ignore_errors=True)
        _log.warning("reindex.interrupted_rebuild_recovered", resources=len(rids))

    # ------------------------------------------------------------ status and verify

    def status(self) -> dict[str, Any]:
        """Resources, last indexed time, unit counts per backend, sizes on disk."""
        text, vector, graph = self._text(), self._vector(), self._graph()
        catalog = self._indexer().catalog
        rows = []
        for r in self.resources.list():
            records = catalog.records(r.resource_id)
            rows.append(
                {
                    "resource_id": r.resource_id,
                    "location": r.location,
                    "type": r.resource_type,
                    "last_indexed_at": r.last_indexed_at,
                    "files": sum(1 for rec in records.values() if rec.unit_uris),
                    "text_units": len(text.unit_uris(r.resource_id)),
                    "vector_units": len(vector.unit_uris(r.resource_id)),
                    "graph_subjects": len(graph.subjects(r.resource_id)),
                    "secret_filter": secret_filter_of(r).describe(),
                    "secrets_skipped": r.secrets_skipped,
                }
            )
        sizes = {
            name: _du(self.data_dir / name)
            for name in ("text", "vectors", "graph", "catalog", "registry.sqlite3")
        }
        return {
            "data_dir": str(self.data_dir),
            "projects": len(self.list_projects()),
            "resources": rows,
            "bytes_on_disk": sizes,
        }

    def verify(self) -> list[VerifyProblem]:
        """Check that catalog, text, vector and graph agree on every resource."""
        text, vector, graph = self._text(), self._vector(), self._graph()
        catalog = self._indexer().catalog
        problems: list[VerifyProblem] = []
        registered = {r.resource_id for r in self.resources.list()}
        present = catalog.resource_ids() | text.resource_ids() | vector.resource_ids()
        present |= graph.resource_ids()
        for rid in sorted(registered | present):
            records = catalog.records(rid)
            expected = {u for rec in records.values() for u in rec.unit_uris}
            subjects = _file_subjects({s for rec in records.values() for s in rec.graph_subjects})
            if rid not in registered:
                expected, subjects = set(), set()
            checks = (
                ("text", expected, text.unit_uris(rid)),
                ("vector", expected, vector.unit_uris(rid)),
                ("graph", subjects, _file_subjects(graph.subjects(rid))),
            )
            for name, want, have in checks:
                missing, extra = want - have, have - want
                if missing or extra:
                    sample = sorted(missing or extra)[0]
                    problems.append(VerifyProblem(rid, name, len(missing), len(extra), sample))
        return problems


class _LazyBackend:
    """Stands for a backend and builds it on the first attribute looked up."""

    __slots__ = ("_factory", "_target")

    def __init__(self, factory: Callable[[], object]) -> None:
        self._factory = factory
        self._target: object | None = None

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - whatever the backend has
        target = self._target
        if target is None:
            target = self._target = self._factory()
        return getattr(target, name)


def _per_resource(
    progress: Callable[[str, int, int], None] | None, resource_id: str
) -> Callable[[int, int], None] | None:
    if progress is None:
        return None

    def report(done: int, total: int) -> None:
        progress(resource_id, done, total)

    return report


def _writable(provider: Callable[[], object], kind: type, what: str) -> Callable[[], Any]:
    def get() -> Any:  # noqa: ANN401 - checked against the Protocol at run time
        value = provider()
        if not isinstance(value, kind):
            raise AcmsError(f"{what} is only wired in the 'local' profile (ACMS_PROFILE=local)")
        return value

    return get


def _required(provider: Callable[[], _T | None], what: str) -> Callable[[], _T]:
    def get() -> _T:
        value = provider()
        if value is None:
            raise AcmsError(f"{what} is only wired in the 'local' profile (ACMS_PROFILE=local)")
        return value

    return get


def _file_subjects(subjects: set[str]) -> set[str]:
    # The resource node itself is not a file's subject.
    return {s for s in subjects if path_of(s) is not None}


def _du(path: Path) -> int:
    if not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total
