"""Used as a library, the package writes nothing on stdout.

An agent host that speaks a protocol on stdout (MCP over stdio) imports the
package, builds the real engines and queries them; structlog's own default
would print every debug event there.  These tests run such a host as a
subprocess and read its stdout byte for byte.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HOST = textwrap.dedent(
    """
    import sys
    from cleveragents.application.container import build_container
    from cleveragents.domain.models.acms.scope import ScopedView

    rid = sys.argv[2]
    c = build_container("local", sys.argv[1])
    view = ScopedView(c.text_backend(), c.vector_backend(), c.graph_backend(), frozenset({rid}))
    assert view.search("aardvark", max_results=5), "no text hit"
    assert view.similarity_search(c.embedder().embed(["aardvark helper"])[0].tolist(), top_k=3)
    view.sparql_query("SELECT ?s ?p ?o WHERE { ?s ?p ?o } LIMIT 5")
    view.traverse(f"uko://{rid}/pkg/core.py", depth=2)
    sys.stderr.write("host done\\n")
    """
)


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(args, capture_output=True, env=env, timeout=180, check=False)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    base = tmp_path_factory.mktemp("libstdout")
    src = base / "proj" / "pkg"
    src.mkdir(parents=True)
    (src / "core.py").write_text("def aardvark_helper():\n    return 'aardvark'\n")
    env = {**os.environ, "ACMS_DATA_DIR": str(base / "data")}
    cli = [sys.executable, "-m", "cleveragents.acms"]
    assert _run([*cli, "project", "add", "local/p"], env).returncode == 0
    added = _run([*cli, "resource", "add", str(base / "proj"), "--project", "local/p"], env)
    assert added.returncode == 0, added.stderr
    done = _run([*cli, "reindex"], env)
    assert done.returncode == 0, done.stderr
    return base / "data", added.stdout.decode().strip()


def test_library_use_without_configuration_writes_nothing_on_stdout(
    indexed: tuple[Path, str],
) -> None:
    data_dir, rid = indexed
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACMS_")}
    done = _run([sys.executable, "-c", HOST, str(data_dir), rid], env)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b""
    assert b"host done" in done.stderr


def test_a_host_that_configures_logging_gets_the_events_there(
    indexed: tuple[Path, str],
) -> None:
    data_dir, rid = indexed
    host = "import logging, sys\nlogging.basicConfig(level=logging.DEBUG, stream=sys.stderr)\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACMS_")}
    done = _run([sys.executable, "-c", host + HOST, str(data_dir), rid], env)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b""
    assert b"DEBUG:cleveragents" in done.stderr


def test_a_host_that_configured_structlog_keeps_its_configuration() -> None:
    code = textwrap.dedent(
        """
        import structlog
        structlog.configure(processors=[structlog.processors.KeyValueRenderer()],
                            logger_factory=structlog.PrintLoggerFactory())
        import cleveragents.application.container  # noqa: F401
        structlog.get_logger("host").info("mine", a=1)
        """
    )
    done = _run([sys.executable, "-c", code], dict(os.environ))
    assert done.returncode == 0, done.stderr.decode()
    assert b"event='mine'" in done.stdout
