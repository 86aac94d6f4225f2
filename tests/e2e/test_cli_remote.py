"""``ACMS_PROFILE=remote`` reaches every ``acms`` command: a query answers
from Milvus and the SPARQL endpoint (not from the local indexes), and what
the profile cannot do is refused in one line naming it.  Against Milvus Lite
and Oxigraph on 127.0.0.1 (``tests/remote_servers.py``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cleveragents.application.container import build_container
from cli_process import cli_env, run_acms
from remote_servers import ServerProcess, milvus_server, oxigraph_server, remote_env

__all__ = ["milvus_server", "oxigraph_server"]  # fixtures, re-exported for pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample"
REINDEX = (str(ROOT / "scripts" / "reindex.py"),)


@pytest.fixture(scope="module")
def remote(
    milvus_server: ServerProcess,
    oxigraph_server: ServerProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    """The sample resource registered locally and indexed into the servers
    by ``scripts/reindex.py`` with no ``--profile``: ``ACMS_PROFILE`` decides."""
    data = tmp_path_factory.mktemp("cli_remote") / "data"
    local = cli_env(data)
    env = remote_env(local, milvus_server, oxigraph_server, "cli")
    assert run_acms(env, "project", "add", "local/sample").returncode == 0
    added = run_acms(env, "resource", "add", str(SAMPLE), "--project", "local/sample")
    assert added.returncode == 0, added.stderr
    indexed = run_acms(env, "--json", program=REINDEX)
    assert indexed.returncode == 0, indexed.stderr
    yield {"env": env, "local": local, "rid": added.stdout.strip(), "data": data}
    with pytest.MonkeyPatch.context() as patch:  # leave the shared servers as they were
        for key, value in env.items():
            patch.setenv(key, value)
        c = build_container("remote", data)
        for backend in (c.text_backend(), c.vector_backend(), c.graph_backend()):
            backend.delete(added.stdout.strip())
            backend.close()


def search(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_acms(env, "--json", "search", "text", "quokkasample", "--project", "local/sample")


def test_acms_search_answers_from_the_remote_profile(remote: dict[str, Any]) -> None:
    done = search(remote["env"])
    assert done.returncode == 0, done.stderr
    hits = json.loads(done.stdout)
    assert hits and all(h["uko_uri"].startswith(f"uko://{remote['rid']}/") for h in hits)
    # The same data directory in the local profile (ACMS_PROFILE forgotten)
    # has no local index: an error saying which profile indexed it, where it
    # answered "no results" and made empty local indexes.
    for command in (
        ("--json", "search", "text", "quokkasample", "--project", "local/sample"),
        ("status",),
        # It removed the resource here and left its units on the servers.
        ("resource", "remove", remote["rid"]),
    ):
        local = run_acms(remote["local"], *command)
        assert local.returncode == 1, local.stderr
        (line,) = local.stderr.strip().splitlines()
        assert "the remote profile indexed this data directory" in line
        assert "ACMS_PROFILE=remote" in line and "--rebuild" in line
    assert not any((remote["data"] / name).exists() for name in ("text", "vectors", "graph"))
    status = json.loads(run_acms(remote["env"], "--json", "status").stdout)
    assert status["profile"] == "remote"
    (row,) = status["resources"]
    assert row["text_units"] > 0 and row["vector_units"] == row["text_units"]
    assert set(status["bytes_on_disk"]) == {"catalog", "registry.sqlite3"}


def test_a_bogus_profile_is_one_line_naming_the_valid_ones(remote: dict[str, Any]) -> None:
    done = search({**remote["env"], "ACMS_PROFILE": "bogus"})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "acms: error: unknown ACMS_PROFILE 'bogus'; expected one of local, remote"
    ]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("reindex", "--rebuild"), "the remote profile takes --full instead"),
        (
            ("sparql", "--results", "SELECT ?s WHERE { ?s ?p ?o }", "--project", "local/sample"),
            "needs the local profile (ACMS_PROFILE is remote)",
        ),
        (
            ("search", "text", "quokkasample", "--path", "*.py", "--project", "local/sample"),
            "does not support the path and lang filters",
        ),
        (
            ("search", "text", "quokkasample", "--lang", "python", "--project", "local/sample"),
            "does not support the path and lang filters",
        ),
    ],
    ids=["reindex --rebuild", "sparql --results", "search text --path", "search text --lang"],
)
def test_what_the_remote_profile_cannot_do_is_refused_naming_it(
    remote: dict[str, Any], args: tuple[str, ...], says: str
) -> None:
    done = run_acms(remote["env"], *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr


def test_hybrid_search_filters_by_path_there(remote: dict[str, Any]) -> None:
    # Hybrid search filters the text ranking itself, so unlike `search text`
    # its --path and --lang work in the remote profile (README says so).
    args = ("--json", "search", "hybrid", "quokkasample", "--project", "local/sample")
    done = run_acms(remote["env"], *args, "--path", "inventory/*.py")
    assert done.returncode == 0, done.stderr
    hits = json.loads(done.stdout)["results"]
    paths = {h.get("path") or h["metadata"]["path"] for h in hits}
    assert paths and all(p.startswith("inventory/") for p in paths), paths


def test_a_select_of_other_than_three_variables_does_not_suggest_results_there(
    remote: dict[str, Any],
) -> None:
    query = "SELECT ?s WHERE { ?s ?p ?o }"
    done = run_acms(remote["env"], "sparql", query, "--project", "local/sample")
    assert done.returncode == 2 and "exactly three variables" in done.stderr
    assert "--results" not in done.stderr  # which the remote profile refuses
    # (In the local profile that error suggests --results: test_cli.py.)


def test_switching_profiles_either_way_indexes_every_file_again(
    milvus_server: ServerProcess, oxigraph_server: ServerProcess, tmp_path: Path
) -> None:
    """The two profiles share one catalog: a file changed and indexed in one
    profile read as unchanged in the other, whose indexes stayed stale for
    good.  A switch now indexes every file again (the identity each session
    records names the profile)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("def numbatmarker():\n    return 1\n")
    local = cli_env(tmp_path / "data")
    remote = remote_env(local, milvus_server, oxigraph_server, "switch")

    def found(env: dict[str, str], word: str) -> bool:
        done = run_acms(env, "--json", "search", "text", word, "--project", "local/s")
        assert done.returncode == 0, done.stderr
        return bool(json.loads(done.stdout))

    assert run_acms(local, "project", "add", "local/s").returncode == 0
    rid = run_acms(local, "resource", "add", str(repo), "--project", "local/s").stdout.strip()
    try:
        assert run_acms(local, "reindex").returncode == 0
        assert found(local, "numbatmarker")
        # To the remote profile: no --full needed any more.
        moved = json.loads(run_acms(remote, "--json", "reindex", "--project", "local/s").stdout)
        assert moved["total"]["files_indexed"] == 1, moved
        assert found(remote, "numbatmarker")
        (repo / "a.py").write_text("def bilbymarker():\n    return 2\n")
        assert run_acms(remote, "reindex", "--project", "local/s").returncode == 0
        assert found(remote, "bilbymarker")
        # Back to local: the change made in the remote profile is indexed here too.
        back = json.loads(run_acms(local, "--json", "reindex").stdout)
        assert back["total"]["files_indexed"] == 1, back
        assert found(local, "bilbymarker") and not found(local, "numbatmarker")
    finally:
        # Leave the shared servers as they were, from a process of its own: a
        # second Milvus client in this one drew Milvus Lite's "too_many_pings".
        run_acms(remote, "resource", "remove", rid)


def test_symbols_answers_from_the_endpoint_as_the_file_defines_them(
    remote: dict[str, Any],
) -> None:
    """``symbols`` reads a file's definitions in one walk of the endpoint
    (it was one request per symbol); the rows are the file's definitions."""
    done = run_acms(
        remote["env"], "--json", "symbols", "inventory/store.py", "--project", "local/sample"
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["results"]
    got = [(r["name"], r["line"], r["kind"]) for r in rows]
    assert got == [
        ("OutOfStockError", 6, "class"),
        ("InventoryStore", 10, "class"),
        ("InventoryStore.__init__", 13, "method"),
        ("InventoryStore.add_item", 16, "method"),
        ("InventoryStore.reserveUnits", 20, "method"),
    ], got
