"""The console script answers a question and leaves with ``os._exit``, skipping
the interpreter's teardown (``cli.main.console``).  Nothing may be lost by it.

Oracle: the same command run through ``main()`` in a process that returns
from it and exits normally: its exit code, its stdout and its stderr's first
line must be what the script printed.  The output of one question is larger than a pipe's
buffer, so an unflushed tail would show.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cli_process import MODULE, cli_env, run_acms

SYMBOLS = 800  # ~150 KB of JSON: over a pipe buffer, under the largest budget


# main() returns; the collector must be on again after it; a normal exit.
_NORMAL_EXIT = (
    "import gc, sys\n"
    "from cleveragents.cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    "sys.exit(code if gc.isenabled() else 99)\n"
)


def _script(data: Path, *args: str, normal_exit: bool = False) -> subprocess.CompletedProcess[str]:
    env = cli_env(data)
    env.pop("PYTHONUNBUFFERED", None)  # stdout block-buffered, as on a user's pipe
    program = ("-c", _NORMAL_EXIT) if normal_exit else MODULE
    return run_acms(env, *args, program=program, timeout=120)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("quick-exit")
    src = base / "src"
    src.mkdir()
    (src / "big.py").write_text(
        "".join(f"def function_number_{i}(argument):\n    return {i}\n\n" for i in range(SYMBOLS))
    )
    data = base / "data"
    for args in (
        ("project", "add", "local/big"),
        ("resource", "add", str(src), "--project", "local/big"),
        ("reindex",),
    ):
        done = _script(data, *args)
        assert done.returncode == 0, done.stderr
    return data


@pytest.mark.parametrize(
    "args",
    [
        ("--json", "symbols", "big.py", "--project", "local/big", "--budget", "200000"),
        ("symbols", "big.py", "--project", "local/big", "--budget", "200000"),
        ("search", "text", "function_number_7", "--project", "local/big"),
        # By predicate: the graph is loaded whole; the script leaves its
        # indexes to the query's worker (cleveragents._process), main() does not.
        (
            "--json",
            "sparql",
            "SELECT ?s ?p ?o WHERE { ?s <https://cleveragents.dev/ns/uko#name> ?o . ?s ?p ?o }",
            "--project",
            "local/big",
        ),
        ("symbols", "missing.py", "--project", "local/big"),  # fails at run time
        ("symbols", "big.py", "--project", "local/nobody"),  # bad input
        ("search", "text", "", "--project", "local/big"),  # bad input
    ],
)
def test_the_script_prints_and_exits_as_main_returns(data: Path, args: tuple[str, ...]) -> None:
    expected = _script(data, *args, normal_exit=True)
    assert expected.returncode != 99  # main() left the collector off
    done = _script(data, *args)
    assert done.returncode == expected.returncode
    assert done.stdout == expected.stdout
    assert done.stderr.splitlines()[:1] == expected.stderr.splitlines()[:1]


def test_a_large_answer_arrives_whole(data: Path) -> None:
    done = _script(
        data, "--json", "symbols", "big.py", "--project", "local/big", "--budget", "200000"
    )
    assert done.returncode == 0, done.stderr
    assert len(done.stdout) > 1 << 16  # more than a pipe holds
    names = {r["name"] for r in json.loads(done.stdout)["results"]}
    assert names == {f"function_number_{i}" for i in range(SYMBOLS)}
