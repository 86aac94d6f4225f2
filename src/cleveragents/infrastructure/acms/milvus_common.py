"""What the Milvus text and vector adapters share: the client, scope filters,
error translation and the collection layout.

One client code path serves Milvus Lite's server, a standalone Milvus and a
cluster: all speak the same gRPC API through ``pymilvus.MilvusClient``.

Scope is a *filter expression* evaluated by the server before ranking
(``resource_id in ["…", "…"]``).  A filter is pasted text, so every member
is validated as a ULID (26 characters of Crockford base32: no quote, bracket,
comma, backslash or space can reach the expression) and written in canonical
upper case; the expression is built only here, from nothing else.  Primary
keys in ``id in [...]`` deletions are SHA-256 hex digests of unit URIs.

Read-after-write: collections are created with consistency level ``Strong``
and every search and query asks for ``Strong`` again, so the server waits
until it has applied every write acknowledged before the request started.
No ``flush`` is needed for visibility (a flush seals segments into object
storage; it is slow and Milvus itself advises against calling it per write):
an insert, upsert or delete that returned is visible to the next search.

Only a write creates a collection.  A read (a search, a count, ``status``)
of a collection the server does not hold never creates it: an empty one
made there would answer every query with nothing, and a mistyped
collection name or a server that lost its data would look healthy.  The
read raises :class:`IndexUnavailableError` naming the server and the
collection, unless the caller's ``required`` says nothing needs it yet (a
fresh deployment, nothing indexed: the read is empty, as a new local index
is).  A backend built without ``required`` (used on its own, by its
writer) creates its collection when it opens, as a local index is made.

Every call carries ``timeout`` seconds; pymilvus retries an unreachable
server only until then, and any engine failure becomes an
:class:`IndexUnavailableError`.  A server restarted with its data holds the
collection *released*: a call it refuses for that loads the collection and
is retried once, so a restart costs no failed request.  pymilvus's own
loggers are silenced (what they report is translated here) and gRPC's C
core logs errors only, unless ``GRPC_VERBOSITY`` says otherwise.

Text longer than a VARCHAR (65,535 bytes) is cut at a character boundary,
never refused: one long line of a file must not stop a reindex.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from cleveragents._logging import get_logger
from cleveragents.domain.models.acms.errors import IndexUnavailableError
from cleveragents.domain.models.acms.uko import resource_id_of
from cleveragents.domain.models.acms.ulids import canonical_ulid

if TYPE_CHECKING:
    from pymilvus import MilvusClient

__all__ = [
    "MAX_TOP_K",
    "MAX_VARCHAR_BYTES",
    "TRUNCATED_KEY",
    "MilvusCollection",
    "encode_varchar",
    "fit_meta",
    "fit_terms",
    "fit_unit",
    "fit_varchar",
    "ids_filter",
    "resource_filter",
    "scope_filter",
    "unit_id",
    "uris_of",
]

_log = get_logger("cleveragents.acms.milvus")

# gRPC's fork support makes a forked child abort (SIGABRT) once a channel is
# open, and the rdflib adapter forks a worker per SPARQL query: a process with
# both (a mixed profile, a benchmark) lost every query.  The child never uses
# gRPC, so its fork handlers are switched off.  gRPC reads this when it is
# first imported, which is below (pymilvus is imported lazily, on first use).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
# gRPC's C core otherwise prints connection chatter (``Got goaway ...
# too_many_pings`` from an idle channel) straight to stderr, under any
# ``--log-level``.  Read when gRPC loads, as above; an operator's own
# setting wins.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
# pymilvus logs every failed RPC, retry and reconnection (with tracebacks) to
# stderr through its own handlers, not ours; each such failure reaches the
# caller here as one IndexUnavailableError, so these loggers are silenced.
# (Its query iterator also warns on every use against Milvus Lite, which
# reports no MVCC timestamp; Strong consistency makes that harmless.)  Set
# after pymilvus is imported: its logging set-up resets levels on import.
_PYMILVUS_LOGGERS = ("pymilvus", "pymilvus.milvus_client", "pymilvus.bulk_writer")
# Milvus's codes for "collection not found" and "collection not loaded".
_NOT_FOUND = 100
_NOT_LOADED = 101

# Milvus caps a search's top-k (and a query's offset + limit) at 16,384.
MAX_TOP_K = 16_384
# A VARCHAR field holds at most 65,535 bytes of UTF-8.
MAX_VARCHAR_BYTES = 65_535
_ITER_BATCH = 4_096
_DELETE_BATCH = 1_000
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
_CANONICAL_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_STRONG = "Strong"

_T = TypeVar("_T")


def unit_id(uko_uri: str) -> str:
    """Primary key of a unit: the SHA-256 of its URI (URIs may exceed a key's length)."""
    return hashlib.sha256(uko_uri.encode("utf-8", "surrogatepass")).hexdigest()


def _ulid_literal(value: str) -> str:
    rid = canonical_ulid(value)
    # canonical_ulid already guarantees this; the filter is a security boundary,
    # so the character set is checked once more right where text is pasted.
    if _CANONICAL_ULID.fullmatch(rid) is None:  # pragma: no cover - defence in depth
        raise ValueError(f"not a valid ULID: {value[:64]!r}")
    return f'"{rid}"'


def scope_filter(scope: frozenset[str]) -> str:
    """``resource_id in ["A", "B"]`` for a non-empty scope of ULIDs.

    Raises:
        ValueError: a member is not a ULID, or the scope is empty (an empty
            list would be a server-side error; callers answer [] themselves).
    """
    if not scope:
        raise ValueError("an empty scope selects nothing; it has no filter")
    return "resource_id in [" + ", ".join(sorted(_ulid_literal(r) for r in scope)) + "]"


def resource_filter(resource_id: str) -> str:
    """``resource_id == "A"`` for one validated ULID."""
    return "resource_id == " + _ulid_literal(resource_id)


def ids_filter(ids: Iterable[str]) -> str:
    """``id in ["…"]`` for primary keys made by :func:`unit_id`."""
    parts = []
    for key in ids:
        if _HEX64.fullmatch(key) is None:  # pragma: no cover - keys are made here
            raise ValueError("not a unit id")
        parts.append(f'"{key}"')
    return "id in [" + ", ".join(parts) + "]"


def _check_timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"timeout must be a number of seconds, not {type(value).__name__}")
    if not 0 < value < math.inf:
        raise ValueError(f"timeout must be positive and finite, got {value}")
    return float(value)


class MilvusCollection:
    """One Milvus collection through one client: creation, calls, errors.

    Args:
        uri: server address, e.g. ``http://milvus:19530``.
        token: ``user:password`` or an API key; never logged.
        collection: collection name (letters, digits, ``_``).
        timeout: seconds any one call may take, retries included.
        create: a function that creates the collection with a client when it
            does not exist yet.
        check: a function that raises ``ValueError`` when an existing
            collection does not fit (its ``describe_collection`` dict).
        required: whether a read of a missing collection is an error (the
            catalog lists indexed units it should hold); a read never
            creates it.  ``None``: a backend used on its own, whose owner
            writes: the collection is created at once when missing.
    """

    def __init__(
        self,
        *,
        uri: str,
        token: str | None,
        collection: str,
        timeout: float,
        create: Callable[[MilvusClient, str], None],
        check: Callable[[dict[str, Any]], None],
        required: Callable[[], bool] | None = None,
    ) -> None:
        if not isinstance(uri, str) or not uri.strip():
            raise ValueError("the Milvus uri must be a non-empty string")
        if not isinstance(collection, str) or _NAME_RE.fullmatch(collection) is None:
            raise ValueError(f"not a valid Milvus collection name: {collection!r}")
        self.name = collection
        self.timeout = _check_timeout(timeout)
        self._lock = threading.Lock()
        self._closed = False
        self._uri = uri
        self._token = token or ""
        self._client: MilvusClient | None = None
        self._create = create
        self._check = check
        self._required = required
        self._exists = False
        self._connect()
        try:
            if required is None:
                self.create_missing()
            else:
                self._look()
        except BaseException:
            self.close()
            raise

    def _look(self) -> bool:
        """Whether the server holds the collection (checked and loaded when it
        does); asks only while it was not seen, or after it went missing."""
        if not self._exists and self.call("has_collection", self.name):
            self._check(self.call("describe_collection", self.name))
            self.call("load_collection", self.name)
            self._exists = True
        return self._exists

    def create_missing(self) -> None:
        """Create the collection if the server does not hold it (writers only)."""
        if not self._look():
            self._create(self._live(), self.name)
            _log.info("acms.milvus.collection_created", collection=self.name)
            self.call("load_collection", self.name)
            self._exists = True

    def _readable(self) -> bool:
        """Whether a read should ask the server: the collection exists.

        Raises:
            IndexUnavailableError: it does not, and something needs it.
        """
        if self._look():
            return True
        if self._required is None or self._required():  # None: created, then dropped
            raise self._missing()
        return False

    def _missing(self) -> IndexUnavailableError:
        return IndexUnavailableError(
            f"the Milvus collection {self.name} does not exist on {redact_userinfo(self._uri)} "
            "(dropped, the server lost its data, or a mistyped collection name): check "
            "ACMS_MILVUS_TEXT_COLLECTION / ACMS_MILVUS_VECTOR_COLLECTION, then run "
            "`acms reindex` to write the remote indexes again"
        )

    def _connect(self) -> MilvusClient:
        try:
            from pymilvus import MilvusClient

            for name in _PYMILVUS_LOGGERS:
                logging.getLogger(name).setLevel(logging.CRITICAL + 1)
            client = MilvusClient(uri=self._uri, token=self._token, timeout=self.timeout)
        except Exception as exc:
            # The message may name the server but never the token.
            raise IndexUnavailableError(
                f"cannot connect to Milvus at {redact_userinfo(self._uri)}: {type(exc).__name__}"
            ) from None
        self._client = client
        return client

    def _live(self) -> MilvusClient:
        if self._closed:
            raise IndexUnavailableError(f"the Milvus collection {self.name} is closed")
        if self._client is None:
            # The last call failed: start a fresh client and load the collection
            # again (a restarted Milvus Lite serves it only after a load).
            client = self._connect()
            if self._exists:
                self._translated(
                    "load_collection",
                    lambda: client.load_collection(self.name, timeout=self.timeout),
                )
            return client
        return self._client

    def call(self, name: str, *args: object, **kwargs: object) -> Any:  # noqa: ANN401
        """``client.<name>(*args, timeout=..., **kwargs)`` with engine errors translated.

        After a failure the next call reconnects, and a collection the server
        holds released (it restarted) is loaded and the call retried once, so
        a restarted server is served again at once.
        """
        client = self._live()
        kwargs.setdefault("timeout", self.timeout)
        return self._translated(name, lambda: getattr(client, name)(*args, **kwargs))

    def _translated(self, what: str, thunk: Callable[[], _T]) -> _T:
        try:
            try:
                return thunk()
            except Exception as exc:
                if _code(exc) != _NOT_LOADED or what == "load_collection":
                    raise
                client = self._live()
                client.load_collection(self.name, timeout=self.timeout)
                _log.info("acms.milvus.collection_reloaded", collection=self.name)
                return thunk()
        except (ValueError, TypeError, IndexUnavailableError):
            raise
        except Exception as exc:
            self._drop_client()
            if _code(exc) == _NOT_FOUND:
                # Dropped while in use: the next write creates it again.
                self._exists = False
                raise self._missing() from exc
            raise IndexUnavailableError(
                f"Milvus call {what} on {self.name} at {redact_userinfo(self._uri)} "
                f"failed: {_short(exc)}"
            ) from exc

    def _drop_client(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def search(
        self,
        data: list[Any],
        anns_field: str,
        *,
        limit: int,
        expr: str,
        metric: str,
        output_fields: list[str],
    ) -> list[dict[str, Any]]:
        """One strong-consistency search; the hits of the single query."""
        if not self._readable():
            return []
        hits = self.call(
            "search",
            self.name,
            data=data,
            anns_field=anns_field,
            limit=min(limit, MAX_TOP_K),
            filter=expr,
            output_fields=output_fields,
            search_params={"metric_type": metric},
            consistency_level=_STRONG,
        )
        return list(hits[0]) if hits else []

    def any_row(self, expr: str) -> bool:
        """Whether a row matches ``expr``: one row asked for (none from a
        missing collection)."""
        if not self._readable():
            return False
        rows = self.call(
            "query",
            self.name,
            filter=expr,
            output_fields=["id"],
            limit=1,
            consistency_level=_STRONG,
        )
        return bool(rows)

    def iterate(self, expr: str, output_fields: list[str]) -> Iterator[dict[str, Any]]:
        """Every row matching ``expr`` (a query iterator, any number of rows)."""
        if not self._readable():
            return
        it = self.call(
            "query_iterator",
            self.name,
            batch_size=_ITER_BATCH,
            filter=expr,
            output_fields=output_fields,
            consistency_level=_STRONG,
        )
        try:
            while True:
                batch = self._translated("query_iterator", it.next)
                if not batch:
                    return
                yield from batch
        finally:
            with contextlib.suppress(Exception):
                it.close()

    def delete_ids(self, ids: Iterable[str]) -> None:
        """Delete rows by primary key, in batches (none from a missing collection)."""
        if not self._look():
            return
        keys = sorted(set(ids))
        for i in range(0, len(keys), _DELETE_BATCH):
            self.call("delete", self.name, filter=ids_filter(keys[i : i + _DELETE_BATCH]))

    def delete_where(self, expr: str) -> None:
        """Delete every row matching ``expr`` (none from a missing collection)."""
        if self._look():
            self.call("delete", self.name, filter=expr)

    def upsert(self, rows: list[dict[str, Any]]) -> None:
        """Insert or replace rows by primary key, creating the collection if need be."""
        if rows:
            self.create_missing()
            self.call("upsert", self.name, rows)

    def ping(self) -> None:
        """Ask the server now whether it holds the collection (one metadata
        call; a collection seen before is described, so a dropped one is
        noticed).

        Raises:
            IndexUnavailableError: the server is unreachable, or the
                collection is missing while something needs it (see
                ``required``).
        """
        if self._exists:
            try:
                self.call("describe_collection", self.name)
            except IndexUnavailableError:
                if self._exists:  # not "does not exist": the server failed
                    raise
        self._readable()

    def close(self) -> None:
        """Close the client; later calls raise :class:`IndexUnavailableError`."""
        self._closed = True
        self._drop_client()


def redact_userinfo(uri: str) -> str:
    """``uri`` fit for a message or a log: ``http://user:secret@host`` ->
    ``http://***@host``.  Everything up to the *last* ``@`` goes, since a
    password may hold ``@`` or ``/`` (a pattern stopping at the first of
    either printed the rest of the password); a path holding ``@`` loses
    more than it must, which a message can afford."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        scheme, rest = "", uri
    if "@" not in rest:
        return uri
    return f"{scheme}{sep}***@{rest.rpartition('@')[2]}"


def _code(exc: BaseException) -> object:
    # pymilvus's MilvusException carries the server's error code.
    return getattr(exc, "code", None)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")
_SHORT_CHARS = 300


def _short(exc: BaseException) -> str:
    """What failed, in one bounded line: the gRPC status code and details
    when a gRPC error is in the chain (its ``str`` is a multi-line dump that
    a first line cut before the status), else the error's text, control
    characters and runs of spaces made one space."""
    text = ""
    seen: BaseException | None = exc
    for _ in range(4):  # the error, then what it wraps
        if seen is None:
            break
        code, details = getattr(seen, "code", None), getattr(seen, "details", None)
        if callable(code) and callable(details):  # grpc.RpcError
            try:
                status = code()
                text = f"gRPC {getattr(status, 'name', status)}: {details() or ''}"
            except Exception:  # a broken error object: its text below
                text = ""
            if text:
                break
        seen = seen.__cause__ or seen.__context__
    if not text:
        text = str(exc) or type(exc).__name__
    text = " ".join(_CONTROL.sub(" ", text).split())
    if len(text) > _SHORT_CHARS:
        text = text[: _SHORT_CHARS - 3] + "..."
    return text or type(exc).__name__


def encode_varchar(text: str, field: str) -> str:
    """``text`` as valid UTF-8 that fits a VARCHAR field.

    For identity fields (a URI), which cannot be cut: content goes through
    :func:`fit_varchar`.

    Raises:
        ValueError: more than :data:`MAX_VARCHAR_BYTES` bytes.
    """
    data = text.encode("utf-8", "replace")
    if len(data) > MAX_VARCHAR_BYTES:
        raise ValueError(
            f"{field} is {len(data)} bytes of UTF-8; a Milvus VARCHAR holds at most "
            f"{MAX_VARCHAR_BYTES}"
        )
    return data.decode("utf-8")


def fit_varchar(text: str, limit: int = MAX_VARCHAR_BYTES) -> tuple[str, bool]:
    """``text`` as valid UTF-8 of at most ``limit`` bytes, and whether it was cut.

    The start is kept, cut at a character boundary (never half a character).
    """
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return data.decode("utf-8"), False
    return data[:limit].decode("utf-8", "ignore"), True


def fit_terms(terms: str, limit: int = MAX_VARCHAR_BYTES) -> tuple[str, bool]:
    """Space-separated ``terms`` cut to at most ``limit`` bytes at a space,
    so no half term is indexed; and whether they were cut."""
    data = terms.encode("utf-8", "replace")
    if len(data) <= limit:
        return data.decode("utf-8"), False
    # The last space at or before byte ``limit``: complete characters before it.
    return data[: limit + 1].rpartition(b" ")[0].decode("utf-8"), True


# Milvus refuses a JSON value over 64 KiB; measured as pymilvus sends it at
# worst (every non-ASCII character escaped), with room to spare.
_MAX_JSON_BYTES = 60_000


# Metadata that locates a unit: cut only when nothing else is left to cut.
_LOCATING = frozenset({"path", "start_line", "end_line", "language", "resource_id"})


def fit_meta(meta: Mapping[str, str]) -> tuple[dict[str, str], bool]:
    """``meta`` whose JSON fits a Milvus JSON field, and whether a value was cut.

    Values come from file content (defined and called names); while the whole
    is too long, the value longest as JSON is halved (keeping its start),
    among those that describe content (``symbols``, ``calls``, ...) before
    any that locates the unit (``path``, its lines, its language).
    """
    out = dict(meta)
    cut = False
    while len(json.dumps(out)) > _MAX_JSON_BYTES:
        named = [k for k in out if k not in _LOCATING and out[k]] or list(out)
        key = max(named, key=lambda k: len(json.dumps(out[k])))
        if not out[key]:  # pragma: no cover - only keys left: cannot happen for str -> str
            raise ValueError("unit metadata keys are too long for Milvus")
        out[key] = out[key][: len(out[key]) // 2]
        cut = True
    return out, cut


TRUNCATED_KEY = "truncated"


def fit_unit(
    uko_uri: str, content: str, metadata: Mapping[str, str], terms: str | None = None
) -> dict[str, Any]:
    """The ``uko_uri``, ``content``, ``meta`` (and ``terms``) fields of a unit's row.

    Content, terms and metadata values are cut to fit (keeping their start);
    when anything was, ``meta["truncated"]`` names it (``content terms``), and
    the unit's URI and line range are unchanged.

    Raises:
        ValueError: the URI is longer than a VARCHAR (it names the unit, so it
            is never cut; a path is at most 4,096 bytes, so a file's is not).
    """
    row: dict[str, Any] = {"uko_uri": encode_varchar(uko_uri, "uko_uri")}
    cut: list[str] = []
    row["content"], content_cut = fit_varchar(content)
    if content_cut:
        cut.append("content")
    if terms is not None:
        row["terms"], terms_cut = fit_terms(terms)
        if terms_cut:
            cut.append("terms")
    meta, meta_cut = fit_meta(metadata)
    if meta_cut:
        cut.append("meta")
    if cut:
        meta[TRUNCATED_KEY] = " ".join(cut)
        _log.info("acms.milvus.unit_cut", uko_uri=uko_uri[:200], fields=cut)
    row["meta"] = meta
    return row


def uris_of(rid: str, uris: Iterable[str]) -> set[str]:
    """The URIs, each checked to name resource ``rid``."""
    if isinstance(uris, str | bytes):
        raise TypeError("uris must be an iterable of URIs, not a single string")
    out = set()
    for uri in uris:
        if not isinstance(uri, str):
            raise TypeError("a unit URI must be a str")
        owner = resource_id_of(uri)
        if owner != rid:
            raise ValueError(f"URI {uri[:80]!r} does not belong to {rid}")
        out.add(uri)
    return out
