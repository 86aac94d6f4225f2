"""Per-resource graph files: a marshal snapshot plus an append-only change log.

Layout under the store's root::

    format                 "acms-graph-store 4": the layout below
    lock                   flock'ed by writers so processes write one at a time
    graphs/<ULID>.graph    one file per resource with a non-empty graph
    graphs/<ULID>.subjects its subject index (optional: see below)

A ``.graph`` file is a 24-byte header (magic, 16 random bytes naming this
file) followed by records, each ``kind length crc32 payload``:

- ``S`` records first (at least one): the whole graph, ``marshal`` of
  ``{subject: {(predicate, object), ...}}`` (an object is an IRI ``str`` or a
  literal ``(lexical, datatype IRI or None)``), in chunks of at most
  :data:`SNAPSHOT_SUBJECTS` subjects (disjoint, as written; a reader takes
  the union should two share one), so that no step of reading or writing a
  file needs more than one chunk's objects at once;
- then any number of ``L`` and ``C`` records, one per committed write.  An
  ``L`` record is ``marshal`` of the ``(add?, s, p, o)`` operations that
  changed the graph (written by a process that holds the graph); a ``C``
  record is ``marshal`` of ``(subjects dropped, triples removed, {subject:
  [(predicate, object)]} added)``, applied in that order (written by a
  process that does not hold the graph: an indexer appends its changes
  without loading the resource's graph, see :class:`WriteState`).  A ``C``
  record's added edges are a list per subject, without repeats: ``marshal``
  writes a set ~4x slower than a list (it sorts the encoded members, so
  that its output is deterministic), and an indexing writer spent ~1 s of
  the standard library's run there; a record of format 3 has sets, and
  readers take either.

Why this shape (figures in ``benchmarks/bench_graph_store.py``):

- Loading is ``marshal.loads``, which builds the in-memory structure in C
  (with the cyclic GC paused).  On the standard library's graph (369k
  triples) it took 0.22x the time of parsing N-Triples through a Python
  regex, 0.64x its peak memory and 0.27x its file size; pickle took 0.36x
  (and can run code when loading), SQLite rows 0.57x.  ``marshal`` builds
  only plain values, but like pickle it is not meant for untrusted bytes:
  these files are written by this module only, and a CRC per record turns
  torn or damaged bytes into "not committed" or :class:`IndexUnavailableError`.
- A write appends one record with one ``write()`` and fsyncs, so it costs
  about the change, not the resource.  Once the log outgrows the snapshot
  (a writer holding the graph), or more than a third of the triples written
  are dead (a writer that does not: :class:`WriteState` counts them), a
  fresh file (snapshot only) replaces the old one (compaction).  A writer
  that does not hold the graph compacts reading one record at a time
  (:meth:`GraphStore.compact`), so it never holds the graph either.
  Appending only new triples never compacts: indexing a resource from
  scratch writes its graph once and never holds all of it.
- Crash safety: a new file is written to a temporary name, fsynced and
  renamed over the old one; a record whose length or CRC does not check out
  (a writer killed mid-append) ends the committed part, is ignored by
  readers and cut off by the next writer.  Every state on disk is the last
  commit of each resource.
- Change detection is one ``stat`` per resource: inode, size and mtime
  change on every append, truncation and replacement.  A file written in
  the last :data:`_RACY_NS` is "racily clean" (git's term): its stat may not
  differ from the next write's within one timestamp tick, or a freed inode
  may be reused by a new file of the same size, so it is checked by its
  header's random name and its tail instead of by its stat.

Reading by subject (:class:`SubjectReader`): a question about a few
subjects (``get_triples``, a walk out of a file's symbols) need not load the
whole graph (0.6 s for the standard library's).  A ``.subjects`` file maps
each subject's 64-bit key (:func:`subject_key`) to the offsets of the
records that change it, each IRI's key, alone and with a predicate
(:func:`object_key`, :func:`pair_key`), and each literal of a
:data:`LITERAL_KEYED` predicate with it (:func:`literal_key`), to those of
the records that add an edge to it, for the records up to the length it
*covers*; it
names its graph file by that file's 16 random bytes.  A reader decodes the
records of the subjects it is asked about, plus every record past the
covered length.  The index is advisory: written after the graph file
without fsync (atomically renamed), ignored unless whole (CRC), of this
very file (its name) and covering no more than the file holds, and then the
graph is loaded as before.  Writers rewrite it with each new file (creation,
compaction) and after appends once the uncovered part exceeds a quarter of
the covered part and 64 KB, from the subjects they just wrote (records
appended meanwhile by another process are decoded), so a write costs
amortised O(change).  A store written by earlier code gets its indexes with
the next change to each resource (or ``acms reindex --rebuild``).

Nothing here knows about scope, SPARQL or traversal: that is the adapter's
(:mod:`.rdflib_graph`).
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import itertools
import marshal
import os
import struct
import sys
import tempfile
import time
import weakref
import zlib
from array import array
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from cleveragents._collector import paused_collector
from cleveragents._logging import get_logger
from cleveragents.domain.models.acms.backends import Triple
from cleveragents.domain.models.acms.errors import REBUILD_HINT, IndexUnavailableError
from cleveragents.domain.models.acms.uko import PREDICATES
from cleveragents.domain.models.acms.ulids import is_ulid

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

__all__ = [
    "Change",
    "Cursor",
    "Edge",
    "GraphStore",
    "Obj",
    "Op",
    "Readable",
    "ResourceGraph",
    "SubjectReader",
    "UnreadableRecord",
    "WriteState",
    "object_key",
    "pair_key",
    "sorted_edges",
    "subject_key",
    "term_str",
]

_log = get_logger("cleveragents.acms.graph_store")

# An object is an IRI (``str``) or a literal (lexical form, datatype IRI or None).
Obj = str | tuple[str, str | None]
Edge = tuple[str, Obj]  # (predicate, object) of one subject
Op = tuple[bool, str, str, Obj]  # (add?, subject, predicate, object)
# (subjects whose triples go, single triples that go, triples added by
# subject): a writer's change holds sets, a decoded ``C`` record lists (or
# sets, if format 3 wrote it); the edges of a subject never repeat.
Change = tuple[list[str], list[tuple[str, str, Obj]], Mapping[str, Collection[Edge]]]
_Key = tuple[int, int, int]  # (inode, size, mtime_ns)

FORMAT = b"acms-graph-store 4\n"
# Version 2 had no ``C`` records and one snapshot record, version 3 sets in
# its ``C`` records: each a subset of 4, so such a store is upgraded by
# rewriting this file alone.  The version moves so that older code refuses
# the store rather than misread it (version 2 code would take a ``C`` record
# for a torn tail and cut it; version 3 code would take a list of edges for
# a set).
_UPGRADABLE = (b"acms-graph-store 2\n", b"acms-graph-store 3\n")
_SUFFIX = ".graph"
_MAGIC = b"ACMSGRF\x02"
_HEADER = len(_MAGIC) + 16
_RECORD = struct.Struct("<cII")  # kind, payload length, crc32
_SNAPSHOT, _LOG, _CHANGE = b"S", b"L", b"C"
_KINDS = (_SNAPSHOT, _LOG, _CHANGE)
_MARSHAL_VERSION = 4

# Fold the log into a new snapshot once it is larger than the snapshot and this.
COMPACT_MIN_BYTES = 1 << 15
# Subjects per snapshot chunk (about 10 triples each in a code graph).
SNAPSHOT_SUBJECTS = 4096
# A file modified this recently is checked by content, not by its stat
# (coarse timestamps: ext4 and tmpfs tick every few ms, some file systems 1-2 s).
_RACY_NS = 2_000_000_000

# The subject index beside a graph file (see the module docstring).
_INDEX_SUFFIX = ".subjects"
_INDEX_MAGIC = b"ACMSSIX\x03"  # 3: literal keys (2: no literal keys; 1: no pair keys)
# Still read: an index of version 2 answers all but literal lookups (those
# load the graph) until the file's next index rewrite makes it version 3.
_INDEX_MAGIC_2 = b"ACMSSIX\x02"
_INDEX_HEAD = struct.Struct("<8s16sQQ")  # magic, the graph file's name, covered, entries
_INDEX_CRC = struct.Struct("<I")
# Rewrite an index once the bytes it does not cover exceed both this share
# of those it does and INDEX_MIN_TAIL: a write costs amortised O(change), and
# a reader decodes at most that much beyond what the index names.
INDEX_TAIL_SHARE = 4
INDEX_MIN_TAIL = 1 << 16
# Entries of the old index an index rewrite reads and merges at a time.
INDEX_MERGE_CHUNK = 1 << 16
# Walks backwards along a predicate that test a record's subjects one by one
# before it builds its map of incoming edges.
_RECORD_SCANS = 8
# Subjects and IRIs whose edges a reader remembers.
_READER_SUBJECTS = 50_000


# ---------------------------------------------------------------- graphs


def term_str(o: Obj) -> str:
    return o if isinstance(o, str) else o[0]


def _edge_pairs(s: str, edges: Iterable[Edge]) -> Iterator[tuple[Triple, bool]]:
    """``s``'s edges as triples of strings, each with whether it points to an IRI."""
    for p, o in edges:
        yield (s, p, term_str(o)), isinstance(o, str)


def sorted_edges(pairs: Iterable[tuple[Triple, bool]]) -> tuple[list[Triple], list[str]]:
    """Triples sorted, each once; the IRIs they point to in the same order."""
    triples: list[Triple] = []
    targets: list[str] = []
    for triple, iri in sorted(pairs):
        if not triples or triples[-1] != triple:
            triples.append(triple)
        if iri:
            targets.append(triple[2])
    return triples, targets


_NO_PAIRS: AbstractSet[tuple[str, str]] = frozenset()
_NO_COUNTS: Mapping[str, int] = MappingProxyType({})


class ResourceGraph:
    """One resource's triples as strings: subject -> {(predicate, object)}."""

    __slots__ = ("by_predicate", "by_subject", "edges", "foreign", "incoming", "size")

    def __init__(self, by_subject: dict[str, set[Edge]] | None = None) -> None:
        self.by_subject: dict[str, set[Edge]] = {} if by_subject is None else by_subject
        # subject -> (its triples as strings, sorted; the IRIs it points to)
        self.edges: dict[str, tuple[list[Triple], list[str]]] = {}
        # Writes are validated, so a graph names no other resource; kept for
        # the adapter's scope filter should one ever do.
        self.foreign = False
        self.size = sum(map(len, self.by_subject.values()))
        # IRI object -> {(subject, predicate)}, and predicate -> {subject:
        # its number of such edges}: built on first use (a walk backwards, a
        # SPARQL query; see graph_view), then kept up to date by add/remove,
        # each in O(1) (a subject may have thousands of edges).
        self.incoming: dict[str, set[tuple[str, str]]] | None = None
        self.by_predicate: dict[str, dict[str, int]] | None = None

    def weight(self) -> int:
        """This graph's memory in triples' worth, for a cache budget: its
        triples, plus its indexes once built (on the stdlib's graph, 216 MB
        of triples beside 18 MB for the predicate index and 67 MB for the
        incoming edges: a tenth and three tenths of a triple each)."""
        weight = self.size
        if self.by_predicate is not None:
            weight += self.size // 10
        if self.incoming is not None:
            weight += self.size * 3 // 10
        return weight

    def build_indexes(self) -> None:
        """Build the predicate and incoming-edge indexes now (they are kept
        up to date from then on)."""
        self._by_predicate()
        self._incoming()

    def _by_predicate(self) -> dict[str, dict[str, int]]:
        if self.by_predicate is None:
            by_predicate: dict[str, dict[str, int]] = {}
            for s, edges in self.by_subject.items():
                for pred, _ in edges:
                    counts = by_predicate.get(pred)
                    if counts is None:
                        by_predicate[pred] = {s: 1}
                    else:
                        counts[s] = counts.get(s, 0) + 1
            self.by_predicate = by_predicate
        return self.by_predicate

    def _incoming(self) -> dict[str, set[tuple[str, str]]]:
        if self.incoming is None:
            incoming: dict[str, set[tuple[str, str]]] = {}
            for s, edges in self.by_subject.items():
                for p, obj in edges:
                    if isinstance(obj, str):
                        incoming.setdefault(obj, set()).add((s, p))
            self.incoming = incoming
        return self.incoming

    def subjects_with(self, p: str) -> Iterable[str]:
        """The subjects with at least one edge of predicate ``p``."""
        return self._by_predicate().get(p, _NO_COUNTS).keys()

    def incoming_of(
        self, o: str, predicates: AbstractSet[str] | None = None
    ) -> AbstractSet[tuple[str, str]]:
        """The (subject, predicate) pairs whose object is the IRI ``o`` (and
        whose predicate is one of ``predicates``, if given)."""
        found = self._incoming().get(o, _NO_PAIRS)
        if predicates is None:
            return found
        return {(s, p) for s, p in found if p in predicates}

    def add(self, s: str, p: str, o: Obj) -> bool:
        edges = self.by_subject.get(s)
        if edges is None:
            edges = self.by_subject[s] = set()
        elif (p, o) in edges:
            return False
        edges.add((p, o))
        self.size += 1
        self.edges.pop(s, None)
        if self.incoming is not None and isinstance(o, str):
            self.incoming.setdefault(o, set()).add((s, p))
        if self.by_predicate is not None:
            counts = self.by_predicate.setdefault(p, {})
            counts[s] = counts.get(s, 0) + 1
        return True

    def remove(self, s: str, p: str, o: Obj) -> bool:
        edges = self.by_subject.get(s)
        if edges is None or (p, o) not in edges:
            return False
        edges.remove((p, o))
        if not edges:
            del self.by_subject[s]
        self.size -= 1
        self.edges.pop(s, None)
        if self.incoming is not None and isinstance(o, str):
            pairs = self.incoming.get(o)
            if pairs is not None:
                pairs.discard((s, p))
                if not pairs:
                    del self.incoming[o]
        if self.by_predicate is not None:
            counts = self.by_predicate.get(p)
            if counts is not None and s in counts:
                if counts[s] > 1:
                    counts[s] -= 1
                else:
                    del counts[s]
                    if not counts:
                        del self.by_predicate[p]
        return True

    def apply(self, ops: Iterable[Op]) -> list[Op]:
        """Apply ``ops`` in order; the ones that changed the graph."""
        done: list[Op] = []
        add, remove = self.add, self.remove
        for op in ops:
            if add(op[1], op[2], op[3]) if op[0] else remove(op[1], op[2], op[3]):
                done.append(op)
        return done

    def apply_change(self, change: Change, done: list[Op] | None = None) -> None:
        """Apply a ``C`` record's change; append the operations that changed
        the graph to ``done`` (None: nobody follows them, e.g. a fresh load)."""
        drops, removes, adds = change
        remove = self.remove
        for s in drops:
            for p, o in list(self.by_subject.get(s, ())):
                remove(s, p, o)
                if done is not None:
                    done.append((False, s, p, o))
        for s, p, o in removes:
            if remove(s, p, o) and done is not None:
                done.append((False, s, p, o))
        add = self.add
        for s, edges in adds.items():
            if (
                done is None
                and self.incoming is None
                and self.by_predicate is None
                and s not in self.by_subject
                and edges
            ):
                # A fresh load: adopt a loaded set as it is (no copy).
                kept = self.by_subject[s] = edges if isinstance(edges, set) else set(edges)
                self.size += len(kept)
                self.edges.pop(s, None)
                continue
            for p, o in edges:
                if add(s, p, o) and done is not None:
                    done.append((True, s, p, o))

    def edges_of(self, s: str) -> tuple[list[Triple], list[str]]:
        cached = self.edges.get(s)
        if cached is None:
            cached = sorted_edges(self.edges_pairs(s))
            self.edges[s] = cached
        return cached

    def edges_pairs(self, s: str) -> Iterator[tuple[Triple, bool]]:
        return _edge_pairs(s, self.by_subject.get(s, ()))

    def triples(self) -> Iterator[tuple[str, str, Obj]]:
        for s, edges in self.by_subject.items():
            for p, o in edges:
                yield s, p, o


# ---------------------------------------------------------------- records


def _record(kind: bytes, payload: bytes) -> bytes:
    head = _RECORD.pack(kind, len(payload), 0)[:5]
    crc = zlib.crc32(payload, zlib.crc32(head))
    return _RECORD.pack(kind, len(payload), crc) + payload


def _as_written(
    change: Change,
) -> tuple[list[str], list[tuple[str, str, Obj]], dict[str, list[Edge]]]:
    """What a ``C`` record holds for ``change``: its added edges as a list per
    subject (``marshal`` writes a set ~4x slower, see the module doc)."""
    drops, removes, adds = change
    return drops, removes, {s: list(edges) for s, edges in adds.items()}


def _next_record(data: bytes | memoryview, pos: int) -> tuple[bytes, memoryview, int] | None:
    """(kind, payload, end) of the record at ``pos``; ``None`` if it is not whole."""
    if len(data) - pos < _RECORD.size:
        return None
    kind, length, crc = _RECORD.unpack_from(data, pos)
    start = pos + _RECORD.size
    end = start + length
    if kind not in _KINDS or end > len(data):
        return None
    view = memoryview(data)
    if zlib.crc32(view[start:end], zlib.crc32(view[pos : pos + 5])) != crc:
        return None
    return kind, view[start:end], end


def _loads(payload: memoryview, want: type, path: Path) -> object:
    try:
        # marshal.loads allocates one container per edge; with the cyclic GC
        # on, the collections it triggers cost 3x the load itself.
        with paused_collector():
            value = marshal.loads(payload)
    except (ValueError, EOFError, TypeError) as exc:
        raise IndexUnavailableError(f"corrupt graph file {path}: {exc}") from exc
    if not isinstance(value, want):
        raise IndexUnavailableError(f"corrupt graph file {path}: unexpected record")
    return value


def _snapshot_chunk(payload: memoryview, path: Path) -> dict[str, set[Edge]]:
    """A snapshot record's edges by subject, each a set.  This code writes
    sets; a host of format 3 still running after an upgrade may have
    compacted a format 4 change record's lists into a snapshot as they were,
    which it would then fail to load, not this code."""
    chunk = cast(dict[str, set[Edge]], _loads(payload, dict, path))
    for s, edges in chunk.items():
        if edges.__class__ is not set:
            chunk[s] = set(edges)
    return chunk


def _decode(kind: bytes, payload: memoryview, path: Path) -> object:
    """An ``L`` record's operations or a ``C`` record's change."""
    if kind == _LOG:
        return _loads(payload, list, path)
    value = _loads(payload, tuple, path)
    if (
        len(cast(tuple[object, ...], value)) != 3
        or not isinstance(value[0], list)  # type: ignore[index]
        or not isinstance(value[1], list)  # type: ignore[index]
        or not isinstance(value[2], dict)  # type: ignore[index]
    ):
        raise IndexUnavailableError(f"corrupt graph file {path}: unexpected change record")
    return value


def _decode_any(kind: bytes, payload: memoryview, path: Path) -> object:
    """Any record's value: a snapshot chunk's dict, a log's or change's."""
    return _loads(payload, dict, path) if kind == _SNAPSHOT else _decode(kind, payload, path)


def _apply_records(
    graph: ResourceGraph, records: Iterable[tuple[bytes, object]], done: list[Op] | None
) -> None:
    for kind, value in records:
        if kind == _LOG:
            changed = graph.apply(cast(list[Op], value))
            if done is not None:
                done.extend(changed)
        else:
            graph.apply_change(cast(Change, value), done)


# ---------------------------------------------------------------- subject index


# CRC-32 and Adler-32 start values: a subject's key and an object's differ.
# A change to how keys are made needs a new _INDEX_MAGIC (old indexes would
# still check out, and name no record for any key).
_SUBJECT_SEEDS = (0, 1)
_OBJECT_SEEDS = (0x0B1EC7, 0x0B1E)
_PAIR_SEEDS = (0x9A12, 0x9A1)
_PAIR_GLUE = " "  # between a pair's predicate and object (no IRI holds a space)
_LITERAL_SEEDS = (0x11E2A1, 0x11E2)
#: The predicates whose literal objects are keyed too (by :func:`literal_key`):
#: a symbol's name and a file's path, what a question looks up by value
#: (``?s uko:name "Graph"``).  Not line numbers, signatures or docs (68% of
#: a code graph's literal edges: a larger index for lookups no one makes).
LITERAL_KEYED = frozenset({PREDICATES["name"], PREDICATES["path"]})
# A walk backwards along at most this many predicates looks up each one's
# pair key; along more (or any), the object's key.
_PAIR_PROBES = 16


def _key64(value: str, seeds: tuple[int, int]) -> int:
    data = value.encode("utf-8", "surrogatepass")
    return (zlib.crc32(data, seeds[0]) << 32) | zlib.adler32(data, seeds[1])


def subject_key(s: str) -> int:
    """A subject's 64-bit key in a subject index: the same in every process
    (a collision costs a reader a record it did not need, never an answer)."""
    return _key64(s, _SUBJECT_SEEDS)


def object_key(o: str) -> int:
    """An IRI object's key in a subject index (for walks backwards)."""
    return _key64(o, _OBJECT_SEEDS)


def pair_key(p: str, o: str) -> int:
    """The key of edges of predicate ``p`` to the IRI ``o`` (for walks
    backwards along given predicates: ``uko:named`` edges to a name node,
    not the thousands of ``uko:calls`` edges to it)."""
    return _key64(p + _PAIR_GLUE + o, _PAIR_SEEDS)


def literal_key(p: str, o: tuple[str, str | None]) -> int:
    """The key of edges of predicate ``p`` (one of :data:`LITERAL_KEYED`)
    to the literal ``o`` (lexical form, datatype)."""
    return _key64(p + "\x00" + o[0] + "\x00" + (o[1] or ""), _LITERAL_SEEDS)


def _record_keys(kind: bytes, value: object) -> set[int]:
    """The index keys of a decoded record: the subjects it changes, the
    IRIs it adds edges to, alone and with each edge's predicate, and the
    literals it adds edges of a :data:`LITERAL_KEYED` predicate to.

    The same keys as :func:`subject_key`, :func:`object_key` and
    :func:`pair_key` give, computed with each IRI encoded once and a pair's
    sums continued from its predicate's (CRC-32 and Adler-32 are streaming
    sums): this runs on every graph write (13% faster than calling them)."""
    subjects: set[str] = set()
    along: dict[str, set[str]] = {}  # IRI object -> predicates of edges to it
    literals: set[tuple[str, tuple[str, str | None]]] = set()

    def edges_to(edges: Iterable[Edge]) -> None:
        for p, o in edges:
            if o.__class__ is str:
                found = along.get(o)
                if found is None:
                    along[o] = {p}
                else:
                    found.add(p)
            elif p in LITERAL_KEYED:
                literals.add((p, cast(tuple[str, str | None], o)))

    if kind == _SNAPSHOT:
        for s, chunk_edges in cast(dict[str, set[Edge]], value).items():
            subjects.add(s)
            edges_to(chunk_edges)
    elif kind == _LOG:
        for add, s, p, o in cast(list[Op], value):
            subjects.add(s)
            if add:
                edges_to(((p, o),))
    else:
        drops, removes, adds = cast(Change, value)
        subjects.update(drops)
        subjects.update(t[0] for t in removes)
        for s, edges in adds.items():
            subjects.add(s)
            edges_to(edges)
    keys = {subject_key(s) for s in subjects}
    keys.update(literal_key(p, o) for p, o in literals)
    crc32, adler32 = zlib.crc32, zlib.adler32
    prefixes: dict[str, tuple[int, int]] = {}
    for o, predicates in along.items():
        data = o.encode("utf-8", "surrogatepass")
        keys.add((crc32(data, _OBJECT_SEEDS[0]) << 32) | adler32(data, _OBJECT_SEEDS[1]))
        for p in predicates:
            prefix = prefixes.get(p)
            if prefix is None:
                head = (p + _PAIR_GLUE).encode("utf-8", "surrogatepass")
                prefix = prefixes[p] = (crc32(head, _PAIR_SEEDS[0]), adler32(head, _PAIR_SEEDS[1]))
            keys.add((crc32(data, prefix[0]) << 32) | adler32(data, prefix[1]))
    return keys


def _tail_allowed(covered: int) -> int:
    """How many bytes past what an index covers it may leave to readers."""
    return max(covered // INDEX_TAIL_SHARE, INDEX_MIN_TAIL)


class _Entries:
    """Index entries, (key, record offset), in two ``uint64`` arrays (16
    bytes an entry; as tuples of ints they took ~120)."""

    __slots__ = ("keys", "offsets")

    def __init__(self, keys: array[int] | None = None, offsets: array[int] | None = None) -> None:
        self.keys = array("Q") if keys is None else keys
        self.offsets = array("Q") if offsets is None else offsets

    def add(self, keys: Iterable[int], offset: int) -> None:
        before = len(self.keys)
        self.keys.extend(keys)
        self.offsets.extend([offset] * (len(self.keys) - before))


class _OldIndex(NamedTuple):
    """An index :func:`_open_index` checked, its descriptor open."""

    fd: int
    covered: int
    entries: int


def _index_file(
    nonce: bytes,
    covered: int,
    parts: Iterable[_Entries],
    old: _OldIndex | None = None,
) -> Iterator[Buffer]:
    """An index file's pieces, to write in order: its header, the keys
    column, the offsets column (entries sorted by key, then offset), the CRC.

    ``old``: an index checked by :func:`_open_index`, whose entries are
    merged in; every offset in ``parts`` must follow all of
    its offsets (they name records appended since).  Its columns are read
    and merged :data:`INDEX_MERGE_CHUNK` entries at a time, twice (keys, then
    offsets), never held whole: a rewrite holds the new entries and one
    chunk, not the resource's index (reading, copying and sorting all of it
    took 48 bytes an entry: the indexing peak on the standard library).
    """
    import numpy as np  # only writers get here, and they have numpy loaded

    empty = np.zeros(0, dtype=np.uint64)
    parts = list(parts)
    keys = np.concatenate([empty, *(np.frombuffer(p.keys, dtype=np.uint64) for p in parts)])
    offsets = np.concatenate([empty, *(np.frombuffer(p.offsets, dtype=np.uint64) for p in parts)])
    order = np.lexsort((offsets, keys))
    keys, offsets = keys[order], offsets[order]
    del order
    fd, count = (-1, 0) if old is None else (old.fd, old.entries)
    head = _INDEX_HEAD.pack(_INDEX_MAGIC, nonce, covered, count + len(keys))
    crc = zlib.crc32(head)
    yield head

    def column(at: int, start: int, stop: int) -> npt.NDArray[np.uint64]:
        data = _pread_all(fd, 8 * (stop - start), at + 8 * start)
        if len(data) != 8 * (stop - start):
            raise OSError("the subject index being merged is shorter than its header says")
        return np.frombuffer(data, dtype="<u8").astype(np.uint64, copy=False)

    # Old entry j is followed by the new entries whose keys are below old
    # entry j+1's (ties: old first, its offsets being smaller); each chunk
    # takes those below the next chunk's first key.
    # Where the new entries went, for the chunks that took some (the
    # offsets column takes them at the same places).
    steps: list[tuple[int, int, int, npt.NDArray[np.intp]]] = []
    low = 0
    for start in range(0, count, INDEX_MERGE_CHUNK):
        stop = min(start + INDEX_MERGE_CHUNK, count)
        chunk = column(_INDEX_HEAD.size, start, min(stop + 1, count))
        high = len(keys)
        if stop < count:
            high = int(np.searchsorted(keys, chunk[-1], "left"))
            chunk = chunk[:-1]
        if high > low:
            at = np.searchsorted(chunk, keys[low:high], "right")
            steps.append((start, low, high, at))
            chunk = np.insert(chunk, at, keys[low:high])
        piece = chunk.astype("<u8", copy=False).data
        crc = zlib.crc32(piece, crc)
        yield piece
        low = high
    if not count:
        piece = keys.astype("<u8", copy=False).data
        crc = zlib.crc32(piece, crc)
        yield piece
    taken = iter(steps)
    step = next(taken, None)
    for start in range(0, count, INDEX_MERGE_CHUNK):
        chunk = column(_INDEX_HEAD.size + 8 * count, start, min(start + INDEX_MERGE_CHUNK, count))
        if step is not None and step[0] == start:
            _, low, high, at = step
            chunk = np.insert(chunk, at, offsets[low:high])
            step = next(taken, None)
        piece = chunk.astype("<u8", copy=False).data
        crc = zlib.crc32(piece, crc)
        yield piece
    if not count:
        piece = offsets.astype("<u8", copy=False).data
        crc = zlib.crc32(piece, crc)
        yield piece
    yield _INDEX_CRC.pack(crc)


def _open_index(path: Path, nonce: bytes, size: int) -> _OldIndex | None:
    """The index at ``path`` if it is a whole,
    undamaged version 3 index of that graph file (now ``size`` bytes; its
    CRC checked reading :data:`INDEX_MERGE_CHUNK` entries at a time), its
    descriptor open for the caller to close; else ``None``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        found = _index_head(_pread_all(fd, _INDEX_HEAD.size, 0), nonce, size)
        if found is not None and found[2]:
            covered, count, _ = found
            end = _INDEX_HEAD.size + 16 * count
            if os.fstat(fd).st_size == end + _INDEX_CRC.size:
                crc, step = 0, 16 * INDEX_MERGE_CHUNK
                for pos in range(0, end, step):
                    crc = zlib.crc32(_pread_all(fd, min(step, end - pos), pos), crc)
                if crc == int.from_bytes(_pread_all(fd, _INDEX_CRC.size, end), "little"):
                    return _OldIndex(fd, covered, count)
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def _index_head(data: bytes, nonce: bytes, size: int) -> tuple[int, int, bool] | None:
    """(covered, entries, whether it keys literals) of an index's header if
    it belongs to the graph file named ``nonce`` (now ``size`` bytes long),
    else ``None``."""
    if len(data) < _INDEX_HEAD.size:
        return None
    magic, named, covered, count = _INDEX_HEAD.unpack_from(data)
    if magic not in (_INDEX_MAGIC, _INDEX_MAGIC_2) or named != nonce:
        return None
    if not _HEADER <= covered <= size:
        return None
    return covered, count, magic == _INDEX_MAGIC


def _index_parts(
    data: bytes, nonce: bytes, size: int
) -> tuple[int, memoryview, memoryview, bool] | None:
    """(covered, keys, offsets, whether it keys literals) of a whole,
    undamaged index of that file; the columns are views of ``data``,
    little-endian ``uint64`` each."""
    head = _index_head(data, nonce, size)
    if head is None:
        return None
    covered, count, literals = head
    end = _INDEX_HEAD.size + 16 * count
    view = memoryview(data)
    if len(data) != end + _INDEX_CRC.size or zlib.crc32(view[:end]) != int.from_bytes(
        view[end:], "little"
    ):
        return None
    middle = _INDEX_HEAD.size + 8 * count
    return covered, view[_INDEX_HEAD.size : middle], view[middle:end], literals


def _index_arrays(
    data: bytes, nonce: bytes, size: int
) -> tuple[int, array[int], array[int], bool] | None:
    """(covered, keys, offsets, whether it keys literals) of a whole,
    undamaged index of that file."""
    found = _index_parts(data, nonce, size)
    if found is None:
        return None
    covered, key_bytes, offset_bytes, literals = found
    keys, offsets = array("Q"), array("Q")
    keys.frombytes(key_bytes)
    offsets.frombytes(offset_bytes)
    if sys.byteorder != "little":
        keys.byteswap()
        offsets.byteswap()
    return covered, keys, offsets, literals


def _index_ends(path: Path) -> bytes | None:
    """An index file's header and the CRC after its entries (see
    :class:`_SubjectIndexFile`); ``None`` if missing or not that shape."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        head = _pread_all(fd, _INDEX_HEAD.size, 0)
        if len(head) < _INDEX_HEAD.size:
            return None
        end = _INDEX_HEAD.size + 16 * _INDEX_HEAD.unpack(head)[3]
        if os.fstat(fd).st_size != end + _INDEX_CRC.size:
            return None
        return head + _pread_all(fd, _INDEX_CRC.size, end)
    finally:
        os.close(fd)


def _read_small(path: Path, size: int | None = None) -> bytes | None:
    """A file's first ``size`` bytes (``None``: all); ``None`` if it is missing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        return _pread_all(fd, size, 0)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class _SubjectIndexFile:
    """A graph file's subject index as a reader holds it: its header (the
    graph file it names, what it covers, how many entries) and the CRC of
    its entries, together ``ends`` (equal ends: equal entries), and its
    entries sorted by key (never changed once read)."""

    ends: bytes
    covered: int
    keys: array[int]
    offsets: array[int]
    literals: bool


@dataclass(slots=True)
class _Unindexed:
    """Records this process appended to one graph file since its index was
    written: contiguous, from ``start`` to ``end``, with their subjects' keys."""

    nonce: bytes
    start: int
    end: int
    entries: _Entries


# ---------------------------------------------------------------- files


def _key(st: os.stat_result) -> _Key:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _racy(st: os.stat_result) -> bool:
    return st.st_mtime_ns + _RACY_NS > time.time_ns()


def _unreadable(path: Path, exc: OSError) -> IndexUnavailableError:
    """The error for a resource's graph file that cannot be read (a directory
    in its place, permissions, EIO): naming the file and the repair."""
    return IndexUnavailableError(
        f"cannot read the graph file {path}: {exc.strerror or exc}" + REBUILD_HINT
    )


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _continues(cursor: Cursor | None, st: os.stat_result, header: bytes) -> bool:
    """Whether the open file (``st``, its first ``_HEADER`` bytes) is the one
    ``cursor`` read, grown or not: the same inode and nonce, and not cut below
    the cursor.  Then only the records after ``cursor.offset`` are new
    (appends only add; a cut only removes torn bytes)."""
    return (
        cursor is not None
        and cursor.ino == st.st_ino
        and cursor.nonce == header[len(_MAGIC) :]
        and st.st_size >= cursor.offset
    )


def _pread_all(fd: int, size: int | None, offset: int) -> bytes:
    """``size`` bytes (``None``: all) from ``offset``; fewer only at the end.

    Raw descriptor reads: a Python file object would raise an ``open``
    audit event per read (the SPARQL tests watch those).
    """
    chunks: list[bytes] = []
    want = size
    while want is None or want > 0:
        chunk = os.pread(fd, 1 << 20 if want is None else want, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        if want is not None:
            want -= len(chunk)
    return b"".join(chunks)


def _pread_record(fd: int, pos: int) -> tuple[bytes, bytes] | None:
    """(kind, payload) of the record at ``pos`` of an open file; ``None`` if
    it is not whole (short, an unknown kind, or a CRC that does not check out)."""
    head = _pread_all(fd, _RECORD.size, pos)
    if len(head) < _RECORD.size:
        return None
    kind, length, crc = _RECORD.unpack(head)
    if kind not in _KINDS:
        return None
    payload = _pread_all(fd, length, pos + _RECORD.size)
    if len(payload) < length or zlib.crc32(payload, zlib.crc32(head[:5])) != crc:
        return None
    return kind, payload


def _write_new(path: Path, pieces: Iterable[Buffer]) -> os.stat_result:
    """Write ``pieces`` in order as ``path`` atomically and durably; its stat.
    ``pieces`` may be a generator: only one piece need be in memory."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            for piece in pieces:
                fh.write(piece)
            fh.flush()
            os.fsync(fh.fileno())
            st = os.fstat(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return st


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[tuple[int, os.stat_result, bytes] | None]:
    """The graph file at ``path``, open for reading: its descriptor, stat and
    checked header; ``None`` if there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        yield None
        return
    try:
        st = os.fstat(fd)
        header = _pread_all(fd, _HEADER, 0)
        if len(header) < _HEADER or header[: len(_MAGIC)] != _MAGIC:
            raise IndexUnavailableError(f"corrupt graph file {path}: not a graph file")
        yield fd, st, header
    finally:
        os.close(fd)


def _write_advisory(path: Path, pieces: Iterable[Buffer]) -> None:
    """Replace ``path`` by ``pieces`` atomically, without fsync: for a file
    that readers check and can do without (a crash may leave it short or
    empty, never half old and half new)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            for piece in pieces:
                fh.write(piece)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _append(path: Path, ino: int, data: bytes) -> os.stat_result:
    """Append ``data`` to ``path`` (inode ``ino``) with one ``write()``, fsync; its stat."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
    try:
        if os.fstat(fd).st_ino != ino:
            raise OSError(f"{path} was replaced under the writer lock")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        return os.fstat(fd)
    finally:
        os.close(fd)


@dataclass(slots=True)
class Cursor:
    """What a process last read of one resource's file."""

    ino: int
    nonce: bytes
    snapshot_end: int  # where the log starts
    offset: int  # end of the last whole record read
    key: _Key  # the file's stat when it was read
    racy: bool  # modified too recently for ``key`` to prove it unchanged

    def log_bytes(self) -> int:
        return self.offset - self.snapshot_end


@dataclass(slots=True)
class WriteState:
    """What a writer that does not hold a resource's graph knows of its file.

    ``counts`` maps ``hash(subject)`` to the subject's triples (a hash, not
    the IRI: about a tenth of the memory of the graph's subjects, and only
    the compaction rule reads it, where a collision costs nothing but an
    early or late compaction); ``live`` counts the triples the file holds,
    ``dead`` those its log holds but the graph no longer does.
    ``uncertain`` counts the edges added to a subject that already had some
    without the change removing that edge first: each may have been there
    already (then ``live`` counts it twice), so the graph holds at least
    ``live - uncertain`` triples (a removal of an absent edge errs the
    other way: fewer).
    """

    cursor: Cursor
    counts: dict[int, int]
    live: int = 0
    dead: int = 0
    uncertain: int = 0

    def count(self, change: Change) -> None:
        """Follow ``change`` in the counts."""
        drops, removes, adds = change
        counts = self.counts
        if adds and counts:
            dropped = {hash(s) for s in drops}
            renewed = {(s, p, o) for s, p, o in removes}
            for s, edges in adds.items():
                key = hash(s)
                if key in counts and key not in dropped:
                    self.uncertain += sum(1 for p, o in edges if (s, p, o) not in renewed)
        for s in drops:
            n = counts.pop(hash(s), 0)
            self.live -= n
            self.dead += n
        for s, _p, _o in removes:
            key = hash(s)
            n = counts.get(key, 0)
            if n:
                if n == 1:
                    del counts[key]
                else:
                    counts[key] = n - 1
                self.live -= 1
                self.dead += 1
        for s, edges in adds.items():
            key = hash(s)
            counts[key] = counts.get(key, 0) + len(edges)
            self.live += len(edges)

    def count_ops(self, ops: Iterable[Op]) -> None:
        """Follow an ``L`` record's operations (each one changed the graph)."""
        counts = self.counts
        for add, s, _p, _o in ops:
            key = hash(s)
            if add:
                counts[key] = counts.get(key, 0) + 1
                self.live += 1
            else:
                n = counts.get(key, 0) - 1
                if n > 0:
                    counts[key] = n
                else:
                    counts.pop(key, None)
                self.live -= 1
                self.dead += 1

    def compaction_due(self) -> bool:
        """More than a third of the triples the log wrote are dead."""
        return self.dead * 2 > self.live and self.cursor.log_bytes() > COMPACT_MIN_BYTES


class GraphStore:
    """The files of per-resource graphs under ``root`` (see the module docstring).

    A store in the N-Triples layout of earlier versions is converted when
    opened (the one time opening reads graphs).

    Raises:
        IndexUnavailableError: the store cannot be created or converted.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._graphs = self.root / "graphs"
        self._lock_fd: int | None = None
        self._unindexed: dict[str, _Unindexed] = {}
        self._swept = False
        try:
            self._graphs.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
            self._check_format()
        except IndexUnavailableError:
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise IndexUnavailableError(
                f"cannot open graph store {self.root}: {exc}" + REBUILD_HINT
            ) from exc

    def _check_format(self) -> None:
        path = self.root / "format"
        try:
            found = path.read_bytes()
        except FileNotFoundError:
            with self.writer_lock():
                if not path.exists():
                    if (self.root / "generation").exists():
                        self._convert_legacy()
                    _write_new(path, [FORMAT])
                    # Last: until it is gone, a killed conversion is redone.
                    (self.root / "generation").unlink(missing_ok=True)
            return
        if found in _UPGRADABLE:
            with self.writer_lock():
                if path.read_bytes() in _UPGRADABLE:
                    _write_new(path, [FORMAT])
            return
        if found != FORMAT:
            raise IndexUnavailableError(f"graph store {self.root} has an unknown format {found!r}")

    def _convert_legacy(self) -> None:
        """Rewrite a store of the earlier N-Triples layout in this one, once.

        Each resource's ``.graph`` is written before its ``.nt``/``.log`` go,
        so a conversion killed at any point is redone from what is left.
        """
        from cleveragents.infrastructure.acms.graph_legacy import read_resource

        converted = 0
        for base in sorted(self._graphs.glob("*.nt")):
            rid = base.stem
            if not is_ulid(rid) or rid != rid.upper():
                continue
            try:
                graph = read_resource(base)
            except ValueError as exc:
                raise IndexUnavailableError(f"corrupt graph file {base}: {exc}") from exc
            if graph.size:
                self.replace(rid, graph)
                converted += 1
            base.unlink()
            base.with_suffix(".log").unlink(missing_ok=True)
        for log in self._graphs.glob("*.log"):  # logs without a base: deletion leftovers
            log.unlink()
        _fsync_dir(self._graphs)
        _log.info("graph_store.converted", store=str(self.root), resources=converted)

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def path(self, rid: str) -> Path:
        return self._graphs / f"{rid}{_SUFFIX}"

    def index_path(self, rid: str) -> Path:
        return self._graphs / f"{rid}{_INDEX_SUFFIX}"

    @contextlib.contextmanager
    def writer_lock(self) -> Iterator[None]:
        """Hold the store's writer lock (processes write one at a time)."""
        if self._lock_fd is None:
            raise IndexUnavailableError("the graph store is closed")
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        except OSError as exc:
            raise IndexUnavailableError(f"cannot lock graph store {self.root}: {exc}") from exc
        try:
            if not self._swept:
                self._sweep()
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _sweep(self) -> None:
        """Remove what killed writers left: temporary files, and subject
        indexes of graph files that are gone.  Called under the writer lock
        (no other writer is between a temporary file and its rename), once
        per store handle."""
        self._swept = True
        try:
            with os.scandir(self._graphs) as entries:
                names = [entry.name for entry in entries]
            present = set(names)
            for name in names:
                stale = (name.startswith(".") and name.endswith(".tmp")) or (
                    name.endswith(_INDEX_SUFFIX)
                    and name[: -len(_INDEX_SUFFIX)] + _SUFFIX not in present
                )
                if stale:
                    with contextlib.suppress(FileNotFoundError):
                        (self._graphs / name).unlink()
                    _log.info("graph_store.leftover_removed", file=name)
        except OSError as exc:  # a leftover costs disk space only
            _log.warning("graph_store.sweep_failed", error=str(exc))

    # ------------------------------------------------------------ reading

    def resource_ids(self) -> set[str]:
        """ULIDs with a graph file (each holds a non-empty graph); reads no graph."""
        try:
            with os.scandir(self._graphs) as entries:
                return {
                    stem
                    for entry in entries
                    if entry.name.endswith(_SUFFIX)
                    and is_ulid(stem := entry.name[: -len(_SUFFIX)])
                    and stem == stem.upper()
                }
        except OSError as exc:
            raise IndexUnavailableError(f"cannot read graph store {self.root}: {exc}") from exc

    def refresh(
        self, rid: str, graph: ResourceGraph | None, cursor: Cursor | None
    ) -> tuple[ResourceGraph, Cursor, list[Op] | None] | None:
        """Bring a held graph up to date with its file, or load it.

        Returns ``None`` when the resource has no graph, else the graph (the
        one given, changed in place by the records appended since, or a
        freshly loaded one), its cursor, and the operations that changed the
        given graph (``None``: the graph was loaded afresh).
        """
        path = self.path(rid)
        try:
            if graph is not None and cursor is not None and not cursor.racy:
                try:
                    if _key(os.stat(path, follow_symlinks=False)) == cursor.key:
                        return graph, cursor, []
                except FileNotFoundError:
                    self._check_root()
                    return None
            return self._read(rid, path, graph, cursor)
        except OSError as exc:
            raise _unreadable(self.path(rid), exc) from exc

    def check(self, rid: str) -> bool:
        """Whether the resource has a graph file, checking what a load reads
        first without reading the graph: its header, and that its first
        record is a whole-length snapshot (``acms status``; a load also
        checks every record's CRC).

        Raises:
            IndexUnavailableError: the file is not a graph file or its
                snapshot is cut short; the store cannot be read.
        """
        path = self.path(rid)
        try:
            with _opened(path) as opened:
                if opened is None:
                    self._check_root()
                    return False
                fd, st, _header = opened
                head = _pread_all(fd, _RECORD.size, _HEADER)
        except OSError as exc:
            raise _unreadable(self.path(rid), exc) from exc
        if len(head) == _RECORD.size:
            kind, length, _crc = _RECORD.unpack(head)
            if kind == _SNAPSHOT and _HEADER + _RECORD.size + length <= st.st_size:
                return True
        raise IndexUnavailableError(f"corrupt graph file {path}: no whole snapshot" + REBUILD_HINT)

    def extent(self, rid: str) -> tuple[bytes, int] | None:
        """The resource's graph file's name (its header's 16 random bytes) and
        size, reading neither its records nor its graph; ``None`` without a
        file.

        Raises:
            IndexUnavailableError: not a graph file, or it cannot be read.
        """
        try:
            with _opened(self.path(rid)) as opened:
                if opened is None:
                    return None
                _fd, st, header = opened
                return header[len(_MAGIC) :], st.st_size
        except OSError as exc:
            raise _unreadable(self.path(rid), exc) from exc

    def _check_root(self) -> None:
        """On a resource's missing graph file: no graph, unless the store itself
        is gone (deleted, or moved away under a running process), which
        would otherwise answer every question with nothing."""
        if not os.path.isdir(self.root):
            raise IndexUnavailableError(
                f"the graph index {self.root} has disappeared" + REBUILD_HINT
            )

    def _read(
        self, rid: str, path: Path, graph: ResourceGraph | None, cursor: Cursor | None
    ) -> tuple[ResourceGraph, Cursor, list[Op] | None] | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            self._check_root()
            return None
        try:
            # The stat before the read: an append after it shows as a change next time.
            st = os.fstat(fd)
            header = _pread_all(fd, _HEADER, 0)
            if graph is not None and _continues(cursor, st, header):
                assert cursor is not None  # the same file: see _continues
                done: list[Op] = []
                if st.st_size > cursor.offset:
                    tail = _pread_all(fd, None, cursor.offset)
                    records, length = self._log_records(tail, 0, path)
                    cursor.offset += length
                    _apply_records(graph, records, done)
                cursor.key, cursor.racy = _key(st), _racy(st)
                if done:
                    _log.debug("graph_store.followed", resource=rid, operations=len(done))
                return graph, cursor, done
            data = _pread_all(fd, None, 0)
        finally:
            os.close(fd)
        loaded, fresh = self._parse(data, st, path)
        _log.debug("graph_store.loaded", resource=rid, triples=loaded.size, bytes=len(data))
        return loaded, fresh, None

    def _parse(self, data: bytes, st: os.stat_result, path: Path) -> tuple[ResourceGraph, Cursor]:
        if len(data) < _HEADER or data[: len(_MAGIC)] != _MAGIC:
            raise IndexUnavailableError(f"corrupt graph file {path}: not a graph file")
        first = _next_record(data, _HEADER)
        if first is None or first[0] != _SNAPSHOT:
            raise IndexUnavailableError(
                f"corrupt graph file {path}: no whole snapshot" + REBUILD_HINT
            )
        by_subject = _snapshot_chunk(first[1], path)
        end = first[2]
        while (chunk := _next_record(data, end)) is not None and chunk[0] == _SNAPSHOT:
            more = _snapshot_chunk(chunk[1], path)
            # Chunks are disjoint; should two ever share a subject, its edges
            # are their union, as every other reader of the file takes them
            # (compaction, the subject reader, live_subjects).
            for s in [s for s in more if s in by_subject]:
                more[s] |= by_subject[s]
            by_subject.update(more)
            end = chunk[2]
        graph = ResourceGraph(by_subject)
        records, length = self._log_records(data, end, path)
        _apply_records(graph, records, None)
        cursor = Cursor(
            st.st_ino,
            data[len(_MAGIC) : _HEADER],
            end,
            end + length,
            _key(st),
            _racy(st),
        )
        return graph, cursor

    def _log_records(
        self, data: bytes, pos: int, path: Path
    ) -> tuple[list[tuple[bytes, object]], int]:
        """The ``L`` and ``C`` records whole from ``pos`` (decoded), and their length."""
        records: list[tuple[bytes, object]] = []
        start = pos
        while (found := _next_record(data, pos)) is not None:
            kind, payload, end = found
            if kind == _SNAPSHOT:
                break
            records.append((kind, _decode(kind, payload, path)))
            pos = end
        return records, pos - start

    # ------------------------------------------------------------ writing
    # Callers hold :meth:`writer_lock` and have just refreshed the resource.

    def cut_torn_tail(self, rid: str, cursor: Cursor) -> None:
        """Cut bytes a killed writer left past the last whole record."""
        path = self.path(rid)
        try:
            size = os.stat(path, follow_symlinks=False).st_size
            if size > cursor.offset:
                os.truncate(path, cursor.offset)
                cursor.key = _key(os.stat(path, follow_symlinks=False))
                cursor.racy = True
                _log.warning("graph_store.torn_tail_cut", resource=rid, bytes=size - cursor.offset)
        except OSError as exc:
            raise IndexUnavailableError(f"cannot write graph of {rid}: {exc}") from exc

    def append(self, rid: str, cursor: Cursor, ops: list[Op]) -> None:
        """Append one committed change; on failure the file is as before."""
        self._append_record(
            rid,
            cursor,
            _record(_LOG, marshal.dumps(ops, _MARSHAL_VERSION)),
            _record_keys(_LOG, ops),
        )

    def _append_record(self, rid: str, cursor: Cursor, data: bytes, keys: Iterable[int]) -> None:
        """Append one whole record (with its index ``keys``); on failure the
        file is as before."""
        path = self.path(rid)
        start = cursor.offset
        try:
            st = _append(path, cursor.ino, data)
        except OSError as exc:
            with contextlib.suppress(OSError):
                # Never a file that replaced this one (another writer's).
                if os.stat(path, follow_symlinks=False).st_ino == cursor.ino:
                    os.truncate(path, cursor.offset)
            raise IndexUnavailableError(f"cannot write graph of {rid}: {exc}") from exc
        cursor.offset += len(data)
        cursor.key, cursor.racy = _key(st), True
        self._index_appended(rid, cursor, start, keys)

    # ------------------------------------------------------------ the subject index
    # Advisory: written after the graph file, checked by readers against it,
    # and never a reason for a write to fail.

    def _index_appended(self, rid: str, cursor: Cursor, start: int, keys: Iterable[int]) -> None:
        """A record ``[start, cursor.offset)`` was appended: note its subjects,
        and rewrite the index once it leaves too much of the file uncovered."""
        pending = self._unindexed.get(rid)
        if pending is None or pending.nonce != cursor.nonce or pending.end != start:
            pending = self._unindexed[rid] = _Unindexed(cursor.nonce, start, start, _Entries())
        pending.entries.add(keys, start)
        pending.end = cursor.offset
        try:
            head = _read_small(self.index_path(rid), _INDEX_HEAD.size)
            found = None if head is None else _index_head(head, cursor.nonce, cursor.offset)
            if found is not None and found[0] > start:
                # It covers bytes this record replaced: the file was cut
                # below it (damaged, or truncated by hand) and is growing
                # again, where its offsets name other bytes now.
                _log.warning("graph_store.stale_index_removed", resource=rid, covered=found[0])
                self.index_path(rid).unlink(missing_ok=True)
                found = None
            # A version 2 index counts as none: rebuilt (whole) by the first
            # append once the file is past the smallest tail allowed.
            covered = _HEADER if found is None or not found[2] else found[0]
            if cursor.offset - covered <= _tail_allowed(covered):
                return
            del self._unindexed[rid]
            self._write_index(rid, cursor, pending)
        except (OSError, IndexUnavailableError) as exc:  # the commit stands
            _log.warning("graph_store.index_not_written", resource=rid, error=str(exc))

    def _write_index(self, rid: str, cursor: Cursor, pending: _Unindexed) -> None:
        """Write ``rid``'s index up to ``cursor.offset``: the entries of the
        current index, of the records between it and ``pending`` (decoded:
        another process appended them), and ``pending``'s."""
        path = self.path(rid)
        # A version 2 index is rebuilt whole (None, like no index).
        old = _open_index(self.index_path(rid), cursor.nonce, cursor.offset)
        if old is not None and old.covered > pending.start:
            # Never so (see below); if it were, the old index and ``pending``
            # would name the same records twice: rebuild it whole instead.
            os.close(old.fd)
            old = None
        try:
            covered = _HEADER if old is None else old.covered
            entries = _Entries()
            if covered < pending.start:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    between = _pread_all(fd, pending.start - covered, covered)
                finally:
                    os.close(fd)
                pos = 0
                while (found := _next_record(between, pos)) is not None:
                    kind, payload, end = found
                    value = _decode_any(kind, payload, path)
                    entries.add(_record_keys(kind, value), covered + pos)
                    pos = end
                if covered + pos != pending.start:
                    raise IndexUnavailableError(f"graph file {path} changed under the writer lock")
                del between
            # ``pending`` starts at or after ``covered``: another handle writes
            # an index only after appending a record of its own (which would
            # have broken ``pending``'s run) or compacting (a new file name).
            pieces = _index_file(cursor.nonce, cursor.offset, [entries, pending.entries], old)
            _write_advisory(self.index_path(rid), pieces)
        finally:
            if old is not None:
                os.close(old.fd)

    def replace(self, rid: str, graph: ResourceGraph) -> Cursor:
        """Write ``graph`` as ``rid``'s whole file (a new resource, or compaction)."""
        nonce = os.urandom(16)
        subjects = list(graph.by_subject)
        by_subject = graph.by_subject
        chunks: list[bytes] = []
        entries = _Entries()
        offset = _HEADER
        for i in range(0, max(len(subjects), 1), SNAPSHOT_SUBJECTS):
            chunk = {s: by_subject[s] for s in subjects[i : i + SNAPSHOT_SUBJECTS]}
            chunks.append(_record(_SNAPSHOT, marshal.dumps(chunk, _MARSHAL_VERSION)))
            entries.add(_record_keys(_SNAPSHOT, chunk), offset)
            offset += len(chunks[-1])
        return self._write_snapshot(rid, nonce, [_MAGIC, nonce, *chunks], entries)

    def _write_snapshot(
        self, rid: str, nonce: bytes, pieces: Iterable[Buffer], entries: _Entries
    ) -> Cursor:
        """Write a snapshot-only file (``pieces``: header, then ``S`` records;
        ``entries`` complete once they are consumed) and its subject index."""
        try:
            st = _write_new(self.path(rid), pieces)
        except OSError as exc:
            raise IndexUnavailableError(f"cannot write graph of {rid}: {exc}") from exc
        self._unindexed.pop(rid, None)
        try:
            _write_advisory(self.index_path(rid), _index_file(nonce, st.st_size, [entries]))
        except OSError as exc:
            _log.warning("graph_store.index_not_written", resource=rid, error=str(exc))
        return Cursor(st.st_ino, nonce, st.st_size, st.st_size, _key(st), True)

    def remove(self, rid: str) -> None:
        self._unindexed.pop(rid, None)
        try:
            with contextlib.suppress(FileNotFoundError):
                self.path(rid).unlink()
            with contextlib.suppress(FileNotFoundError):
                self.index_path(rid).unlink()
            _fsync_dir(self._graphs)
        except OSError as exc:
            raise IndexUnavailableError(f"cannot write graph of {rid}: {exc}") from exc

    # ------------------------------------------------------------ writing without the graph
    # Callers hold :meth:`writer_lock`.

    def write_state(self, rid: str, state: WriteState | None) -> WriteState | None:
        """Bring ``state`` up to date with ``rid``'s file, reading one record at a time.

        ``None`` when the resource has no file.  A state of the same file
        reads only the records appended since (by another process); else the
        whole file is counted afresh, never holding more than one record.
        """
        with self._reading(rid) as opened:
            if opened is None:
                return None
            path, fd, st, header = opened
            same = state is not None and _continues(state.cursor, st, header)
            if not same:
                nonce = header[len(_MAGIC) :]
                cursor = Cursor(st.st_ino, nonce, _HEADER, _HEADER, _key(st), True)
                state = WriteState(cursor, {})
            assert state is not None
            self._count_records(fd, state, path, snapshot=not same)
            state.cursor.key, state.cursor.racy = _key(st), True
            return state

    @contextlib.contextmanager
    def _reading(self, rid: str) -> Iterator[tuple[Path, int, os.stat_result, bytes] | None]:
        """``rid``'s graph file open for reading (:func:`_opened`), with its
        path; ``None`` if it has none.  An ``OSError`` becomes
        :class:`IndexUnavailableError`."""
        path = self.path(rid)
        try:
            with _opened(path) as opened:
                yield None if opened is None else (path, *opened)
        except OSError as exc:
            raise _unreadable(self.path(rid), exc) from exc

    def _count_records(self, fd: int, state: WriteState, path: Path, *, snapshot: bool) -> None:
        cursor = state.cursor
        pos = cursor.offset
        while (found := _pread_record(fd, pos)) is not None:  # None: a torn tail
            kind, payload = found
            length = len(payload)
            if pos == _HEADER and kind != _SNAPSHOT:
                break
            if kind == _SNAPSHOT:
                if not snapshot:
                    break
                chunk = cast(dict[str, set[Edge]], _loads(memoryview(payload), dict, path))
                state.count(([], [], chunk))
                del chunk
                cursor.snapshot_end = pos + _RECORD.size + length
            else:
                snapshot = False
                value = _decode(kind, memoryview(payload), path)
                if kind == _LOG:
                    state.count_ops(cast(list[Op], value))
                else:
                    state.count(cast(Change, value))
                del value
            del payload
            pos += _RECORD.size + length
        if pos == _HEADER:
            raise IndexUnavailableError(
                f"corrupt graph file {path}: no whole snapshot" + REBUILD_HINT
            )
        cursor.offset = pos

    def append_change(self, rid: str, state: WriteState, change: Change) -> None:
        """Append ``change`` as a ``C`` record (``state`` current, torn tail cut)."""
        self._append_record(
            rid,
            state.cursor,
            _record(_CHANGE, marshal.dumps(_as_written(change), _MARSHAL_VERSION)),
            _record_keys(_CHANGE, change),
        )
        state.count(change)

    def create(self, rid: str, change: Change) -> WriteState:
        """A new file for ``rid`` holding what ``change`` adds (it has no file)."""
        graph = ResourceGraph()
        graph.apply_change(change)
        return self.create_from(rid, graph)

    def create_from(self, rid: str, graph: ResourceGraph) -> WriteState:
        """Write ``graph`` as ``rid``'s whole file; the state of the new file."""
        cursor = self.replace(rid, graph)
        state = WriteState(cursor, {})
        state.count(([], [], graph.by_subject))
        return state

    def compact(self, rid: str, state: WriteState) -> WriteState:
        """Rewrite ``rid``'s file as snapshot chunks of the triples it holds,
        one record in memory at a time; the state of the new file.

        For a writer that does not hold the graph (loading it for the
        compaction made a reindex of many changed files peak at the whole
        graph).  ``state`` is current and its torn tail cut (the caller holds
        the writer lock).  Two passes over the records, last to first: which
        of a record's edges survive depends only on the records after it
        (:func:`_live_backwards`).  The first pass finds the subjects whose
        surviving edges come from more than one record; the second writes
        every other subject's edges as it meets them, in chunks, and those
        subjects' edges, held, at the end, so that chunks stay disjoint.
        Held in memory: one record and one chunk; the subjects and single
        triples later records drop; the held subjects' edges (usually the
        resource node's); and, per subject or record, 64-bit keys (the
        subjects met, the new index's entries, the new state's counts, each
        record's offset), not the triples.
        """
        with self._reading(rid) as opened:
            if opened is None or not _continues(state.cursor, opened[2], opened[3]):
                raise IndexUnavailableError(f"graph file of {rid} changed under the writer lock")
            path, fd, _st, _header = opened
            spans = self._spans(fd, state.cursor.offset, path)
            seen: set[int] = set()
            several: set[int] = set()
            for live in _live_backwards(fd, spans, path):
                for s in live:
                    key = subject_key(s)
                    (several if key in seen else seen).add(key)
            del seen
            nonce = os.urandom(16)
            entries = _Entries()
            fresh = WriteState(Cursor(0, nonce, 0, 0, (0, 0, 0), True), {})

            def pieces() -> Iterator[bytes]:
                yield _MAGIC + nonce
                offset, wrote = _HEADER, False
                chunk: dict[str, set[Edge]] = {}
                held: dict[str, set[Edge]] = {}

                def record() -> bytes:
                    nonlocal offset, wrote
                    data = _record(_SNAPSHOT, marshal.dumps(chunk, _MARSHAL_VERSION))
                    entries.add(_record_keys(_SNAPSHOT, chunk), offset)
                    fresh.count(([], [], chunk))
                    offset += len(data)
                    wrote = True
                    return data

                for live in _live_backwards(fd, spans, path):
                    for s, edges in live.items():
                        if subject_key(s) in several:
                            held.setdefault(s, set()).update(edges)
                            continue
                        chunk[s] = edges
                        if len(chunk) >= SNAPSHOT_SUBJECTS:
                            yield record()
                            chunk = {}
                for s, edges in held.items():
                    chunk[s] = edges
                    if len(chunk) >= SNAPSHOT_SUBJECTS:
                        yield record()
                        chunk = {}
                if chunk or not wrote:  # a file holds at least one chunk
                    yield record()

            cursor = self._write_snapshot(rid, nonce, pieces(), entries)
        fresh.cursor = cursor
        _log.debug("graph_store.compacted", resource=rid, triples=fresh.live)
        return fresh

    @staticmethod
    def _spans(fd: int, end: int, path: Path) -> list[tuple[int, int]]:
        """(offset, length) of each record up to ``end``, from their heads
        (the payloads are checked when read)."""
        spans: list[tuple[int, int]] = []
        pos = _HEADER
        while pos < end:
            head = _pread_all(fd, _RECORD.size, pos)
            if len(head) < _RECORD.size:
                break
            kind, length, _crc = _RECORD.unpack(head)
            if kind not in _KINDS or pos + _RECORD.size + length > end:
                break
            spans.append((pos, length))
            pos += _RECORD.size + length
        if pos != end or not spans:
            raise IndexUnavailableError(f"corrupt graph file {path}: records do not end at {end}")
        return spans

    @staticmethod
    def compaction_due(cursor: Cursor) -> bool:
        return cursor.log_bytes() > max(cursor.snapshot_end, COMPACT_MIN_BYTES)

    def live_subjects(self, rid: str) -> set[str] | None:
        """The subjects ``rid``'s graph holds an edge of, read record by
        record as :meth:`compact` reads them (one record in memory at a
        time), never loading the graph; ``None`` if it has no file.

        For ``verify`` and the repair sweep, which need only the subjects: a
        load of a stdlib-sized graph for them peaked at ~245 MB.  The records
        read are those a load applies (:meth:`_parse`): the snapshot chunks,
        then the change records up to the first that is not whole.
        """
        with self._reading(rid) as opened:
            if opened is None:
                return None
            path, fd, _st, _header = opened
            spans: list[tuple[int, int]] = []
            pos, snapshot = _HEADER, True
            while (found := _pread_record(fd, pos)) is not None:
                kind, payload = found
                if kind == _SNAPSHOT:
                    if not snapshot:
                        break
                elif pos == _HEADER:
                    break
                else:
                    snapshot = False
                spans.append((pos, len(payload)))
                pos += _RECORD.size + len(payload)
                del payload
            if not spans:
                raise IndexUnavailableError(
                    f"corrupt graph file {path}: no whole snapshot" + REBUILD_HINT
                )
            subjects: set[str] = set()
            for live in _live_backwards(fd, spans, path):
                subjects.update(live)
            return subjects

    # ------------------------------------------------------------ reading by subject

    def subject_reader(
        self, rid: str, previous: SubjectReader | None = None
    ) -> SubjectReader | None:
        """A reader of ``rid``'s graph by subject, without loading it; ``None``
        when the file has no index of it covering enough (load it then) or
        there is no file.

        ``previous`` (a reader of an earlier state) lends what still holds if
        the file is the same one, grown: the records it decoded (an append
        never changes a record), its index arrays while the index file still
        covers what it did (same header), and the records past the index it
        decoded, so that a reader made after a commit reads and decodes only
        what was appended since: O(change), not the index and its tail (up to
        a quarter of the file, re-read after every commit before)."""
        with self._reading(rid) as opened:
            if opened is None:
                return None
            path, fd, st, header = opened
            nonce = header[len(_MAGIC) :]
            grown = previous if previous is not None and previous.grew_into(st, nonce, fd) else None
            found = self._subject_index(rid, nonce, st.st_size, grown)
            if found is None:
                return None
            index = found
            covered = index.covered
            if st.st_size - covered > 2 * _tail_allowed(covered):
                return None  # written by code that keeps no index: load it
            tail: list[tuple[int, _Record]] = []
            start = covered
            continued = grown is not None and grown.covered <= covered <= grown.end
            if continued:
                assert grown is not None
                tail = [(offset, record) for offset, record in grown.tail if offset >= covered]
                start = grown.end
            rest = _pread_all(fd, st.st_size - start, start)
            # The reader keeps the file open: what it reads later is this
            # file as it was, even if another process replaces it.
            # Never 0-2 (a process without stdio): a SPARQL worker keeps
            # this descriptor and points those at /dev/null.
            own = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
        fresh: list[_Record] = []
        last = grown.last if grown is not None and continued else None
        try:
            pos = 0
            while (record := _next_record(rest, pos)) is not None and record[0] != _SNAPSHOT:
                kind, payload, end = record
                fresh.append(_Record(kind, _decode(kind, payload, path)))
                tail.append((start + pos, fresh[-1]))
                last = (start + pos, bytes(rest[pos : pos + _RECORD.size]))
                pos = end
        except BaseException:
            os.close(own)
            raise
        if not tail:
            last = None
        reader = SubjectReader(path, own, st, nonce, index, tail, start + pos, last)
        if previous is not None:
            reader.adopt(previous, fresh if continued else None)
        return reader

    def _subject_index(
        self, rid: str, nonce: bytes, size: int, grown: SubjectReader | None
    ) -> _SubjectIndexFile | None:
        """``rid``'s subject index for the graph file named ``nonce`` (``size``
        bytes now): ``grown``'s, if the index file's header and the CRC of
        its entries are still the ones it read (two small reads), else read
        and checked whole; ``None`` if missing, unreadable or stale."""
        path = self.index_path(rid)
        try:
            if grown is not None:
                ends = _index_ends(path)
                if ends == grown.index.ends and _index_head(ends, nonce, size) is not None:
                    return grown.index
            data = _read_small(path)
        except OSError as exc:  # advisory: load the graph instead
            _log.warning("graph_store.index_unreadable", resource=rid, error=str(exc))
            return None
        found = None if data is None else _index_arrays(data, nonce, size)
        if found is None or data is None:
            return None
        covered, keys, offsets, literals = found
        ends = bytes(data[: _INDEX_HEAD.size]) + bytes(data[-_INDEX_CRC.size :])
        return _SubjectIndexFile(ends, covered, keys, offsets, literals)


# ---------------------------------------------------------------- reading by subject


class UnreadableRecord(IndexUnavailableError):
    """A record a subject index names could not be read (its CRC or payload
    is damaged): loading ``path``'s graph answers instead, as a load ends a
    graph at a damaged record (or reports the store unreadable)."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


class _Record:
    """A decoded record as a reader keeps it, by subject: a snapshot chunk's
    edges; a change's (dropped subjects, removed edges, added edges); a log's
    operations.  Which subjects it adds an edge to each IRI from is built on
    the first walk backwards that needs it."""

    __slots__ = ("_adds_to", "_holders", "_scans", "kind", "size", "value")

    def __init__(self, kind: bytes, value: object) -> None:
        self.kind = kind
        self.value: object
        if kind == _SNAPSHOT:
            self.value = value
            self.size = sum(map(len, cast(dict[str, set[Edge]], value).values()))
        elif kind == _LOG:
            ops: dict[str, list[tuple[bool, Edge]]] = {}
            for add, s, p, o in cast(list[Op], value):
                ops.setdefault(s, []).append((add, (p, o)))
            self.value = ops
            self.size = len(cast(list[Op], value))
        else:
            drops, removes, adds = cast(Change, value)
            removed: dict[str, list[Edge]] = {}
            for s, p, o in removes:
                removed.setdefault(s, []).append((p, o))
            self.value = (set(drops), removed, adds)
            self.size = len(drops) + len(removes) + sum(map(len, adds.values()))
        self._adds_to: dict[str, list[tuple[str, str]]] | None = None
        self._holders: dict[Edge, list[str]] | None = None
        self._scans = 0

    def subjects(self) -> Iterable[str]:
        """The subjects whose edges this record sets or changes (exactly the
        ones :func:`_fold` reads it for)."""
        if self.kind == _CHANGE:
            drops, removed, adds = cast(
                tuple[set[str], dict[str, list[Edge]], dict[str, Collection[Edge]]], self.value
            )
            return itertools.chain(drops, removed, adds)
        return cast(dict[str, object], self.value).keys()

    def added(self) -> Iterator[tuple[str, str, Obj]]:
        """The edges this record adds (or holds, for a snapshot chunk)."""
        edges_by_subject: Mapping[str, Collection[Edge]]
        if self.kind == _SNAPSHOT:
            edges_by_subject = cast(dict[str, set[Edge]], self.value)
        elif self.kind == _CHANGE:
            change = cast(tuple[object, object, dict[str, Collection[Edge]]], self.value)
            edges_by_subject = change[2]
        else:
            for s, ops in cast(dict[str, list[tuple[bool, Edge]]], self.value).items():
                for add, (p, o) in ops:
                    if add:
                        yield s, p, o
            return
        for s, edges in edges_by_subject.items():
            for p, o in edges:
                yield s, p, o

    def adds_to(self, o: str) -> list[tuple[str, str]]:
        """The (subject, predicate) pairs this record adds an edge to ``o`` from."""
        if self._adds_to is None:
            adds_to: dict[str, list[tuple[str, str]]] = {}
            for s, p, obj in self.added():
                if isinstance(obj, str):
                    adds_to.setdefault(obj, []).append((s, p))
            self._adds_to = adds_to
        return self._adds_to.get(o, [])

    def adds_edge(self, edge: Edge) -> list[str]:
        """The subjects this record adds ``edge`` to (scanning its subjects)."""
        if self.kind == _LOG:
            ops = cast(dict[str, list[tuple[bool, Edge]]], self.value)
            return [s for s, changes in ops.items() if (True, edge) in changes]
        value = (
            self.value
            if self.kind == _SNAPSHOT
            else cast(tuple[object, object, object], self.value)[2]
        )
        return [s for s, edges in cast(dict[str, Collection[Edge]], value).items() if edge in edges]

    def adds_literal(self, edge: Edge) -> list[str]:
        """The subjects this record adds ``edge`` (a :data:`LITERAL_KEYED`
        predicate to a literal) to: the first few questions scan the
        subjects, later ones share a map of those edges, built once."""
        if self._holders is None and self._scans < _RECORD_SCANS:
            self._scans += 1
            return self.adds_edge(edge)
        if self._holders is None:
            holders: dict[Edge, list[str]] = {}
            for s, p, o in self.added():
                if p in LITERAL_KEYED and not isinstance(o, str):
                    holders.setdefault((p, o), []).append(s)
            self._holders = holders
        return self._holders.get(edge, [])

    def adds_along(self, o: str, p: str) -> list[tuple[str, str]]:
        """The (subject, ``p``) pairs this record adds an edge ``p`` to ``o``
        from.  The first few questions test each subject's edges (a record
        has ~10x more edges than subjects); later ones share the map of
        :meth:`adds_to`, built once."""
        if self._adds_to is None and self._scans < _RECORD_SCANS and self.kind != _LOG:
            self._scans += 1
            return [(s, p) for s in self.adds_edge((p, o))]
        return [pair for pair in self.adds_to(o) if pair[1] == p]


def _live_backwards(
    fd: int, spans: list[tuple[int, int]], path: Path
) -> Iterator[dict[str, set[Edge]]]:
    """Per record of ``spans``, last to first: the edges it adds that the
    file still holds, by subject.

    An edge a record adds survives unless a later record drops its subject
    or removes it; an ``L`` record's operations apply in order, and a ``C``
    record's drops and removals come before its own additions.  An edge two
    records add survives in both (a set holds it once).
    """
    dropped: set[str] = set()
    removed: set[tuple[str, str, Obj]] = set()
    for pos, length in reversed(spans):
        found = _pread_record(fd, pos)
        if found is None or len(found[1]) != length:
            raise IndexUnavailableError(f"corrupt graph file {path}: bad record at {pos}")
        kind, payload = found
        value = _decode_any(kind, memoryview(payload), path)
        del payload
        live: dict[str, set[Edge]] = {}
        if kind == _LOG:
            for add, s, p, o in reversed(cast(list[Op], value)):
                if not add:
                    removed.add((s, p, o))
                elif s not in dropped and (s, p, o) not in removed:
                    live.setdefault(s, set()).add((p, o))
        else:
            drops, removes, adds = (
                ([], [], cast(dict[str, set[Edge]], value))
                if kind == _SNAPSHOT
                else cast(Change, value)
            )
            for s, edges in adds.items():
                if s in dropped:
                    continue
                kept = (
                    {(p, o) for p, o in edges if (s, p, o) not in removed}
                    if removed or edges.__class__ is not set
                    else cast(set[Edge], edges)
                )
                if kept:
                    live[s] = kept
            dropped.update(drops)
            removed.update(removes)
        del value
        yield live


def _fold(s: str, records: Iterable[_Record], edges: set[Edge] | None = None) -> set[Edge]:
    """``s``'s edges after ``records`` (in file order), as a full load has
    them; ``edges``: its edges before them (changed in place), none if None."""
    if edges is None:
        edges = set()
    for record in records:
        if record.kind == _SNAPSHOT:
            edges.update(cast(dict[str, Collection[Edge]], record.value).get(s, ()))
        elif record.kind == _LOG:
            for add, edge in cast(dict[str, list[tuple[bool, Edge]]], record.value).get(s, ()):
                if add:
                    edges.add(edge)
                else:
                    edges.discard(edge)
        else:
            drops, removed, adds = cast(
                tuple[set[str], dict[str, list[Edge]], dict[str, Collection[Edge]]], record.value
            )
            if s in drops:
                edges.clear()
            edges.difference_update(removed.get(s, ()))
            edges.update(adds.get(s, ()))
    return edges


class SubjectReader:
    """One resource's graph read subject by subject, without loading it.

    The subject index names the records that change each subject, and those
    that add an edge to each IRI, and along each predicate, and to each
    literal of a :data:`LITERAL_KEYED` predicate (by :func:`subject_key`,
    :func:`object_key`, :func:`pair_key` and :func:`literal_key`); the
    records past what it covers were decoded when the reader was made.  A
    subject's edges are its records folded in file order, exactly what a
    full load holds for it; an IRI's incoming edges (along some predicates)
    are the (subject, predicate) pairs its records add, kept if the
    subject's current edges still hold them (property-tested against a
    loaded graph).  A reader answers for the file as it was when made:
    :meth:`current` says whether it still is.  Read-only; ``by_subject``
    looks up (it cannot list), so ``get_triples`` and the walks use a reader
    as they use a loaded graph.
    """

    foreign = False

    def __init__(
        self,
        path: Path,
        fd: int,
        st: os.stat_result,
        nonce: bytes,
        index: _SubjectIndexFile,
        tail: list[tuple[int, _Record]],
        end: int,
        last: tuple[int, bytes] | None = None,
    ) -> None:
        self._path = path
        self.index = index
        self._literals = index.literals
        self._fd = fd  # owned: closed by close(), or when the reader is collected
        self._closer = weakref.finalize(self, os.close, fd)
        self._ino = st.st_ino
        self._key = _key(st)
        self._racy = _racy(st)
        self._nonce = nonce
        self.covered = index.covered
        self._keys = index.keys
        self._offsets = index.offsets
        #: The records past the index, with their offsets, in file order,
        #: and where the last whole one ends.
        self.tail = tail
        self.end = end
        #: The offset and header (kind, length, CRC) of the last tail record.
        self.last = last
        self._tail = [record for _, record in tail]
        self._records: dict[int, _Record] = {}
        self._weight = sum(record.size for record in self._tail)
        self._edges: dict[str, set[Edge]] = {}
        self._sorted: dict[str, tuple[list[Triple], list[str]]] = {}
        self._incoming: dict[str, set[tuple[str, str]]] = {}
        self._along: dict[tuple[str, str], set[tuple[str, str]]] = {}
        self._holding: dict[tuple[str, tuple[str, str | None]], set[str]] = {}
        self._lookup = _Lookup(self)

    @property
    def by_subject(self) -> Mapping[str, set[Edge]]:
        return self._lookup

    def close(self) -> None:
        """Close the reader's file (idempotent)."""
        self._closer()

    @property
    def path(self) -> Path:
        """The graph file this reader reads."""
        return self._path

    @property
    def nonce(self) -> bytes:
        """The 16 random bytes that name the graph file it reads."""
        return self._nonce

    def is_open(self) -> bool:
        return self._closer.alive

    def fileno(self) -> int:
        """The descriptor of the graph file it reads (a SPARQL worker keeps it)."""
        return self._fd

    def current(self) -> bool:
        """Whether the file is still the one this reader read, not grown."""
        try:
            st = os.stat(self._path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if _key(st) != self._key:
            return False
        if not self._racy:
            return True
        # Modified too recently for the stat to prove it: check its name.
        header = _read_small(self._path, _HEADER)
        return header is not None and header[len(_MAGIC) :] == self._nonce

    def edges(self, s: str) -> set[Edge]:
        """``s``'s edges (empty: none)."""
        edges = self._edges.get(s)
        if edges is None:
            self._bound()
            edges = self._edges[s] = _fold(s, self._records_for(subject_key(s)))
        return edges

    def incoming_of(
        self, o: str, predicates: AbstractSet[str] | None = None
    ) -> AbstractSet[tuple[str, str]]:
        """The (subject, predicate) pairs whose object is the IRI ``o`` (and
        whose predicate is one of ``predicates``, if given).  Along a few
        predicates only the records that add an edge of one of them to ``o``
        are read (their pair keys)."""
        found = self._incoming.get(o)
        if found is None and predicates is not None and len(predicates) <= _PAIR_PROBES:
            return {pair for p in predicates for pair in self._incoming_along(o, p)}
        if found is None:
            found = self._verified(o, self._records_for(object_key(o)), None)
            self._incoming[o] = found
        if predicates is None:
            return found
        return {(s, p) for s, p in found if p in predicates}

    def _incoming_along(self, o: str, p: str) -> set[tuple[str, str]]:
        found = self._along.get((p, o))
        if found is None:
            found = self._along[p, o] = self._verified(o, self._records_for(pair_key(p, o)), p)
        return found

    def keys_literals(self, p: str) -> bool:
        """Whether :meth:`subjects_with_literal` answers for predicate ``p``
        (an index of version 2 keys no literal: the graph must be loaded)."""
        return self._literals and p in LITERAL_KEYED

    def subjects_with_literal(self, p: str, o: tuple[str, str | None]) -> set[str]:
        """The subjects with an edge ``p`` to the literal ``o``, reading only
        the records that add such an edge (``p`` one of
        :data:`LITERAL_KEYED`; see :meth:`keys_literals`)."""
        found = self._holding.get((p, o))
        if found is None:
            edge = (p, o)
            candidates: set[str] = set()
            for record in self._records_for(literal_key(p, o)):
                candidates.update(record.adds_literal(edge))
            found = {s for s in candidates if edge in self.edges(s)}
            self._bound()
            self._holding[p, o] = found
        return found

    def _verified(
        self, o: str, records: list[_Record], predicate: str | None
    ) -> set[tuple[str, str]]:
        """The pairs ``records`` add to ``o`` (along ``predicate``, if given)
        that the subjects' current edges still hold."""
        candidates: set[tuple[str, str]] = set()
        for record in records:
            candidates.update(
                record.adds_to(o) if predicate is None else record.adds_along(o, predicate)
            )
        found = {
            (s, p)
            for s, p in candidates
            if (predicate is None or p == predicate) and (p, o) in self.edges(s)
        }
        self._bound()
        return found

    def edges_pairs(self, s: str) -> Iterator[tuple[Triple, bool]]:
        return _edge_pairs(s, self.edges(s))

    def edges_of(self, s: str) -> tuple[list[Triple], list[str]]:
        cached = self._sorted.get(s)
        if cached is None:
            cached = self._sorted[s] = sorted_edges(self.edges_pairs(s))
        return cached

    def adopt(self, previous: SubjectReader, appended: Sequence[_Record] | None = None) -> None:
        """Take the records ``previous`` decoded, if it read this same file
        (an append never changes a record, and a new file has a new name):
        after a commit, a question decodes what changed, not again what it
        read before.  ``appended``: every record written after the last one
        ``previous`` read (None: not known); the subjects none of them
        changes keep the edges ``previous`` folded for them."""
        if previous._ino != self._ino or previous._nonce != self._nonce:
            return
        if appended is not None:
            # A fold is in file order and the appended records come last: a
            # subject they change is its folded edges, then those records.
            changed: set[str] = set()
            for record in appended:
                changed.update(record.subjects())
            # Edges that come out the same (a file's ``contains`` edge removed
            # and added again) keep their sorted listing too.
            for s, edges in previous._edges.items():
                if s in changed:
                    folded = _fold(s, appended, set(edges))
                    if folded != edges:
                        self._edges[s] = folded
                        continue
                self._edges[s] = edges
                listing = previous._sorted.get(s)
                if listing is not None:
                    self._sorted[s] = listing
        # Its tail records that this reader's index now covers are records
        # like any other (the index names them by offset).
        for offset, record in itertools.chain(previous._records.items(), previous.tail):
            if offset < self.covered and offset not in self._records:
                self._records[offset] = record
                self._weight += record.size

    def grew_into(self, st: os.stat_result, nonce: bytes, fd: int) -> bool:
        """Whether the graph file now open (``st``, named ``nonce``, ``fd``) is
        the one this reader read, grown or not: the same inode and name, not
        cut below the records it decoded, and its last tail record still there.
        A cut removes torn bytes, or (a write whose ``fsync`` failed) the one
        record just appended, which the next write replaces: a reader that saw
        that record finds another header where it was."""
        if st.st_ino != self._ino or nonce != self._nonce or st.st_size < self.end:
            return False
        if self.last is None:
            return True
        offset, head = self.last
        try:
            return _pread_all(fd, len(head), offset) == head
        except OSError:
            return False

    def weight(self) -> int:
        """Memory in triples' worth (as :meth:`ResourceGraph.weight`): the
        triples of the records decoded so far, which the reader keeps, so
        that it decodes each at most once (never more than loading the
        graph), and its index (16 bytes an entry, a fifth of a triple)."""
        return self._weight + len(self._keys) // 5

    def _bound(self) -> None:
        memos = len(self._edges) + len(self._incoming) + len(self._along) + len(self._holding)
        if memos >= _READER_SUBJECTS:
            self._edges.clear()
            self._sorted.clear()
            self._incoming.clear()
            self._along.clear()
            self._holding.clear()

    def _records_for(self, key: int) -> list[_Record]:
        """The records filed under ``key``, then those past the index, in file order."""
        i = bisect.bisect_left(self._keys, key)
        wanted: list[int] = []
        while i < len(self._keys) and self._keys[i] == key:
            wanted.append(self._offsets[i])
            i += 1
        return [self._record(offset) for offset in sorted(set(wanted))] + self._tail

    def _record(self, offset: int) -> _Record:
        record = self._records.get(offset)
        if record is not None:
            return record
        if not self._closer.alive:
            raise IndexUnavailableError(f"the reader of {self._path} is closed")
        try:
            head = _pread_all(self._fd, _RECORD.size, offset)
            length = _RECORD.unpack(head)[1] if len(head) == _RECORD.size else 0
            data = head + _pread_all(self._fd, length, offset + _RECORD.size)
        except OSError as exc:
            raise IndexUnavailableError(f"cannot read graph file {self._path}: {exc}") from exc
        found = _next_record(data, 0)
        if found is None or offset + found[2] > self.covered:
            raise UnreadableRecord(
                f"corrupt graph file {self._path}: bad subject index", self._path
            )
        kind, payload, _ = found
        try:
            value = _decode_any(kind, payload, self._path)
        except IndexUnavailableError as exc:
            raise UnreadableRecord(str(exc), self._path) from exc
        record = self._records[offset] = _Record(kind, value)
        self._weight += record.size
        return record


class _Lookup(Mapping[str, set[Edge]]):
    """A reader's ``by_subject``: lookups only (it cannot list its subjects)."""

    __slots__ = ("_reader",)

    def __init__(self, reader: SubjectReader) -> None:
        self._reader = reader

    def __getitem__(self, s: str) -> set[Edge]:
        edges = self._reader.edges(s) if isinstance(s, str) else None
        if not edges:
            raise KeyError(s)
        return edges

    def __contains__(self, s: object) -> bool:
        return isinstance(s, str) and bool(self._reader.edges(s))

    def __iter__(self) -> Iterator[str]:
        raise TypeError("a subject reader cannot list the subjects of its graph")

    def __len__(self) -> int:
        raise TypeError("a subject reader cannot count the subjects of its graph")


class Readable(Protocol):
    """What reading by subject needs of a graph: a loaded
    :class:`ResourceGraph` or a :class:`SubjectReader`."""

    @property
    def by_subject(self) -> Mapping[str, set[Edge]]: ...

    @property
    def foreign(self) -> bool: ...

    def edges_of(self, s: str) -> tuple[list[Triple], list[str]]: ...

    def edges_pairs(self, s: str) -> Iterator[tuple[Triple, bool]]: ...

    def incoming_of(
        self, o: str, predicates: AbstractSet[str] | None = None
    ) -> AbstractSet[tuple[str, str]]:
        """(subject, predicate) pairs with an edge to the IRI ``o``; only
        along ``predicates``, if given (walks and SPARQL do not filter again)."""
        ...
