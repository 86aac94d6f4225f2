"""The SPARQL side of the ``remote`` profile when its configuration or its
server is wrong: a write is never silently lost, a credential never reaches a
log line, every call honours ``ACMS_REMOTE_TIMEOUT``, and ``acms status``
fails while the endpoint is unreachable.  Against ``oxigraph serve`` (and
Milvus Lite for the command-line runs) on 127.0.0.1, started by the tests."""

from __future__ import annotations

import base64
import contextlib
import http.server
import logging
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from structlog.testing import capture_logs

from cleveragents.application.container import build_container
from cleveragents.application.remote_profile import remote_settings
from cleveragents.domain.models.acms.errors import IndexUnavailableError, QueryError
from cleveragents.domain.models.acms.uko import UKO, file_uri, resource_uri
from cleveragents.infrastructure.acms.sparql_endpoint_graph import SparqlEndpointGraphBackend
from cli_process import cli_env, run_acms
from remote_servers import (
    ServerProcess,
    free_port,
    http_server,
    milvus_server,
    oxigraph_server,
    unique_name,
)

__all__ = ["milvus_server", "oxigraph_server"]  # fixtures, re-exported for pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample"
A = "01JD5TD11B000000000000000A"
PASSWORD = "sparql-Pa55-Secret"
SELECT = "SELECT ?s ?p ?o WHERE { ?s ?p ?o }"


def at(query: str, update: str, store: str, **kwargs: object) -> SparqlEndpointGraphBackend:
    return SparqlEndpointGraphBackend(
        query,
        update_url=update,
        store_url=store,
        **kwargs,  # type: ignore[arg-type]
    )


def files(rid: str, n: int = 3) -> list[tuple[str, str, str]]:
    return [(resource_uri(rid), UKO + "contains", file_uri(rid, f"f{i}.py")) for i in range(n)]


@pytest.fixture
def good(oxigraph_server: ServerProcess) -> Iterator[SparqlEndpointGraphBackend]:
    uri = oxigraph_server.uri
    b = at(uri + "/query", uri + "/update", uri + "/store")
    yield b
    with contextlib.suppress(IndexUnavailableError):
        b.delete(A)
    b.close()


# ---------------------------------------------------------------- 1. non-2xx is an error


def test_a_mistyped_update_url_fails_the_write(
    oxigraph_server: ServerProcess, good: SparqlEndpointGraphBackend
) -> None:
    uri = oxigraph_server.uri
    b = at(uri + "/query", uri + "/updat", uri + "/store")
    try:
        with pytest.raises(IndexUnavailableError, match="404") as info:
            b.upsert(A, files(A), delete_subjects=[resource_uri(A)])
        assert "/updat" in str(info.value)
        good.upsert(A, files(A))
        with pytest.raises(IndexUnavailableError, match="404"):
            b.delete(A, [resource_uri(A)])
        with pytest.raises(IndexUnavailableError, match="404"):
            b.delete(A)
    finally:
        b.close()
    assert len(good.get_triples(resource_uri(A), scope=frozenset({A})).triples) == 3


def test_a_mistyped_store_url_fails_the_write(
    oxigraph_server: ServerProcess, good: SparqlEndpointGraphBackend
) -> None:
    uri = oxigraph_server.uri
    b = at(uri + "/query", uri + "/update", uri + "/stor")
    try:
        with pytest.raises(IndexUnavailableError, match="404"):
            b.upsert(A, files(A))
        # Deleting a whole resource (what prune does) really deletes it.
        good.upsert(A, files(A))
        b.delete(A)
        assert A not in good.resource_ids()
        b.delete(A)  # a resource with no graph: nothing to do, no error
    finally:
        b.close()


def test_a_mistyped_query_url_is_the_server_not_the_query(oxigraph_server: ServerProcess) -> None:
    uri = oxigraph_server.uri
    b = at(uri + "/quer", uri + "/update", uri + "/store")
    try:
        for call in (
            lambda: b.sparql_query(SELECT, scope=frozenset({A})),
            lambda: b.sparql_query("CONSTRUCT WHERE { ?s ?p ?o }", scope=frozenset({A})),
            lambda: b.get_triples(resource_uri(A), scope=frozenset({A})),
            lambda: b.resource_ids(),
        ):
            with pytest.raises(IndexUnavailableError, match="404") as info:
                call()
            assert not isinstance(info.value, QueryError)
            assert "JSON" not in str(info.value)
    finally:
        b.close()


def test_an_unreachable_endpoint_is_named() -> None:
    """A refused connection said "the SPARQL endpoint cannot be reached"
    without saying which of the three configured endpoints."""
    dead = f"http://127.0.0.1:{free_port()}"
    graph = at(dead + "/query", dead + "/update", dead + "/store", timeout=2)
    try:
        with pytest.raises(IndexUnavailableError) as info:
            graph.ping()
        assert f"{dead}/query" in str(info.value) and "cannot be reached" in str(info.value)
        with pytest.raises(IndexUnavailableError, match=f"{dead}/update"):
            graph.delete(A)
    finally:
        graph.close()


def test_a_bad_query_is_still_the_query(good: SparqlEndpointGraphBackend) -> None:
    # Passes the guard, refused by Oxigraph (400): the caller's fault.
    with pytest.raises(QueryError, match="400"):
        good.sparql_query("SELECT ?s ?p ?o WHERE { ?s ?p ?o } GROUP BY ?s", scope=frozenset({A}))


class _Redirect(http.server.BaseHTTPRequestHandler):
    target: ClassVar[str] = ""

    def log_message(self, *args: object) -> None:
        pass

    def _redirect(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(307)
        self.send_header("location", self.target + self.path)
        self.send_header("content-length", "0")
        self.end_headers()

    do_GET = do_POST = do_PUT = do_DELETE = _redirect


def redirecting_to(target: str) -> contextlib.AbstractContextManager[str]:
    return http_server(type("Handler", (_Redirect,), {"target": target}))


def test_a_redirecting_endpoint_is_an_error_for_every_call(
    oxigraph_server: ServerProcess, good: SparqlEndpointGraphBackend
) -> None:
    good.upsert(A, files(A))
    with redirecting_to(oxigraph_server.uri) as base:
        b = at(base + "/query", base + "/update", base + "/store")
        try:
            calls = (
                lambda: b.upsert(A, files(A, 5)),
                lambda: b.upsert(A, [], delete_subjects=[resource_uri(A)]),
                lambda: b.delete(A),
                lambda: b.sparql_query("CONSTRUCT WHERE { ?s ?p ?o }", scope=frozenset({A})),
                lambda: b.sparql_query(SELECT, scope=frozenset({A})),
                lambda: b.traverse(resource_uri(A), scope=frozenset({A})),
            )
            for call in calls:
                with pytest.raises(IndexUnavailableError, match="307") as info:
                    call()
                assert not isinstance(info.value, QueryError)
        finally:
            b.close()
    # Nothing was followed: the real server holds what it held.
    assert len(good.get_triples(resource_uri(A), scope=frozenset({A})).triples) == 3


# ---------------------------------------------------------------- 2. no credential in a log


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str]]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.seen.append((self.path, self.headers.get("authorization", "")))
        body = b'{"head":{},"boolean":true}'
        self.send_response(200)
        self.send_header("content-type", "application/sparql-results+json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_userinfo_in_a_sparql_url_becomes_basic_auth(tmp_path: Path) -> None:
    _Recorder.seen.clear()
    with http_server(_Recorder) as url:
        base = url.replace("http://", f"http://acms:{PASSWORD}@")
        settings = remote_settings(sparql_env(base, "http://127.0.0.1:1"))
        assert settings.sparql_user == "acms" and settings.sparql_password == PASSWORD
        assert PASSWORD not in settings.sparql_query_url + settings.sparql_update_url
        with env_set(sparql_env(base, "http://127.0.0.1:1")):
            graph = remote_graph(tmp_path)
            try:
                graph.sparql_query("ASK { ?s ?p ?o }", scope=frozenset({A}))
            finally:
                graph.close()
    ((path, auth),) = _Recorder.seen
    assert path == "/query"
    assert base64.b64decode(auth.removeprefix("Basic ")).decode() == f"acms:{PASSWORD}"


def test_conflicting_sparql_credentials_are_refused_without_the_secret() -> None:
    env = sparql_env("http://other:pw2@127.0.0.1:1", "http://127.0.0.1:2")
    env.update(ACMS_SPARQL_USER="acms", ACMS_SPARQL_PASSWORD=PASSWORD)
    with pytest.raises(ValueError, match="ACMS_SPARQL_QUERY_URL") as info:
        remote_settings(env)
    assert PASSWORD not in str(info.value) and "pw2" not in str(info.value)


@pytest.mark.parametrize("password", ["s3cr#t", "12345/x", "a?b", "p@ss/w"])
def test_a_password_that_breaks_the_url_is_refused_without_it(password: str) -> None:
    """A '/', '?' or '#' in the user info ends the host part early: the
    password became a host, a port or a path, logged at INFO or raised
    as an 'internal error' echoing it."""
    env = sparql_env(f"http://admin:{password}@127.0.0.1:7879", "http://127.0.0.1:2")
    with pytest.raises(ValueError, match="percent-encode") as info:
        remote_settings(env)
    assert password not in str(info.value) and "ACMS_SPARQL_QUERY_URL" in str(info.value)
    encoded = urllib.parse.quote(password, safe="")
    settings = remote_settings(
        sparql_env(f"http://admin:{encoded}@127.0.0.1:7879", "http://127.0.0.1:2")
    )
    assert settings.sparql_password == password


def test_a_remote_write_and_query_log_no_password(
    tmp_path: Path, oxigraph_server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    host = oxigraph_server.uri.removeprefix("http://")
    caplog.set_level(logging.DEBUG)
    for userinfo, extra in (
        (f"acms:{PASSWORD}@", {}),
        ("", {"ACMS_SPARQL_USER": "acms", "ACMS_SPARQL_PASSWORD": PASSWORD}),
    ):
        env = {**sparql_env(f"http://{userinfo}{host}", "http://127.0.0.1:1"), **extra}
        with env_set(env), capture_logs() as events:
            graph = remote_graph(tmp_path)
            try:
                graph.upsert(A, files(A))
                got = graph.sparql_query(SELECT, scope=frozenset({A}))
                assert len(got.triples) == 3
                graph.delete(A)
            finally:
                graph.close()
        assert any("HTTP Request" in r.getMessage() for r in caplog.records)  # httpx did log
        assert PASSWORD not in caplog.text
        assert PASSWORD not in repr(events)


# ---------------------------------------------------------------- 3. ACMS_REMOTE_TIMEOUT


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """Accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def hold() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                conn, _ = sock.accept()
                held.append(conn)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        sock.close()


def test_every_sparql_call_honours_the_remote_timeout(tmp_path: Path) -> None:
    with silent_server() as base, env_set(sparql_env(base, base, ACMS_REMOTE_TIMEOUT="1")):
        graph = remote_graph(tmp_path)
        calls: dict[str, Callable[[], object]] = {
            "add": lambda: graph.upsert(A, files(A)),
            "change": lambda: graph.upsert(A, files(A), delete_subjects=[resource_uri(A)]),
            "delete": lambda: graph.delete(A),
            "query": lambda: graph.get_triples(resource_uri(A), scope=frozenset({A})),
        }
        try:
            for name, call in calls.items():
                outcome: list[BaseException] = []

                def run(
                    call: Callable[[], object] = call, outcome: list[BaseException] = outcome
                ) -> None:
                    try:
                        call()
                    except BaseException as exc:
                        outcome.append(exc)

                worker = threading.Thread(target=run, daemon=True)
                worker.start()
                worker.join(30)  # generous: the timeout is 1 s, the old wait 120 s
                assert not worker.is_alive(), f"{name} still waiting after 30 s"
                assert outcome and isinstance(outcome[0], IndexUnavailableError | QueryError)
        finally:
            graph.close()


# ---------------------------------------------------------------- 4. acms status


def test_status_fails_while_the_sparql_endpoint_is_unreachable(
    tmp_path: Path, milvus_server: ServerProcess, oxigraph_server: ServerProcess
) -> None:
    data = tmp_path / "data"
    base = {
        **cli_env(data),
        "ACMS_PROFILE": "remote",
        "ACMS_MILVUS_URI": milvus_server.uri,
        "ACMS_MILVUS_TEXT_COLLECTION": unique_name("status_text"),
        "ACMS_MILVUS_VECTOR_COLLECTION": unique_name("status_vectors"),
        "ACMS_REMOTE_TIMEOUT": "5",
    }
    local = cli_env(data)  # the registry is local in every profile
    assert run_acms(local, "project", "add", "local/sample").returncode == 0
    added = run_acms(local, "resource", "add", str(SAMPLE), "--project", "local/sample")
    assert added.returncode == 0, added.stderr
    up = {**base, **sparql_env(oxigraph_server.uri, milvus_server.uri, **_no_auth())}
    done = run_acms(up, "status")
    assert done.returncode == 0, done.stderr  # the control: all servers up
    dead = f"http://127.0.0.1:{free_port()}"
    down = {**base, **sparql_env(dead, milvus_server.uri, **_no_auth())}
    done = run_acms(down, "status")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "SPARQL" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_status_asks_each_server_once_even_with_nothing_registered(
    tmp_path: Path, milvus_server: ServerProcess, oxigraph_server: ServerProcess
) -> None:
    """A fresh deployment's health check: no resource yet, a server down."""
    base = {
        **cli_env(tmp_path / "data"),
        "ACMS_PROFILE": "remote",
        "ACMS_MILVUS_TEXT_COLLECTION": unique_name("empty_text"),
        "ACMS_MILVUS_VECTOR_COLLECTION": unique_name("empty_vectors"),
        "ACMS_REMOTE_TIMEOUT": "5",
    }
    up = {**base, **sparql_env(oxigraph_server.uri, milvus_server.uri, **_no_auth())}
    (tmp_path / "data").mkdir()  # the image's /data volume: an empty directory
    done = run_acms(up, "status")
    assert done.returncode == 0, done.stderr
    dead = f"http://127.0.0.1:{free_port()}"
    for env, says in (
        ({**base, **sparql_env(dead, milvus_server.uri, **_no_auth())}, "SPARQL"),
        ({**base, **sparql_env(oxigraph_server.uri, dead, **_no_auth())}, "Milvus"),
    ):
        done = run_acms(env, "status")
        assert done.returncode == 1, done.stdout + done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0], done.stderr


def test_local_status_loads_no_graph(tmp_path: Path) -> None:
    c = build_container("stub", tmp_path)  # registry only
    c.project_repository().add("local/sample")
    resource = c.resource_registry().register(str(SAMPLE), "directory")
    from cleveragents.infrastructure.acms.index_store import ManagedIndexStore

    store = ManagedIndexStore.open(tmp_path, dimension=8)
    store.counts(resource.resource_id)
    # The graph store checks the resource's file head (status names a
    # damaged one); it loads and reads no graph.
    graph: Any = store._open["graph"]
    assert graph._graphs == {} and graph._readers == {}


# ---------------------------------------------------------------- helpers


def remote_graph(data: Path) -> SparqlEndpointGraphBackend:
    """The container's graph under ``remote``, configured from the environment."""
    graph = build_container("remote", data).graph_backend()
    assert isinstance(graph, SparqlEndpointGraphBackend)
    return graph


def _no_auth() -> dict[str, str]:
    return {"ACMS_SPARQL_USER": "", "ACMS_SPARQL_PASSWORD": ""}


def sparql_env(sparql: str, milvus: str, **extra: str) -> dict[str, str]:
    return {
        "ACMS_MILVUS_URI": milvus,
        "ACMS_SPARQL_QUERY_URL": sparql + "/query",
        "ACMS_SPARQL_UPDATE_URL": sparql + "/update",
        "ACMS_SPARQL_STORE_URL": sparql + "/store",
        "ACMS_REMOTE_TIMEOUT": "20",
        **extra,
    }


@contextlib.contextmanager
def env_set(values: dict[str, str]) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name in ("ACMS_SPARQL_USER", "ACMS_SPARQL_PASSWORD"):
            patch.delenv(name, raising=False)
        for key, value in values.items():
            patch.setenv(key, value)
        yield


@pytest.mark.parametrize("typo", ["ACMS_SPARQL_UPDATE_URL", "ACMS_SPARQL_STORE_URL"])
def test_reindex_with_a_mistyped_url_fails_at_run_time(
    tmp_path: Path, milvus_server: ServerProcess, oxigraph_server: ServerProcess, typo: str
) -> None:
    data = tmp_path / "data"
    local = cli_env(data)
    assert run_acms(local, "project", "add", "local/sample").returncode == 0
    assert (
        run_acms(local, "resource", "add", str(SAMPLE), "--project", "local/sample").returncode == 0
    )
    env = {
        **local,
        **sparql_env(oxigraph_server.uri, milvus_server.uri, ACMS_SPARQL_PASSWORD=PASSWORD),
        "ACMS_SPARQL_USER": "acms",
        "ACMS_PROFILE": "remote",
        "ACMS_MILVUS_TEXT_COLLECTION": unique_name("typo_text"),
        "ACMS_MILVUS_VECTOR_COLLECTION": unique_name("typo_vectors"),
    }
    env[typo] = env[typo][:-1]  # .../updat, .../stor
    done = run_acms(env, "reindex", "--full")
    # A server or configuration problem (1), not bad input (2), and not success.
    assert done.returncode == 1, done.stdout + done.stderr
    assert "404" in done.stderr and PASSWORD not in done.stdout + done.stderr
