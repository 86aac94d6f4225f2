"""The index store port: how a planner hands its changes to the indexes.

The indexer (a planner) turns a resource's files into one :class:`FileDelta`
per file; an :class:`IndexStore` applies them inside a per-resource
:class:`IndexTransaction`::

    with store.session(resource_id, identity=embedder_identity) as tx:
        for delta in planner.plan(...):
            tx.apply(delta)
    # leaving the block normally commits: the rest of the writes, vanished
    # files' deletions, the repair of an earlier crash, the clean marker

The store alone knows the order of the writes, the crash markers and the
repair; the planner never calls an engine.  :class:`Catalog` is the record
of what was indexed, which a store keeps beside the indexes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from cleveragents.domain.models.acms.backends import (
    GraphIndex,
    IndexUnit,
    TextIndex,
    VectorIndex,
    WriteTriple,
)
from cleveragents.domain.models.acms.indexing import FileRecord, IndexStats

if TYPE_CHECKING:  # annotations only: a query process need not load numpy
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "Catalog",
    "DeltaKind",
    "FileDelta",
    "IndexStore",
    "IndexTransaction",
    "MaintainedStore",
    "VerifyProblem",
]

DeltaKind = Literal["index", "touch", "delete"]


@dataclass(frozen=True, slots=True)
class FileDelta:
    """One file's change to a resource's indexes.

    - ``index``: ``record`` is the file's new catalog row; ``units`` (with one
      ``embeddings`` row each) and ``triples`` replace what ``old`` named.
    - ``touch``: the content is unchanged; only the catalog row (size,
      mtime) is replaced by ``record``.
    - ``delete``: the file vanished; everything ``old`` names goes.
    """

    kind: DeltaKind
    path: str
    record: FileRecord | None = None
    old: FileRecord | None = None
    units: tuple[IndexUnit, ...] = ()
    embeddings: npt.NDArray[np.float32] | None = None
    triples: tuple[WriteTriple, ...] = ()
    subjects: tuple[str, ...] = ()
    size: int = field(default=0, compare=False)
    # The text index's preparer result per unit (``PreparedWrites``), when
    # a planning worker ran it; None: the text index analyses at the write.
    prepared: tuple[object, ...] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in ("index", "touch", "delete"):
            raise ValueError(f"unknown delta kind {self.kind!r}")
        if self.kind == "delete":
            if self.old is None or self.record is not None:
                raise ValueError("a delete delta names the old record and no new one")
        elif self.record is None or self.record.path != self.path:
            raise ValueError(f"a {self.kind} delta needs the file's new record")
        if self.units and (self.embeddings is None or self.embeddings.shape[0] != len(self.units)):
            raise ValueError("an index delta needs one embedding row per unit")
        if self.prepared is not None and len(self.prepared) != len(self.units):
            raise ValueError("a delta's prepared text needs one entry per unit")


@dataclass(frozen=True, slots=True)
class VerifyProblem:
    """One disagreement between the catalog and an index."""

    resource_id: str
    index: str
    missing: int
    extra: int
    sample: str
    #: The resource carries the mark of a run stopped mid-write: the next
    #: reindex of it checks and repairs it (a disagreement is expected).
    interrupted: bool = False


class Catalog(Protocol):
    """What was indexed for each file of each resource, plus store metadata."""

    def records(self, resource_id: str) -> dict[str, FileRecord]:
        """Every record of a resource, by path."""
        ...

    def file_stats(self, resource_id: str) -> Mapping[str, tuple[int, int]]:
        """``(size, mtime_ns)`` of every file of a resource, by path (read-only)."""
        ...

    def get(self, resource_id: str, paths: Iterable[str]) -> dict[str, FileRecord]:
        """The records of some files (paths without a record are left out)."""
        ...

    def put(self, resource_id: str, records: Iterable[FileRecord]) -> None:
        """Insert or replace records of one resource, in one transaction."""
        ...

    def remove(self, resource_id: str, paths: Iterable[str] | None = None) -> None:
        """Forget some files of a resource, or all of them when ``paths`` is None."""
        ...

    def resource_ids(self) -> set[str]:
        """Resources with at least one record."""
        ...

    def get_meta(self, key: str) -> str | None:
        """A store-wide setting, or None."""
        ...

    def set_meta(self, key: str, value: str) -> None:
        """Record a store-wide setting."""
        ...

    def delete_meta(self, key: str) -> None:
        """Forget a setting (no error when it is not set)."""
        ...

    def close(self) -> None:
        """Release the catalog's files."""
        ...


@runtime_checkable
class IndexTransaction(Protocol):
    """One resource's pass over the store (see the module doc)."""

    resource_id: str
    stats: IndexStats

    @property
    def full(self) -> bool:
        """True when every file must be re-indexed (the index identity changed)."""
        ...

    @property
    def suspects(self) -> frozenset[str]:
        """Paths an earlier crash may have left incomplete: re-index them."""
        ...

    @property
    def needs_reembed(self) -> bool:
        """True when only the embedder changed since the resource was indexed:
        :meth:`reembed` its stored units instead of re-indexing every file."""
        ...

    def reembed(
        self,
        embed: Callable[[list[str]], npt.NDArray[np.float32]],
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> bool:
        """Replace the resource's vectors with ``embed`` of its stored units'
        content (a unit of work: a crash leaves the next session to redo it).

        False when the store cannot read the units back: the session is then
        ``full``.
        """
        ...

    def file_stats(self) -> Mapping[str, tuple[int, int]]:
        """The catalog's ``(size, mtime_ns)`` per path of this resource."""
        ...

    def is_racy(self, mtime_ns: int) -> bool:
        """True when a file with this recorded mtime may have changed unseen
        (it is not older than the resource's last catalog write)."""
        ...

    def record(self, path: str) -> FileRecord | None:
        """The catalog record of one path (fetched on first need)."""
        ...

    def records(self, paths: Iterable[str]) -> dict[str, FileRecord]:
        """The catalog records of some paths."""
        ...

    # A parser is native code: a hostile file may crash it (SIGSEGV, abort)
    # and with it the process that plans the file.  A worker's death is
    # seen by the writer; the writer's own death (planning in process:
    # ``--jobs 1``, or a change too small to start workers) is seen by the
    # resource's next session through the planning mark, which makes the
    # file a *suspect*: planned again in a child process first (a process
    # killed from outside leaves a mark too).  A content that kills its
    # planner is quarantined: planned without the tree-sitter parser (its
    # text and vector units kept, and the symbols and imports of the
    # pure-Python reader) until it changes, so one hostile file costs at
    # most one failed run per version of it, never every run.

    def suspects_left(self) -> list[tuple[str, str]]:
        """``(path, sha256)`` of the contents a dead planner was planning,
        until :meth:`resolve_suspect` settles each."""
        ...

    def resolve_suspect(self, path: str, sha256: str, *, crashed: bool) -> None:
        """A suspect was planned again in a child process: ``crashed``
        quarantines its content; either way it is no longer a suspect."""
        ...

    def begin_planning(self, path: str, sha256: str) -> None:
        """Mark ``path`` (content ``sha256``) as being planned in this process,
        until :meth:`end_planning`: a process that dies in between leaves the
        mark, and the next session quarantines that content."""
        ...

    def end_planning(self) -> None:
        """The file marked by :meth:`begin_planning` was planned (or raised)."""
        ...

    def quarantined(self, path: str, sha256: str) -> bool:
        """Whether planning this content of ``path`` killed a planner before."""
        ...

    def quarantine(self, path: str, sha256: str) -> None:
        """Remember that planning this content of ``path`` killed a planner
        (a worker): it is planned without the code parser from now on."""
        ...

    def apply(self, delta: FileDelta) -> None:
        """Queue or write one file's change, in the store's write order.

        Raises:
            ValueError: a delta of another resource.
            IndexUnavailableError: a write failed.
        """
        ...


@runtime_checkable
class IndexStore(Protocol):
    """Owner of the indexes' write protocol (see the module doc)."""

    @property
    def dimension(self) -> int:
        """Embedding dimension of the vector index."""
        ...

    @property
    def catalog(self) -> Catalog:
        """The record of what was indexed (read it; the store writes it)."""
        ...

    def session(
        self, resource_id: str, *, identity: str | None = None
    ) -> AbstractContextManager[IndexTransaction]:
        """A transaction over one resource; leaving it normally commits it.

        ``identity`` names what produced the units (embedder and settings): a
        change of identity makes the resource's sessions ``full`` until one
        completes (None: not checked).
        """
        ...

    def delete_resource(self, resource_id: str) -> None:
        """Delete every unit and record of a resource, crash-safely."""
        ...

    def mark_dirty(self, resource_ids: Iterable[str]) -> None:
        """Make the next session of each resource check and repair it."""
        ...

    def prune(self, keep: Iterable[str]) -> list[str]:
        """Delete every indexed resource not in ``keep``; return their ULIDs."""
        ...

    def verify(
        self, registered: Iterable[str], *, lock_timeout: float | None = None
    ) -> list[VerifyProblem]:
        """Check that catalog, text, vector and graph agree on every resource
        (holding the write lock, waiting up to ``lock_timeout`` seconds for a
        running reindex, when it is not None)."""
        ...

    def iter_resource_ids(self) -> Iterator[str]:
        """Every resource any index or the catalog holds, sorted."""
        ...


@runtime_checkable
class MaintainedStore(IndexStore, Protocol):
    """An index store over a data directory: its lock, rebuild and health."""

    def close(self) -> None:
        """Close every index opened so far (a later use opens it again)."""
        ...

    @property
    def text(self) -> TextIndex:
        """The live text index."""
        ...

    @property
    def vector(self) -> VectorIndex:
        """The live vector index."""
        ...

    @property
    def graph(self) -> GraphIndex:
        """The live graph index."""
        ...

    def writing(self, *, timeout: float = 60.0) -> AbstractContextManager[MaintainedStore]:
        """Hold the data directory's writer lock (after repairing a killed rebuild).

        Raises:
            BusyError: another writer held it for ``timeout`` seconds.
        """
        ...

    def rebuild(self) -> AbstractContextManager[IndexStore]:
        """A fresh, empty store whose indexes replace the live ones atomically
        when the block exits normally (hold :meth:`writing`)."""
        ...

    def counts(self, resource_id: str) -> dict[str, int]:
        """Indexed files (binary ones, recorded without units or subjects,
        left out) and units per index of one resource."""
        ...

    def check_reachable(self) -> None:
        """Raise :class:`IndexUnavailableError` while an index server this
        store depends on is unreachable, or a local index is missing while
        files are indexed."""
        ...

    def indexed_file(self, resource_id: str, path: str) -> bool:
        """Whether the store indexed ``path`` of a resource as a text file
        (its file node is in the graph); a file left out, ignored, secret or
        binary, is not.

        Raises:
            ValueError: an invalid ULID.
        """
        ...

    def bytes_on_disk(self) -> dict[str, int]:
        """Sizes of the live indexes and the registry."""
        ...

    def loose_modes(self) -> list[str]:
        """Paths in the data directory that group or others may access."""
        ...

    def secure(self) -> None:
        """Narrow the data directory's files to owner-only."""
        ...
