"""Real servers for the remote-backend tests, on 127.0.0.1 with free ports.

- ``milvus-lite server`` (PyPI ``milvus-lite``): Milvus's gRPC API over
  faiss-cpu and pyarrow, spoken to by the same ``pymilvus`` client as a
  Milvus cluster;
- ``oxigraph serve`` (PyPI ``oxigraph``): a SPARQL 1.1 Protocol and Graph
  Store Protocol server.

Session-scoped fixtures start one of each and stop them at the end; tests
that stop or restart a server start their own with :class:`ServerProcess`.
Import the fixtures into a test module (``from remote_servers import ...``).
"""

from __future__ import annotations

import contextlib
import http.server
import importlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
MILVUS_LITE = str(BIN / "milvus-lite")
OXIGRAPH = str(BIN / "oxigraph")
_counter = itertools.count()


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, even by SIGKILL or a
    CI timeout, so no server outlives its tests (Linux; elsewhere a no-op)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class ServerProcess:
    """One server child on a fixed port and data directory; restartable."""

    def __init__(self, kind: str, data_dir: Path, port: int | None = None) -> None:
        self.kind = kind
        self.data_dir = data_dir
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir.parent / f"{data_dir.name}.log"

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _argv(self) -> list[str]:
        if self.kind == "milvus":
            return [
                MILVUS_LITE,
                "server",
                "--data-dir",
                str(self.data_dir),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--max-workers",
                "4",
            ]
        bind = f"127.0.0.1:{self.port}"
        return [OXIGRAPH, "serve", "--location", str(self.data_dir), "--bind", bind]

    def start(self, timeout: float = 60.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self._argv(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} server exited: {self.log.read_text()[-2000:]}")
            if _port_open(self.port) and self._ready():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.kind} server did not listen within {timeout}s")

    def _ready(self) -> bool:
        """Serving requests, not just listening (a deployment's health check)."""
        if self.kind != "milvus":
            return True
        # The adapter module first: it switches gRPC's fork support off before
        # gRPC loads, which the rdflib adapter's forked SPARQL worker needs.
        import cleveragents.infrastructure.acms.milvus_common  # noqa: F401

        pymilvus = importlib.import_module("pymilvus")
        try:
            client = pymilvus.MilvusClient(uri=self.uri, timeout=2)
            try:
                client.list_collections(timeout=2)
            finally:
                client.close()
        except Exception:
            return False
        return True

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@contextlib.contextmanager
def running(kind: str) -> Iterator[ServerProcess]:
    """A server of ``kind`` (``milvus`` or ``oxigraph``) for the block's duration."""
    root = Path(tempfile.mkdtemp(prefix=f"acms-{kind}-"))
    server = ServerProcess(kind, root / "data")
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def http_server(
    handler: type[http.server.BaseHTTPRequestHandler], **attrs: object
) -> Iterator[str]:
    """A threaded HTTP server on 127.0.0.1 (a free port) answering with
    ``handler``, ``attrs`` set on the server; yields its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    for name, value in attrs.items():
        setattr(server, name, value)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def unique_name(prefix: str) -> str:
    """A collection name no other test in this session uses."""
    return f"{prefix}_{os.getpid()}_{next(_counter)}"


def remote_env(
    base: Mapping[str, str], milvus: ServerProcess, oxigraph: ServerProcess, prefix: str
) -> dict[str, str]:
    """``base`` (an environment) with the remote profile over the two servers,
    in collections of their own (named after ``prefix``)."""
    return {
        **base,
        "ACMS_PROFILE": "remote",
        "ACMS_MILVUS_URI": milvus.uri,
        "ACMS_SPARQL_QUERY_URL": oxigraph.uri + "/query",
        "ACMS_SPARQL_UPDATE_URL": oxigraph.uri + "/update",
        "ACMS_SPARQL_STORE_URL": oxigraph.uri + "/store",
        "ACMS_MILVUS_TEXT_COLLECTION": unique_name(prefix + "_text"),
        "ACMS_MILVUS_VECTOR_COLLECTION": unique_name(prefix + "_vectors"),
        "ACMS_REMOTE_TIMEOUT": "20",
    }


@pytest.fixture(scope="session")
def milvus_server() -> Iterator[ServerProcess]:
    with running("milvus") as server:
        yield server


@pytest.fixture(scope="session")
def oxigraph_server() -> Iterator[ServerProcess]:
    with running("oxigraph") as server:
        yield server
