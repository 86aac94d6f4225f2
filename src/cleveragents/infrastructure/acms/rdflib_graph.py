"""``GraphIndex`` over rdflib: one in-memory graph per resource, N-Triples on disk.

Layout under ``store_path``::

    graphs/<ULID>.nt    one file per non-empty resource graph (atomic replace)
    generation          a counter bumped after every write (atomic replace)
    lock                flock'ed by writers so processes write one at a time

Reads first compare the ``generation`` file with the last one seen; when
another process wrote, the resource files whose (mtime_ns, size, inode)
changed are reloaded and removed ones dropped.

SPARQL from a model is checked by :mod:`.sparql_guard` and evaluated only
against a plain ``Graph`` holding the union of the in-scope resource graphs
(cached per scope), never against a Dataset, so no query can name another
resource's graph.  Evaluation runs in a forked child process killed at the
time limit, with a row cap (:mod:`.sparql_worker`).  The N-Triples files are
written and read here, not by rdflib, so literals keep their lexical form
exactly (rdflib's parser normalises ``"010"^^xsd:integer`` to ``"10"``).
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
from typing import Self, cast

import structlog
from rdflib import BNode, Graph, URIRef
from rdflib import Literal as RdfLiteral
from rdflib.plugins.stores.memory import Memory
from rdflib.term import Node

from cleveragents.domain.models.acms.backends import (
    GraphResult,
    Literal,
    Triple,
    WriteTriple,
    validate_depth,
    validate_non_empty,
    validate_positive_int,
)
from cleveragents.domain.models.acms.errors import IndexUnavailableError, QueryError
from cleveragents.domain.models.acms.uko import UKO, resource_id_of
from cleveragents.domain.models.acms.ulids import canonical_ulid, is_ulid, validate_scope
from cleveragents.infrastructure.acms.sparql_guard import check_query
from cleveragents.infrastructure.acms.sparql_worker import evaluate

__all__ = ["RdflibGraphBackend"]

_log = structlog.get_logger("cleveragents.acms.rdflib_graph")

# Prefixes a query may use without declaring them (rdflib adds rdf, rdfs, xsd, ...).
_INIT_NS = {"uko": UKO}

_RdfTriple = tuple[URIRef, URIRef, URIRef | RdfLiteral]
_Stat = tuple[int, int, int]

# An absolute IRI that N-Triples can hold verbatim: a scheme, then no space,
# control character, surrogate or any of <>"{}|^`\ .
_IRI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\x00-\x20\x7f<>\"{}|^`\\\ud800-\udfff]*")

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


def _nt_line(triple: _RdfTriple) -> str:
    s, p, o = triple
    if isinstance(o, RdfLiteral):
        obj = f'"{_escape(str(o))}"'
        if o.datatype is not None:
            obj += f"^^<{o.datatype}>"
    else:
        obj = f"<{o}>"
    return f"<{s}> <{p}> {obj} .\n"


def _serialize(graph: Graph) -> bytes:
    lines = sorted(_nt_line(t) for t in _rdf_triples(graph))
    return "".join(lines).encode("utf-8", "surrogatepass")


def _parse(data: bytes) -> Graph:
    graph = _new_graph()
    for number, line in enumerate(data.decode("utf-8").split("\n"), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _NT_LINE.fullmatch(line.rstrip("\r"))
        if m is None:
            raise ValueError(f"line {number} is not an N-Triples triple this store writes")
        s, p, iri, lexical, datatype = m.groups()
        obj: URIRef | RdfLiteral
        if iri is not None:
            obj = URIRef(iri)
        else:
            value = _UNESCAPE_RE.sub(_unescape_match, lexical) if "\\" in lexical else lexical
            obj = _literal(value, datatype)
        graph.add((URIRef(s), URIRef(p), obj))
    return graph


def _literal(value: str, datatype: str | None) -> RdfLiteral:
    # normalize=False keeps the lexical form exactly as written.
    return RdfLiteral(value, datatype=URIRef(datatype) if datatype else None, normalize=False)


def _new_graph() -> Graph:
    # An explicit store instance: no plugin lookup, never a Dataset.
    return Graph(store=Memory())


def _rdf_triples(graph: Graph) -> Iterator[_RdfTriple]:
    # Resource graphs hold only IRIs and literals (checked on write and read).
    return cast("Iterator[_RdfTriple]", iter(graph))


def _term(node: Node) -> str:
    if isinstance(node, BNode):
        return f"_:{node}"
    return str(node)


def _in_scope(triple: Triple, scope: frozenset[str]) -> bool:
    # The rule ScopedView applies: any term naming a resource names one in scope.
    for term in triple:
        rid = resource_id_of(term)
        if rid is not None and rid not in scope:
            return False
    return True


def _validate_timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"query_timeout must be a number of seconds, not {type(value).__name__}")
    if not 0 < value < math.inf:
        raise ValueError(f"query_timeout must be positive and finite, got {value}")
    return float(value)


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
        self._graphs: dict[str, Graph] = {}
        self._subject_index: dict[Node, set[str]] = {}
        self._unions: OrderedDict[frozenset[str], Graph] = OrderedDict()
        # Per resource: subject -> its triples as strings (sorted) and whether
        # each object is an IRI; built lazily, dropped when the resource changes.
        self._adjacency: dict[str, dict[str, list[tuple[Triple, bool]]]] = {}
        self._file_stats: dict[str, _Stat] = {}
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
            self._adjacency.clear()
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

        The evaluation runs in a forked child process (see :mod:`.sparql_worker`)
        that is killed at ``query_timeout``; an answer over ``max_rows`` triples
        (counted before out-of-scope ones are dropped) is refused, not truncated.

        Raises:
            TypeError / ValueError: empty query or invalid scope.
            QueryLimitError: the query ran past ``query_timeout`` or its answer
                holds more than ``max_rows`` triples.
            QueryError: malformed query, an update, SERVICE / FROM / FROM NAMED /
                GRAPH, a SELECT of other than three variables, or an error
                raised while evaluating.
            IndexUnavailableError: the store cannot be read.
        """
        validate_non_empty(query, "query")
        canonical = validate_scope(scope)
        checked = check_query(query, init_ns=_INIT_NS)
        if checked.form == "SELECT" and len(checked.projection) != 3:
            raise QueryError(
                "a SELECT query must project exactly three variables (subject, predicate, "
                f"object), got {len(checked.projection)}"
            )
        union = self._union(canonical)
        answer = evaluate(union, checked, timeout=self._query_timeout, max_rows=self._max_rows)
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

        ``scope=None`` reads every graph (maintenance use only).

        Raises:
            TypeError / ValueError: empty subject or invalid scope.
            IndexUnavailableError: the store cannot be read.
        """
        validate_non_empty(subject, "subject")
        canonical = None if scope is None else validate_scope(scope)
        with self._lock:
            self._refresh()
            found = self._triples_of(URIRef(subject), canonical)
        triples = sorted({(_term(s), _term(p), _term(o)) for s, p, o in found})
        if canonical is not None:
            triples = [t for t in triples if _in_scope(t, canonical)]
        return GraphResult(triples=triples, metadata={"rows": str(len(triples))})

    def traverse(
        self, start: str, *, depth: int = 2, scope: frozenset[str] | None = None
    ) -> GraphResult:
        """Breadth-first walk along outgoing IRI edges from ``start``.

        Depth 0 gives no triples, depth 1 the triples of ``start``, depth 2
        adds the triples of the IRIs those reach, and so on.  Each triple comes
        once; nodes are visited once, so cycles end.  Only in-scope graphs are
        followed (``scope=None``: all, maintenance use only).

        Raises:
            TypeError / ValueError: empty start, negative depth, invalid scope.
            IndexUnavailableError: the store cannot be read.
        """
        validate_non_empty(start, "start")
        validate_depth(depth)
        canonical = None if scope is None else validate_scope(scope)
        out: list[Triple] = []
        seen: set[Triple] = set()
        with self._lock:
            self._refresh()
            visited = {start}
            frontier = [start]
            for _ in range(depth):
                reached: list[str] = []
                for current in frontier:
                    for triple, iri in self._edges_of(current, canonical):
                        if triple not in seen:
                            seen.add(triple)
                            out.append(triple)
                        target = triple[2]
                        if iri and target not in visited:
                            visited.add(target)
                            reached.append(target)
                if not reached:
                    break
                frontier = reached
        if canonical is not None:
            out = [t for t in out if _in_scope(t, canonical)]
        return GraphResult(triples=out, metadata={"rows": str(len(out))})

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
        checked: dict[str, URIRef] = {}
        to_add = [_check_triple(t, rid, checked) for t in _materialise(triples, "triples")]
        doomed = {URIRef(s) for s in _check_subjects(delete_subjects, "delete_subjects")}
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
        doomed = (
            None if subjects is None else {URIRef(s) for s in _check_subjects(subjects, "subjects")}
        )
        with self._lock, self._writer_lock():
            if doomed is not None:
                self._change(rid, doomed, [])
                return
            self._refresh()
            if rid in self._graphs:
                self._persist(rid, None)
                self._install(rid, None)
                self._bump_generation()

    def subjects(self, resource_id: str) -> set[str]:
        """Distinct subjects (IRIs) in a resource's graph; empty if it has none."""
        rid = canonical_ulid(resource_id)
        with self._lock:
            self._refresh()
            graph = self._graphs.get(rid)
            return set() if graph is None else {str(s) for s in graph.subjects(unique=True)}

    def resource_ids(self) -> set[str]:
        """ULIDs of the resources whose graph is non-empty."""
        with self._lock:
            self._refresh()
            return set(self._graphs)

    # ------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise IndexUnavailableError("the graph store is closed")

    def _edges_of(self, subject: str, scope: frozenset[str] | None) -> list[tuple[Triple, bool]]:
        """The triples of ``subject`` in in-scope graphs, as strings, sorted."""
        rids = self._subject_index.get(URIRef(subject), set())
        if scope is not None:
            rids = rids & scope
        edges: list[tuple[Triple, bool]] = []
        for rid in rids:
            adjacency = self._adjacency.get(rid)
            if adjacency is None:
                adjacency = {}
                for s, p, o in self._graphs[rid]:
                    key = _term(s)
                    triple = (key, _term(p), _term(o))
                    adjacency.setdefault(key, []).append((triple, isinstance(o, URIRef)))
                for entries in adjacency.values():
                    entries.sort()
                self._adjacency[rid] = adjacency
            edges.extend(adjacency.get(subject, ()))
        if len(rids) > 1:
            edges.sort()
        return edges

    def _triples_of(
        self, subject: URIRef, scope: frozenset[str] | None
    ) -> set[tuple[Node, Node, Node]]:
        rids = self._subject_index.get(subject, set())
        if scope is not None:
            rids = rids & scope
        found: set[tuple[Node, Node, Node]] = set()
        for rid in rids:
            found.update(self._graphs[rid].triples((subject, None, None)))
        return found

    def _union(self, scope: frozenset[str]) -> Graph:
        with self._lock:
            self._refresh()
            present = frozenset(rid for rid in scope if rid in self._graphs)
            union = self._unions.get(present)
            if union is not None:
                self._unions.move_to_end(present)
                return union
            union = _new_graph()
            for rid in sorted(present):
                union += self._graphs[rid]
            self._unions[present] = union
            while len(self._unions) > self._union_cache_size:
                self._unions.popitem(last=False)
            return union

    def _change(
        self,
        rid: str,
        doomed: set[URIRef],
        to_add: list[_RdfTriple],
        drop: Sequence[_RdfTriple] = (),
    ) -> None:
        """Apply one write in place; on a failed write, undo it and re-raise.

        Changing the resource graph in place keeps a write proportional to its
        size, not the resource's.  Readers are safe: every read of resource
        graphs holds ``self._lock``, and SPARQL runs on union copies.
        """
        self._refresh()
        graph = self._graphs.get(rid)
        if graph is None:
            graph = _new_graph()
        removed = [t for s in doomed for t in graph.triples((s, None, None))]
        removed += [t for t in dict.fromkeys(drop) if t[0] not in doomed and t in graph]
        for t in removed:
            graph.remove(t)
        added = [t for t in dict.fromkeys(to_add) if t not in graph]
        for t in added:
            graph.add(t)
        if not removed and not added:
            return
        try:
            self._persist(rid, graph if len(graph) else None)
        except IndexUnavailableError:
            for t in added:
                graph.remove(t)
            for t in removed:
                graph.add(t)
            raise
        for subject in doomed | {t[0] for t in added} | {t[0] for t in removed}:
            rids = self._subject_index.setdefault(subject, set())
            if (subject, None, None) in graph:
                rids.add(rid)
            else:
                rids.discard(rid)
                if not rids:
                    del self._subject_index[subject]
        if len(graph):
            self._graphs[rid] = graph
        else:
            self._graphs.pop(rid, None)
        self._unions.clear()
        self._adjacency.pop(rid, None)
        self._bump_generation()

    def _persist(self, rid: str, graph: Graph | None) -> None:
        """Write the resource's file (remove it for ``None``); no-op in memory."""
        if self._root is None:
            return
        path = self._root / "graphs" / f"{rid}.nt"
        try:
            if graph is not None:
                _atomic_write(path, _serialize(graph))
                self._file_stats[rid] = _stat_key(path.stat())
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                _fsync_dir(path.parent)
                self._file_stats.pop(rid, None)
        except OSError as exc:
            raise IndexUnavailableError(f"cannot write graph of {rid}: {exc}") from exc

    def _install(self, rid: str, graph: Graph | None) -> None:
        old = self._graphs.pop(rid, None)
        if old is not None:
            for s in old.subjects(unique=True):
                rids = self._subject_index.get(s)
                if rids is not None:
                    rids.discard(rid)
                    if not rids:
                        del self._subject_index[s]
        if graph is not None:
            self._graphs[rid] = graph
            for s in graph.subjects(unique=True):
                self._subject_index.setdefault(s, set()).add(rid)
        self._unions.clear()
        self._adjacency.pop(rid, None)

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
        on_disk: dict[str, _Stat] = {}
        with os.scandir(graphs_dir) as entries:
            for entry in entries:
                stem, dot, ext = entry.name.partition(".")
                if dot and ext == "nt" and is_ulid(stem) and stem == stem.upper():
                    on_disk[stem] = _stat_key(entry.stat(follow_symlinks=False))
        changed = 0
        for rid in set(self._file_stats) - set(on_disk):
            self._file_stats.pop(rid)
            self._install(rid, None)
            changed += 1
        for rid, key in on_disk.items():
            if self._file_stats.get(rid) != key:
                self._load(rid, graphs_dir / f"{rid}.nt")
                changed += 1
        self._generation_seen = generation
        if changed:
            _log.debug("rdflib_graph.reloaded", resources=changed, store=str(self._root))

    def _load(self, rid: str, path: Path) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            self._file_stats.pop(rid, None)
            self._install(rid, None)
            return
        with os.fdopen(fd, "rb") as fh:
            key = _stat_key(os.fstat(fh.fileno()))
            data = fh.read()
        try:
            graph = _parse(data)
        except ValueError as exc:  # UnicodeDecodeError included
            raise IndexUnavailableError(f"corrupt graph file {path}: {exc}") from exc
        self._file_stats[rid] = key
        self._install(rid, graph if len(graph) else None)

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


def _check_iri(value: object, name: str, rid: str, checked: dict[str, URIRef]) -> URIRef:
    # ``checked`` memoises the IRIs of one write: subjects and predicates repeat.
    if isinstance(value, str) and value in checked:
        return checked[value]
    iri = validate_non_empty(value, name)
    if _IRI_RE.fullmatch(iri) is None:
        raise ValueError(f"{name} is not an absolute IRI: {iri[:80]!r}")
    owner = resource_id_of(iri)
    if owner is not None and owner != rid:
        raise ValueError(f"{name} {iri[:80]!r} names resource {owner}, not {rid}")
    checked[iri] = URIRef(iri)
    return checked[iri]


def _check_triple(triple: object, rid: str, checked: dict[str, URIRef]) -> _RdfTriple:
    if not isinstance(triple, tuple) or len(triple) != 3:
        raise TypeError("each triple must be a tuple (subject, predicate, object)")
    s, p, o = triple
    subject = _check_iri(s, "subject", rid, checked)
    predicate = _check_iri(p, "predicate", rid, checked)
    obj: URIRef | RdfLiteral
    if isinstance(o, Literal):
        if not isinstance(o.value, str):
            raise TypeError(f"a literal value must be a str, not {type(o.value).__name__}")
        datatype = (
            None if o.datatype is None else str(_check_iri(o.datatype, "datatype", rid, checked))
        )
        obj = _literal(o.value, datatype)
    elif isinstance(o, str):
        obj = _check_iri(o, "object", rid, checked)
    else:
        raise TypeError(f"an object must be an IRI str or a Literal, not {type(o).__name__}")
    return subject, predicate, obj
