"""Incremental indexer: keeps the text, vector and graph indexes of each
resource in step with its files.

Design::

    hydrator / reindex ──► Indexer.session(resource) ──► IndexSession
                                             │ per listed file:
                                             │   needs_read? (catalog size/mtime)
                                             │   update(file, bytes) -> hash changed?
                                             │ batches of files:
                                             │   chunk + embed + triples
                                             │   text / vector / graph .upsert
                                             │   catalog.put (after the indexes commit)
                                             └ finish(): delete units of vanished files,
                                                         sweep orphans if it was dirty

- A file whose size and mtime match the catalog is not read at all.
- A file read whose content hash matches is not re-indexed (only its
  catalog row is touched).
- A changed file's new units are written in the same atomic upsert that
  drops its old ones, so a crash never leaves the file missing from an index;
  the catalog is updated only after all three indexes committed, so an
  interrupted run is repaired by the next one (upserts are idempotent).
  Deletions go the other way: a vanished file's catalog row goes first, then
  its units.  So the catalog never names a unit an index lacks, except in the
  window of a changed file (the catalog still names the old units, and the
  file's size or mtime no longer match it, so it is re-read).

Crash safety: the *dirty marker*.  Before a session's first index write it
records ``dirty:<resource>`` in the catalog meta, and clears it only at the
end of a complete :meth:`IndexSession.finish`.  A crash in between can leave
units no catalog row names: a file changed again before the next run (its
crashed version's units are in neither the old nor the new row), or a file
that vanished.  A session that *starts* on a dirty resource therefore

1. marks *suspect* every file whose catalog units or graph subjects some
   index lacks, and re-indexes it even when its size, mtime and hash match;
2. after its own writes, *sweeps*: deletes the text and vector units and the
   graph file subjects (and ``contains`` edges) that no catalog row names.

Only dirty sessions scan the indexes; a clean resource with nothing to do
costs what it always did (no index reads and no writes, not even the marker).
:mod:`.fault_injection` names every write step (``checkpoint``), for the crash
tests that kill a reindex at each one.
- Imports are resolved against the files listed in the same walk.  An
  unchanged file keeps the import targets resolved when it was indexed;
  ``full=True`` re-resolves everything.

The indexer depends on the backend Protocols and the :class:`Embedder` port
only; the container supplies the engines.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import structlog

from cleveragents.application.services.chunking import chunk_text, detect_language, make_units
from cleveragents.application.services.code_graph import ModuleLookup, extract_facts, file_triples
from cleveragents.application.services.fault_injection import checkpoint
from cleveragents.application.services.resource_files import (
    ListedFile,
    ReadFile,
    decode_text,
    is_binary,
    list_resource,
    read_file,
    secret_content,
)
from cleveragents.domain.models.acms.backends import (
    GraphIndex,
    IndexUnit,
    TextIndex,
    VectorIndex,
    WriteTriple,
)
from cleveragents.domain.models.acms.embedding import Embedder
from cleveragents.domain.models.acms.indexing import FileRecord, IndexStats
from cleveragents.domain.models.acms.secret_filter import DEFAULT_SECRET_FILTER, SecretFilter
from cleveragents.domain.models.acms.uko import UKO, file_uri, path_of, resource_uri
from cleveragents.domain.models.acms.ulids import canonical_ulid

__all__ = [
    "DEFAULT_INDEX_FILE_BYTES",
    "NOT_READ",
    "Catalog",
    "IndexSession",
    "Indexer",
    "NotRead",
]

DEFAULT_INDEX_FILE_BYTES = 1024 * 1024
_EMBED_BATCH = 256

_log = structlog.get_logger("cleveragents.acms.indexer")


class Catalog(Protocol):
    """Where the indexer remembers what it indexed (see ``SqliteCatalog``)."""

    def records(self, resource_id: str) -> dict[str, FileRecord]: ...
    def file_stats(self, resource_id: str) -> dict[str, tuple[int, int]]: ...
    def get(self, resource_id: str, paths: Iterable[str]) -> dict[str, FileRecord]: ...
    def put(self, resource_id: str, records: Iterable[FileRecord]) -> None: ...
    def remove(self, resource_id: str, paths: Iterable[str] | None = None) -> None: ...
    def resource_ids(self) -> set[str]: ...
    def get_meta(self, key: str) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def delete_meta(self, key: str) -> None: ...


@dataclass(slots=True)
class _Pending:
    listed: ListedFile
    sha256: str
    units: list[IndexUnit]
    triples: list[WriteTriple]
    subjects: tuple[str, ...]
    old: FileRecord | None


class Indexer:
    """Feeds the three indexes of a resource from its files, incrementally."""

    def __init__(
        self,
        text: TextIndex,
        vector: VectorIndex,
        graph: GraphIndex,
        embedder: Embedder,
        catalog: Catalog,
        *,
        max_file_bytes: int = DEFAULT_INDEX_FILE_BYTES,
        batch_units: int = 8192,
        batch_bytes: int = 16 * 1024 * 1024,
        batch_triples: int = 250_000,
    ) -> None:
        if embedder.dimension != vector.dimension:
            raise ValueError(
                f"embedder dimension {embedder.dimension} does not match the vector index "
                f"dimension {vector.dimension}"
            )
        if max_file_bytes <= 0:
            raise ValueError("max_file_bytes must be positive")
        self.text = text
        self.vector = vector
        self.graph = graph
        self.embedder = embedder
        self.catalog = catalog
        self.max_file_bytes = max_file_bytes
        self.batch_units = batch_units
        self.batch_bytes = batch_bytes
        self.batch_triples = batch_triples
        identity = f"{embedder.name}:{embedder.dimension}"
        recorded = catalog.get_meta("embedder")
        # Vectors from another embedder are not comparable: re-index everything.
        self._force_full = recorded is not None and recorded != identity
        self._identity = identity

    def session(
        self,
        resource_id: str,
        root: str | Path,
        listed_paths: Iterable[str],
        *,
        full: bool = False,
        secrets: SecretFilter = DEFAULT_SECRET_FILTER,
    ) -> IndexSession:
        """Start indexing one resource whose walk listed ``listed_paths``
        (``secrets`` content-checks the files the session reads itself)."""
        return IndexSession(
            self,
            canonical_ulid(resource_id),
            Path(root),
            listed_paths,
            full=full or self._force_full,
            secrets=secrets,
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
    ) -> IndexStats:
        """List and index one resource on its own (the ``reindex`` path).

        ``progress(done, total)`` is called after each file.  Files the
        ``secrets`` deny-list leaves out count as ``skipped["secret"]``.

        Raises:
            ResourceListingError: git cannot list a git resource (nothing is
                written: its units stay as they were).
        """
        listing = list_resource(root, resource_type, secrets=secrets)
        listed = listing.files
        paths = [f.rel_path for f in listed]
        session = self.session(resource_id, root, paths, full=full, secrets=secrets)
        for _ in listing.secret_skipped:
            session.stats.skip("secret")
        for done, f in enumerate(listed, 1):
            session.visit(f)
            if progress is not None:
                progress(done, len(listed))
        return session.finish()

    def delete_resource(self, resource_id: str) -> None:
        """Delete every unit of a resource from all indexes and the catalog.

        The catalog rows go first, under the dirty marker: a crash part way
        leaves units no row names, which the resource's next session sweeps
        (or the next prune deletes), never rows naming units that are gone.
        """
        rid = canonical_ulid(resource_id)
        self.catalog.set_meta(_dirty_key(rid), "delete")
        self.catalog.remove(rid)
        checkpoint("resource.delete")
        self.text.delete(rid)
        checkpoint("resource.delete")
        self.vector.delete(rid)
        checkpoint("resource.delete")
        self.graph.delete(rid)
        checkpoint("resource.delete")
        self.catalog.delete_meta(_dirty_key(rid))
        _log.info("indexer.resource_deleted", resource_id=rid)

    def mark_dirty(self, resource_ids: Iterable[str]) -> None:
        """Make the next session of each resource check its indexes against the
        catalog and sweep orphans (e.g. after an interrupted rebuild swap)."""
        for rid in resource_ids:
            self.catalog.set_meta(_dirty_key(canonical_ulid(rid)), "marked")

    def prune(self, keep: Iterable[str]) -> list[str]:
        """Delete the units of every indexed resource not in ``keep``."""
        keep_set = {canonical_ulid(r) for r in keep}
        present = (
            self.catalog.resource_ids()
            | self.text.resource_ids()
            | self.vector.resource_ids()
            | self.graph.resource_ids()
        )
        gone = sorted(present - keep_set)
        for rid in gone:
            self.delete_resource(rid)
        return gone

    def _mark_identity(self) -> None:
        if self.catalog.get_meta("embedder") != self._identity:
            self.catalog.set_meta("embedder", self._identity)
        self._force_full = False


class NotRead:
    """Marker type: the caller did not read the file (see ``IndexSession.visit``)."""


NOT_READ = NotRead()


class IndexSession:
    """One resource's pass: visit (or read and update) each listed file, then finish."""

    def __init__(
        self,
        indexer: Indexer,
        resource_id: str,
        root: Path,
        listed_paths: Iterable[str],
        *,
        full: bool,
        secrets: SecretFilter = DEFAULT_SECRET_FILTER,
    ) -> None:
        self._ix = indexer
        self._secrets = secrets
        self.resource_id = resource_id
        self.root = root
        self.full = full
        self.stats = IndexStats()
        self._t0 = time.perf_counter()
        # A re-run compares the listing with each file's (size, mtime) only;
        # the full record (unit URIs, subjects) is fetched for the few files
        # that changed or vanished.  Nothing here is O(resource) beyond that.
        self._catalog_stats = indexer.catalog.file_stats(resource_id)
        self._records: dict[str, FileRecord] = {}
        self._listed_paths = (
            listed_paths
            if isinstance(listed_paths, list | tuple | set | frozenset)
            else list(listed_paths)
        )
        self._module_lookup: ModuleLookup | None = None
        self._seen: set[str] = set()
        self._touched: list[FileRecord] = []
        self._pending: list[_Pending] = []
        self._pending_units = 0
        self._pending_bytes = 0
        self._graph_triples: list[WriteTriple] = []
        self._graph_delete_subjects: set[str] = set()
        self._graph_delete_triples: list[WriteTriple] = []
        self._graph_records: list[FileRecord] = []
        self._finished = False
        # A previous session of this resource did not finish: check, then sweep.
        self._dirty_at_start = indexer.catalog.get_meta(_dirty_key(resource_id)) is not None
        self._dirty = self._dirty_at_start
        if self._dirty_at_start:
            self._records = indexer.catalog.records(resource_id)
        self._suspect = self._find_suspects() if self._dirty_at_start else set()

    def _old(self, path: str) -> FileRecord | None:
        """The catalog's record of ``path`` (fetched on first need)."""
        if path not in self._catalog_stats:
            return None
        old = self._records.get(path)
        if old is None:
            old = self._ix.catalog.get(self.resource_id, [path]).get(path)
            if old is not None:
                self._records[path] = old
        return old

    @property
    def _modules(self) -> ModuleLookup:
        """The Python modules of the listing, looked up per name when needed."""
        if self._module_lookup is None:
            self._module_lookup = ModuleLookup(self._listed_paths)
        return self._module_lookup

    def _find_suspects(self) -> set[str]:
        """Paths whose catalog row names a unit or subject some index lacks."""
        rid = self.resource_id
        text = self._ix.text.unit_uris(rid)
        vector = self._ix.vector.unit_uris(rid)
        subjects = self._ix.graph.subjects(rid)
        suspect = {
            path
            for path, rec in self._records.items()
            if not (
                text.issuperset(rec.unit_uris)
                and vector.issuperset(rec.unit_uris)
                and subjects.issuperset(rec.graph_subjects)
            )
        }
        if suspect:
            _log.info("indexer.suspect_files", resource_id=rid, files=len(suspect))
        return suspect

    def _mark_dirty(self) -> None:
        """Record that this session is about to write its indexes."""
        if not self._dirty:
            self._ix.catalog.set_meta(_dirty_key(self.resource_id), "session")
            checkpoint("index.dirty")
            self._dirty = True

    # ------------------------------------------------------------ per file

    def needs_read(self, listed: ListedFile) -> bool:
        """True when the index needs this file's bytes (new, or size/mtime changed)."""
        if listed.size > self._ix.max_file_bytes:
            return False
        return (
            self.full
            or self._catalog_stats.get(listed.rel_path) != (listed.size, listed.mtime_ns)
            or listed.rel_path in self._suspect
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
        self.stats.files_seen += 1
        if listed.size > self._ix.max_file_bytes:
            self.skip(listed, "too_large")
            return
        if preread is None:
            self.skip(listed, "unreadable")
            return
        if not self.needs_read(listed):
            self.keep(listed)
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

    def keep(self, listed: ListedFile) -> None:
        """The file is unchanged since the catalog saw it: keep its units."""
        self._seen.add(listed.rel_path)
        self.stats.files_unchanged += 1

    def skip(self, listed: ListedFile, reason: str) -> None:
        """The file cannot be indexed now: its old units (if any) go at finish."""
        self.stats.skip(reason)

    def update(self, listed: ListedFile, data: bytes) -> None:
        """Index ``data`` as the current content of ``listed`` if it changed."""
        if len(data) > self._ix.max_file_bytes:
            self.skip(listed, "too_large")
            return
        path = listed.rel_path
        self._seen.add(path)
        sha = hashlib.sha256(data).hexdigest()
        old = self._old(path)
        if is_binary(path, data[:8192]):
            # Recorded with no units, so an unchanged binary file is never re-read.
            self.stats.skip("binary")
            self._queue(_Pending(listed, sha, [], [], (), old), 0)
            return
        if old is not None and old.sha256 == sha and not self.full and path not in self._suspect:
            self.stats.files_unchanged += 1
            self.stats.files_touched += 1
            self._touched.append(
                FileRecord(
                    path, listed.size, listed.mtime_ns, sha, old.unit_uris, old.graph_subjects
                )
            )
            return
        text = decode_text(data)
        language = detect_language(path)
        chunks = chunk_text(text, language)
        units = make_units(self.resource_id, path, text, language=language, chunks=chunks)
        facts = extract_facts(path, text, language)
        triples = file_triples(self.resource_id, path, language, chunks, facts, self._modules)
        own = file_uri(self.resource_id, path)
        # The file and the URIs under it: never the resource node (its one
        # `contains` edge is dropped as an exact triple instead).
        subjects = tuple(sorted({t[0] for t in triples if t[0].startswith(own)} | {own}))
        self._queue(_Pending(listed, sha, units, triples, subjects, old), len(data))

    # ------------------------------------------------------------ batches

    def _queue(self, pending: _Pending, size: int) -> None:
        self._pending.append(pending)
        self._pending_units += len(pending.units)
        self._pending_bytes += size
        if (
            self._pending_units >= self._ix.batch_units
            or self._pending_bytes >= self._ix.batch_bytes
        ):
            self._flush()

    def _flush(self) -> None:
        """Write the pending files to the text and vector indexes now; queue
        their graph change and catalog rows for :meth:`_flush_graph`.

        A resource's graph is one file rewritten per change, so graph writes
        are batched far larger than text/vector ones.  Catalog rows follow the
        graph write: a file is recorded only once all three indexes hold it.
        """
        if not self._pending:
            return
        rid = self.resource_id
        ix = self._ix
        units = [u for p in self._pending for u in p.units]
        new_uris = {u.uko_uri for u in units}
        stale = {
            uri for p in self._pending if p.old for uri in p.old.unit_uris if uri not in new_uris
        }
        embeddings = self._embed([u.content for u in units], ix.vector.dimension)
        self._mark_dirty()
        ix.text.upsert(rid, units, delete_uris=stale)
        checkpoint("index.text")
        ix.vector.upsert(rid, units, embeddings, delete_uris=stale)
        checkpoint("index.vector")
        self.stats.index_writes += 2
        self.stats.units_written += len(units)
        resource_subject = _resource_subject(rid)
        for p in self._pending:
            self._graph_triples.extend(p.triples)
            if p.old is not None:
                self._graph_delete_subjects.update(
                    s for s in p.old.graph_subjects if s != resource_subject
                )
                self._graph_delete_triples.extend(_contains(rid, p.old.path))
            self._graph_delete_subjects.update(s for s in p.subjects if s != resource_subject)
            self._graph_records.append(
                FileRecord(
                    p.listed.rel_path,
                    p.listed.size,
                    p.listed.mtime_ns,
                    p.sha256,
                    tuple(u.uko_uri for u in p.units),
                    p.subjects,
                )
            )
        self.stats.files_indexed += sum(1 for p in self._pending if p.units or p.triples)
        _log.debug(
            "indexer.batch_written", resource_id=rid, files=len(self._pending), units=len(units)
        )
        self._pending.clear()
        self._pending_units = 0
        self._pending_bytes = 0
        if len(self._graph_triples) >= self._ix.batch_triples:
            self._flush_graph()

    def _flush_graph(self) -> None:
        if not self._graph_records:
            return
        rid = self.resource_id
        self._ix.graph.upsert(
            rid,
            self._graph_triples,
            delete_subjects=self._graph_delete_subjects,
            delete_triples=self._graph_delete_triples,
        )
        checkpoint("index.graph")
        self._ix.catalog.put(rid, self._graph_records)
        checkpoint("index.catalog")
        self.stats.index_writes += 1
        self._graph_triples = []
        self._graph_delete_subjects = set()
        self._graph_delete_triples = []
        self._graph_records = []

    def _embed(self, texts: Sequence[str], dimension: int) -> np.ndarray:
        if not texts:
            return np.zeros((0, dimension), dtype=np.float32)
        parts = [
            self._ix.embedder.embed(texts[i : i + _EMBED_BATCH])
            for i in range(0, len(texts), _EMBED_BATCH)
        ]
        return np.ascontiguousarray(np.vstack(parts), dtype=np.float32)

    def finish(self) -> IndexStats:
        """Write what is pending and delete the units of files no longer present."""
        if self._finished:
            return self.stats
        self._flush()
        self._flush_graph()
        if self._touched:
            self._ix.catalog.put(self.resource_id, self._touched)
            checkpoint("index.touch")
            self._touched.clear()
        rid = self.resource_id
        seen = self._seen
        gone_paths = [path for path in self._catalog_stats if path not in seen]
        gone = list(self._ix.catalog.get(rid, gone_paths).values()) if gone_paths else []
        if gone:
            uris = [u for rec in gone for u in rec.unit_uris]
            subjects = [
                s for rec in gone for s in rec.graph_subjects if s != _resource_subject(rid)
            ]
            self._mark_dirty()
            # Rows first: a crash below leaves orphans for the sweep, never a
            # row naming units that are already gone.
            self._ix.catalog.remove(rid, [rec.path for rec in gone])
            checkpoint("delete.catalog")
            self._ix.text.delete(rid, uris)
            checkpoint("delete.text")
            self._ix.vector.delete(rid, uris)
            checkpoint("delete.vector")
            self._ix.graph.upsert(
                rid,
                [],
                delete_subjects=subjects,
                delete_triples=[c for rec in gone for c in _contains(rid, rec.path)],
            )
            checkpoint("delete.graph")
            self.stats.files_deleted += len(gone)
            self.stats.index_writes += 3
        if self._dirty_at_start:
            self._sweep()
        if self._dirty:
            self._ix.catalog.delete_meta(_dirty_key(rid))
            checkpoint("index.clean")
        self._ix._mark_identity()
        self.stats.seconds = time.perf_counter() - self._t0
        self._finished = True
        _log.info("indexer.resource_indexed", resource_id=self.resource_id, **self.stats.as_dict())
        return self.stats

    def _sweep(self) -> None:
        """Delete what no catalog row names (what an interrupted session left)."""
        rid = self.resource_id
        records = self._ix.catalog.records(rid)
        expected = {u for rec in records.values() for u in rec.unit_uris}
        text_orphans = self._ix.text.unit_uris(rid) - expected
        if text_orphans:
            self._ix.text.delete(rid, text_orphans)
            self.stats.index_writes += 1
        checkpoint("sweep.text")
        vector_orphans = self._ix.vector.unit_uris(rid) - expected
        if vector_orphans:
            self._ix.vector.delete(rid, vector_orphans)
            self.stats.index_writes += 1
        checkpoint("sweep.vector")
        subjects = {s for rec in records.values() for s in rec.graph_subjects}
        # Only file subjects (the rule verify checks): never the resource node.
        subject_orphans = {
            s for s in self._ix.graph.subjects(rid) if s not in subjects and path_of(s) is not None
        }
        files = {file_uri(rid, rec.path) for rec in records.values() if rec.graph_subjects}
        resource = _resource_subject(rid)
        contains_orphans = [
            (resource, UKO + "contains", o)
            for _s, p, o in self._ix.graph.get_triples(resource, scope=frozenset({rid})).triples
            if p == UKO + "contains" and o not in files
        ]
        if subject_orphans or contains_orphans:
            self._ix.graph.upsert(
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


def _dirty_key(resource_id: str) -> str:
    return f"dirty:{resource_id}"


def _resource_subject(resource_id: str) -> str:
    return resource_uri(resource_id)


def _contains(resource_id: str, path: str) -> list[WriteTriple]:
    return [(_resource_subject(resource_id), UKO + "contains", file_uri(resource_id, path))]
