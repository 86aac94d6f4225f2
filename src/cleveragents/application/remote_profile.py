"""The ``remote`` profile: Milvus for text and vectors, a SPARQL 1.1 endpoint
for the graph, configured from the environment.

=============================  ==========================================
``ACMS_MILVUS_URI``            Milvus address, e.g. ``http://milvus:19530`` (required)
``ACMS_MILVUS_TOKEN``          ``user:password`` or API key (secret, optional)
``ACMS_MILVUS_TEXT_COLLECTION``   default ``acms_text``
``ACMS_MILVUS_VECTOR_COLLECTION`` default ``acms_vectors``
``ACMS_SPARQL_QUERY_URL``      SPARQL query endpoint (required)
``ACMS_SPARQL_UPDATE_URL``     SPARQL update endpoint (required)
``ACMS_SPARQL_STORE_URL``      Graph Store Protocol endpoint (required)
``ACMS_SPARQL_USER`` / ``ACMS_SPARQL_PASSWORD``  HTTP basic auth (secret, optional)
``ACMS_REMOTE_TIMEOUT``        seconds per server call, reads and writes (default 10)
=============================  ==========================================

User info in a SPARQL URL (``http://user:password@host/query``) is moved
into the basic-auth credentials, percent-decoding undone: the HTTP client
logs every request's URL, so it never sees one with a password.  Every URL
that holds credentials and ``ACMS_SPARQL_USER``/``PASSWORD`` must agree (one
client talks to the three endpoints); a difference is refused naming the
variables.

The registry and the indexer's catalog stay in ``ACMS_DATA_DIR`` as in the
``local`` profile.  Secrets are held in :class:`RemoteSettings` fields that
``repr`` hides and are never put into a log event or an error message.
"""

from __future__ import annotations

import math
import os
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dependency_injector import providers

from cleveragents._logging import get_logger
from cleveragents.domain.models.acms.backends import GraphIndex, TextIndex, VectorIndex
from cleveragents.infrastructure.acms.index_store import ManagedIndexStore
from cleveragents.infrastructure.acms.milvus_common import redact_userinfo

if TYPE_CHECKING:
    from cleveragents.application.container import Container

__all__ = ["RemoteSettings", "remote_settings", "wire_remote"]

_log = get_logger("cleveragents.acms.container")


@dataclass(frozen=True)
class RemoteSettings:
    """Where the remote engines are and how to authenticate (secrets hidden)."""

    milvus_uri: str
    sparql_query_url: str
    sparql_update_url: str
    sparql_store_url: str
    milvus_token: str | None = field(default=None, repr=False)
    sparql_user: str | None = None
    sparql_password: str | None = field(default=None, repr=False)
    text_collection: str = "acms_text"
    vector_collection: str = "acms_vectors"
    timeout: float = 10.0

    def public(self) -> dict[str, str]:
        """The settings fit to log: addresses (userinfo removed), no secrets."""
        return {
            "milvus_uri": redact_userinfo(self.milvus_uri),
            "sparql_query_url": redact_userinfo(self.sparql_query_url),
            "sparql_update_url": redact_userinfo(self.sparql_update_url),
            "sparql_store_url": redact_userinfo(self.sparql_store_url),
            "milvus_token": "set" if self.milvus_token else "unset",
            "sparql_auth": "set" if self.sparql_password else "unset",
            "text_collection": self.text_collection,
            "vector_collection": self.vector_collection,
        }


def remote_settings(environ: Mapping[str, str] | None = None) -> RemoteSettings:
    """Read :class:`RemoteSettings` from the environment.

    Raises:
        ValueError: a required variable is missing or a value is invalid
            (the message names the variable, never a secret's value).
    """
    env = os.environ if environ is None else environ

    def required(name: str) -> str:
        value = env.get(name, "").strip()
        if not value:
            raise ValueError(f"the remote profile needs {name}")
        return value

    raw_timeout = env.get("ACMS_REMOTE_TIMEOUT", "10")
    try:
        timeout = float(raw_timeout)
    except ValueError:
        raise ValueError(f"ACMS_REMOTE_TIMEOUT must be a number, got {raw_timeout!r}") from None
    if not 0 < timeout < math.inf:
        raise ValueError("ACMS_REMOTE_TIMEOUT must be positive and finite")
    user = env.get("ACMS_SPARQL_USER") or None
    password = env.get("ACMS_SPARQL_PASSWORD") or None
    if (user is None) != (password is None):
        raise ValueError("set both ACMS_SPARQL_USER and ACMS_SPARQL_PASSWORD, or neither")
    credentials = None if user is None or password is None else (user, password)
    source = "ACMS_SPARQL_USER/ACMS_SPARQL_PASSWORD"
    urls = {}
    for name in ("ACMS_SPARQL_QUERY_URL", "ACMS_SPARQL_UPDATE_URL", "ACMS_SPARQL_STORE_URL"):
        urls[name], found = _without_userinfo(required(name), name)
        if found is not None and credentials is not None and found != credentials:
            raise ValueError(f"the credentials in {name} differ from those in {source}")
        if found is not None and credentials is None:
            credentials, source = found, name
    return RemoteSettings(
        milvus_uri=required("ACMS_MILVUS_URI"),
        sparql_query_url=urls["ACMS_SPARQL_QUERY_URL"],
        sparql_update_url=urls["ACMS_SPARQL_UPDATE_URL"],
        sparql_store_url=urls["ACMS_SPARQL_STORE_URL"],
        milvus_token=env.get("ACMS_MILVUS_TOKEN") or None,
        sparql_user=None if credentials is None else credentials[0],
        sparql_password=None if credentials is None else credentials[1],
        text_collection=env.get("ACMS_MILVUS_TEXT_COLLECTION") or "acms_text",
        vector_collection=env.get("ACMS_MILVUS_VECTOR_COLLECTION") or "acms_vectors",
        timeout=timeout,
    )


def _without_userinfo(url: str, name: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its user info, and the (user, password) it held.

    Raises:
        ValueError: naming ``name``, never echoing the URL (it may hold a
            password): a ``/``, ``?`` or ``#`` in the user info ends the host
            part early, so the password would be read as a host, a port or
            a path, and sent or logged as such.
    """
    parts = urllib.parse.urlsplit(url)
    authority = url.partition("://")[2]
    for end in "?#":
        authority = authority.partition(end)[0]
    encode = (
        "percent-encode '/', '?', '#' and '@' in its user or password, or use "
        "ACMS_SPARQL_USER and ACMS_SPARQL_PASSWORD"
    )
    if authority.count("@") != parts.netloc.count("@"):
        raise ValueError(f"{name} has an '@' outside its host part: {encode}")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ValueError(f"{name} has no valid host and port: {encode}") from None
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, None
    user, colon, password = userinfo.partition(":")
    if not user or not colon:
        raise ValueError(f"{name} holds a user without a password; give both, or neither")
    bare = urllib.parse.urlunsplit(parts._replace(netloc=host))
    return bare, (urllib.parse.unquote(user), urllib.parse.unquote(password))


def _milvus_text(s: RemoteSettings, required: Callable[[], bool]) -> TextIndex:
    from cleveragents.infrastructure.acms.milvus_text import MilvusTextBackend

    return MilvusTextBackend(
        s.milvus_uri,
        token=s.milvus_token,
        collection=s.text_collection,
        timeout=s.timeout,
        required=required,
    )


def _milvus_vector(s: RemoteSettings, dimension: int, required: Callable[[], bool]) -> VectorIndex:
    from cleveragents.infrastructure.acms.milvus_vector import MilvusVectorBackend

    return MilvusVectorBackend(
        s.milvus_uri,
        dimension=int(dimension),
        token=s.milvus_token,
        collection=s.vector_collection,
        timeout=s.timeout,
        required=required,
    )


def _sparql_graph(
    s: RemoteSettings, expected: Callable[[str, Callable[[], bool]], int]
) -> GraphIndex:
    from cleveragents.infrastructure.acms.sparql_endpoint_graph import SparqlEndpointGraphBackend

    return SparqlEndpointGraphBackend(
        s.sparql_query_url,
        update_url=s.sparql_update_url,
        store_url=s.sparql_store_url,
        user=s.sparql_user,
        password=s.sparql_password,
        timeout=s.timeout,
        write_timeout=s.timeout,
        expected=expected,
    )


class _RemoteIndexStore(ManagedIndexStore):
    """The index store over the servers.

    The remote counterpart of the local profile's lost-index check
    (:meth:`ManagedIndexStore.check_present`): a Milvus collection missing on
    the server while the catalog lists indexed files is an error of every
    read and of ``status``, never an empty answer, and only a writer
    (:meth:`writing`) creates one.  ``status`` also asks the SPARQL endpoint,
    per resource whose graph the catalog says holds subjects, whether it
    holds any triple of it (one ``ASK`` each); a graph query's empty answer
    asks the same of the in-scope graphs (the backend's ``expected``).
    """

    def iter_resource_ids(self) -> Iterator[str]:
        """The resources of this deployment the servers or the catalog hold:
        those the catalog has rows of or a stopped session's or removal's
        marker for.  Servers are shared (the default collection names, one
        SPARQL dataset): another deployment's resources are neither pruned
        by a plain ``reindex`` nor reported by ``--verify`` here."""
        known = self.catalog.resource_ids()
        ours, foreign = [], 0
        for rid in super().iter_resource_ids():
            if rid in known or self.marked(rid):
                ours.append(rid)
            else:
                foreign += 1
        if foreign:
            _log.info("acms.remote.other_deployments_resources", resources=foreign)
        return iter(ours)

    def indexed(self) -> bool:
        """Whether the catalog lists indexed files (so the servers should
        hold units): one indexed read of the catalog."""
        return bool(self.catalog.resource_ids())

    remote = True

    def check_reachable(self) -> None:
        """Ask each server one trivial question (``acms status``, the image's
        health check, calls it once, with or without resources registered);
        a Milvus collection missing while the catalog lists indexed files is
        an error here."""
        for index in (self.text, self.vector, self.graph):
            ping = getattr(index, "ping", None)
            if callable(ping):
                ping()

    def counts(self, resource_id: str) -> dict[str, int]:
        """As :meth:`ManagedIndexStore.counts`; a resource whose graph the
        catalog says holds subjects and the endpoint holds nothing of is an
        error (the endpoint lost its data, or the URLs name another dataset),
        not a count the catalog made up."""
        counts = super().counts(resource_id)
        holds = getattr(self.graph, "holds", None)
        if counts["graph_subjects"] and callable(holds) and not holds(resource_id):
            # Asked again after the catalog: a session empties a graph before
            # its catalog rows follow (see ManagedIndexStore._recorded).
            lost = self.recorded_subjects(resource_id, lambda: not holds(resource_id))
            if lost:
                from cleveragents.infrastructure.acms.sparql_endpoint_graph import (
                    lost_graph_error,
                )

                url = getattr(self.graph, "query_url", None) or "(its URL)"
                raise lost_graph_error(url, resource_id, lost)
        return counts

    @contextmanager
    def writing(self, *, timeout: float = 60.0) -> Iterator[ManagedIndexStore]:
        """As :meth:`ManagedIndexStore.writing`; the writer creates the Milvus
        collections the server does not hold (its reads, e.g. the units a
        resource had, then see them empty rather than refused)."""
        with super().writing(timeout=timeout) as store:
            for index in (self.text, self.vector):
                create = getattr(index, "create_missing", None)
                if callable(create):
                    create()
            yield store


def _remote_store(s: RemoteSettings, data_dir: str, dimension: int) -> ManagedIndexStore:
    """The index store over the servers; its catalog, lock and registry stay in
    the local data directory (the write protocol is the same as ``local``)."""
    from pathlib import Path

    from cleveragents.infrastructure.acms import file_modes
    from cleveragents.infrastructure.acms.index_layout import live_index_path
    from cleveragents.infrastructure.acms.index_store import CATALOG_FILE
    from cleveragents.infrastructure.acms.sqlite_catalog import SqliteCatalog

    root = Path(data_dir).resolve()
    file_modes.make_private_dirs(root)
    store = _RemoteIndexStore(
        # store: assigned below, before any read asks whether it is required.
        text=lambda: _milvus_text(s, store.indexed),
        vector=lambda: _milvus_vector(s, dimension, store.indexed),
        graph=lambda: _sparql_graph(s, store.recorded_subjects),
        catalog=lambda: SqliteCatalog(live_index_path(root, "catalog") / CATALOG_FILE),
        dimension=int(dimension),
        data_dir=root,
    )
    return store


def wire_remote(
    container: Container, environ: Mapping[str, str] | None = None, *, embedder: str = "hashing"
) -> None:
    """Override the container's backends, embedder and indexer for ``remote``.

    Backends are built (and servers contacted) on first use, as in ``local``;
    ``embedder`` (``ACMS_EMBEDDER``: ``hashing`` or ``minilm``) as there.

    Raises:
        ValueError: the environment does not configure the profile.
    """
    from cleveragents.application.container import (
        _graph,
        _hashing_embedder,
        _indexer,
        _minilm_embedder,
        _text,
        _vector,
    )

    settings = remote_settings(environ)
    cfg = container.config
    container.index_store.override(
        providers.Singleton(_remote_store, settings, cfg.data_dir, cfg.embedding_dimension)
    )
    container.text_backend.override(providers.Singleton(_text, container.index_store))
    container.vector_backend.override(providers.Singleton(_vector, container.index_store))
    container.graph_backend.override(providers.Singleton(_graph, container.index_store))
    container.embedder.override(
        providers.Singleton(_minilm_embedder)
        if embedder == "minilm"
        else providers.Singleton(_hashing_embedder, cfg.embedding_dimension)
    )
    container.indexer.override(
        providers.Singleton(_indexer, container.index_store, container.embedder, embedder)
    )
    _log.info("acms.container.remote_profile", **settings.public())
