"""structlog is imported by the first log event emitted, not by the package.

Importing structlog costs ~50 ms, a fifth of a CLI question.  A process that
emits no event (a question at the default level) must never import it; one
that emits an event must log it exactly as before: the CLI as JSON lines on
stderr at the level it was given, a library host through ``logging``.  Each
case runs in a fresh interpreter, which is the only place the import can be
observed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACMS_")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    base = tmp_path_factory.mktemp("lazylog")
    (base / "proj").mkdir()
    (base / "proj" / "core.py").write_text("def aardvark_helper():\n    return 'aardvark'\n")
    done = _python(
        """
        import sys
        from cleveragents.application.container import build_container
        from cleveragents.application.services.operations import AcmsOperations
        ops = AcmsOperations.from_container(build_container("local", sys.argv[1]))
        ops.add_project("local/p")
        rid = ops.add_resource(sys.argv[2], "local/p", "directory").resource_id
        ops.reindex(resources=[rid])
        print(rid)
        """,
        str(base / "data"),
        str(base / "proj"),
    )
    assert done.returncode == 0, done.stderr
    return base / "data", done.stdout.strip()


CLI = """
import sys
from cleveragents.cli.main import _main
code, _ = _main(sys.argv[1:], console=False)
sys.stdout.flush()
print("structlog imported:", "structlog" in sys.modules, file=sys.stderr)
sys.exit(code)
"""


def test_a_cli_question_that_logs_nothing_never_imports_structlog(
    indexed: tuple[Path, str],
) -> None:
    data, rid = indexed
    for question in (
        ["search", "text", "aardvark", "--resource", rid],
        ["traverse", f"uko://{rid}/core.py", "--depth", "2", "--resource", rid],
        ["sparql", "SELECT ?s ?p ?o WHERE { ?s ?p ?o } LIMIT 3", "--resource", rid],
    ):
        done = _python(CLI, "--data-dir", str(data), *question, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)
        assert "structlog imported: False" in done.stderr, (question, done.stderr)


def test_a_cli_run_at_a_lower_level_logs_its_events_as_json_lines(
    indexed: tuple[Path, str],
) -> None:
    data, rid = indexed
    done = _python(CLI, "--data-dir", str(data), "reindex", "--log-level", "info")
    assert done.returncode == 0, done.stderr
    assert "structlog imported: True" in done.stderr
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    indexed_events = [e for e in events if e["event"] == "indexer.resource_indexed"]
    assert indexed_events and indexed_events[0]["level"] == "info"
    assert indexed_events[0]["resource_id"] == rid
    assert not any(e["level"] == "debug" for e in events)  # the CLI's level filters


def test_a_library_host_gets_events_through_logging_and_drops_the_rest_unimported() -> None:
    done = _python(
        """
        import logging, sys
        import cleveragents
        from cleveragents._logging import get_logger
        log = get_logger("cleveragents.acms.test")
        log.info("dropped", n=1)  # below the last-resort handler's WARNING
        print("after info:", "structlog" in sys.modules, file=sys.stderr)
        log.warning("kept", n=2)
        print("after warning:", "structlog" in sys.modules, file=sys.stderr)
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(name)s %(message)s")
        log.debug("now kept", n=3)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0] == "after info: False"
    assert "event='kept'" in lines[1] and "n=2" in lines[1]
    assert lines[2] == "after warning: True"
    assert lines[3] == "cleveragents.acms.test event='now kept' n=3"
    assert "dropped" not in done.stderr


def test_a_host_that_configures_logging_after_importing_the_package_sees_its_events() -> None:
    """``dictConfig`` disables every logger that exists when it runs: the
    package must not create its standard loggers at import."""
    done = _python(
        """
        import logging.config, sys
        from cleveragents.infrastructure.acms import index_store
        logging.config.dictConfig({
            "version": 1,
            "handlers": {"err": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr"}},
            "root": {"level": "INFO", "handlers": ["err"]},
        })
        index_store._log.warning("visible_to_host", n=1)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "event='visible_to_host'" in done.stderr
    assert done.stdout == ""


# Thread a's first event, then thread b's while a's is under way.
_TWO_FIRST_EVENTS = """
import threading, time
from cleveragents._logging import get_logger
a, b = get_logger("cleveragents.acms.a"), get_logger("cleveragents.acms.b")
t = threading.Thread(target=lambda: a.{level}("{first}"))
t.start()
time.sleep(0.1)
b.{level}("{second}")
t.join()
"""


def test_a_thread_logging_while_another_imports_structlog_does_not_fail() -> None:
    """Mid-import, ``sys.modules`` holds a structlog without its functions."""
    done = _python(
        textwrap.dedent(
            """
        import importlib.abc, sys, threading, time
        class Slow(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "structlog.dev":
                    time.sleep(0.5)  # a slow first import (a cold cache, a busy machine)
                return None
        sys.meta_path.insert(0, Slow())
        """
        )
        + _TWO_FIRST_EVENTS.format(level="warning", first="first", second="second")
    )
    assert done.returncode == 0, done.stderr
    assert "event='first'" in done.stderr and "event='second'" in done.stderr


def test_two_threads_first_events_configure_the_cli_log_once() -> None:
    """The CLI's pending configuration is taken and applied under a lock:
    another thread's first event meanwhile must wait, not configure the
    quiet default (whose events would loop through the CLI's handler)."""
    done = _python(
        textwrap.dedent(
            """
        import sys, threading, time
        from cleveragents.cli.main import configure_logging
        from cleveragents._logging import get_logger
        configure_logging("info")
        import structlog
        real = structlog.processors.TimeStamper
        def slow(*args, **kwargs):  # the CLI's configuration, slowed down
            time.sleep(0.3)
            return real(*args, **kwargs)
        structlog.processors.TimeStamper = slow
        """
        )
        + _TWO_FIRST_EVENTS.format(level="info", first="from_a", second="from_b")
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stderr.splitlines()]  # JSON lines only
    assert sorted(e["event"] for e in events) == ["from_a", "from_b"]
