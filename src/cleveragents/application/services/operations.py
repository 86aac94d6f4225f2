"""The operations behind the ``acms`` command line and ``scripts/reindex.py``.

The CLI parses arguments and prints; everything it does goes through
:class:`AcmsOperations`, built by :func:`cleveragents.bootstrap.bootstrap`, so
the same behaviour is available to an agent host in Python.

Every write goes through the index store (a unit of work that owns the data
directory's layout, lock, write order and crash repair): ``reindex``,
``hydrate`` and ``remove_resource`` hold its writer lock, ``rebuild`` indexes
into a fresh store that is swapped in atomically.  This module decides *what*
to index (which resources, which projects) and never how it is written.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from cleveragents._logging import get_logger
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
    ConflictError,
    NotFoundError,
    QueryError,
    ResourceListingError,
    ScopeViolationError,
)
from cleveragents.domain.models.acms.index_store import MaintainedStore, VerifyProblem
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
from cleveragents.domain.models.acms.uko import resource_id_of
from cleveragents.domain.models.acms.ulids import canonical_ulid

if TYPE_CHECKING:
    # Imported where used: a query command needs neither the indexer (numpy,
    # parsers) nor the tier service (pydantic).
    from cleveragents.application.container import Container
    from cleveragents.application.services.agent_session import AgentSession
    from cleveragents.application.services.context_tier_service import ContextTierService
    from cleveragents.application.services.indexer import Indexer

__all__ = [
    "AcmsOperations",
    "ReindexReport",
    "VerifyProblem",
    "detect_resource_type",
]

_log = get_logger("cleveragents.acms.operations")
_GIT_RESOURCE_TYPES = frozenset({"git-checkout", "git"})
_T = TypeVar("_T")


def detect_resource_type(path: str | os.PathLike[str]) -> str:
    """``git-checkout`` when ``path`` is inside a git work tree, else ``directory``.

    Raises:
        ResourceListingError: git refuses the checkout ("dubious ownership"):
            guessing ``directory`` would index what ``.gitignore`` excludes.
    """
    inside = _inside_git_work_tree(path)
    return "git-checkout" if inside else "directory"


def _inside_git_work_tree(path: str | os.PathLike[str]) -> bool | None:
    """Whether git finds ``path`` inside a work tree; None when git cannot run.

    Raises:
        ResourceListingError: git refuses the checkout ("dubious ownership").
    """
    path = os.path.expanduser(path)  # git -C does not expand "~" (a shell does)
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
        return None
    if out.returncode != 0 and "dubious ownership" in out.stderr:
        raise ResourceListingError(
            f"git refuses the checkout {path} (dubious ownership: it belongs to another user) "
            f"(fix: git config --global --add safe.directory {shlex.quote(os.fspath(path))}, "
            "or pass --type directory to index every file, .gitignore ignored)"
        )
    return out.returncode == 0 and out.stdout.strip() == "true"


@dataclass(slots=True)
class ReindexReport:
    """What a reindex did, per resource and in total.

    ``git_ignored`` maps each git resource that listed no file while its
    directory holds some to the work tree that ignores them all.
    """

    resources: dict[str, IndexStats] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    git_ignored: dict[str, str] = field(default_factory=dict)
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
            "empty_locations": self.empty,
            "git_ignored": self.git_ignored,
            "pruned": self.pruned,
            "failed": self.failed,
            "total": self.total.as_dict(),
            "seconds": round(self.seconds, 3),
        }


def _why_unreadable(location: str, path: str, max_bytes: int) -> str:
    """Why the indexed file ``path`` of the resource at ``location`` could
    not be read (``read_file`` returned None): one line for the caller.

    Nothing is said of a file reached through a directory that resolves
    outside the resource (one on its path became a symlink): its existence,
    type or size is not the resource's to tell."""
    full = os.path.join(location, path)
    if not os.path.isdir(location):
        # A reindex keeps a gone root's files (an unmounted volume comes
        # back): "run acms reindex" would change nothing.
        return (
            f"{path} cannot be read: its resource's directory {location} is gone or not a "
            "directory (its indexed files are kept; 'acms resource remove' deletes them)"
        )
    root = os.path.realpath(location)
    parent = os.path.realpath(os.path.dirname(full))
    if parent != root and not parent.startswith(root + os.sep):
        return f"{path} cannot be read now: a directory on its path leads out of the resource"
    try:
        st = os.lstat(full)
    except (FileNotFoundError, NotADirectoryError):
        return f"{path} was indexed but no longer exists on disk (run `acms reindex`)"
    except OSError as exc:
        return f"{path} cannot be read now: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink now, not the file indexed: not served"
    if stat.S_ISDIR(st.st_mode):
        return f"{path} is no longer a regular file (a directory now)"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is no longer a regular file"
    if st.st_size > max_bytes:
        return f"{path} is {st.st_size} bytes now, over the {max_bytes} bytes read serves"
    # Changed again since, or a directory on its path became a symlink.
    return f"{path} cannot be read now (changed since it was indexed; try again)"


class AcmsOperations:
    """Projects, resources, reindexing, scoped queries and status over one data dir."""

    def __init__(
        self,
        *,
        data_dir: Path,
        projects: ProjectRepository,
        resources: ResourceRegistry,
        store: Callable[[], MaintainedStore],
        text: Callable[[], TextIndex],
        vector: Callable[[], VectorIndex],
        graph: Callable[[], GraphIndex],
        embedder: Callable[[], Embedder],
        indexer: Callable[[], Indexer],
    ) -> None:
        # Backends are built on first use, so commands that do not need an
        # engine (project list, resource add) do not import or open it.
        self.data_dir = data_dir
        self.projects = projects
        self.resources = resources
        self._store = store
        self._text = text
        self._vector = vector
        self._graph = graph
        self._embedder = embedder
        self._indexer = indexer

    @classmethod
    def from_container(cls, container: Container) -> AcmsOperations:
        """Operations over a container built for the ``local`` profile."""
        return cls(
            data_dir=Path(container.config.data_dir()),
            projects=container.project_repository(),
            resources=container.resource_registry(),
            store=_required(container.index_store, "an index store"),
            text=_writable(container.text_backend, TextIndex, "a text index"),
            vector=_writable(container.vector_backend, VectorIndex, "a vector index"),
            graph=_writable(container.graph_backend, GraphIndex, "a graph index"),
            embedder=_required(container.embedder, "an embedder"),
            indexer=_required(container.indexer, "an indexer"),
        )

    def close(self) -> None:
        """Close the indexes opened through this object (their files and
        locks), for a host that is done with it: its queries fail after it.
        Nothing to close outside the local profile's index store."""
        try:
            store = self._store()
        except AcmsError:
            return  # no index store in this profile
        store.close()

    def _secure(self) -> None:
        """Owner-only modes for what a registry write may have created."""
        self._store().secure()

    # ------------------------------------------------------------ projects

    def add_project(self, name: str) -> Project:
        """Create a project (``namespace/name``)."""
        project = self.projects.add(name)
        self._secure()
        return project

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
            if not self.list_projects():
                # Most likely the wrong data directory, not a misspelt name.
                raise NotFoundError(
                    f"no project named {name!r}: the data directory {self.data_dir} holds "
                    "no projects (is --data-dir or ACMS_DATA_DIR the one you indexed?)"
                )
            raise NotFoundError(f"no project named {name!r} (see 'acms project list')")
        return project

    # ------------------------------------------------------------ resources

    def add_resource(
        self,
        path: str,
        project: str,
        resource_type: str | None = None,
        *,
        force: bool = False,
        secret_filter: bool = True,
        secret_allow: Iterable[str] = (),
    ) -> Resource:
        """Register ``path`` and link it to ``project``.

        A path equal to, inside or containing a resource already in the
        project would index the same files twice: it is refused unless
        ``force``.  ``secret_filter=False`` turns the secret deny-list off
        for it; ``secret_allow`` globs let matching files through it.

        Raises:
            NotFoundError: unknown project.  ValueError: bad path (empty, the
            data directory, a git repository's own directory or a path in
            one, a git type outside any git work tree),
            type or allow-pattern.
            ResourceListingError: git refuses the checkout.
            ConflictError: the path overlaps a resource of the project.
        """
        linked = set(self.project(project).resource_ids)
        if resource_type is not None and resource_type not in RESOURCE_TYPES:
            raise ValueError(f"unknown resource type {resource_type!r}")
        if not path.strip():
            raise ValueError("the path is empty (give the directory to register)")
        if not os.path.isdir(os.path.expanduser(path)):
            # Before the overlap check: a file inside a resource is first of
            # all not a directory.
            raise ValueError(f"not a directory: {os.path.realpath(os.path.expanduser(path))}")
        from cleveragents.application.services.resource_files import (
            excluded_below,
            git_directory_of,
        )

        git_dir = git_directory_of(os.path.expanduser(path))
        if git_dir is not None:
            real = os.path.realpath(os.path.expanduser(path))
            raise ValueError(
                f"{real} is {'' if real == git_dir else 'inside '}the git repository "
                f"directory {git_dir}: git's objects, refs and config (remote URLs with "
                "credentials among them), not a project's files; register the work tree"
            )

        try:  # the data directory itself cannot be a resource (inside one, it is left out)
            excluded_below(os.path.expanduser(path), (self.data_dir,))
        except ResourceListingError as exc:
            raise ValueError(str(exc)) from exc
        if not force:
            self._refuse_overlap(path, project, linked)
        if resource_type in _GIT_RESOURCE_TYPES and _inside_git_work_tree(path) is False:
            # Accepted, it would fail at every reindex until removed and added again.
            raise ValueError(
                f"not a git work tree: {os.path.realpath(os.path.expanduser(path))} "
                "(register it with --type directory to index every file)"
            )
        resource = self.resources.register(
            path,
            resource_type or detect_resource_type(path),
            secret_filter=secret_filter,
            secret_allow=tuple(secret_allow),
        )
        self.projects.link(project, resource.resource_id)
        self._secure()
        return resource

    def git_ignoring_work_tree(self, resource: Resource) -> str | None:
        """The top level of the git work tree that ignores every file of a
        git resource whose directory holds files to index: such a resource
        indexes nothing, and registered as a ``directory`` it would.  None
        otherwise (and when git cannot list it: listing it says why).

        Its cost: one ``git ls-files`` of the directory (see
        :func:`git_ignored_work_tree`).
        """
        from cleveragents.application.services.resource_files import git_ignored_work_tree

        return git_ignored_work_tree(
            resource.location, resource.resource_type, secrets=secret_filter_of(resource)
        )

    def _note_git_ignored(self, report: ReindexReport) -> None:
        """Name in ``report`` each git resource that listed no file while its
        directory holds some (checked only for resources that listed none)."""
        for resource in self.resources.list():
            stats = report.resources.get(resource.resource_id)
            if stats is None or stats.files_seen:
                continue
            work_tree = self.git_ignoring_work_tree(resource)
            if work_tree is not None:
                _log.info(
                    "reindex.git_ignores_all",
                    resource_id=resource.resource_id,
                    work_tree=work_tree,
                )
                report.git_ignored[resource.resource_id] = work_tree

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

    def _refuse_overlap(self, path: str, project: str, linked: set[str]) -> None:
        new = Path(os.path.realpath(os.path.expanduser(path)))
        for r in self.resources.list():
            if r.resource_id not in linked:
                continue
            old = Path(os.path.realpath(r.location))
            if new == old:
                relation = "is already registered as"
            elif old in new.parents:
                relation = "is inside"
            elif new in old.parents:
                relation = "contains"
            else:
                continue
            raise ConflictError(
                f"{new} {relation} resource {r.resource_id} ({old}) of project {project}; "
                "its files would be indexed twice (use --force to register it anyway)"
            )

    def list_resources(self, project: str | None = None) -> list[Resource]:
        """Registered resources, all or those of one project."""
        resources = self.resources.list()
        if project is None:
            return resources
        linked = set(self.project(project).resource_ids)
        return [r for r in resources if r.resource_id in linked]

    def remove_resource(self, resource_id: str, *, lock_timeout: float = 60.0) -> None:
        """Forget a resource and delete all its index units, waiting up to
        ``lock_timeout`` seconds for a running reindex.

        Raises:
            ValueError: malformed ULID.  NotFoundError: unknown resource.
            BusyError: a reindex held the lock past ``lock_timeout``.
        """
        rid = canonical_ulid(resource_id)
        if self.resources.get(rid) is None:
            raise NotFoundError(f"no resource {rid} (see 'acms resource list')")
        with self._store().writing(timeout=lock_timeout) as store:
            store.delete_resource(rid)
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

    def agent_session(
        self, projects: Iterable[str] = (), resources: Iterable[str] = (), *, owned: bool = False
    ) -> AgentSession:
        """A scoped session with agent-sized answers (what ``acms serve`` and
        ``cleveragents.acms.open_data_dir`` give), over the named projects and
        resources, or every registered project when none is named.
        ``owned``: the session's ``close`` closes this object's indexes (a
        session that is the only user of this object, as ``open_data_dir``'s).

        Raises:
            ValueError: a malformed ULID.  NotFoundError: an unknown name.
        """
        from cleveragents.application.services.agent_session import (
            AgentSession,
            FileText,
            SessionScope,
        )
        from cleveragents.application.services.resource_files import (
            ListedFile,
            decode_text,
            is_binary,
            read_file,
            refuse_swapped_root,
        )

        projects, resources = list(projects), list(resources)
        if not projects and not resources:
            projects = [p.name for p in self.list_projects()]
        by_project = {name: frozenset(self.project(name).resource_ids) for name in projects}
        rids = set().union(*by_project.values()) if by_project else set()
        if resources:
            rids |= self.scope((), resources)
        registry = self.resources

        def is_indexed(rid: str, path: str) -> bool:
            # Any error (no store in this profile, an unreadable catalog)
            # reaches the caller, as the graph's did.
            return self._store().indexed_file(rid, path)

        def read(rid: str, path: str, max_bytes: int) -> FileText | None:
            # The file as it is now, held to the rules its indexing applied:
            # one that became binary, or took in a secret, since is not served.
            resource = registry.get(rid)
            if resource is None:
                raise ValueError(
                    f"resource {rid} is no longer registered (removed since this started)"
                )
            try:
                refuse_swapped_root(resource.location)
            except ResourceListingError as exc:
                raise ValueError(f"{path} is not served: {exc}") from None
            got = read_file(resource.location, ListedFile(path, 0, 0), max_bytes=max_bytes)
            if got is None:
                raise ValueError(_why_unreadable(resource.location, path, max_bytes))
            if is_binary(path, got.data):
                raise ValueError(f"{path} is binary now (changed since it was indexed): not served")
            secrets = secret_filter_of(resource)
            kind = "path" if secrets.is_secret(path) else secrets.content_rule(path, got.data)
            if kind is not None:
                raise ValueError(
                    f"{path} now matches the secret filter ({kind}): not served "
                    "(the next reindex drops it from the index)"
                )
            record = self._store().catalog.get(rid, [path]).get(path)
            indexed = None if record is None else record.sha256
            return FileText(decode_text(got.data), hashlib.sha256(got.data).hexdigest() != indexed)

        return AgentSession(
            text=cast(TextBackend, _LazyBackend(self._text)),
            vector=cast(VectorBackend, _LazyBackend(self._vector)),
            graph=cast(GraphBackend, _LazyBackend(self._graph)),
            # Built (numpy imported, a model perhaps loaded) by the first search.
            embedder=cast(Embedder, _LazyBackend(self._embedder)),
            scope=SessionScope(resources=frozenset(rids), projects=by_project),
            read_file=read,
            is_indexed=is_indexed,
            closer=self.close if owned else None,
            registered=lambda: frozenset(r.resource_id for r in registry.list()),
            locations=lambda: {r.resource_id: r.location for r in registry.list()},
            embedded_by=self._embedded_by,
        )

    def _embedded_by(self, scope: frozenset[str]) -> Mapping[str, str]:
        """The embedder that made each in-scope resource's vectors (the index
        store's record; none from a store that keeps no record)."""
        recorded = getattr(self._store(), "recorded_embedders", None)
        return recorded(scope) if callable(recorded) else {}

    def sparql_results(self, query: str, scope: frozenset[str]) -> dict[str, Any]:
        """A sandboxed query's answer in the SPARQL 1.1 JSON results form (any
        SELECT, ASK, CONSTRUCT): see ``RdflibGraphBackend.sparql_select``.

        Raises:
            QueryError: the graph backend cannot answer in that form, or the
                query is refused.  ScopeViolationError: a row named a
                resource outside ``scope`` (a bug, never input).
        """
        select = getattr(self._graph(), "sparql_select", None)
        if select is None:
            raise QueryError("this graph backend answers SPARQL as triples only")
        answer: dict[str, Any] = select(query, scope=scope)
        for row in answer.get("results", {}).get("bindings", []):  # last line of defence
            for term in row.values():
                rid = resource_id_of(term.get("value", ""))
                if rid is not None and rid not in scope:
                    raise ScopeViolationError("a SPARQL answer named a resource out of scope")
        return answer

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

    def embed_query(self, text: str, scope: frozenset[str] | None = None) -> list[float]:
        """Embed a query text with the configured embedder; with ``scope``,
        for a search of it: an error if its vectors were made by another
        embedder (see ``agent_session.check_embedded_by``)."""
        if not text.strip():
            raise ValueError("the text to embed must not be empty")
        embedder = self._embedder()
        if scope is not None:
            from cleveragents.application.services.agent_session import check_embedded_by

            check_embedded_by(embedder, self._embedded_by(scope))
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
        jobs: int | None = None,
        reembed_progress: Callable[[str, str, int, int], None] | None = None,
    ) -> ReindexReport:
        """Index the named resources (all when none named), incrementally.

        A resource indexed with another embedder (same units) has its stored
        units re-embedded first, no file read:
        ``reembed_progress(resource_id, embedder_name, done, total)``.  An
        embedder of another dimension is refused (``IndexUnavailableError``
        naming ``reindex --rebuild``).

        ``jobs`` worker processes parse, chunk and embed (default: one per
        core; ``1``: all in this process); this process alone writes.

        Indexing every resource also deletes the units of resources that are
        no longer registered.  Only one reindex runs per data directory at a
        time: another waits up to ``lock_timeout`` seconds.  A git resource
        git cannot list is recorded in ``report.failed`` (its units stay as
        they were) and the other resources are still indexed.
        """
        from cleveragents.application.services.resource_files import refuse_swapped_root

        projects, resources = list(projects), list(resources)
        everything = not projects and not resources
        targets = None if everything else sorted(self.scope(projects, resources))
        report = ReindexReport()
        t0 = time.perf_counter()
        with (
            self._store().writing(timeout=lock_timeout) as store,
            self._indexer().workers(jobs) as indexer,
        ):
            # One registry read under the lock, not one per resource.
            registered = {r.resource_id: r for r in self.resources.list()}
            for rid in registered if targets is None else targets:
                resource = registered.get(rid)
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
                if _indexed_but_empty(resource, store):
                    # An unmounted volume leaves its mount point empty: listing
                    # it would delete every unit, to be read again once it is
                    # back.  Kept, as a missing directory is; the CLI says so.
                    _log.warning(
                        "reindex.skip_empty_location", resource_id=rid, location=resource.location
                    )
                    report.empty.append(rid)
                    continue
                try:
                    refuse_swapped_root(resource.location)
                    stats = indexer.index_resource(
                        rid,
                        resource.location,
                        resource.resource_type,
                        full=full,
                        progress=_per_resource(progress, rid),
                        secrets=secret_filter_of(resource),
                        reembed_progress=_reembed_of(reembed_progress, rid),
                        exclude=(self.data_dir,),
                    )
                except ResourceListingError as exc:
                    _log.info("reindex.resource_failed", resource_id=rid, error=str(exc))
                    report.failed[rid] = str(exc)
                    continue
                report.resources[rid] = stats
                self.resources.mark_indexed(rid, secrets_skipped=stats.skipped.get("secret", 0))
            if everything:
                keep = [r.resource_id for r in self.resources.list()]
                if not keep and not self.list_projects():
                    self._refuse_pruning_all(store)
                report.pruned = store.prune(keep)
        self._note_git_ignored(report)
        report.seconds = time.perf_counter() - t0
        return report

    def _refuse_pruning_all(self, store: MaintainedStore) -> None:
        """A registry that lists no project and no resource while the
        indexes hold some was lost or replaced (deleted, emptied, a fresh one
        made in its place): pruning would delete every index, which only
        hours of reindexing make again, where restoring the registry brings
        them back.  (One that lists projects but no resource was left so on
        purpose, or restored from an older backup: its units go, as
        ``--verify`` says.)"""
        held = list(store.iter_resource_ids())
        if held:
            raise AcmsError(
                f"the registry ({self.data_dir / 'registry.sqlite3'}) lists no projects "
                f"while the indexes hold {len(held)}: if it was lost or replaced, restore it "
                "from a backup; to start over, register the projects and resources again "
                "(the next reindex then drops the old ones' units) or remove the data directory"
            )

    def rebuild(
        self,
        *,
        lock_timeout: float = 60.0,
        progress: Callable[[str, int, int], None] | None = None,
        jobs: int | None = None,
    ) -> ReindexReport:
        """Build fresh indexes of every resource beside the live ones, then swap
        each one in with an atomic exchange (see ``MaintainedStore.rebuild``).
        ``jobs`` as for :meth:`reindex`.

        Readers see the old index or the new one, never a half-built one; a
        reader that has an index open picks the new one up on its next query.
        """
        from cleveragents.application.services.resource_files import refuse_swapped_root

        report = ReindexReport()
        t0 = time.perf_counter()
        planner = self._indexer()
        with self._store().writing(timeout=lock_timeout) as live:
            # Indexes built without a resource whose directory is gone would
            # drop its units at the swap (a reindex keeps them): refuse
            # before building anything, and again if one vanishes meanwhile.
            _refuse_missing(self.resources.list(), live)
            with live.rebuild() as fresh, planner.over(fresh).workers(jobs) as indexer:
                for resource in self.resources.list():
                    _refuse_missing([resource], live)
                    try:
                        refuse_swapped_root(resource.location)
                        report.resources[resource.resource_id] = indexer.index_resource(
                            resource.resource_id,
                            resource.location,
                            resource.resource_type,
                            full=True,
                            progress=_per_resource(progress, resource.resource_id),
                            secrets=secret_filter_of(resource),
                            exclude=(self.data_dir,),
                        )
                    except ResourceListingError as exc:
                        # Swapping in indexes without this resource would drop its
                        # units: stop before the first swap, the live ones untouched.
                        raise ResourceListingError(
                            f"rebuild stopped, live indexes unchanged: resource "
                            f"{resource.resource_id}: {exc}"
                        ) from exc
            for rid, stats in report.resources.items():
                self.resources.mark_indexed(rid, secrets_skipped=stats.skipped.get("secret", 0))
        self._note_git_ignored(report)
        report.seconds = time.perf_counter() - t0
        _log.info("reindex.rebuilt", resources=len(report.resources), seconds=report.seconds)
        return report

    def hydrate(self, tier_service: ContextTierService, projects: Iterable[str]) -> int:
        """Hydrate a tier service (and the indexes) for projects, as a plan does
        (``hydrate_tiers_for_plan``: one tier budget for all their resources).

        Raises:
            NotFoundError: a project the registry does not know.
        """
        from cleveragents.application.services.context_tier_hydrator import (
            hydrate_tiers_for_plan,
        )

        names = list(projects)
        for name in names:
            self.project(name)  # an unknown name is an error here, not a skip
        with self._store().writing():
            return hydrate_tiers_for_plan(
                tier_service, names, self.projects, self.resources, indexer=self._indexer()
            )

    # ------------------------------------------------------------ status and verify

    def status(self) -> dict[str, Any]:
        """Resources, last indexed time, unit counts per index and the graph's
        file subjects (from commit records and the catalog: reading no unit
        and loading no graph; ``verify`` compares them), sizes on disk,
        the secret filter per resource, and the paths of the data directory
        that others may read."""
        store = self._store()
        # Servers of the remote profile, once, resources or not; a lost local
        # index is named rather than counted as empty.
        store.check_reachable()
        rows = [
            {
                "resource_id": r.resource_id,
                "location": r.location,
                "type": r.resource_type,
                "last_indexed_at": r.last_indexed_at,
                **store.counts(r.resource_id),
                "secret_filter": secret_filter_of(r).describe(),
                "secrets_skipped": r.secrets_skipped,
            }
            for r in self.resources.list()
        ]
        listed = {row["resource_id"] for row in rows}
        return {
            "data_dir": str(self.data_dir),
            "projects": len(self.list_projects()),
            "resources": rows,
            # Indexed, not registered: a resource removed by a registry
            # restored from an older backup, or every one if it was lost.
            "unregistered": sorted(set(store.catalog.resource_ids()) - listed),
            "bytes_on_disk": store.bytes_on_disk(),
            "loose_modes": store.loose_modes(),
        }

    def verify(self, *, lock_timeout: float | None = 60.0) -> list[VerifyProblem]:
        """Check that catalog, text, vector and graph agree on every resource,
        holding the reindex lock (waiting up to ``lock_timeout`` seconds for a
        running reindex; ``None``: without the lock).

        Raises:
            BusyError: a reindex held the lock past ``lock_timeout``.
        """
        return self._store().verify(
            (r.resource_id for r in self.resources.list()), lock_timeout=lock_timeout
        )


class _LazyBackend:
    """Stands for a backend (or the embedder) and builds it on the first
    attribute looked up."""

    __slots__ = ("_factory", "_lock", "_target")

    def __init__(self, factory: Callable[[], object]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._target: object | None = None

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - whatever the backend has
        target = self._target
        if target is None:
            with self._lock:  # concurrent first calls build it once
                target = self._target
                if target is None:
                    target = self._target = self._factory()
        return getattr(target, name)


def _refuse_missing(resources: Iterable[Resource], live: MaintainedStore) -> None:
    """Stop a rebuild when a resource's directory is gone, or is empty while
    its files are indexed (an unmounted volume; see :meth:`AcmsOperations.rebuild`).

    Raises:
        ResourceListingError: naming each such resource and what to do.
    """
    gone = [r for r in resources if not os.path.isdir(r.location)]
    empty = [r for r in resources if r not in gone and _indexed_but_empty(r, live)]
    if gone or empty:
        names = "; ".join(
            [f"the directory of {r.resource_id} ({r.location}) is gone" for r in gone]
            + [f"the directory of {r.resource_id} ({r.location}) is empty" for r in empty]
        )
        raise ResourceListingError(
            f"rebuild stopped, live indexes unchanged: {names}, and a rebuild would drop "
            "its indexed files; restore it (mount the volume), or remove the "
            "resource ('acms resource remove ULID'), then rebuild"
        )


def _indexed_but_empty(resource: Resource, live: MaintainedStore) -> bool:
    """An empty directory whose files the live catalog holds (or may hold:
    a catalog that cannot be read counts as holding them)."""
    if not _is_empty_dir(resource.location):
        return False
    try:  # the catalog alone: no index (nor, remote, any server) is asked
        return bool(live.catalog.file_stats(resource.resource_id))
    except AcmsError:
        return True


def _is_empty_dir(location: str) -> bool:
    """Whether a directory has no entry at all (an unreadable one is not
    empty: listing it reports why)."""
    try:
        with os.scandir(location) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def _per_resource(
    progress: Callable[[str, int, int], None] | None, resource_id: str
) -> Callable[[int, int], None] | None:
    if progress is None:
        return None

    def report(done: int, total: int) -> None:
        progress(resource_id, done, total)

    return report


def _reembed_of(
    progress: Callable[[str, str, int, int], None] | None, resource_id: str
) -> Callable[[str, int, int], None] | None:
    if progress is None:
        return None

    def report(name: str, done: int, total: int) -> None:
        progress(resource_id, name, done, total)

    return report


def _writable(provider: Callable[[], object], kind: type, what: str) -> Callable[[], Any]:
    def get() -> Any:  # noqa: ANN401 - checked against the Protocol at run time
        value = provider()
        if not isinstance(value, kind):
            if value is not None and type(value).__module__.split(".")[0] != "cleveragents":
                # A host's own backend (an override): say what it lacks.
                raise AcmsError(
                    f"{what} is needed, and the {type(value).__name__} wired is not one "
                    f"(the {kind.__name__} Protocol: queries and writes); a backend that "
                    "only answers queries serves them through ScopedView"
                )
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
