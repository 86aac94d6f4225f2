"""``GraphIndex`` over rdflib: compact per-resource graphs, N-Triples plus a change log on disk.

Layout under ``store_path``::

    graphs/<ULID>.nt    a resource's base graph (sorted N-Triples, atomic replace)
    graphs/<ULID>.log   changes since the base: ``+``/``-`` N-Triples lines, each
                        write one ``write()`` ending with a ``C`` commit line, fsynced
    generation          a counter bumped after every write (atomic replace)
    lock                flock'ed by writers so processes write one at a time

A write appends only its change to the resource's log, so its cost follows the
change, not the resource; the log is folded into the base (compaction) once it
outgrows it.  A record without its commit line (a writer killed mid-write) is
ignored by readers and cut off by the next writer.  A log without a base is
the leftover of a deletion and is ignored.  Reads first compare the
``generation`` file with the last one seen; when another process wrote, a grown
log is read from where this process stopped and a replaced base reloaded.

Resource graphs are held as plain strings (subject -> {(predicate, object)}),
not rdflib stores: loading is faster, memory smaller (so forking the SPARQL
worker is cheaper) and ``traverse`` runs on them directly.  SPARQL from a model
is checked by :mod:`.sparql_guard` and evaluated only against a plain rdflib
``Graph`` holding the union of the in-scope resource graphs (cached per scope),
never against a Dataset, so no query can name another resource's graph.
Evaluation runs in a forked child process killed at the time limit, with a row
cap (:mod:`.sparql_worker`).  The N-Triples are written and read here, not by
rdflib, so literals keep their lexical form exactly (rdflib's parser
normalises ``"010"^^xsd:integer`` to ``"10"``).
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import re
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import structlog
from rdflib import Graph, URIRef
from rdflib import Literal as RdfLiteral
from rdflib.plugins.stores.memory import Memory

from cleveragents.domain.models.acms.backends import (
    GraphResult,
    Literal,
    Triple,
    WriteTriple,
    validate_depth,
    validate_non_empty,
    validate_positive_int,
)
from cleveragents.domain.models.acms.errors import IndexUnavailableError
from cleveragents.domain.models.acms.uko import UKO, resource_id_of
from cleveragents.domain.models.acms.ulids import canonical_ulid, is_ulid, validate_scope
from cleveragents.infrastructure.acms.sparql_guard import check_query_size
from cleveragents.infrastructure.acms.sparql_worker import evaluate

__all__ = ["RdflibGraphBackend"]

_log = structlog.get_logger("cleveragents.acms.rdflib_graph")

# Prefixes a query may use without declaring them (rdflib adds rdf, rdfs, xsd, ...).
_INIT_NS = {"uko": UKO}

# An object is an IRI (``str``) or a literal (lexical form, datatype IRI or None).
_Lit = tuple[str, str | None]
_Obj = str | _Lit
_Edge = tuple[str, _Obj]  # (predicate, object) of one subject
_Op = tuple[bool, str, str, _Obj]  # (add?, subject, predicate, object)
_Stat = tuple[int, int, int]

# An absolute IRI that N-Triples can hold verbatim: a scheme, then no space,
# control character, surrogate or any of <>"{}|^`\ .
_IRI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\x00-\x20\x7f<>\"{}|^`\\\ud800-\udfff]*")

# Fold the log into the base once it is larger than the base and this.
_COMPACT_MIN_BYTES = 1 << 16
_COMMIT = b"C\n"

# ---------------------------------------------------------------- N-Triples

_ESCAPE_RE = re.compile(r"[\\\"\x00-\x1f\x7f\ud800-\udfff]")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNESCAPE_RE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))", re.DOTALL)
_UNESCAPES = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'"}
_UNESCAPES["\\"] = "\\"
_NT_LINE = re.compile(
    r'<([^<>"\s]*)> <([^<>"\s]*)> '
    r'(?:<([^<>"\s]*)>|"([^"\\]*(?:\\.[^"\\]*)*)"(?:\^\^<([^<>"\s]*)>)?) \.'
)


def _escape(value: str) -> str:
    # Control characters and lone surrogates (file names decoded with
    # surrogateescape) are written as \\uXXXX so any str round-trips.
    return _ESCAPE_RE.sub(
        lambda m: _ESCAPES.get(m.group(), f"\\u{ord(m.group()):04X}"),
        value,
    )


def _unescape_match(m: re.Match[str]) -> str:
    code = m.group(1) or m.group(2)
    if code is not None:
        return chr(int(code, 16))
    char = m.group(3)
    if char not in _UNESCAPES:
        raise ValueError(f"bad escape \\{char}")
    return _UNESCAPES[char]


def _nt_line(s: str, p: str, o: _Obj) -> str:
    if isinstance(o, str):
        return f"<{s}> <{p}> <{o}> .\n"
    lexical, datatype = o
    if datatype is None:
        return f'<{s}> <{p}> "{_escape(lexical)}" .\n'
    return f'<{s}> <{p}> "{_escape(lexical)}"^^<{datatype}> .\n'


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


class _Parser:
    """Parses the lines this store writes; shares equal strings across a load.

    ``foreign`` turns true when a triple names a resource other than ``rid``
    (never written by this store, so only a hand-edited file has one).
    """

    def __init__(self, rid: str) -> None:
        self._rid = rid
        self._memo: dict[str, str] = {}
        self.foreign = False

    def _iri(self, iri: str) -> str:
        found = self._memo.get(iri)
        if found is not None:
            return found
        owner = resource_id_of(iri)
        if owner is not None and owner != self._rid:
            self.foreign = True
        self._memo[iri] = iri
        return iri

    def triple(self, line: str) -> tuple[str, str, _Obj] | None:
        """The triple of one line; ``None`` for blank lines and comments."""
        m = _NT_LINE.fullmatch(line)
        if m is None:
            if not line.strip() or line.startswith("#"):
                return None
            raise ValueError("a line is not an N-Triples triple this store writes")
        s, p, iri, lexical, datatype = m.groups()
        memo = self._memo
        s = memo.get(s) or self._iri(s)
        p = memo.get(p) or self._iri(p)
        if iri is not None:
            return s, p, memo.get(iri) or self._iri(iri)
        value = _UNESCAPE_RE.sub(_unescape_match, lexical) if "\\" in lexical else lexical
        return s, p, (value, None if datatype is None else self._iri(datatype))


def _term_str(o: _Obj) -> str:
    return o if isinstance(o, str) else o[0]


def _in_scope(triple: Triple, scope: frozenset[str]) -> bool:
    # The rule ScopedView applies: any term naming a resource names one in scope.
    for term in triple:
        rid = resource_id_of(term)
        if rid is not None and rid not in scope:
            return False
    return True


def _result(triples: list[Triple], metadata: dict[str, str]) -> GraphResult:
    """A GraphResult of triples built here (three ``str`` each, by construction)."""
    result = object.__new__(GraphResult)
    object.__setattr__(result, "triples", triples)
    object.__setattr__(result, "metadata", metadata)
    return result


def _required_scope(scope: frozenset[str] | None, method: str) -> frozenset[str]:
    """The canonical scope; ``None`` is refused, never read as "every graph"."""
    if scope is None:
        raise TypeError(
            f"{method} needs scope=, a frozenset of resource ULIDs; to read every graph "
            "(maintenance), pass scope=frozenset(backend.resource_ids())"
        )
    return validate_scope(scope)


def _validate_timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"query_timeout must be a number of seconds, not {type(value).__name__}")
    if not 0 < value < math.inf:
        raise ValueError(f"query_timeout must be positive and finite, got {value}")
    return float(value)


# ---------------------------------------------------------------- graphs


class _ResourceGraph:
    """One resource's triples as strings: subject -> {(predicate, object)}."""

    __slots__ = ("by_subject", "edges", "foreign", "size")

    def __init__(self) -> None:
        self.by_subject: dict[str, set[_Edge]] = {}
        # subject -> (its triples as strings, sorted; the IRIs it points to)
        self.edges: dict[str, tuple[list[Triple], list[str]]] = {}
        self.foreign = False
        self.size = 0

    def add(self, s: str, p: str, o: _Obj) -> bool:
        edges = self.by_subject.get(s)
        if edges is None:
            edges = self.by_subject[s] = set()
        elif (p, o) in edges:
            return False
        edges.add((p, o))
        self.size += 1
        self.edges.pop(s, None)
        return True

    def remove(self, s: str, p: str, o: _Obj) -> bool:
        edges = self.by_subject.get(s)
        if edges is None or (p, o) not in edges:
            return False
        edges.remove((p, o))
        if not edges:
            del self.by_subject[s]
        self.size -= 1
        self.edges.pop(s, None)
        return True

    def edges_of(self, s: str) -> tuple[list[Triple], list[str]]:
        cached = self.edges.get(s)
        if cached is None:
            cached = _sorted_edges(self.edges_pairs(s))
            self.edges[s] = cached
        return cached

    def edges_pairs(self, s: str) -> Iterator[tuple[Triple, bool]]:
        for p, o in self.by_subject.get(s, ()):
            yield (s, p, _term_str(o)), isinstance(o, str)

    def triples(self) -> Iterator[tuple[str, str, _Obj]]:
        for s, edges in self.by_subject.items():
            for p, o in edges:
                yield s, p, o

    def serialize(self) -> bytes:
        return _encode("".join(sorted(_nt_line(s, p, o) for s, p, o in self.triples())))


def _sorted_edges(pairs: Iterable[tuple[Triple, bool]]) -> tuple[list[Triple], list[str]]:
    """Triples sorted, each once; the IRIs they point to in the same order."""
    triples: list[Triple] = []
    targets: list[str] = []
    for triple, iri in sorted(pairs):
        if not triples or triples[-1] != triple:
            triples.append(triple)
        if iri:
            targets.append(triple[2])
    return triples, targets


def _rdf_graph(graphs: Iterable[_ResourceGraph]) -> Graph:
    # An explicit store instance: no plugin lookup, never a Dataset.
    graph = Graph(store=Memory())
    refs: dict[str, URIRef] = {}
    for res in graphs:
        for s, edges in res.by_subject.items():
            subject = refs.get(s) or refs.setdefault(s, URIRef(s))
            for p, o in edges:
                predicate = refs.get(p) or refs.setdefault(p, URIRef(p))
                obj: URIRef | RdfLiteral
                if isinstance(o, str):
                    obj = refs.get(o) or refs.setdefault(o, URIRef(o))
                else:
                    # normalize=False keeps the lexical form exactly as written.
                    obj = RdfLiteral(
                        o[0], datatype=None if o[1] is None else URIRef(o[1]), normalize=False
                    )
                graph.add((subject, predicate, obj))
    return graph


# ---------------------------------------------------------------- files


def _stat_key(st: os.stat_result) -> _Stat:
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _append(path: Path, data: bytes) -> tuple[int, int]:
    """Append ``data`` with one ``write()`` and fsync; (inode, size before)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        st = os.fstat(fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    if st.st_size == 0:
        _fsync_dir(path.parent)
    return st.st_ino, st.st_size


def _read_from(path: Path, offset: int) -> tuple[int, bytes] | None:
    """(inode, bytes from ``offset``) of a regular file; ``None`` if missing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as fh:
        ino = os.fstat(fh.fileno()).st_ino
        fh.seek(offset)
        return ino, fh.read()


def _committed(data: bytes) -> tuple[list[bytes], int]:
    """The records of ``data`` that end with a commit line, and their length."""
    end = data.rfind(b"\n" + _COMMIT)
    if end < 0:
        return ([], 2) if data.startswith(_COMMIT) else ([], 0)
    end += 1 + len(_COMMIT)
    return data[:end].split(b"\n")[:-1], end


@contextlib.contextmanager
def _corrupt_is_unavailable(path: Path) -> Iterator[None]:
    try:
        yield
    except ValueError as exc:  # UnicodeDecodeError included
        raise IndexUnavailableError(f"corrupt graph file {path}: {exc}") from exc


class _Files:
    """What this process last read of one resource's files."""

    __slots__ = ("base", "log_ino", "log_offset")

    def __init__(self, base: _Stat, log_ino: int | None, log_offset: int) -> None:
        self.base = base
        self.log_ino = log_ino
        self.log_offset = log_offset


# ---------------------------------------------------------------- backend


class RdflibGraphBackend:
    """A :class:`~cleveragents.domain.models.acms.backends.GraphIndex` on rdflib.

    Args:
        store_path: directory of the store (created if missing); ``None`` keeps
            everything in memory.
        union_cache_size: how many per-scope union graphs to keep.
        query_timeout: seconds a SPARQL query may run (positive, finite); the
            evaluation runs in a forked child process that is killed then.
        max_rows: the most triples a SPARQL answer may hold; more is a
            :class:`QueryLimitError`, never a silent truncation.

    Raises:
        TypeError / ValueError: an invalid ``union_cache_size``,
            ``query_timeout`` or ``max_rows``.
        IndexUnavailableError: the store cannot be created or read.
    """

    def __init__(
        self,
        store_path: str | os.PathLike[str] | None = None,
        *,
        union_cache_size: int = 8,
        query_timeout: float = 10.0,
        max_rows: int = 10_000,
    ) -> None:
        self._union_cache_size = validate_positive_int(union_cache_size, "union_cache_size")
        self._query_timeout = _validate_timeout(query_timeout)
        self._max_rows = validate_positive_int(max_rows, "max_rows")
        self._lock = threading.RLock()
        self._graphs: dict[str, _ResourceGraph] = {}
        self._subject_index: dict[str, set[str]] = {}
        self._unions: OrderedDict[frozenset[str], Graph] = OrderedDict()
        self._files: dict[str, _Files] = {}
        self._generation_seen: _Stat | None = None
        self._closed = False
        self._lock_fd: int | None = None
        self._root = Path(store_path) if store_path is not None else None
        if self._root is None:
            return
        try:
            (self._root / "graphs").mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self._root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
            with self._writer_lock():
                if not (self._root / "generation").exists():
                    _atomic_write(self._root / "generation", b"0\n")
                self._refresh_locked()
        except IndexUnavailableError:
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise IndexUnavailableError(f"cannot open graph store {self._root}: {exc}") from exc

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Release the store; later calls raise :class:`IndexUnavailableError`."""
        with self._lock:
            self._closed = True
            self._graphs.clear()
            self._subject_index.clear()
            self._unions.clear()
            self._files.clear()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------ read side

    def sparql_query(self, query: str, *, scope: frozenset[str]) -> GraphResult:
        """Evaluate a sandboxed SPARQL query over the union of the in-scope graphs.

        CONSTRUCT/DESCRIBE give their triples (sorted); SELECT must project
        exactly three variables, read as (s, p, o), rows with an unbound one
        skipped, engine order kept only under an outer ORDER BY (else sorted);
        ASK gives no triples and ``metadata["boolean"]``.  ``metadata["rows"]``
        counts the triples returned.  Triples that name a resource outside
        ``scope`` (possible only through IRI constants in the query) are dropped.

        A text over ``sparql_guard.MAX_QUERY_BYTES`` is refused unread; parsing,
        checking and evaluation run in a forked child process (see
        :mod:`.sparql_worker`) that is killed at ``query_timeout``.  An answer
        over ``max_rows`` triples (counted before out-of-scope ones are dropped)
        or over ``sparql_worker.MAX_RESULT_BYTES`` is refused, not truncated.

        Raises:
            TypeError / ValueError: empty query or invalid scope.
            QueryLimitError: the query ran past ``query_timeout``, or its answer
                holds more than ``max_rows`` triples or ``MAX_RESULT_BYTES``.
            QueryError: a query over ``MAX_QUERY_BYTES``, malformed, an update,
                SERVICE / FROM / FROM NAMED / GRAPH, a SELECT of other than three
                variables, or an error raised while evaluating.
            IndexUnavailableError: the store cannot be read.
        """
        validate_non_empty(query, "query")
        check_query_size(query)
        canonical = validate_scope(scope)
        union = self._union(canonical)
        # Parsing and checking run in the worker too, inside the time limit.
        answer = evaluate(
            union, query, init_ns=_INIT_NS, timeout=self._query_timeout, max_rows=self._max_rows
        )
        if answer.boolean is not None:
            return GraphResult(metadata={"boolean": str(answer.boolean).lower(), "rows": "0"})
        triples = answer.triples
        kept = [t for t in triples if _in_scope(t, canonical)]
        metadata = {"rows": str(len(kept))}
        if len(kept) != len(triples):
            metadata["dropped_out_of_scope"] = str(len(triples) - len(kept))
        return GraphResult(triples=kept, metadata=metadata)

    def get_triples(self, subject: str, *, scope: frozenset[str] | None = None) -> GraphResult:
        """Triples whose subject is ``subject`` from the in-scope graphs, sorted.

        ``scope`` is required: without it nothing is read (maintenance that
        means every graph says so with ``scope=frozenset(self.resource_ids())``).

        Raises:
            TypeError: no scope, or an argument of the wrong type.
            ValueError: empty subject or a scope member that is not a ULID.
            IndexUnavailableError: the store cannot be read.
        """
        validate_non_empty(subject, "subject")
        canonical = _required_scope(scope, "get_triples")
        found: set[Triple] = set()
        foreign = False
        with self._lock:
            self._refresh()
            for rid in self._rids_of(subject, canonical):
                res = self._graphs[rid]
                found.update(res.edges_of(subject)[0])
                foreign = foreign or res.foreign
        triples = sorted(found)
        if canonical is not None and foreign:
            triples = [t for t in triples if _in_scope(t, canonical)]
        return _result(triples, {"rows": str(len(triples))})

    def traverse(
        self, start: str, *, depth: int = 2, scope: frozenset[str] | None = None
    ) -> GraphResult:
        """Breadth-first walk along outgoing IRI edges from ``start``.

        Depth 0 gives no triples, depth 1 the triples of ``start``, depth 2
        adds the triples of the IRIs those reach, and so on.  Each triple comes
        once; nodes are visited once, so cycles end.  Only in-scope graphs are
        followed; ``scope`` is required, as for :meth:`get_triples`.

        Raises:
            TypeError: no scope, or an argument of the wrong type.
            ValueError: empty start, negative depth, a scope member not a ULID.
            IndexUnavailableError: the store cannot be read.
        """
        validate_non_empty(start, "start")
        validate_depth(depth)
        canonical = _required_scope(scope, "traverse")
        out: list[Triple] = []
        foreign = False
        with self._lock:
            self._refresh()
            graphs = self._graphs
            index = self._subject_index
            seen: set[Triple] | None = None  # needed once a subject is in two graphs
            visited = {start}
            frontier = [start]
            for _ in range(depth):
                reached: list[str] = []
                for current in frontier:
                    rids = index.get(current)
                    if not rids:
                        continue
                    if len(rids) == 1:
                        (rid,) = rids
                        if canonical is not None and rid not in canonical:
                            continue
                        res = graphs[rid]
                        foreign = foreign or res.foreign
                        triples, targets = res.edges_of(current)
                        if seen is None:
                            out.extend(triples)
                        else:
                            for triple in triples:
                                if triple not in seen:
                                    seen.add(triple)
                                    out.append(triple)
                    else:
                        if seen is None:
                            seen = set(out)
                        pairs: set[tuple[Triple, bool]] = set()
                        for rid in rids if canonical is None else rids & canonical:
                            res = graphs[rid]
                            foreign = foreign or res.foreign
                            pairs.update(res.edges_pairs(current))
                        triples, targets = _sorted_edges(pairs)
                        for triple in triples:
                            if triple not in seen:
                                seen.add(triple)
                                out.append(triple)
                    for target in targets:
                        if target not in visited:
                            visited.add(target)
                            reached.append(target)
                if not reached:
                    break
                frontier = reached
        if canonical is not None and foreign:
            out = [t for t in out if _in_scope(t, canonical)]
        return _result(out, {"rows": str(len(out))})

    # ------------------------------------------------------------ write side

    def upsert(
        self,
        resource_id: str,
        triples: Iterable[WriteTriple],
        *,
        delete_subjects: Iterable[str] = (),
        delete_triples: Iterable[WriteTriple] = (),
    ) -> None:
        """Atomically drop the triples of ``delete_subjects``, then add ``triples``.

        Subjects and predicates are absolute IRIs; an object is an IRI ``str``
        or a :class:`Literal`.  Every ``uko://`` IRI in a triple must name
        ``resource_id``, so a resource graph never links into another one.
        ``delete_triples`` (an extension of the Protocol) names single triples
        to drop in the same change, before ``triples`` are added.

        Raises:
            TypeError: a triple or subject of the wrong type.
            ValueError: an invalid ULID, IRI, or an IRI of another resource.
            IndexUnavailableError: the change could not be written.
        """
        rid = canonical_ulid(resource_id)
        checked: dict[str, str] = {}
        to_add = [_check_triple(t, rid, checked) for t in _materialise(triples, "triples")]
        doomed = set(_check_subjects(delete_subjects, "delete_subjects"))
        drop = [
            _check_triple(t, rid, checked) for t in _materialise(delete_triples, "delete_triples")
        ]
        with self._lock, self._writer_lock():
            self._change(rid, doomed, to_add, drop)

    def delete(self, resource_id: str, subjects: Iterable[str] | None = None) -> None:
        """Remove the triples of ``subjects``, or the whole graph when ``None``.

        Raises:
            TypeError / ValueError: an invalid ULID or subject.
            IndexUnavailableError: the change could not be written.
        """
        rid = canonical_ulid(resource_id)
        doomed = None if subjects is None else set(_check_subjects(subjects, "subjects"))
        with self._lock, self._writer_lock():
            if doomed is not None:
                self._change(rid, doomed, [])
                return
            self._refresh()
            if rid in self._graphs:
                self._remove_files(rid)
                self._install(rid, None)
                self._bump_generation()

    def subjects(self, resource_id: str) -> set[str]:
        """Distinct subjects (IRIs) in a resource's graph; empty if it has none."""
        rid = canonical_ulid(resource_id)
        with self._lock:
            self._refresh()
            res = self._graphs.get(rid)
            return set() if res is None else set(res.by_subject)

    def resource_ids(self) -> set[str]:
        """ULIDs of the resources whose graph is non-empty."""
        with self._lock:
            self._refresh()
            return set(self._graphs)

    # ------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise IndexUnavailableError("the graph store is closed")

    def _rids_of(self, subject: str, scope: frozenset[str] | None) -> set[str]:
        rids = self._subject_index.get(subject, set())
        return rids if scope is None else rids & scope

    def _union(self, scope: frozenset[str]) -> Graph:
        with self._lock:
            self._refresh()
            present = frozenset(rid for rid in scope if rid in self._graphs)
            union = self._unions.get(present)
            if union is not None:
                self._unions.move_to_end(present)
                return union
            union = _rdf_graph(self._graphs[rid] for rid in sorted(present))
            self._unions[present] = union
            while len(self._unions) > self._union_cache_size:
                self._unions.popitem(last=False)
            return union

    def _apply(self, rid: str, ops: Iterable[_Op]) -> list[_Op]:
        """Apply ``ops`` to ``rid``'s graph and indexes; the ones that changed it."""
        res = self._graphs.get(rid)
        if res is None:
            res = self._graphs[rid] = _ResourceGraph()
        done: list[_Op] = []
        touched: set[str] = set()
        for op in ops:
            add, s, p, o = op
            if res.add(s, p, o) if add else res.remove(s, p, o):
                done.append(op)
                touched.add(s)
        index = self._subject_index
        for s in touched:
            if s in res.by_subject:
                index.setdefault(s, set()).add(rid)
            else:
                rids = index.get(s)
                if rids is not None:
                    rids.discard(rid)
                    if not rids:
                        del index[s]
        if not res.size:
            del self._graphs[rid]
        if done:
            self._drop_unions(rid)
        return done

    def _drop_unions(self, rid: str) -> None:
        for key in [key for key in self._unions if rid in key]:
            del self._unions[key]

    def _change(
        self,
        rid: str,
        doomed: set[str],
        to_add: list[tuple[str, str, _Obj]],
        drop: Sequence[tuple[str, str, _Obj]] = (),
    ) -> None:
        """Apply one write; on a failed write, undo it and re-raise.

        Only the change is written (appended to the resource's log), so a
        write costs about its size, not the resource's.  Readers are safe:
        every read of resource graphs holds ``self._lock``, and SPARQL runs
        on union copies.
        """
        self._refresh()
        self._sync_for_write(rid)
        res = self._graphs.get(rid)
        ops: list[_Op] = []
        if res is not None:
            for s in doomed:
                ops.extend((False, s, p, o) for p, o in res.by_subject.get(s, ()))
            ops.extend((False, s, p, o) for s, p, o in dict.fromkeys(drop) if s not in doomed)
        ops.extend((True, s, p, o) for s, p, o in dict.fromkeys(to_add))
        done = self._apply(rid, ops)
        if not done:
            return
        undo: list[_Op] = [(not add, s, p, o) for add, s, p, o in reversed(done)]
        try:
            self._persist(rid, done)
        except IndexUnavailableError:
            self._apply(rid, undo)
            raise
        self._bump_generation_or_undo(rid, undo)
        self._maybe_compact(rid)

    # ------------------------------------------------------------ persistence

    def _paths(self, rid: str) -> tuple[Path, Path]:
        assert self._root is not None
        graphs = self._root / "graphs"
        return graphs / f"{rid}.nt", graphs / f"{rid}.log"

    def _persist(self, rid: str, done: list[_Op]) -> None:
        """Write one applied change to disk; no-op in memory."""
        if self._root is None:
            return
        base, log = self._paths(rid)
        res = self._graphs.get(rid)
        files = self._files.get(rid)
        try:
            if res is None:
                self._remove_files(rid)
            elif files is None:
                # A new resource: its whole graph is the change.  A log left by
                # an interrupted deletion goes first.
                with contextlib.suppress(FileNotFoundError):
                    log.unlink()
                _atomic_write(base, res.serialize())
                self._files[rid] = _Files(_stat_key(base.stat()), None, 0)
            else:
                record = "".join(("+" if add else "-") + _nt_line(s, p, o) for add, s, p, o in done)
                data = _encode(record) + _COMMIT
                ino, size = _append(log, data)
                files.log_ino, files.log_offset = ino, size + len(data)
        except OSError as exc:
            raise IndexUnavailableError(f"cannot write graph of {rid}: {exc}") from exc

    def _remove_files(self, rid: str) -> None:
        """Delete a resource's files: the base first (a log alone is ignored)."""
        if self._root is None:
            return
        try:
            for path in self._paths(rid):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            _fsync_dir(self._root / "graphs")
        except OSError as exc:
            raise IndexUnavailableError(f"cannot write graph of {rid}: {exc}") from exc
        self._files.pop(rid, None)

    def _bump_generation_or_undo(self, rid: str, undo: list[_Op]) -> None:
        files = self._files.get(rid)
        try:
            self._bump_generation()
        except IndexUnavailableError:
            # Other processes look only after a bump: take the change back.
            with contextlib.suppress(OSError):
                self._take_back(rid, files, undo)
            self._apply(rid, undo)
            raise

    def _take_back(self, rid: str, files: _Files | None, undo: list[_Op]) -> None:
        if self._root is None:
            return
        base, log = self._paths(rid)
        if files is None:  # the change removed the resource's files: rewrite them
            res = _ResourceGraph()
            for _, s, p, o in undo:
                res.add(s, p, o)
            _atomic_write(base, res.serialize())
            self._files[rid] = _Files(_stat_key(base.stat()), None, 0)
        elif files.log_ino is None:  # a new resource: its base was the change
            base.unlink()
            self._files.pop(rid, None)
        else:
            record = sum(len(_encode(_nt_line(s, p, o))) + 1 for _, s, p, o in undo)
            offset = files.log_offset - record - len(_COMMIT)
            os.truncate(log, offset)
            files.log_offset = offset

    def _maybe_compact(self, rid: str) -> None:
        """Fold a log that outgrew its base into a new base (content unchanged)."""
        files = self._files.get(rid)
        res = self._graphs.get(rid)
        if self._root is None or files is None or res is None or files.log_ino is None:
            return
        if files.log_offset <= max(files.base[1], _COMPACT_MIN_BYTES):
            return
        base, log = self._paths(rid)
        try:
            # A crash between the two steps leaves a log whose replay on the
            # new base changes nothing: each triple ends as its last op left it.
            _atomic_write(base, res.serialize())
            key = _stat_key(base.stat())
            log.unlink()
            _fsync_dir(base.parent)
        except OSError as exc:  # the data is safe in base + log; try again later
            _log.warning("rdflib_graph.compaction_failed", resource=rid, error=str(exc))
            return
        self._files[rid] = _Files(key, None, 0)

    def _install(self, rid: str, res: _ResourceGraph | None) -> None:
        old = self._graphs.pop(rid, None)
        index = self._subject_index
        if old is not None:
            for s in old.by_subject:
                rids = index.get(s)
                if rids is not None:
                    rids.discard(rid)
                    if not rids:
                        del index[s]
        if res is not None and res.size:
            self._graphs[rid] = res
            for s in res.by_subject:
                rids = index.get(s)
                if rids is None:
                    index[s] = {rid}
                else:
                    rids.add(rid)
        self._drop_unions(rid)

    def _bump_generation(self) -> None:
        if self._root is None:
            return
        path = self._root / "generation"
        try:
            try:
                current = int(path.read_text(encoding="ascii").strip() or "0")
            except (FileNotFoundError, ValueError):
                current = 0
            _atomic_write(path, f"{current + 1}\n".encode("ascii"))
            self._generation_seen = _stat_key(path.stat())
        except OSError as exc:
            raise IndexUnavailableError(f"cannot bump the graph generation: {exc}") from exc

    def _refresh(self) -> None:
        """Pick up other processes' writes (call with ``self._lock`` held)."""
        self._check_open()
        try:
            self._refresh_locked()
        except OSError as exc:
            raise IndexUnavailableError(f"cannot read graph store {self._root}: {exc}") from exc

    def _refresh_locked(self) -> None:
        self._check_open()
        if self._root is None:
            return
        generation = _stat_key((self._root / "generation").stat())
        if generation == self._generation_seen:
            return
        graphs_dir = self._root / "graphs"
        bases: dict[str, _Stat] = {}
        logs: dict[str, tuple[int, int]] = {}
        with os.scandir(graphs_dir) as entries:
            for entry in entries:
                stem, dot, ext = entry.name.partition(".")
                if not dot or not is_ulid(stem) or stem != stem.upper():
                    continue
                if ext == "nt":
                    bases[stem] = _stat_key(entry.stat(follow_symlinks=False))
                elif ext == "log":
                    st = entry.stat(follow_symlinks=False)
                    logs[stem] = (st.st_ino, st.st_size)
        changed = 0
        for rid in set(self._files) - set(bases):
            self._files.pop(rid)
            self._install(rid, None)
            changed += 1
        for rid, key in bases.items():
            changed += self._sync(rid, key, logs.get(rid))
        self._generation_seen = generation
        if changed:
            _log.debug("rdflib_graph.reloaded", resources=changed, store=str(self._root))

    def _sync_for_write(self, rid: str) -> None:
        """Read what a killed writer committed to ``rid`` and cut off its torn tail."""
        if self._root is None:
            return
        base, log = self._paths(rid)
        try:
            try:
                key = _stat_key(os.stat(base, follow_symlinks=False))
            except FileNotFoundError:
                if rid in self._files:
                    self._files.pop(rid)
                    self._install(rid, None)
                return
            try:
                st = os.stat(log, follow_symlinks=False)
                log_stat: tuple[int, int] | None = (st.st_ino, st.st_size)
            except FileNotFoundError:
                log_stat = None
            self._sync(rid, key, log_stat)
            files = self._files.get(rid)
            if files is not None and log_stat is not None and files.log_ino == log_stat[0]:
                size = os.stat(log, follow_symlinks=False).st_size
                if size > files.log_offset:
                    os.truncate(log, files.log_offset)
        except OSError as exc:
            raise IndexUnavailableError(f"cannot read graph store {self._root}: {exc}") from exc

    def _sync(self, rid: str, base_key: _Stat, log_stat: tuple[int, int] | None) -> int:
        """Bring ``rid`` up to date with its files; 1 if anything was read."""
        files = self._files.get(rid)
        if files is None or files.base != base_key:
            self._load(rid)
            return 1
        if log_stat is None:
            if files.log_ino is None:
                return 0
            self._load(rid)
            return 1
        ino, size = log_stat
        if files.log_ino is None:
            offset = 0  # a log started since the base was read
        elif files.log_ino == ino:
            offset = files.log_offset
        else:
            self._load(rid)
            return 1
        if size == offset:
            return 0
        if size < offset or not self._read_log_tail(rid, files, ino, offset):
            self._load(rid)
        return 1

    def _read_log_tail(self, rid: str, files: _Files, ino: int, offset: int) -> bool:
        """Apply the records committed past ``offset``; False if the log was replaced."""
        _, log = self._paths(rid)
        read = _read_from(log, offset)
        if read is None or read[0] != ino:
            return False
        lines, length = _committed(read[1])
        ops = self._ops(rid, lines, log)
        files.log_ino, files.log_offset = ino, offset + length
        if ops:
            self._apply(rid, ops)
        return True

    def _ops(self, rid: str, lines: list[bytes], path: Path) -> list[_Op]:
        parser = _Parser(rid)
        ops: list[_Op] = []
        with _corrupt_is_unavailable(path):
            for raw in lines:
                if raw == b"C":
                    continue
                sign, line = raw[:1], raw[1:].decode("utf-8")
                triple = parser.triple(line)
                if sign not in (b"+", b"-") or triple is None:
                    raise ValueError("a log line is not a change this store writes")
                ops.append((sign == b"+", *triple))
        if parser.foreign:
            res = self._graphs.get(rid)
            if res is not None:
                res.foreign = True
        return ops

    def _load(self, rid: str) -> None:
        """Read ``rid``'s base and committed log afresh."""
        base, log = self._paths(rid)
        for _ in range(8):
            try:
                fd = os.open(base, os.O_RDONLY | os.O_NOFOLLOW)
            except FileNotFoundError:
                self._files.pop(rid, None)
                self._install(rid, None)
                return
            with os.fdopen(fd, "rb") as fh:
                key = _stat_key(os.fstat(fh.fileno()))
                data = fh.read()
            read = _read_from(log, 0)
            try:
                if _stat_key(os.stat(base, follow_symlinks=False)) != key:
                    continue  # compacted meanwhile: the log may belong to the new base
            except FileNotFoundError:
                continue
            break
        else:
            raise IndexUnavailableError(f"graph file {base} keeps changing")
        parser = _Parser(rid)
        res = _ResourceGraph()
        by_subject = res.by_subject
        size = 0
        triple = parser.triple
        with _corrupt_is_unavailable(base):
            for line in data.decode("utf-8").split("\n"):
                parsed = triple(line.rstrip("\r"))
                if parsed is None:
                    continue
                s, p, o = parsed
                edges = by_subject.get(s)
                if edges is None:
                    by_subject[s] = {(p, o)}
                    size += 1
                elif (p, o) not in edges:
                    edges.add((p, o))
                    size += 1
        res.size = size
        res.foreign = parser.foreign
        files = _Files(key, None, 0)
        self._files[rid] = files
        self._install(rid, res)
        if read is not None:
            lines, length = _committed(read[1])
            ops = self._ops(rid, lines, log)
            files.log_ino, files.log_offset = read[0], length
            if ops:
                self._apply(rid, ops)

    @contextlib.contextmanager
    def _writer_lock(self) -> Iterator[None]:
        self._check_open()
        if self._lock_fd is None:
            yield
            return
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        except OSError as exc:
            raise IndexUnavailableError(f"cannot lock graph store {self._root}: {exc}") from exc
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)


def _materialise(items: object, name: str) -> list[object]:
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise TypeError(f"{name} must be an iterable of items, not {type(items).__name__}")
    return list(items)


def _check_subjects(subjects: object, name: str) -> list[str]:
    out = []
    for s in _materialise(subjects, name):
        out.append(validate_non_empty(s, f"{name} member"))
    return out


def _check_iri(value: object, name: str, rid: str, checked: dict[str, str]) -> str:
    # ``checked`` memoises the IRIs of one write: subjects and predicates repeat.
    if isinstance(value, str) and value in checked:
        return checked[value]
    iri = validate_non_empty(value, name)
    if _IRI_RE.fullmatch(iri) is None:
        raise ValueError(f"{name} is not an absolute IRI: {iri[:80]!r}")
    owner = resource_id_of(iri)
    if owner is not None and owner != rid:
        raise ValueError(f"{name} {iri[:80]!r} names resource {owner}, not {rid}")
    # A plain str (not a subclass) so the stored graphs hold only plain strings.
    checked[iri] = str(iri)
    return checked[iri]


def _check_triple(triple: object, rid: str, checked: dict[str, str]) -> tuple[str, str, _Obj]:
    if not isinstance(triple, tuple) or len(triple) != 3:
        raise TypeError("each triple must be a tuple (subject, predicate, object)")
    s, p, o = triple
    subject = _check_iri(s, "subject", rid, checked)
    predicate = _check_iri(p, "predicate", rid, checked)
    obj: _Obj
    if isinstance(o, Literal):
        if not isinstance(o.value, str):
            raise TypeError(f"a literal value must be a str, not {type(o.value).__name__}")
        datatype = None if o.datatype is None else _check_iri(o.datatype, "datatype", rid, checked)
        obj = (str(o.value), datatype)
    elif isinstance(o, str):
        obj = _check_iri(o, "object", rid, checked)
    else:
        raise TypeError(f"an object must be an IRI str or a Literal, not {type(o).__name__}")
    return subject, predicate, obj
