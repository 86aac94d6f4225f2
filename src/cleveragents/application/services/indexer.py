"""Incremental indexer: a planner that turns a resource's files into per-file
changes for the index store.

Design::

    hydrator / reindex ──► Indexer.session(resource) ──► IndexSession (planner)
                                             │ per listed file:
                                             │   needs_read? (catalog size/mtime, racy,
                                             │                suspect after a crash)
                                             │   update(file, bytes) -> hash changed?
                                             │   chunk + embed + triples -> FileDelta
                                             │          │
                                             │          ▼ tx.apply(delta)
                                             │   IndexStore transaction (infrastructure):
                                             │   write order, markers, crash repair
                                             └ finish(): vanished files -> delete deltas;
                                                         the store commits

- A file whose size and mtime match the catalog is not read at all, unless
  the store calls its entry *racy* (its mtime is not older than the last
  catalog write: a same-size rewrite in the same timestamp tick would look
  unchanged) or *suspect* (an earlier session crashed with it half-written).
- A file read whose content hash matches is not re-indexed (a ``touch``
  delta updates its catalog row).
- A changed file's delta names its new units and the old record: the store
  writes the new units in the same atomic upsert that drops the old ones.
- Imports are resolved against the files listed in the same walk.  An
  unchanged file keeps the import targets resolved when it was indexed;
  ``full=True`` re-resolves everything.

The planner makes no engine call: it reads the catalog through the store's
transaction and hands it :class:`FileDelta` values (see
:mod:`cleveragents.domain.models.acms.index_store`).

Inside :meth:`Indexer.workers` (``acms reindex --jobs N``), the CPU work of a
changed file (parse, chunk, triples, units, embeddings) runs in worker
processes (:mod:`.index_workers`); this process lists, reads, hashes and
writes, and hands the deltas on in listing order.  Less than one batch of
changed files (a watch event, a small re-run) is planned here without
starting a worker.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import numpy as np
import numpy.typing as npt

from cleveragents._collector import collect_when_due, paused_collector
from cleveragents._logging import get_logger
from cleveragents.application.services.code_graph import PathLookup, root_package
from cleveragents.application.services.index_workers import (
    EMBED_BATCH,
    FilePlan,
    Outcome,
    PlanFailure,
    PlannerPool,
    PlannerSpec,
    default_jobs,
    embed_plans,
    embed_texts,
    fault_from_env,
    plan_file,
    worker_nice_from_env,
)
from cleveragents.application.services.resource_files import (
    ListedFile,
    ReadFile,
    is_binary,
    list_resource,
    read_file,
    secret_content,
)
from cleveragents.domain.models.acms.backends import IndexUnit, WriteTriple
from cleveragents.domain.models.acms.code_facts import CodeParser
from cleveragents.domain.models.acms.embedding import Embedder
from cleveragents.domain.models.acms.index_store import (
    Catalog,
    FileDelta,
    IndexStore,
    IndexTransaction,
)
from cleveragents.domain.models.acms.indexing import FileRecord, IndexStats
from cleveragents.domain.models.acms.secret_filter import (
    DEFAULT_SECRET_FILTER,
    SECRET_RULES_VERSION,
    SecretFilter,
)
from cleveragents.domain.models.acms.ulids import canonical_ulid

__all__ = [
    "DEFAULT_INDEX_FILE_BYTES",
    "NOT_READ",
    "WORKER_BATCH_BYTES",
    "Catalog",
    "IndexSession",
    "Indexer",
    "NotRead",
    "PlannerSpec",
    "default_jobs",
]

# Bumped when the code parser reads different facts from the same text
# (ts2: a call's line is its name's line; definitions found on real trees;
# ts3: a name defined again in its file, an overload, is a symbol of its own):
# every file is parsed again.
_CODE_GRAPH_VERSION = "code-graph-ts3"
# Bumped when the units change shape (``symbols``, ``calls``, then
# ``qualified`` metadata): a re-index follows.
_UNITS_VERSION = "units-5"
DEFAULT_INDEX_FILE_BYTES = 1024 * 1024
_EMBED_BATCH = EMBED_BATCH
# A worker's batch: enough source to amortise the round trip, small enough
# that the files in flight (WINDOW_PER_JOB batches per job) bound the memory
# (a planned batch is ~9x its source in Python objects).  The window (4 MB
# of source with 2 jobs) keeps the workers busy while the writer flushes
# store batches and commits the text index: with 2 batches per job the
# workers drained during each text commit (stdlib at jobs 2, four
# interleaved runs each: 12.6-13.0 s; 4 per job: 12.2-12.5 s, for ~20 MB
# more peak RSS).
WORKER_BATCH_BYTES = 512 * 1024
WINDOW_PER_JOB = 4
_WORKER_BATCH_FILES = 256

_log = get_logger("cleveragents.acms.indexer")


@dataclass(slots=True)
class _Planned:
    listed: ListedFile
    sha256: str
    units: list[IndexUnit] | tuple[IndexUnit, ...]
    triples: list[WriteTriple] | tuple[WriteTriple, ...]
    subjects: tuple[str, ...]
    old: FileRecord | None
    size: int
    prepared: tuple[object, ...] | None = None


def _log_crash(resource_id: str, path: str, detail: str) -> None:
    _log.warning(
        "indexer.planner_crashed",
        resource_id=resource_id,
        path=path,
        detail=detail[:200],
        outcome="indexed without tree-sitter until it changes",
    )


def _pool_runs(pool: PlannerPool, resource_id: str, listing: str) -> bool:
    """Whether a worker of ``pool`` can plan an empty batch: when none can
    (a worker killed as it starts, a broken environment), a dead worker says
    nothing about the file it was given."""
    try:
        pool.submit(resource_id, listing, []).result()
    except Exception:
        return False
    return True


@dataclass(slots=True)
class _Work:
    """A changed file on its way to a worker."""

    listed: ListedFile
    sha256: str
    old: FileRecord | None
    data: bytes


class Indexer:
    """Plans the changes of each resource's files; the store writes them."""

    def __init__(
        self,
        store: IndexStore,
        embedder: Embedder,
        *,
        max_file_bytes: int = DEFAULT_INDEX_FILE_BYTES,
        code_parser: CodeParser | None = None,
        spec: PlannerSpec | None = None,
    ) -> None:
        """``spec`` is how a worker process builds its own embedder and
        parser (the same ones as ``embedder`` and ``code_parser``); without
        it, planning runs in this process whatever ``jobs`` asks."""
        if embedder.dimension != store.dimension:
            raise ValueError(
                f"embedder dimension {embedder.dimension} does not match the vector index "
                f"dimension {store.dimension}"
            )
        if max_file_bytes <= 0:
            raise ValueError("max_file_bytes must be positive")
        self.store = store
        self.embedder = embedder
        # Where the store keeps its files (None in RAM): a listing leaves it
        # out when a resource holds it (context_tier_hydrator).
        self.data_dir: Path | None = getattr(store, "data_dir", None)
        self.max_file_bytes = max_file_bytes
        self.code_parser = code_parser
        self._pool: PlannerPool | None = None
        # What produced the index.  The units part (chunker, code graph: with
        # a code parser, chunks and graph follow its definitions) changing
        # re-indexes every file; the embedder part (name:dimension) alone
        # changing re-embeds the stored units (no file is read).
        graph = f"{_CODE_GRAPH_VERSION}|" if code_parser is not None else ""
        self.embedder_identity = f"{embedder.name}:{embedder.dimension}"
        # The secret rules too: a file they now deny must leave the index.
        self.units_identity = f"{graph}{_UNITS_VERSION}|{SECRET_RULES_VERSION}"
        self.identity = f"{self.embedder_identity}|{self.units_identity}"
        if spec is not None and spec.embedder_identity not in (None, self.embedder_identity):
            # Workers would build the configured embedder, not this one.
            _log.info(
                "indexer.planning_in_process",
                reason="the embedder is not the one worker processes build",
                embedder=self.embedder_identity,
                workers=spec.embedder_identity,
            )
            spec = None
        self.spec = spec

    def over(self, store: IndexStore) -> Indexer:
        """The same planner writing to another store (a rebuild's fresh one)."""
        return Indexer(
            store,
            self.embedder,
            max_file_bytes=self.max_file_bytes,
            code_parser=self.code_parser,
            spec=self.spec,
        )

    @contextlib.contextmanager
    def workers(
        self, jobs: int | None = None, *, batch_bytes: int = WORKER_BATCH_BYTES
    ) -> Iterator[Indexer]:
        """Plan files in ``jobs`` worker processes inside the block.

        ``None``: one per core (:func:`default_jobs`).  ``1``, or an indexer
        built without a :class:`PlannerSpec`: in this process.  The pool
        lives for the block, so the workers load their parser and embedder
        once for every resource indexed in it; it starts with the first
        full batch (``batch_bytes`` of changed files), so a session that
        changes less plans it here.

        Raises:
            ValueError: ``jobs`` is not a positive int, or ``ACMS_WORKER_NICE``
                is set to anything but an integer from 0 to 19 (checked
                whatever ``jobs`` is, so a typo never waits for a run with
                workers to show).
        """
        if jobs is None:
            jobs = default_jobs()
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise ValueError(f"jobs must be a positive int, not {jobs!r}")
        worker_nice_from_env()
        if jobs == 1 or self.spec is None or self._pool is not None:
            yield self
            return
        with PlannerPool(self.spec, jobs, batch_bytes=batch_bytes) as pool:
            self._pool = pool
            try:
                yield self
            finally:
                self._pool = None

    @property
    def catalog(self) -> Catalog:
        """The store's catalog (read-only use: status, tests)."""
        return self.store.catalog

    def session(
        self,
        resource_id: str,
        root: str | Path,
        listed_paths: Iterable[str],
        *,
        full: bool = False,
        secrets: SecretFilter = DEFAULT_SECRET_FILTER,
        reembed_progress: Callable[[str, int, int], None] | None = None,
    ) -> IndexSession:
        """Start indexing one resource whose walk listed ``listed_paths``
        (``secrets`` content-checks the files the session reads itself).

        When only the embedder changed since the resource was indexed, its
        stored units are re-embedded first (no file read), calling
        ``reembed_progress(embedder_name, done, total)``.

        Use it as a context manager, or call :meth:`IndexSession.finish`.
        """
        return IndexSession(
            self,
            canonical_ulid(resource_id),
            Path(root),
            listed_paths,
            full=full,
            secrets=secrets,
            reembed_progress=reembed_progress,
        )

    def index_resource(
        self,
        resource_id: str,
        root: str | Path,
        resource_type: str = "git-checkout",
        *,
        full: bool = False,
        progress: Callable[[int, int], None] | None = None,
        secrets: SecretFilter = DEFAULT_SECRET_FILTER,
        reembed_progress: Callable[[str, int, int], None] | None = None,
        exclude: Iterable[str | os.PathLike[str]] = (),
    ) -> IndexStats:
        """List and index one resource on its own (the ``reindex`` path).

        ``progress(done, total)`` is called after each file;
        ``reembed_progress`` as for :meth:`session`.  Files the
        ``secrets`` deny-list leaves out count as ``skipped["secret"]``,
        symbolic links (never followed) as ``skipped["symlink"]``, binaries
        by their extension as ``skipped["binary"]`` and FIFOs, sockets and
        devices as ``skipped["not_regular"]``;
        directories in ``exclude`` (the data directory) are never listed.

        Raises:
            ResourceListingError: git cannot list a git resource (nothing is
                written: its units stay as they were).
        """
        listing = list_resource(root, resource_type, secrets=secrets, exclude=exclude)
        listed = listing.files
        paths = [f.rel_path for f in listed]
        # Planned files arrive by the thousand and leave no reference cycles:
        # the cyclic collector would only walk them (~8% of an indexing run).
        with (
            paused_collector(),
            self.session(
                resource_id,
                root,
                paths,
                full=full,
                secrets=secrets,
                reembed_progress=reembed_progress,
            ) as session,
        ):
            for _ in listing.secret_skipped:
                session.stats.skip("secret")
            for _path, reason in listing.left_out:  # never read, but not unsaid
                session.stats.skip(reason)
            session.visit_all(listed, progress)
        return session.stats

    def delete_resource(self, resource_id: str) -> None:
        """Delete every unit of a resource from all indexes and the catalog."""
        self.store.delete_resource(resource_id)

    def mark_dirty(self, resource_ids: Iterable[str]) -> None:
        """Make the next session of each resource check and repair it."""
        self.store.mark_dirty(resource_ids)

    def prune(self, keep: Iterable[str]) -> list[str]:
        """Delete the units of every indexed resource not in ``keep``."""
        return self.store.prune(keep)


class NotRead:
    """Marker type: the caller did not read the file (see ``IndexSession.visit``)."""


NOT_READ = NotRead()


class IndexSession:
    """One resource's pass: visit (or read and update) each listed file, then finish.

    With a worker pool (:meth:`Indexer.workers`), changed files go to the
    workers in batches of about :data:`WORKER_BATCH_BYTES`; at most two
    batches per job are in flight, and their deltas reach the store in the
    order the files were visited, so the store sees the same sequence of
    deltas as with one job.  A file whose planning fails, or whose worker
    dies twice (once in its batch, once alone), is skipped (``parse_failed``
    or ``worker_failed``): its old units go at finish, and the next session
    reads it again.
    """

    def __init__(
        self,
        indexer: Indexer,
        resource_id: str,
        root: Path,
        listed_paths: Iterable[str],
        *,
        full: bool,
        secrets: SecretFilter = DEFAULT_SECRET_FILTER,
        reembed_progress: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self._ix = indexer
        self._secrets = secrets
        self.resource_id = resource_id
        self.root = root
        # Before the store's session starts: a bad fault variable (tests) or
        # a listing that raises must not leave it open.
        self._fault = fault_from_env()
        self._listed_paths = (
            listed_paths
            if isinstance(listed_paths, list | tuple | set | frozenset)
            else list(listed_paths)
        )
        self._stack = contextlib.ExitStack()
        self._tx: IndexTransaction = self._stack.enter_context(
            indexer.store.session(resource_id, identity=indexer.identity)
        )
        if self._tx.needs_reembed and not full:
            self._reembed(reembed_progress)
        self.full = full or self._tx.full
        self.stats: IndexStats = self._tx.stats
        self._catalog_stats = self._tx.file_stats()
        # Fixed when the transaction starts (from the dirty marker): read once,
        # not once per file of a re-run.
        self._suspects = self._tx.suspects
        # Contents a dead planner was planning (see _settle_suspect).
        self._suspects_left = set(self._tx.suspects_left())
        self._max_file_bytes = indexer.max_file_bytes
        self._path_lookup: PathLookup | None = None
        # The package the root is imported as, when the root is one (rdflib/).
        self._package = root_package(Path(os.path.abspath(root)).name, self._listed_paths)
        self._seen: set[str] = set()
        self._to_embed: list[_Planned] = []
        self._to_embed_units = 0
        self._pool = indexer._pool
        self._listing_file: str | None = None
        self._batch: list[_Work] = []
        self._batch_bytes = 0
        self._in_flight: deque[tuple[list[_Work], Future[list[Outcome]]]] = deque()
        self._finished = False
        self._broken = False

    def _reembed(self, progress: Callable[[str, int, int], None] | None) -> None:
        """Only the embedder changed: re-embed the stored units (the store's
        unit of work), before the incremental pass handles changed files."""
        embedder = self._ix.embedder

        def embed(texts: list[str]) -> npt.NDArray[np.float32]:
            return embed_texts(embedder, texts)

        def report(done: int, total: int) -> None:
            if progress is not None:
                progress(embedder.name, done, total)

        try:
            self._tx.reembed(embed, progress=report)
        except BaseException as exc:
            # Nothing more is written: the dirty marker stays and the identity
            # is not recorded, so the next session re-embeds again.
            self._stack.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def __enter__(self) -> IndexSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.finish()
        else:
            self._abandon(exc if exc is not None else exc_type())

    def _abandon(self, exc: BaseException) -> None:
        """End the session after ``exc``: nothing more is written, the store
        keeps the dirty marker, and the resource's next session repairs what
        this one left."""
        if self._finished:
            return
        self._finished = self._broken = True
        for _, future in self._in_flight:
            future.cancel()
        self._in_flight.clear()
        self._stack.__exit__(type(exc), exc, exc.__traceback__)

    @property
    def _files(self) -> PathLookup:
        """The listing, for resolving imports of every language to files."""
        if self._path_lookup is None:
            self._path_lookup = PathLookup(self._listed_paths, self._package)
        return self._path_lookup

    # ------------------------------------------------------------ per file

    def needs_read(self, listed: ListedFile) -> bool:
        """True when the index needs this file's bytes (new, changed, racy or suspect)."""
        if listed.size > self._max_file_bytes:
            return False
        recorded = self._catalog_stats.get(listed.rel_path)
        return (
            self.full
            or recorded is None
            or recorded[0] != listed.size
            or recorded[1] != listed.mtime_ns
            or listed.rel_path in self._suspects
            or self._tx.is_racy(recorded[1])
        )

    def visit(self, listed: ListedFile, preread: ReadFile | NotRead | None = NOT_READ) -> None:
        """Handle one listed file, reading it only when the index needs it.

        ``preread`` is what a caller already read for its own purpose (the
        hydrator's tier): the bytes, or None when that read failed; the
        caller has content-checked them for secrets.  Bytes the session reads
        itself are checked here: a file holding a secret token is skipped
        (``skipped["secret"]``).  Reads count in the stats only when the
        index needed them.
        """
        stats = self.stats
        stats.files_seen += 1
        if listed.size > self._max_file_bytes:
            self.skip(listed, "too_large")
            return
        if preread is None:
            self.skip(listed, "unreadable")
            return
        if not self.needs_read(listed):
            # keep(), inlined: most files of a re-run take this path.
            self._seen.add(listed.rel_path)
            stats.files_unchanged += 1
            return
        read = (
            read_file(self.root, listed, max_bytes=self._ix.max_file_bytes)
            if isinstance(preread, NotRead)
            else preread
        )
        if read is None:
            self.skip(listed, "unreadable")
            return
        self.stats.files_read += 1
        self.stats.bytes_read += len(read.data)
        own_read = isinstance(preread, NotRead)
        if own_read and secret_content(self._secrets, listed.rel_path, read.data):
            self.skip(listed, "secret")
            return
        self.update(ListedFile(listed.rel_path, read.size, read.mtime_ns), read.data)

    def visit_all(
        self,
        files: Sequence[ListedFile],
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """:meth:`visit` each file (none read before), calling
        ``progress(done, total)`` after each.

        A file the catalog holds with the same size and mtime (not racy, not
        suspect, within the size limit) is kept right here, in one tight
        loop: on a re-run where nothing changed that is every file.
        """
        total = len(files)
        stats = self.stats
        recorded_of = self._catalog_stats.get
        suspects, seen, is_racy = self._suspects, self._seen, self._tx.is_racy
        max_bytes = -1 if self.full else self._max_file_bytes  # full: nothing is kept
        kept = 0
        try:
            for done, listed in enumerate(files, 1):
                path = listed.rel_path
                recorded = recorded_of(path)
                if (
                    recorded is not None
                    and recorded[0] == listed.size <= max_bytes
                    and recorded[1] == listed.mtime_ns
                    and path not in suspects
                    and not is_racy(recorded[1])
                ):
                    seen.add(path)
                    kept += 1
                else:
                    self.visit(listed)
                if progress is not None:
                    progress(done, total)
        finally:
            stats.files_seen += kept
            stats.files_unchanged += kept

    def keep(self, listed: ListedFile) -> None:
        """The file is unchanged since the catalog saw it: keep its units."""
        self._seen.add(listed.rel_path)
        self.stats.files_unchanged += 1

    def skip(self, listed: ListedFile, reason: str) -> None:
        """The file cannot be indexed now: its old units (if any) go at finish."""
        self.stats.skip(reason)

    def update(self, listed: ListedFile, data: bytes) -> None:
        """Plan ``data`` as the current content of ``listed`` if it changed."""
        if len(data) > self._max_file_bytes:
            self.skip(listed, "too_large")
            return
        path = listed.rel_path
        self._seen.add(path)
        sha = hashlib.sha256(data).hexdigest()
        old = self._tx.record(path)
        if is_binary(path, data[:8192]):
            # Recorded with no units, so an unchanged binary file is never re-read.
            self.stats.skip("binary")
            self._apply(_Planned(listed, sha, [], [], (), old, 0), np.zeros((0, 0), np.float32))
            return
        unchanged = old is not None and old.sha256 == sha
        if unchanged and old is not None and not self.full and path not in self._suspects:
            self.stats.files_unchanged += 1
            self.stats.files_touched += 1
            record = FileRecord(
                path, listed.size, listed.mtime_ns, sha, old.unit_uris, old.graph_subjects
            )
            self._tx.apply(FileDelta("touch", path, record=record, old=old))
            return
        work = _Work(listed, sha, old, data)
        if self._suspects_left:
            for stale in [e for e in self._suspects_left if e[0] == path and e[1] != sha]:
                self._suspects_left.discard(stale)  # another content: it is parsed anew
                self._tx.resolve_suspect(*stale, crashed=False)
            if (path, sha) in self._suspects_left:
                self._suspects_left.discard((path, sha))
                self._apply_outcomes([work], [self._settle_suspect(work)])
                return
        quarantined = self._tx.quarantined(path, sha)
        if self._pool is not None and not quarantined:
            self._batch.append(work)
            self._batch_bytes += len(data)
            full = self._batch_bytes >= self._pool.batch_bytes
            if full or len(self._batch) >= _WORKER_BATCH_FILES:
                self._submit()
            return
        plan = self._plan_here(work, quarantined=quarantined)
        if isinstance(plan, PlanFailure):
            self._failed(path, plan)
            return
        self._to_embed.append(
            _Planned(listed, sha, plan.units, plan.triples, plan.subjects, old, len(data))
        )
        self._to_embed_units += len(plan.units)
        if self._to_embed_units >= _EMBED_BATCH:
            self._embed_pending()

    def _plan_here(self, work: _Work, *, quarantined: bool = False) -> FilePlan | PlanFailure:
        """Plan one file in this process.  With the code parser, under the
        store's planning mark: if the parser takes this process down, the
        resource's next session finds the file a suspect (see
        :meth:`_settle_suspect`).  Quarantined content is planned without
        the parser (text and vector units, the pure-Python reader's symbols
        and imports; no calls) until it changes.

        Raises:
            IndexUnavailableError: the mark cannot be written (the store's
                fault, never the file's).
        """
        path, parser = work.listed.rel_path, self._ix.code_parser
        tx = self._tx
        if quarantined and parser is not None:
            _log.info("indexer.code_graph_skipped", path=path, reason="quarantined")
            parser = None
        if parser is not None:
            tx.begin_planning(path, work.sha256)
        try:
            return plan_file(self.resource_id, path, work.data, parser, self._files, self._fault)
        except Exception as exc:  # the same rule as in a worker
            return PlanFailure("parse_failed", f"{type(exc).__name__}: {exc}"[:200])
        finally:
            if parser is not None:
                tx.end_planning()

    def _settle_suspect(self, work: _Work) -> Outcome:
        """A dead planner was planning this very content: plan it again in a
        child process.  Its answer is used when the child lives; its
        content is quarantined only when the child dies while a child can
        otherwise run (a writer killed from outside, or the OOM killer,
        leaves a mark too).  When no child can run at all (no spec, no
        shared memory, workers killed as they start), it is planned here
        without tree-sitter this time and stays a suspect."""
        path, sha = work.listed.rel_path, work.sha256
        try:
            outcome = self._ask_child(work)
        except Exception as exc:  # no child to ask: safe for now, decided later
            _log.warning(
                "indexer.suspect_unsettled",
                resource_id=self.resource_id,
                path=path,
                reason=f"{type(exc).__name__}: {exc}"[:200],
                outcome="indexed without tree-sitter this time; still a suspect",
            )
            return self._without_parser(work)
        self._tx.resolve_suspect(path, sha, crashed=outcome is None)
        if outcome is None:
            _log_crash(self.resource_id, path, "a one-off worker died planning it")
            return self._without_parser(work)
        _log.info("indexer.suspect_cleared", resource_id=self.resource_id, path=path)
        return outcome

    def _without_parser(self, work: _Work) -> Outcome:
        """``work`` planned here without tree-sitter, with its embeddings."""
        return embed_plans(self._ix.embedder, [self._plan_here(work, quarantined=True)])[0]

    def _ask_child(self, work: _Work) -> Outcome | None:
        """Plan ``work`` in a one-off worker: its outcome, or None when it
        dies while a worker can otherwise run.

        Raises:
            RuntimeError / OSError: no worker can run (no spec, no shared
                memory, workers killed as they start).
        """
        spec = self._ix.spec
        if spec is None:
            raise RuntimeError("this indexer has no planner spec for a worker")
        with PlannerPool(spec, 2) as pool:
            listing = pool.listing(self._listed_paths, self._package)
            item = [(work.listed.rel_path, work.data)]
            try:
                return pool.submit(self.resource_id, listing, item).result()[0]
            except BrokenProcessPool:
                if not _pool_runs(pool, self.resource_id, listing):
                    raise RuntimeError("no planning worker could start") from None
                return None

    def _failed(self, path: str, failure: PlanFailure) -> None:
        # Not seen: the old units go at finish, the catalog forgets the file,
        # and the next session reads it again.
        self._seen.discard(path)
        self.stats.skip(failure.reason)
        _log.warning(
            "indexer.file_failed",
            resource_id=self.resource_id,
            path=path,
            reason=failure.reason,
            detail=failure.detail,
        )

    # ------------------------------------------------------------ workers

    def _submit(self) -> None:
        """Send the batch being built to a worker; wait for the oldest when
        the window (:data:`WINDOW_PER_JOB` batches per job) is full."""
        pool = self._pool
        if not self._batch or pool is None:
            return
        if self._listing_file is None:
            self._listing_file = pool.listing(self._listed_paths, self._package)
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        items = [(w.listed.rel_path, w.data) for w in batch]
        self._in_flight.append((batch, pool.submit(self.resource_id, self._listing_file, items)))
        while len(self._in_flight) >= WINDOW_PER_JOB * pool.jobs:
            self._complete_oldest()

    def _complete_oldest(self) -> None:
        batch, future = self._in_flight.popleft()
        try:
            outcomes = future.result()
        except Exception:  # a dead worker (BrokenProcessPool) or a failed batch
            outcomes = self._retry_alone(batch)
        self._apply_outcomes(batch, outcomes)

    def _apply_outcomes(self, batch: list[_Work], outcomes: list[Outcome]) -> None:
        for work, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, PlanFailure):
                self._failed(work.listed.rel_path, outcome)
                continue
            plan, rows = outcome
            self._apply(self._planned(work, plan), rows)

    def _retry_alone(self, batch: list[_Work]) -> list[Outcome]:
        """Plan each file of a failed batch in a worker of its own, so only
        the file that kills a worker is lost."""
        pool = self._pool
        assert pool is not None and self._listing_file is not None
        _log.warning("indexer.worker_failed", resource_id=self.resource_id, files=len(batch))
        out: list[Outcome] = []
        runs: bool | None = None  # whether a worker can plan anything at all
        for work in batch:
            try:
                item = [(work.listed.rel_path, work.data)]
                out.extend(pool.submit(self.resource_id, self._listing_file, item).result())
            except Exception as exc:
                if runs is None and isinstance(exc, BrokenProcessPool):
                    runs = _pool_runs(pool, self.resource_id, self._listing_file)
                if not (runs and isinstance(exc, BrokenProcessPool)):
                    # Not this file's doing (no worker starts, or another
                    # error): skipped this time, planned again next run.
                    out.append(PlanFailure("worker_failed", f"{type(exc).__name__}: {exc}"))
                    continue
                # This file takes its worker down.
                # Quarantined, so that no later session plans it with the
                # parser in the writer (a small change is planned there),
                # and planned here without the parser: indexed all the same.
                path = work.listed.rel_path
                _log_crash(self.resource_id, path, f"{type(exc).__name__}: {exc}")
                self._tx.quarantine(path, work.sha256)
                out.append(self._without_parser(work))
        return out

    def _drain(self) -> None:
        pool = self._pool
        if pool is not None and not pool.started and self._batch:
            # Less than one batch changed (a watch event, a small re-run):
            # planning it here costs less than starting the workers.
            batch, self._batch, self._batch_bytes = self._batch, [], 0
            plans = [self._plan_here(w) for w in batch]
            self._apply_outcomes(batch, embed_plans(self._ix.embedder, plans))
        self._submit()
        while self._in_flight:
            self._complete_oldest()

    # ------------------------------------------------------------ deltas

    @staticmethod
    def _planned(work: _Work, plan: FilePlan) -> _Planned:
        return _Planned(
            work.listed,
            work.sha256,
            plan.units,
            plan.triples,
            plan.subjects,
            work.old,
            len(work.data),
            plan.prepared,
        )

    def _embed_pending(self) -> None:
        """Embed the planned files' units in one call and hand their deltas on."""
        planned, self._to_embed, self._to_embed_units = self._to_embed, [], 0
        rows = embed_texts(self._ix.embedder, [u.content for p in planned for u in p.units])
        offset = 0
        for p in planned:
            self._apply(p, rows[offset : offset + len(p.units)])
            offset += len(p.units)

    def _apply(self, p: _Planned, embeddings: npt.NDArray[np.float32]) -> None:
        collect_when_due()  # index_resource pauses the collector
        record = FileRecord(
            p.listed.rel_path,
            p.listed.size,
            p.listed.mtime_ns,
            p.sha256,
            tuple(u.uko_uri for u in p.units),
            p.subjects,
        )
        self._tx.apply(
            FileDelta(
                "index",
                p.listed.rel_path,
                record=record,
                old=p.old,
                units=tuple(p.units),
                embeddings=embeddings if p.units else None,
                triples=tuple(p.triples),
                subjects=p.subjects,
                size=p.size,
                prepared=p.prepared,
            )
        )

    def finish(self) -> IndexStats:
        """Hand on what is planned, delete files no longer present, commit.

        Raises:
            RuntimeError: the session already failed (its store session
                ended; the resource's next session repairs it).
        """
        if self._broken:
            raise RuntimeError(f"the index session of {self.resource_id} failed; start another")
        if self._finished:
            return self.stats
        try:
            self._drain()
            self._embed_pending()
            if self._suspects_left:  # of files no longer listed: nothing to settle
                listed = set(self._listed_paths)
                for path, sha in sorted(self._suspects_left):
                    if path not in listed:
                        self._tx.resolve_suspect(path, sha, crashed=False)
            gone_paths = [path for path in self._catalog_stats if path not in self._seen]
            if gone_paths:
                for path, rec in sorted(self._tx.records(gone_paths).items()):
                    self._tx.apply(FileDelta("delete", path, old=rec))
        except BaseException as exc:
            # End the store's session as a failed one (the dirty marker stays),
            # or the text index would keep the resource's staged writer.
            self._abandon(exc)
            raise
        self._finished = True
        try:
            self._stack.close()  # the store commits
        except BaseException:
            self._broken = True
            raise
        return self.stats
