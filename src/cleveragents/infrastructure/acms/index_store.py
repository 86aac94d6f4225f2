"""The index store: the one owner of the write protocol (a unit of work).

It alone knows

- the data directory layout (``index_layout``: ``text``, ``vectors``,
  ``graph``, ``catalog`` as links into generations; ``reindex.lock``;
  ``.rebuild/`` and ``.previous/``), with owner-only modes (``file_modes``);
- the order of the writes of a resource session, the dirty marker, the
  crash points (``fault_injection``) and the repair of an interrupted session
  or rebuild;
- the racily-clean rule that makes a same-size rewrite within one timestamp
  tick visible.

Planners hand it per-file :class:`FileDelta` values inside a session::

    with store.session(rid, identity="hashing-v2:384") as tx:
        tx.apply(delta)            # index / touch / delete one file
    # normal exit commits: flush, vanished files, sweep, clean marker

Write order of a session (every step a commit, except a staged text
upsert, each followed by its ``checkpoint``):

1. ``dirty:<rid>`` recorded in the catalog before the first index write;
2. per batch of changed files: text upsert, vector upsert (new units in the
   same atomic change that drops the old); per larger batch the graph
   upserts (one per few thousand triples, whole files each: a graph record
   a question reads by subject stays small) and *then* the files' catalog
   rows, once their text is committed (a text index with ``StagedWrites``
   commits once per ``_COMMIT_BATCHES`` text batches, step
   ``index.commit``), so the catalog names only units that
   every index holds (except during a changed file's window, when the file's
   size or mtime no longer match its row, so it is re-read);
3. catalog rows of files whose mtime changed but content did not;
4. vanished files: catalog rows first, then text, vector, graph (a crash
   leaves orphans for the sweep, never a row naming units already gone);
5. if the session *started* dirty: sweep what no catalog row names;
6. the marker cleared.

A session that starts on a dirty resource marks *suspect* every file whose
catalog units or subjects some index lacks (the planner re-indexes them).

Racily clean (git's rule): a session records, with its catalog writes, the
coarse clock at its start (the clock that stamps file mtimes).  A later
session re-hashes every file whose recorded mtime is not older than that
stamp: its size and mtime could match while its content changed within the
same tick.  Exact for file systems whose timestamps are at least as fine as
the kernel tick (ext4, xfs, btrfs, tmpfs); coarser ones (FAT's 2 s) are not
covered.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import shutil
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from cleveragents._logging import get_logger
from cleveragents._malloc import keep_large_blocks_mapped, release_memory
from cleveragents.domain.models.acms.backends import (
    CountedUnits,
    GraphIndex,
    GroupedWrites,
    IndexUnit,
    PreparedWrites,
    StagedWrites,
    StoredUnits,
    TextIndex,
    VectorIndex,
    WriteTriple,
)
from cleveragents.domain.models.acms.errors import IndexUnavailableError, RepairNeededError
from cleveragents.domain.models.acms.index_store import Catalog, FileDelta, VerifyProblem
from cleveragents.domain.models.acms.indexing import FileRecord, IndexStats
from cleveragents.domain.models.acms.uko import PREDICATES, file_uri, path_of, resource_uri
from cleveragents.domain.models.acms.ulids import canonical_ulid, new_ulid
from cleveragents.infrastructure.acms import file_modes
from cleveragents.infrastructure.acms.fault_injection import checkpoint
from cleveragents.infrastructure.acms.index_layout import (
    GENERATIONS,
    collect_garbage,
    install,
    live_index_path,
)
from cleveragents.infrastructure.acms.reindex_lock import LOCK_FILE, ReindexLock, reindex_running

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    import numpy as np
    import numpy.typing as npt

__all__ = [
    "CATALOG_FILE",
    "INDEX_NAMES",
    "DimensionChangedError",
    "IdentityParts",
    "ManagedIndexStore",
    "StoreTransaction",
    "coarse_clock_ns",
    "split_identity",
]

INDEX_NAMES = ("text", "vectors", "graph", "catalog")
# The vector index's database in its directory (faiss_vector.DB_FILENAME;
# not imported from there: that module imports numpy).
VECTOR_DATABASE = "vectors.sqlite3"

# The indexes that hold a resource's units (the catalog records them).
_UNIT_INDEXES = ("text", "vectors", "graph")
# Catalog meta key: "1" once a session of this store's local indexes wrote.
_LOCAL_META = "local_indexes"
# Catalog meta key: "1" once a session of the remote profile's indexes wrote.
_REMOTE_META = "remote_indexes"


# In its own directory so a rebuild swaps it like the indexes it describes.
CATALOG_FILE = "catalog.sqlite3"
REGISTRY_FILE = "registry.sqlite3"
STAGING = ".rebuild"
PREVIOUS = ".previous"

_log = get_logger("cleveragents.acms.index_store")

# CLOCK_REALTIME_COARSE: the clock Linux stamps file times with.
_CLOCK_REALTIME_COARSE = 5


def coarse_clock_ns() -> int:
    """Now, by the clock that stamps file mtimes (never later than it)."""
    if sys.platform.startswith("linux"):
        return time.clock_gettime_ns(_CLOCK_REALTIME_COARSE)
    return time.time_ns() - 2_000_000_000  # unknown tick: be generous


class DimensionChangedError(RepairNeededError):
    """The live vector index holds another dimension than the embedder's:
    only ``reindex --rebuild`` replaces it."""


def _session_state(marked: bool, running: bool) -> dict[str, int]:
    return {"interrupted": int(marked and not running), "reindexing": int(marked and running)}


def _dirty_key(rid: str) -> str:
    return f"dirty:{rid}"


def _identity_key(rid: str) -> str:
    return f"identity:{rid}"


@dataclass(frozen=True, slots=True)
class IdentityParts:
    """An index identity, split: the embedder (``name:dimension``) and what
    shapes the units and the graph (everything after the first ``|``)."""

    embedder: str
    units: str

    @property
    def dimension(self) -> int | None:
        """The embedder's dimension, when the identity names one."""
        _, sep, dim = self.embedder.rpartition(":")
        return int(dim) if sep and dim.isdigit() else None


def split_identity(identity: str) -> IdentityParts:
    """``"hashing-v1:384|code-graph-ts1|units-2"`` -> embedder and units parts."""
    embedder, _, units = identity.partition("|")
    return IdentityParts(embedder, units)


def _stamp_key(rid: str) -> str:
    return f"catalog_written_ns:{rid}"


def _extent_key(rid: str) -> str:
    """The resource's graph file at its last commit: ``<name hex>:<end>``."""
    return f"graph_extent:{rid}"


# The directory of the planning marks, one file per resource being indexed
# (see StoreTransaction.begin_planning), and how many quarantined contents a
# resource keeps (the oldest are forgotten: a content that changed is never
# asked about again).
PLANNING = "planning"
_QUARANTINE_KEEP = 1_000


def _read_planning_file(where: Path) -> bytes | None:
    """A planning file's bytes (None: absent).  Anything there that is not a
    regular file is damage, removed (a FIFO would block, a directory or a
    symlink would fail every session)."""
    try:
        fd = os.open(where, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            # Not damage at the path (no descriptor left, a parent that is
            # not a directory): kept, and the error said.
            raise IndexUnavailableError(f"cannot read the planning file {where}: {exc}") from exc
        _log.warning("index_store.planning_file_removed", path=str(where), error=str(exc))
        _remove_planning_file(where)
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            _log.warning("index_store.planning_file_removed", path=str(where), error="not a file")
            _remove_planning_file(where)
            return None
        return os.read(fd, 16 << 20)
    finally:
        os.close(fd)


def _remove_planning_file(where: Path) -> None:
    try:
        if where.is_dir() and not where.is_symlink():
            shutil.rmtree(where)
        else:
            where.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise IndexUnavailableError(f"cannot remove the planning file {where}: {exc}") from exc


def _write_planning_file(where: Path, entries: list[tuple[str, str]]) -> None:
    """Replace a list of ``(path, sha256)`` atomically (removed when empty)."""
    if not entries:
        _remove_planning_file(where)
        return
    tmp = where.with_name(where.name + ".tmp")
    try:
        file_modes.make_private_dirs(where.parent)
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
        )
        try:
            os.write(fd, json.dumps([[sha, path] for path, sha in entries]).encode("ascii"))
        finally:
            os.close(fd)
        os.replace(tmp, where)
    except OSError as exc:
        raise IndexUnavailableError(f"cannot write the planning file {where}: {exc}") from exc


def _read_entries(raw: bytes | None) -> list[tuple[str, str]]:
    """The ``(path, sha256)`` list of a suspects or quarantine file."""
    if not raw:
        return []
    try:
        items = json.loads(raw.decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        return []
    out: list[tuple[str, str]] = []
    for item in items if isinstance(items, list) else ():
        if (
            isinstance(item, list)
            and len(item) == 2
            and all(isinstance(x, str) for x in item)
            and item[1]
        ):
            entry = (item[1], item[0])
            if entry not in out:
                out.append(entry)
    return out


def _read_mark(raw: bytes) -> tuple[str, str] | None:
    """The ``(path, sha256)`` a planning mark names, or None (empty, torn)."""
    try:
        sha, path = json.loads(raw.decode("ascii"))
    except (ValueError, TypeError, UnicodeDecodeError):
        return None
    if not isinstance(sha, str) or not isinstance(path, str) or not path:
        return None
    return path, sha


def _contains(rid: str, path: str) -> list[WriteTriple]:
    return [(resource_uri(rid), PREDICATES["contains"], file_uri(rid, path))]


def _subjects(records: Mapping[str, FileRecord]) -> int:
    # Each file's subjects are URIs under the file (the planner's rule).
    return len({s for rec in records.values() for s in rec.graph_subjects})


def _units(records: Mapping[str, FileRecord]) -> int:
    return sum(len(rec.unit_uris) for rec in records.values())


def _unit_count(index: TextIndex | VectorIndex, rid: str) -> int:
    if isinstance(index, CountedUnits):
        return index.unit_count(rid)
    return len(index.unit_uris(rid))


def _holds_units(index: TextIndex | VectorIndex, rid: str) -> bool:
    """Whether ``index`` holds any unit of ``rid``, as cheaply as it can tell."""
    holds_any = getattr(index, "holds_any", None)
    if callable(holds_any):
        return bool(holds_any(rid))
    return _unit_count(index, rid) > 0


def _lacks_units(index: TextIndex | VectorIndex, rid: str) -> bool:
    return not _holds_units(index, rid)


def _file_subjects(subjects: Iterable[str]) -> set[str]:
    # The resource node itself is not a file's subject.
    return {s for s in subjects if path_of(s) is not None}


# What a session holds before it writes (text and vector per units/bytes,
# graph and catalog per triples): the session's memory beyond the files in
# flight.  A planned file costs about 9 bytes of Python objects per source
# byte (units, metadata, triples, embeddings), so a batch of 8 MB of source
# held ~70 MB and one of 120k triples ~30 MB.  Since a graph write appends
# only its change (it no longer loads the resource's graph), small graph
# batches cost little.  The text batches are committed together
# (_COMMIT_BATCHES), in Tantivy's memory until then, so a batch's size only
# sets what is in flight: at 1 MB instead of 2 (as many bytes per commit)
# the standard library's indexing peak fell ~5 MB at one job and ~4-15 MB at
# two, in the same time; at 512 KB it rose again.
_BATCH_UNITS = 512
_BATCH_BYTES = 1024 * 1024
_BATCH_TRIPLES = 15_000  # 30k: ~3 MB more at the standard library's peak
# With a text index that stages its writes, one text commit (and one round of
# catalog rows) per this many text batches (6 MB of source): a Tantivy commit
# makes a segment, and merging ~30 small ones per stdlib-sized resource cost
# ~2 s of CPU.  A segment being written keeps a hash table of its distinct
# terms (doubled when half full) and its commit sorts them: at 8 MB of
# source per commit the standard library's segments took a 32 MiB table, at
# 6 MB a 16 MiB one (the indexing peak 187 -> 170 MB, no slower; seven
# segments, still under the merge policy's eight).
_COMMIT_BATCHES = 6
# Triples per graph upsert within a batch (whole files each): one record of
# the graph file, which a question about one of its subjects decodes whole.
_GRAPH_PART_TRIPLES = 4096


@dataclass(slots=True)
class _GraphPart:
    """One graph upsert of a batch: whole files' triples and what they drop."""

    triples: list[WriteTriple]
    delete_subjects: set[str]
    delete_triples: list[WriteTriple]


@dataclass(frozen=True, slots=True)
class _Batches:
    units: int = _BATCH_UNITS
    bytes: int = _BATCH_BYTES
    triples: int = _BATCH_TRIPLES


class ManagedIndexStore:
    """The four stores of a data directory (or given instances) and their write protocol.

    Build one with :meth:`open` (a data directory) or :meth:`over` (instances,
    e.g. the in-memory reference indexes).  Indexes are opened on first use,
    so a command that queries one engine never imports the others.
    """

    #: The indexes are the remote profile's servers (its subclass says so):
    #: sessions mark the catalog ``remote_indexes`` and record the identity
    #: with ``|remote``, so that switching profiles indexes every file again.
    remote = False

    def __init__(
        self,
        *,
        text: Callable[[], TextIndex],
        vector: Callable[[], VectorIndex],
        graph: Callable[[], GraphIndex],
        catalog: Callable[[], Catalog],
        dimension: int,
        data_dir: Path | None = None,
        clock: Callable[[], int] = coarse_clock_ns,
        batch_units: int = _BATCH_UNITS,
        batch_bytes: int = _BATCH_BYTES,
        batch_triples: int = _BATCH_TRIPLES,
    ) -> None:
        self._factories: dict[str, Callable[[], object]] = {
            "text": text,
            "vectors": vector,
            "graph": graph,
            "catalog": catalog,
        }
        self._open: dict[str, object] = {}
        # One lock per index: a first use from several threads at once opens
        # the index once (the graph factory opens the catalog: another lock).
        self._opening = {name: threading.Lock() for name in self._factories}
        # recorded_embedders' answers while the catalog is unchanged.
        self._embedders: dict[str, str | None] = {}
        self._embedders_token: object = None
        self._embedders_lock = threading.Lock()
        self._live = False  # the live indexes of data_dir (their links)
        self._local = False  # the indexes are files of data_dir (_at)
        self._writing = 0  # depth of writing() blocks held by this process
        self._unsecured = False  # a session wrote since the last secure()
        self._dimension = dimension
        self.data_dir = data_dir
        # Where sessions keep their planning marks (a rebuild's fresh store
        # keeps them in the live data directory: see _rebuild).
        self.planning_dir = None if data_dir is None else data_dir / PLANNING
        self.clock = clock
        self.batches = _Batches(batch_units, batch_bytes, batch_triples)

    # ------------------------------------------------------------ construction

    @classmethod
    def open(
        cls, data_dir: str | os.PathLike[str], *, dimension: int, **options: object
    ) -> ManagedIndexStore:
        """The live indexes of ``data_dir`` (created owner-only on first use)."""
        root = Path(data_dir).resolve()
        file_modes.make_private_dirs(root)
        return cls._at(root, dimension, live=True, **options)

    @classmethod
    def _at(cls, root: Path, dimension: int, *, live: bool, **options: object) -> ManagedIndexStore:
        def where(name: str) -> Path:
            if live:
                store._refuse_lost(name)  # store: assigned below, before any use
                return live_index_path(root, name)
            path = root / name
            file_modes.make_private_dirs(path)
            return path

        def text() -> TextIndex:
            from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend

            # The live index: a shard a query finds missing is checked
            # against the catalog (a fresh rebuild's has nothing to check).
            return TantivyTextBackend(
                where("text"), expected=store.recorded_units if live else None
            )

        def vector() -> VectorIndex:
            from cleveragents.infrastructure.acms.faiss_vector import (
                DimensionMismatchError,
                FaissVectorBackend,
            )

            try:
                return FaissVectorBackend(where("vectors"), dimension=dimension)
            except DimensionMismatchError as exc:
                raise DimensionChangedError(
                    f"{exc}: the embedder's dimension changed, and the vector index cannot "
                    "hold both: run `acms reindex --rebuild` to build fresh indexes"
                ) from exc

        def graph() -> GraphIndex:
            from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend

            return RdflibGraphBackend(
                where("graph"),
                expected=store.recorded_subjects if live else None,
                extent=store.recorded_extent if live else None,
            )

        def catalog() -> Catalog:
            from cleveragents.infrastructure.acms.sqlite_catalog import SqliteCatalog

            return SqliteCatalog(where("catalog") / CATALOG_FILE)

        store = cls(
            text=text,
            vector=vector,
            graph=graph,
            catalog=catalog,
            dimension=dimension,
            data_dir=root,
            **options,  # type: ignore[arg-type]
        )
        store._live = live
        store._local = True
        return store

    @classmethod
    def over(
        cls,
        text: TextIndex,
        vector: VectorIndex,
        graph: GraphIndex,
        catalog: Catalog,
        **options: object,
    ) -> ManagedIndexStore:
        """A store over existing index instances (no data directory, no lock)."""
        return cls(
            text=lambda: text,
            vector=lambda: vector,
            graph=lambda: graph,
            catalog=lambda: catalog,
            dimension=vector.dimension,
            **options,  # type: ignore[arg-type]
        )

    @classmethod
    def in_memory(cls, dimension: int, **options: object) -> ManagedIndexStore:
        """A store over the in-memory reference indexes (fast tests)."""
        from cleveragents.infrastructure.acms.memory_indexes import (
            MemoryCatalog,
            MemoryGraphIndex,
            MemoryTextIndex,
            MemoryVectorIndex,
        )

        return cls.over(
            MemoryTextIndex(),
            MemoryVectorIndex(dimension),
            MemoryGraphIndex(),
            MemoryCatalog(),
            **options,
        )

    # ------------------------------------------------------------ the stores

    def _get(self, name: str) -> object:
        value = self._open.get(name)
        if value is None:
            with self._opening[name]:
                value = self._open.get(name)
                if value is None:
                    value = self._open[name] = self._factories[name]()
        return value

    @property
    def text(self) -> TextIndex:
        """The text index (opened on first use)."""
        value = self._get("text")
        assert isinstance(value, TextIndex)
        return value

    @property
    def vector(self) -> VectorIndex:
        """The vector index (opened on first use)."""
        value = self._get("vectors")
        assert isinstance(value, VectorIndex)
        return value

    @property
    def graph(self) -> GraphIndex:
        """The graph index (opened on first use)."""
        value = self._get("graph")
        assert isinstance(value, GraphIndex)
        return value

    @property
    def catalog(self) -> Catalog:
        """The catalog (opened on first use)."""
        return self._get("catalog")  # type: ignore[return-value]

    @property
    def dimension(self) -> int:
        """Embedding dimension of the vector index."""
        return self._dimension

    def _refuse_lost(self, name: str) -> None:
        """Raise if the live index ``name`` is gone while the catalog lists
        indexed files.

        Opening a missing live index makes an empty one (a data directory's
        first use).  Once files are indexed, a missing one is damage (deleted,
        or a restore that left it out): an empty index in its place would
        answer every query with nothing, and the catalog would keep every
        reindex from writing it again.  A missing catalog is not refused:
        every file then looks new, and the next reindex writes them all
        again.  A catalog the remote profile wrote (its ``remote_indexes``
        mark, or no mark of either profile) has rows and no local index:
        opened by mistake in the local profile (``ACMS_PROFILE`` unset), it
        answered every query with nothing, and ``status`` or ``--verify``
        made empty local indexes in its data directory.
        """
        if not self._lost(name):
            return
        label = {"vectors": "vector"}.get(name, name)
        where = self._root() / name
        if name == "vectors" and where.is_dir():
            where = where / VECTOR_DATABASE  # the database is what is gone
        rebuild = "`acms reindex --rebuild` builds every index again from the files"
        catalog = self.catalog
        gone = "is empty (0 bytes)" if where.is_file() else "is missing"
        if catalog.get_meta(_LOCAL_META) == "1":
            raise RepairNeededError(
                f"the {label} index {where} {gone} while the catalog lists indexed files: {rebuild}"
            )
        remote = catalog.get_meta(_REMOTE_META) == "1"
        raise RepairNeededError(
            f"the {label} index {where} does not exist while the catalog lists indexed files"
            + (
                ": the remote profile indexed this data directory, so set ACMS_PROFILE=remote "
                "(and the servers' settings) to use it, or, to index it here instead, "
                if remote
                else ": if the remote profile indexed it, set ACMS_PROFILE=remote; if not, "
            )
            + rebuild
        )

    def _local_wrote(self) -> bool:
        """Whether a session of local indexes ever wrote this catalog."""
        return self.catalog.get_meta(_LOCAL_META) == "1"

    def _lost(self, name: str) -> bool:
        """Whether the live index ``name`` is gone while the catalog lists
        indexed files (see :meth:`_refuse_lost`)."""
        root = self.data_dir
        if not self._live or root is None or name == "catalog":
            return False
        live = root / name
        if not (root / "catalog").exists():
            return False
        # The vector index is one database: its directory without it, or with
        # it emptied to 0 bytes, opened as a new, empty one (found by reviewers).
        whole = name != "vectors" or _has_bytes(live / VECTOR_DATABASE)
        if (live.exists() or live.is_symlink()) and whole:
            return False
        return bool(self.catalog.resource_ids())

    def _rebuild_only(self, name: str) -> bool:
        """Whether the live index ``name`` is one only a rebuild repairs: lost
        (see :meth:`_refuse_lost`), or a vector index of another dimension."""
        if self._lost(name):
            return True
        try:
            self._get(name)
        except DimensionChangedError:
            return True
        return False

    def check_present(self) -> None:
        """Raise :class:`IndexUnavailableError` if a live index is missing
        while the catalog lists indexed files (see :meth:`_refuse_lost`)."""
        for name in INDEX_NAMES:
            self._refuse_lost(name)

    def open_all(self) -> None:
        """Open the four stores now rather than on first use.

        A vector index of another dimension is left closed: its first use
        raises :class:`DimensionChangedError`, and a rebuild (which never
        opens it) replaces it.
        """
        for name in INDEX_NAMES:
            try:
                self._get(name)
            except DimensionChangedError:
                if name != "vectors":
                    raise

    def close(self) -> None:
        """Close every store opened so far."""
        for name in INDEX_NAMES:
            value = self._open.pop(name, None)
            if value is not None:
                value.close()  # type: ignore[attr-defined]

    # ------------------------------------------------------------ sessions

    @contextmanager
    def session(
        self, resource_id: str, *, identity: str | None = None
    ) -> Iterator[StoreTransaction]:
        """One resource's transaction; leaving the block normally commits it.

        ``identity`` names what produced the units (embedder, settings): when
        it differs from the one recorded for the resource, the session is
        ``full``.  None: neither checked nor recorded.

        An exception leaves what was written and the dirty marker: the
        resource's next session repairs it.
        """
        rid = canonical_ulid(resource_id)
        if self._live and self.data_dir is not None:
            # Every index exists once a session has written the catalog, even
            # one the resource gives nothing to (binary files only): a link
            # missing beside catalog rows is then damage (_refuse_lost).
            self.check_present()
            for name in INDEX_NAMES:
                live_index_path(self.data_dir, name)
        mark = _LOCAL_META if self._local else _REMOTE_META if self.remote else None
        if mark is not None and self.catalog.get_meta(mark) != "1":
            self.catalog.set_meta(mark, "1")
        if identity is not None and self.remote:
            # Units the other profile's indexes hold are not in these: the
            # two profiles share the catalog, so a switch either way must
            # index every file again (it said "unchanged" and the switched-to
            # indexes stayed stale) ...
            identity = f"{identity}|remote"
        recorded = None if identity is None else self.catalog.get_meta(_identity_key(rid))
        if recorded is not None and recorded.endswith("|remote") != self.remote:
            # ... and sweep what these indexes still hold of files changed or
            # gone since they last wrote (a symbol renamed meanwhile).
            self.mark_dirty([rid])
        # This process writes batch after batch: large blocks stay out of the
        # C heap (see cleveragents._malloc; 218 -> 199 MB peak at one job).
        keep_large_blocks_mapped()
        text = self.text
        # A session writes in batches: Tantivy keeps its writer between them,
        # and commits once per several (StoreTransaction._put_ready).
        grouped: AbstractContextManager[None] = nullcontext()
        if isinstance(text, StagedWrites):
            grouped = text.staged_writes(rid)
        elif isinstance(text, GroupedWrites):
            grouped = text.grouped_writes(rid)
        with grouped:
            tx = StoreTransaction(self, rid, identity, staged=isinstance(text, StagedWrites))
            try:
                yield tx
                tx.commit()
            finally:
                tx.close_planning()
        if tx.wrote:
            self._wrote()

    def _wrote(self) -> None:
        self._unsecured = True
        if not self._writing:  # else once, when the writer lock is released
            self.secure()

    def delete_resource(self, resource_id: str) -> None:
        """Delete every unit and record of a resource.

        The catalog rows go first, under the dirty marker: a crash part way
        leaves units no row names, which the resource's next session sweeps
        (or the next prune deletes), never rows naming units that are gone.

        An index only a rebuild repairs (lost, or of another dimension) is
        left as it is, checked before anything is written: the rebuild makes
        it without this resource, and one restored instead still holds the
        resource's units, which the next prune deletes.  Refused part way,
        the removal left the resource registered with its rows gone and its
        marker set; and a rebuild refuses while a resource whose directory is
        gone is registered, so removing it must not need the rebuild.
        """
        rid = canonical_ulid(resource_id)
        catalog = self.catalog
        skipped = [name for name in _UNIT_INDEXES if self._rebuild_only(name)]
        if skipped and catalog.get_meta(_REMOTE_META) == "1" and not self._local_wrote():
            # The remote profile's data directory, opened in the local one by
            # mistake: its units are on the servers, which removing it here
            # would leave behind.  Refused, as every other command is.
            self._refuse_lost(skipped[0])
        if skipped:
            _log.warning(
                "index_store.resource_delete_left_to_rebuild", resource_id=rid, indexes=skipped
            )
        catalog.set_meta(_dirty_key(rid), "delete")
        catalog.remove(rid)
        checkpoint("resource.delete")
        for name in _UNIT_INDEXES:
            if name not in skipped:
                cast("TextIndex | VectorIndex | GraphIndex", self._get(name)).delete(rid)
            checkpoint("resource.delete")
        for key in (_identity_key(rid), _stamp_key(rid), _extent_key(rid), _dirty_key(rid)):
            catalog.delete_meta(key)
        if self.planning_dir is not None:
            for suffix in ("", ".suspect", ".quarantine"):
                _remove_planning_file(self.planning_dir / (rid + suffix))
        self._wrote()
        _log.info("index_store.resource_deleted", resource_id=rid)

    def mark_dirty(self, resource_ids: Iterable[str]) -> None:
        """Make the next session of each resource check it against the catalog."""
        for rid in resource_ids:
            self.catalog.set_meta(_dirty_key(canonical_ulid(rid)), "marked")

    def marked(self, resource_id: str) -> bool:
        """Whether a session or removal of the resource left its dirty marker
        (it was stopped before it finished)."""
        return self.catalog.get_meta(_dirty_key(canonical_ulid(resource_id))) is not None

    def iter_resource_ids(self) -> Iterator[str]:
        """Every resource the catalog or an index holds, sorted."""
        present = (
            self.catalog.resource_ids()
            | self.text.resource_ids()
            | self.vector.resource_ids()
            | self.graph.resource_ids()
        )
        return iter(sorted(present))

    def prune(self, keep: Iterable[str]) -> list[str]:
        """Delete the units of every indexed resource not in ``keep``."""
        keep_set = {canonical_ulid(r) for r in keep}
        gone = [rid for rid in self.iter_resource_ids() if rid not in keep_set]
        for rid in gone:
            self.delete_resource(rid)
        return gone

    # ------------------------------------------------------------ checks

    def verify(
        self, registered: Iterable[str], *, lock_timeout: float | None = None
    ) -> list[VerifyProblem]:
        """Check that catalog, text, vector and graph agree on every resource.

        With a ``lock_timeout`` the check holds the reindex lock (waiting up
        to that many seconds for a running reindex, then :class:`BusyError`):
        indexes read mid-session disagree by design, and an operator's cron
        job beside ``watch`` must not report that as damage.  A problem of a
        resource a stopped run left marked says so (``interrupted``): the
        next reindex of it repairs it.
        """
        if lock_timeout is None:
            return self._verify(registered)
        with ReindexLock(self._root(), timeout=lock_timeout):
            return self._verify(registered)

    def _verify(self, registered: Iterable[str]) -> list[VerifyProblem]:
        known = {canonical_ulid(r) for r in registered}
        problems: list[VerifyProblem] = []
        for rid in sorted(known | set(self.iter_resource_ids())):
            records = self.catalog.records(rid)
            expected = {u for rec in records.values() for u in rec.unit_uris}
            subjects = _file_subjects(s for rec in records.values() for s in rec.graph_subjects)
            if rid not in known:
                expected, subjects = set(), set()
            checks = (
                ("text", expected, self.text.unit_uris(rid)),
                ("vector", expected, self.vector.unit_uris(rid)),
                ("graph", subjects, _file_subjects(self.graph.subjects(rid))),
            )
            for name, want, have in checks:
                missing, extra = want - have, have - want
                if missing or extra:
                    sample = sorted(missing or extra)[0]
                    interrupted = self.catalog.get_meta(_dirty_key(rid)) is not None
                    problems.append(
                        VerifyProblem(rid, name, len(missing), len(extra), sample, interrupted)
                    )
        return problems

    def indexed_file(self, resource_id: str, path: str) -> bool:
        """Whether the catalog records the file's node among the graph
        subjects of ``path`` (every planned text file has one; a binary file
        is recorded without): one row read, where asking the graph for the
        node's triples loads the resource's graph."""
        rid = canonical_ulid(resource_id)
        record = self.catalog.get(rid, [path]).get(path)
        return record is not None and file_uri(rid, path) in record.graph_subjects

    def check_reachable(self) -> None:
        """Local indexes have no server to reach: an index that cannot be
        opened is an error of the call that opens it, and one missing while
        the catalog lists indexed files is an error here."""
        self.check_present()

    def counts(self, resource_id: str) -> dict[str, int]:
        """Of one resource: its indexed files and its graph's file subjects
        as the catalog records them, the units each index holds, its files
        indexed without tree-sitter because their content crashed it, and
        whether a session of it stopped midway (``interrupted``).

        A file is indexed when its row names units or subjects (the reindex
        summary's ``indexed``): an empty file has no unit but its file node,
        a binary one is recorded with neither (the summary skips it).

        It costs the resource's metadata, not its data: an index that can
        (:class:`CountedUnits`) counts from its own commit records, and the
        subjects come from the catalog, since counting them in the graph
        loads the graph whole (``verify`` compares the two).  A local text
        shard is opened and a graph file's head checked (``check_readable``),
        so a damaged or missing one is an error here, as in a query; ``verify``
        reads everything.
        """
        rid = canonical_ulid(resource_id)
        records = self.catalog.records(rid)
        for index in (self.text, self.graph):
            check = getattr(index, "check_readable", None)
            if callable(check):
                check(rid)  # damaged or missing: named here, not by a query
        units = {"text": _unit_count(self.text, rid), "vector": _unit_count(self.vector, rid)}
        indexes: tuple[tuple[str, TextIndex | VectorIndex], ...] = (
            ("text", self.text),
            ("vector", self.vector),
        )
        for name, holder in indexes:
            if units[name] or not any(rec.unit_uris for rec in records.values()):
                continue
            # The index holds nothing of a resource the catalog records units
            # of (a Milvus collection restored from an older snapshot, rows
            # deleted): an error, not a count of 0 (found by a reviewer).
            # Asked again after the catalog: a write under way explains it.
            lost = self.recorded_units(rid, functools.partial(_lacks_units, holder, rid))
            if lost:
                raise IndexUnavailableError(
                    f"the {name} index holds no unit of resource {rid} while the catalog "
                    f"records {lost}: `acms reindex --resource {rid}` writes them again"
                )
        return {
            "files": sum(1 for rec in records.values() if rec.unit_uris or rec.graph_subjects),
            "text_units": units["text"],
            "vector_units": units["vector"],
            "graph_subjects": _subjects(records),
            # Files indexed without tree-sitter: their content crashed it.
            "quarantined": sum(
                1
                for path, sha in self._quarantine_of(rid)
                if (rec := records.get(path)) is not None and rec.sha256 == sha
            ),
            # A session's marker: its session runs now (the lock is held:
            # "reindexing"), or one stopped midway (killed, out of space:
            # "interrupted"; its indexes may disagree with its files until
            # the next reindex, which repairs it).  Every session sets the
            # marker, so status told a running one "interrupted" (found in
            # a read-back).
            **_session_state(
                self.catalog.get_meta(_dirty_key(rid)) is not None,
                self.data_dir is not None and reindex_running(self.data_dir),
            ),
        }

    def recorded_units(
        self, resource_id: str, still_missing: Callable[[], bool] | None = None
    ) -> int:
        """The text and vector units the catalog records for a resource
        (``still_missing``: see :meth:`_recorded`)."""
        return self._recorded(resource_id, still_missing, "unit_uris")

    def recorded_subjects(
        self, resource_id: str, still_missing: Callable[[], bool] | None = None
    ) -> int:
        """The graph subjects the catalog records for a resource (what its
        graph should hold): the catalog's rows of it, not the graph
        (``still_missing``: see :meth:`_recorded`)."""
        return self._recorded(resource_id, still_missing, "graph_subjects")

    def _recorded(
        self,
        resource_id: str,
        still_missing: Callable[[], bool] | None,
        column: str,
    ) -> int:
        """The units (``column`` ``unit_uris``) or subjects
        (``graph_subjects``) the resource's catalog rows name; with ``still_missing``
        (an index found the resource's shard or graph missing, and looks
        again), only if that is a loss: 0 when a write explains it.

        A session's changed file is a window in which the catalog row still
        names the units the indexes already dropped (rows follow the index
        writes), so a resource whose last units go (its files emptied or made
        binary) has no shard yet rows naming units, under its dirty marker; a
        rebuild swaps the catalog last, so between two swaps the old catalog
        may name units the new shard does not have.  A loss is reported only
        when no write of the resource was under way from before the rows were
        read until after the index looked again: no dirty marker, no rebuild
        being swapped in, the same session stamp both times.
        """
        rid = canonical_ulid(resource_id)
        count = _units if column == "unit_uris" else _subjects
        if still_missing is None:
            return count(self.catalog.records(rid))
        if not self._names_any(rid, column):
            return 0  # a resource rightly without any: its rows are not decoded
        before = self._settled(rid)
        if before is None:
            return 0
        found = count(self.catalog.records(rid))
        if not found or not still_missing():
            return 0
        return found if self._settled(rid) == before else 0

    def recorded_embedders(self, resource_ids: Iterable[str]) -> dict[str, str]:
        """The embedder (``name:dimension``) that made each resource's vectors,
        as its last session recorded it; resources without a record left out.
        Asked by every vector query: answered from memory while the catalog
        is unchanged (one ``PRAGMA data_version``)."""
        catalog = self.catalog
        version = getattr(catalog, "version", None)
        token = version() if callable(version) else None
        with self._embedders_lock:
            if token is None or token != self._embedders_token:
                self._embedders = {}
                self._embedders_token = token
            known = self._embedders
            found: dict[str, str] = {}
            for rid in resource_ids:
                if rid not in known:
                    raw = catalog.get_meta(_identity_key(rid)) or catalog.get_meta("embedder")
                    known[rid] = None if raw is None else split_identity(raw).embedder
                embedder = known[rid]
                if embedder is not None:
                    found[rid] = embedder
            return found

    def recorded_extent(self, resource_id: str, settled: bool = True) -> tuple[bytes, int] | None:
        """The resource's graph file as its last session left it: the file's
        name (16 bytes) and the end of its last commit; ``None`` when nothing
        is recorded or, with ``settled``, a write of it may be under way (see
        :meth:`_settled`; a reader then asks nothing of the file)."""
        rid = canonical_ulid(resource_id)
        raw = self.catalog.get_meta(_extent_key(rid))
        if raw is None or (settled and self._settled(rid) is None):
            return None
        name, _, end = raw.partition(":")
        try:
            return bytes.fromhex(name), int(end)
        except ValueError:
            _log.warning("index_store.graph_extent_unreadable", resource_id=rid, value=raw)
            return None

    def _names_any(self, rid: str, column: str) -> bool:
        """Whether a catalog row of ``rid`` names any unit (``unit_uris``) or
        graph subject (``graph_subjects``): the catalog's indexed scan when it
        has one, else its rows decoded."""
        names_any = getattr(self.catalog, "names_any", None)
        if callable(names_any):
            return bool(names_any(rid, column))
        return any(getattr(rec, column) for rec in self.catalog.records(rid).values())

    def _settled(self, rid: str) -> str | None:
        """The resource's last session stamp, or None while a write of it may
        be under way (its dirty marker; a rebuild staged or being swapped in)."""
        if self.data_dir is not None and (self.data_dir / STAGING).exists():
            return None
        catalog = self.catalog
        if catalog.get_meta(_dirty_key(rid)) is not None:
            return None
        return catalog.get_meta(_stamp_key(rid)) or ""

    def lost_parts(self, resource_id: str) -> list[str]:
        """The indexes that hold nothing of a resource whose catalog rows name
        units (``text``, ``vectors``) or graph subjects (``graph``) of it.

        Asked by a session that starts clean (no dirty marker) under the
        writer lock, where index and catalog agree unless something was lost:
        a shard or graph file deleted or left out of a restore, a Milvus
        collection dropped (and made again, empty, by the writer) or an
        endpoint that lost its graphs.  Each costs one cheap question per
        index (a commit record, a file's head, one row or ``ASK`` remotely),
        and the catalog only a scan of the resource's rows for a non-empty
        column.
        """
        rid = canonical_ulid(resource_id)
        lost: list[str] = []
        if self._names_any(rid, "unit_uris"):
            lost += [
                name
                for name, index in (("text", self.text), ("vectors", self.vector))
                if not _holds_units(index, rid)
            ]
        if self._names_any(rid, "graph_subjects"):
            graph = self.graph
            holds = getattr(graph, "holds", None)
            cut_short = getattr(graph, "cut_short", None)
            if not (holds(rid) if callable(holds) else bool(graph.subjects(rid))) or (
                callable(cut_short) and cut_short(rid)
            ):
                lost.append("graph")
        return lost

    def _quarantine_of(self, rid: str) -> list[tuple[str, str]]:
        if self.planning_dir is None:
            return []
        where = self.planning_dir / (rid + ".quarantine")
        try:  # status reports; it repairs nothing
            if not where.is_file() or where.is_symlink():
                return []
            return _read_entries(where.read_bytes())
        except OSError as exc:
            _log.warning("index_store.quarantine_unreadable", path=str(where), error=str(exc))
            return []

    # ------------------------------------------------------------ the data directory

    def _root(self) -> Path:
        if self.data_dir is None:
            raise ValueError("this store has no data directory")
        return self.data_dir

    def _owned(self) -> list[Path]:
        root = self._root()
        names = [GENERATIONS, STAGING, PREVIOUS, LOCK_FILE, PLANNING]
        names += [REGISTRY_FILE + suffix for suffix in ("", "-wal", "-shm", "-journal")]
        return [root / name for name in names]

    def secure(self) -> None:
        """Narrow what the engines created in the data directory to owner-only."""
        self._unsecured = False
        if self.data_dir is not None:
            file_modes.tighten(self._owned())

    def loose_modes(self) -> list[str]:
        """The data directory and the files in it that others may access."""
        root = self._root()
        return [str(p) for p in file_modes.loose([root]) if p == root] + [
            str(p) for p in file_modes.loose(self._owned())
        ]

    def bytes_on_disk(self) -> dict[str, int]:
        """Sizes of the live indexes and the registry."""
        root = self._root()
        return {name: _du(root / name) for name in (*INDEX_NAMES, REGISTRY_FILE)}

    @contextmanager
    def writing(self, *, timeout: float = 60.0) -> Iterator[ManagedIndexStore]:
        """Hold the data directory's reindex lock; repair an interrupted rebuild first.

        A finished rebuild renames ``.rebuild/`` to ``.previous/``, so a
        ``.rebuild/`` seen under the lock is the remains of a killed one: every
        resource is marked dirty (its next session checks and sweeps it) and
        ``.rebuild/`` goes.
        """
        with ReindexLock(self._root(), timeout=timeout):
            staging = self._root() / STAGING
            if staging.exists():
                rids = list(self.iter_resource_ids())
                self.mark_dirty(rids)
                shutil.rmtree(staging, ignore_errors=True)
                _log.warning("reindex.interrupted_rebuild_recovered", resources=len(rids))
            self._writing += 1
            try:
                yield self
            finally:
                self._writing -= 1
                if self._unsecured:
                    self.secure()

    def rebuild(self) -> AbstractContextManager[ManagedIndexStore]:
        """Fresh indexes in ``.rebuild/``, swapped in on a normal exit (hold :meth:`writing`).

        Each live index is exchanged with its fresh copy, the catalog last:
        until it is swapped, the live catalog is the old one, and a swapped
        index ahead of it is repaired as after any interrupted session.
        Readers see the old index or the new one, never a half-built one.
        """
        return self._rebuild()

    @contextmanager
    def _rebuild(self) -> Iterator[ManagedIndexStore]:
        root = self._root()
        staging, previous = root / STAGING, root / PREVIOUS
        for stale in (staging, previous):
            shutil.rmtree(stale, ignore_errors=True)
        # Generations no live link points into: the one the last rebuild
        # replaced, and any left by a killed one.
        collect_garbage(root, INDEX_NAMES)
        file_modes.make_private_dirs(staging)
        fresh = ManagedIndexStore._at(
            staging,
            self._dimension,
            live=False,
            clock=self.clock,
            batch_units=self.batches.units,
            batch_bytes=self.batches.bytes,
            batch_triples=self.batches.triples,
        )
        # A rebuild plans every file again: its marks, suspects and quarantine
        # are the live ones (they outlive a rebuild killed by a parser, whose
        # .rebuild/ the next run removes).
        fresh.planning_dir = self.planning_dir
        try:
            yield fresh
            # An index nothing was written to (no resource, or none with
            # files) is created empty, so that every one is swapped in and a
            # reader holding the old one finds a new one to reopen.
            fresh.open_all()
        finally:
            fresh.close()
        checkpoint("rebuild.staged")
        generation = new_ulid()
        for name in INDEX_NAMES:
            displaced = install(root, name, staging / name, generation)
            if displaced is not None:  # a real directory of the older layout
                os.replace(displaced, staging / name)
            checkpoint("rebuild.swap")
        os.replace(staging, previous)
        checkpoint("rebuild.done")
        self.secure()


class StoreTransaction:
    """One resource's session over a :class:`ManagedIndexStore` (see the module doc)."""

    def __init__(
        self,
        store: ManagedIndexStore,
        resource_id: str,
        identity: str | None,
        *,
        staged: bool = False,
    ) -> None:
        self._store = store
        # The text index's writes wait for commit_staged (see _put_ready).
        self._staged = staged
        self._staged_units = 0
        self._staged_bytes = 0
        self.resource_id = resource_id
        self.stats = IndexStats()
        self._t0 = time.perf_counter()
        self._started_ns = store.clock()
        catalog = store.catalog
        self._catalog = catalog
        self._identity = identity
        recorded = catalog.get_meta(_identity_key(resource_id)) or catalog.get_meta("embedder")
        self._recorded = recorded
        # Units from another chunker or code graph are not comparable: redo
        # all.  Another embedder alone only re-embeds the stored units.
        self._full = False
        self._reembed = False
        # Another chunker or code graph may plan a quarantined content fine.
        self._units_changed = False
        if identity is not None and recorded is not None and recorded != identity:
            was, now = split_identity(recorded), split_identity(identity)
            if was.units != now.units:
                self._full = self._units_changed = True
            else:
                self._reembed = True
            if was.dimension is not None and was.dimension != now.dimension:
                raise DimensionChangedError(
                    f"resource {resource_id}: the embedder changed from {was.embedder} to "
                    f"{now.embedder}, and with it the vector dimension; the vector index "
                    "cannot hold both: run `acms reindex --rebuild` to build fresh indexes"
                )
        stamp = catalog.get_meta(_stamp_key(resource_id))
        self._racy_from = int(stamp) if stamp is not None else None
        # A re-run compares the listing with each file's (size, mtime) only;
        # full records are fetched for the few files that changed or vanished.
        self._catalog_stats = catalog.file_stats(resource_id)
        self._records: dict[str, FileRecord] = {}
        self._dirty_at_start = catalog.get_meta(_dirty_key(resource_id)) is not None
        if not self._dirty_at_start:
            lost = store.lost_parts(resource_id)
            if lost:
                # Written again as a stopped session's repair would: every
                # file whose units a lost index lacks is indexed again.
                _log.warning(
                    "index_store.lost_units_rewritten", resource_id=resource_id, indexes=lost
                )
                catalog.set_meta(_dirty_key(resource_id), "lost")
                self._dirty_at_start = True
                # What a graph file lost is not only its files' subjects:
                # the resource node's edges to files whose subjects are
                # intact (a file cut short) went too; every file writes them.
                if "graph" in lost:
                    self._full = True
                    # Written whole again from here: no longer the file to check.
                    catalog.delete_meta(_extent_key(resource_id))
        self._dirty = self._dirty_at_start
        self._suspects: frozenset[str] = frozenset()
        if self._dirty_at_start:
            self._records = catalog.records(resource_id)
            self._suspects = self._find_suspects()
        self._pending: list[FileDelta] = []
        self._pending_units = 0
        self._pending_bytes = 0
        self._graph_parts: list[_GraphPart] = []
        # The resource node's edges (``contains``) of the whole batch, written
        # as a part of their own after the files' parts (see _flush_graph).
        self._resource_part = _GraphPart([], set(), [])
        self._graph_triples = 0
        self._graph_records: list[FileRecord] = []
        # Files every index holds, their catalog rows waiting for the text commit.
        self._ready: list[FileRecord] = []
        self._touched: list[FileRecord] = []
        self._gone: list[FileRecord] = []
        self.wrote = False
        self._done = False
        # Planning marks (see begin_planning): the file, its descriptor, and
        # the quarantined contents (read on first need).
        self._mark_path = None if store.planning_dir is None else store.planning_dir / resource_id
        self._mark_fd: int | None = None
        self._quarantine: dict[tuple[str, str], None] | None = None
        self._suspects_left: list[tuple[str, str]] = []
        self._take_planning_mark()

    # ------------------------------------------------------------ planning marks

    def _planning_file(self, suffix: str) -> Path | None:
        where = self._mark_path
        return None if where is None else where.with_name(where.name + suffix)

    def _take_planning_mark(self) -> None:
        """Move the mark an earlier session left (its process died while
        planning that file) to the resource's suspects, which stay until the
        planner resolves them (:meth:`resolve_suspect`)."""
        where, suspects = self._mark_path, self._planning_file(".suspect")
        if where is None or suspects is None:
            return
        raw = _read_planning_file(where)
        entries = _read_entries(_read_planning_file(suspects))
        left = _read_mark(raw) if raw else None
        if left is not None and left not in entries:
            _log.warning(
                "index_store.planner_died",
                resource_id=self.resource_id,
                path=left[0],
                detail="the indexing process died while planning this file: it is planned "
                "again in a worker process first, and quarantined if it kills that too",
            )
            entries.append(left)
            _write_planning_file(suspects, entries)
        if raw is not None:
            _remove_planning_file(where)
        self._suspects_left = entries

    def suspects_left(self) -> list[tuple[str, str]]:
        """``(path, sha256)`` of the contents a dead planner was planning."""
        return list(self._suspects_left)

    def resolve_suspect(self, path: str, sha256: str, *, crashed: bool) -> None:
        """A suspect was planned again in a child process: ``crashed`` quarantines it."""
        if crashed:
            self.quarantine(path, sha256)
        entries = [e for e in self._suspects_left if e != (path, sha256)]
        if entries != self._suspects_left:
            self._suspects_left = entries
            suspects = self._planning_file(".suspect")
            if suspects is not None:
                _write_planning_file(suspects, entries)

    def begin_planning(self, path: str, sha256: str) -> None:
        """Mark ``path`` as being planned in this process (one ``pwrite`` and
        one ``ftruncate`` of a small file; no ``fsync``: what matters is a
        process that dies, and the kernel keeps its writes).

        Raises:
            IndexUnavailableError: the mark cannot be written.
        """
        where = self._mark_path
        if where is None:
            return
        line = json.dumps([sha256, path]).encode("ascii") + b"\n"
        try:
            fd = self._mark_fd
            if fd is None:
                file_modes.make_private_dirs(where.parent)
                flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
                fd = self._mark_fd = os.open(where, flags, 0o600)
            os.pwrite(fd, line, 0)
            os.ftruncate(fd, len(line))
        except OSError as exc:
            raise IndexUnavailableError(f"cannot write the planning mark {where}: {exc}") from exc

    def end_planning(self) -> None:
        """Clear the mark :meth:`begin_planning` wrote."""
        if self._mark_fd is not None:
            try:
                os.ftruncate(self._mark_fd, 0)
            except OSError as exc:
                raise IndexUnavailableError(
                    f"cannot clear the planning mark {self._mark_path}: {exc}"
                ) from exc

    def close_planning(self) -> None:
        """Remove the planning mark (the session ended, normally or not)."""
        fd, self._mark_fd = self._mark_fd, None
        if fd is None or self._mark_path is None:
            return
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._mark_path)

    def _quarantined_set(self) -> dict[tuple[str, str], None]:
        if self._quarantine is None:
            where = self._planning_file(".quarantine")
            if self._units_changed:
                # New planning code (the units' identity changed): what
                # killed the old one is tried again, in a worker first if it
                # still kills (the crash repair quarantines it again).
                if where is not None:
                    with contextlib.suppress(FileNotFoundError):
                        where.unlink()
                self._quarantine = {}
            else:
                raw = None if where is None else _read_planning_file(where)
                self._quarantine = dict.fromkeys(_read_entries(raw))
        return self._quarantine

    def quarantined(self, path: str, sha256: str) -> bool:
        """Whether planning this content of ``path`` killed a planner before."""
        return (path, sha256) in self._quarantined_set()

    def quarantine(self, path: str, sha256: str) -> None:
        """Remember this content of ``path`` as one that kills its planner (a
        file beside the marks, in the live data directory, so a rebuild keeps
        it; the newest :data:`_QUARANTINE_KEEP`)."""
        entries = self._quarantined_set()
        entries.pop((path, sha256), None)
        entries[(path, sha256)] = None
        while len(entries) > _QUARANTINE_KEEP:
            del entries[next(iter(entries))]
        where = self._planning_file(".quarantine")
        if where is not None:
            _write_planning_file(where, list(entries))

    # ------------------------------------------------------------ what the planner reads

    @property
    def full(self) -> bool:
        """True when every file must be re-indexed (the index identity changed)."""
        return self._full

    @property
    def needs_reembed(self) -> bool:
        """True when only the embedder changed: :meth:`reembed` the stored units."""
        return self._reembed and not self._full

    def reembed(
        self,
        embed: Callable[[list[str]], npt.NDArray[np.float32]],
        *,
        batch: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> bool:
        """Replace the resource's vectors with ``embed`` of each stored unit's content.

        Nothing is read from the resource's files and text, graph and catalog
        are not written: the units come back from the text index.  The
        vectors are written in batches under the dirty marker; the new
        identity is recorded only at commit, so a crash part way leaves the
        next session to re-embed again.  ``batch`` units per vector write
        (default: the store's ``batch_units``); ``progress(done, total)`` is
        called before the first batch and after each.

        False when the text index cannot read its units back (the session is
        then ``full``: every file is re-indexed).
        """
        if not self.needs_reembed:
            return False
        rid, store = self.resource_id, self._store
        text = store.text
        try:
            units = list(_stored_units(text, rid))
        except NotImplementedError as exc:
            _log.info("index_store.reembed_unavailable", resource_id=rid, reason=str(exc))
            self._full = True
            return False
        total = len(units)
        step = batch or store.batches.units
        if progress is not None:
            progress(0, total)
        self._mark_dirty()
        for start in range(0, total, step):
            part = units[start : start + step]
            rows = embed([u.content for u in part])
            store.vector.upsert(rid, part, rows)
            checkpoint("reembed.vector")
            self.stats.index_writes += 1
            self.stats.units_reembedded += len(part)
            if progress is not None:
                progress(start + len(part), total)
        _log.info("index_store.reembedded", resource_id=rid, units=total)
        return True

    @property
    def suspects(self) -> frozenset[str]:
        """Paths an earlier crash may have left incomplete."""
        return self._suspects

    def file_stats(self) -> Mapping[str, tuple[int, int]]:
        """The catalog's ``(size, mtime_ns)`` per path of this resource."""
        return self._catalog_stats

    def is_racy(self, mtime_ns: int) -> bool:
        """True when a file recorded with this mtime may have changed unseen."""
        return self._racy_from is not None and mtime_ns >= self._racy_from

    def record(self, path: str) -> FileRecord | None:
        """The catalog record of ``path`` (fetched on first need)."""
        if path not in self._catalog_stats:
            return None
        old = self._records.get(path)
        if old is None:
            old = self._catalog.get(self.resource_id, [path]).get(path)
            if old is not None:
                self._records[path] = old
        return old

    def records(self, paths: Iterable[str]) -> dict[str, FileRecord]:
        """The catalog records of some paths (one query for those not fetched yet)."""
        wanted = [p for p in paths if p in self._catalog_stats]
        missing = [p for p in wanted if p not in self._records]
        if missing:
            self._records.update(self._catalog.get(self.resource_id, missing))
        return {p: self._records[p] for p in wanted if p in self._records}

    # ------------------------------------------------------------ writes

    def apply(self, delta: FileDelta) -> None:
        """Queue or write one file's change (see the module doc for the order)."""
        if self._done:
            raise ValueError("the session is already committed")
        for unit in delta.units:
            if unit.resource_id != self.resource_id:
                raise ValueError(f"unit {unit.uko_uri[:80]!r} is not of {self.resource_id}")
        if delta.kind == "touch":
            assert delta.record is not None
            self._touched.append(delta.record)
        elif delta.kind == "delete":
            assert delta.old is not None
            self._gone.append(delta.old)
        else:
            self._pending.append(delta)
            self._pending_units += len(delta.units)
            self._pending_bytes += delta.size
            batches = self._store.batches
            if self._pending_units >= batches.units or self._pending_bytes >= batches.bytes:
                self._flush()

    def _mark_dirty(self) -> None:
        if not self._dirty:
            self._catalog.set_meta(_dirty_key(self.resource_id), "session")
            checkpoint("index.dirty")
            self._dirty = True
        self.wrote = True

    def _flush(self) -> None:
        """Write pending files to text and vector now; queue their graph change
        and catalog rows for :meth:`_flush_graph` (a resource's graph changes
        in far larger batches)."""
        if not self._pending:
            return
        import numpy as np  # here: a process that only queries never loads it

        rid, store = self.resource_id, self._store
        units: list[IndexUnit] = [u for d in self._pending for u in d.units]
        rows = [d.embeddings for d in self._pending if d.units and d.embeddings is not None]
        embeddings = (
            np.ascontiguousarray(np.vstack(rows), dtype=np.float32)
            if rows
            else np.zeros((0, store.dimension), dtype=np.float32)
        )
        new_uris = {u.uko_uri for u in units}
        stale = {
            uri for d in self._pending if d.old for uri in d.old.unit_uris if uri not in new_uris
        }
        self._mark_dirty()
        text = store.text
        if isinstance(text, PreparedWrites) and any(d.prepared for d in self._pending):
            prepared = [
                p
                for d in self._pending
                for p in (d.prepared if d.prepared is not None else (None,) * len(d.units))
            ]
            text.upsert_prepared(rid, units, prepared, delete_uris=stale)
        else:
            text.upsert(rid, units, delete_uris=stale)
        checkpoint("index.text")
        self._staged_units += len(units)
        self._staged_bytes += self._pending_bytes
        store.vector.upsert(rid, units, embeddings, delete_uris=stale)
        checkpoint("index.vector")
        self.stats.index_writes += 2
        self.stats.units_written += len(units)
        resource = resource_uri(rid)
        parts, node = self._graph_parts, self._resource_part
        for d in self._pending:
            assert d.record is not None
            if not parts or len(parts[-1].triples) >= _GRAPH_PART_TRIPLES:
                parts.append(_GraphPart([], set(), []))
            part = parts[-1]
            for triple in d.triples:
                (node if triple[0] == resource else part).triples.append(triple)
            self._graph_triples += len(d.triples)
            if d.old is not None:
                part.delete_subjects.update(s for s in d.old.graph_subjects if s != resource)
                node.delete_triples.extend(_contains(rid, d.old.path))
            part.delete_subjects.update(s for s in d.subjects if s != resource)
            self._graph_records.append(d.record)
        self.stats.files_indexed += sum(1 for d in self._pending if d.units or d.triples)
        _log.debug(
            "index_store.batch_written", resource_id=rid, files=len(self._pending), units=len(units)
        )
        self._pending.clear()
        self._pending_units = 0
        self._pending_bytes = 0
        del units, rows, embeddings
        if self._graph_triples >= store.batches.triples or (self._staged and self._commit_due()):
            self._flush_graph()  # and, when due, the text commit and catalog rows
        # The freed batch (Python objects, numpy arrays) back to the system:
        # RSS then follows what is in flight, not the largest batch so far.
        release_memory()

    def _flush_graph(self) -> None:
        if not self._graph_records:
            return
        rid = self.resource_id
        # Each part its own upsert (atomic); a crash between two is a crash
        # mid-batch like any other: the dirty marker and no catalog rows yet.
        # Parts never share a subject (a file's subjects are its own; the
        # resource node's edges are in the last part alone), so in sequence
        # they are the batch.  Keeping the resource node out of the files'
        # parts keeps a walk through it (``traverse`` from a file at depth 2)
        # to the few records that hold its edges, not every record.
        node = self._resource_part
        parts = self._graph_parts
        if node.triples or node.delete_triples:
            parts.append(node)
        for part in parts:
            self._store.graph.upsert(
                rid,
                part.triples,
                delete_subjects=part.delete_subjects,
                delete_triples=part.delete_triples,
            )
            checkpoint("index.graph")
            self.stats.index_writes += 1
        self._ready.extend(self._graph_records)
        self._graph_parts = []
        self._resource_part = _GraphPart([], set(), [])
        self._graph_triples = 0
        self._graph_records = []
        self._put_ready()

    def _put_ready(self, *, force: bool = False) -> None:
        """The catalog rows of the files every index holds, once their text
        is committed: with staged text writes, once per _COMMIT_BATCHES text
        batches (each commit makes a Tantivy segment; _flush then writes the
        graph batch early, so a resource with few triples commits as often)
        or when forced."""
        if not self._ready or (self._staged and not force and not self._commit_due()):
            return
        self._commit_text()
        self._catalog.put(self.resource_id, self._ready)
        checkpoint("index.catalog")
        self._ready = []

    def _commit_due(self) -> bool:
        """Whether the text staged since the last commit is _COMMIT_BATCHES
        text batches' worth."""
        batches = self._store.batches
        return (
            self._staged_units >= _COMMIT_BATCHES * batches.units
            or self._staged_bytes >= _COMMIT_BATCHES * batches.bytes
        )

    def _commit_text(self) -> None:
        """Make the text writes staged so far durable (and visible)."""
        text = self._store.text
        if self._staged and isinstance(text, StagedWrites):
            text.commit_staged(self.resource_id)
            checkpoint("index.commit")
            self._staged_units = self._staged_bytes = 0

    def commit(self) -> IndexStats:
        """Write what is pending, delete vanished files, repair, clear the marker."""
        if self._done:
            return self.stats
        rid, store = self.resource_id, self._store
        self._flush()
        self._flush_graph()
        self._put_ready(force=True)
        if self._touched:
            self._catalog.put(rid, self._touched)
            checkpoint("index.touch")
            self._touched = []
            self.wrote = True
        if self._gone:
            gone = self._gone
            uris = [u for rec in gone for u in rec.unit_uris]
            resource = resource_uri(rid)
            subjects = [s for rec in gone for s in rec.graph_subjects if s != resource]
            self._mark_dirty()
            self._catalog.remove(rid, [rec.path for rec in gone])
            checkpoint("delete.catalog")
            store.text.delete(rid, uris)
            checkpoint("delete.text")
            store.vector.delete(rid, uris)
            checkpoint("delete.vector")
            store.graph.upsert(
                rid,
                [],
                delete_subjects=subjects,
                delete_triples=[c for rec in gone for c in _contains(rid, rec.path)],
            )
            checkpoint("delete.graph")
            self.stats.files_deleted += len(gone)
            self.stats.index_writes += 3
        if self._gone or self._dirty_at_start:
            self._commit_text()  # the sweep reads the text index
        if self._dirty_at_start:
            self._sweep()
            self._commit_text()
        written = getattr(store.graph, "written_extent", None) if self.wrote else None
        extent = written(rid) if callable(written) else None
        if extent is not None:
            # Readers check the file against it (a cut short file is an error).
            self._catalog.set_meta(_extent_key(rid), f"{extent[0].hex()}:{extent[1]}")
        if self._dirty:
            self._catalog.delete_meta(_dirty_key(rid))
            checkpoint("index.clean")
            self.wrote = True  # a repair session writes even when nothing changed
        if self.wrote:
            # Files whose mtime is not older than this are re-hashed next time.
            self._catalog.set_meta(_stamp_key(rid), str(self._started_ns))
        identity = self._identity
        if identity is not None and self._catalog.get_meta(_identity_key(rid)) != identity:
            self._catalog.set_meta(_identity_key(rid), identity)
        self.stats.seconds = time.perf_counter() - self._t0
        self._done = True
        _log.info("indexer.resource_indexed", resource_id=rid, **self.stats.as_dict())
        return self.stats

    # ------------------------------------------------------------ repair

    def _find_suspects(self) -> frozenset[str]:
        """Paths whose catalog row names a unit or subject some index lacks."""
        rid, store = self.resource_id, self._store
        text = store.text.unit_uris(rid)
        vector = store.vector.unit_uris(rid)
        subjects = store.graph.subjects(rid)
        suspect = frozenset(
            path
            for path, rec in self._records.items()
            if not (
                text.issuperset(rec.unit_uris)
                and vector.issuperset(rec.unit_uris)
                and subjects.issuperset(rec.graph_subjects)
            )
        )
        if suspect:
            _log.info("indexer.suspect_files", resource_id=rid, files=len(suspect))
        return suspect

    def _sweep(self) -> None:
        """Delete what no catalog row names (what an interrupted session left)."""
        rid, store = self.resource_id, self._store
        records = self._catalog.records(rid)
        expected = {u for rec in records.values() for u in rec.unit_uris}
        text_orphans = store.text.unit_uris(rid) - expected
        if text_orphans:
            store.text.delete(rid, text_orphans)
            self.stats.index_writes += 1
        checkpoint("sweep.text")
        vector_orphans = store.vector.unit_uris(rid) - expected
        if vector_orphans:
            store.vector.delete(rid, vector_orphans)
            self.stats.index_writes += 1
        checkpoint("sweep.vector")
        subjects = {s for rec in records.values() for s in rec.graph_subjects}
        # Only file subjects (the rule verify checks): never the resource node.
        subject_orphans = {
            s for s in store.graph.subjects(rid) if s not in subjects and path_of(s) is not None
        }
        files = {file_uri(rid, rec.path) for rec in records.values() if rec.graph_subjects}
        resource = resource_uri(rid)
        contains = PREDICATES["contains"]
        contains_orphans = [
            (resource, contains, o)
            for _s, p, o in store.graph.get_triples(resource, scope=frozenset({rid})).triples
            if p == contains and o not in files
        ]
        if subject_orphans or contains_orphans:
            store.graph.upsert(
                rid, [], delete_subjects=subject_orphans, delete_triples=contains_orphans
            )
            self.stats.index_writes += 1
        checkpoint("sweep.graph")
        _log.info(
            "indexer.orphans_swept",
            resource_id=rid,
            text=len(text_orphans),
            vector=len(vector_orphans),
            graph_subjects=len(subject_orphans),
            contains=len(contains_orphans),
        )


def _stored_units(text: TextIndex, rid: str) -> Iterator[IndexUnit]:
    if not isinstance(text, StoredUnits):
        raise NotImplementedError(f"{type(text).__name__} does not read units back")
    return text.units(rid)


def _has_bytes(path: Path) -> bool:
    """Whether ``path`` is a file holding anything (SQLite opens a 0-byte file
    as a new database)."""
    try:
        return os.stat(path).st_size > 0
    except FileNotFoundError:
        return False


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
