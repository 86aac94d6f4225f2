"""A remote server that lost its data, or a mistyped collection name, is an
error of every read and of ``acms status`` (exit 1, one line naming the
server and what to do), never an empty answer; a read never creates a
Milvus collection, and a plain ``reindex`` writes what was lost again.  Against
Milvus Lite and Oxigraph on 127.0.0.1 (``tests/remote_servers.py``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cleveragents.application.container import build_container
from cleveragents.infrastructure.acms.sparql_endpoint_graph import SparqlEndpointGraphBackend
from cli_process import cli_env, run_acms
from remote_servers import (
    ServerProcess,
    milvus_server,
    oxigraph_server,
    remote_env,
    unique_name,
)

__all__ = ["milvus_server", "oxigraph_server"]  # fixtures, re-exported for pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample"


def collections(uri: str) -> set[str]:
    import pymilvus

    client = pymilvus.MilvusClient(uri=uri, timeout=20)
    try:
        return set(client.list_collections())
    finally:
        client.close()


def drop(uri: str, name: str) -> None:
    import pymilvus

    client = pymilvus.MilvusClient(uri=uri, timeout=20)
    try:
        client.drop_collection(name)
    finally:
        client.close()


@pytest.fixture
def remote(
    milvus_server: ServerProcess, oxigraph_server: ServerProcess, tmp_path: Path
) -> Iterator[dict[str, Any]]:
    """The sample resource registered and indexed into fresh collections."""
    data = tmp_path / "data"
    env = remote_env(cli_env(data), milvus_server, oxigraph_server, "lost")
    assert run_acms(env, "project", "add", "local/sample").returncode == 0
    added = run_acms(env, "resource", "add", str(SAMPLE), "--project", "local/sample")
    assert added.returncode == 0, added.stderr
    indexed = run_acms(env, "reindex", "--full")
    assert indexed.returncode == 0, indexed.stderr
    rid = added.stdout.strip()
    yield {"env": env, "rid": rid, "data": data, "milvus": milvus_server.uri}
    with pytest.MonkeyPatch.context() as patch:  # leave the shared servers as they were
        for key, value in env.items():
            patch.setenv(key, value)
        graph = build_container("remote", data).graph_backend()
        graph.delete(rid)
        graph.close()
    for name in (env["ACMS_MILVUS_TEXT_COLLECTION"], env["ACMS_MILVUS_VECTOR_COLLECTION"]):
        drop(milvus_server.uri, name)


def one_error(done: subprocess.CompletedProcess[str], *says: str) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for part in says:
        assert part in lines[0], lines[0]
    return lines[0]


def test_a_mistyped_collection_is_an_error_and_is_not_created(remote: dict[str, Any]) -> None:
    env = {**remote["env"], "ACMS_MILVUS_TEXT_COLLECTION": unique_name("acms_txet")}
    typo = env["ACMS_MILVUS_TEXT_COLLECTION"]
    done = run_acms(env, "search", "text", "quokkasample", "--project", "local/sample")
    one_error(done, typo, remote["milvus"], "`acms reindex`", "ACMS_MILVUS_TEXT_COLLECTION")
    one_error(run_acms(env, "status"), typo)
    assert typo not in collections(remote["milvus"])
    # The control: the right name answers.
    ok = run_acms(
        remote["env"], "--json", "search", "text", "quokkasample", "--project", "local/sample"
    )
    assert ok.returncode == 0 and json.loads(ok.stdout), ok.stderr


def test_a_dropped_collection_fails_queries_and_status_until_a_reindex(
    remote: dict[str, Any],
) -> None:
    env = remote["env"]
    assert run_acms(env, "status").returncode == 0
    name = env["ACMS_MILVUS_VECTOR_COLLECTION"]
    drop(remote["milvus"], name)
    done = run_acms(env, "search", "vector", "inventory service", "--project", "local/sample")
    one_error(done, name, "does not exist", "`acms reindex`")
    one_error(run_acms(env, "status"), name, "does not exist")
    assert name not in collections(remote["milvus"])  # no read made it again
    rebuilt = run_acms(env, "reindex")  # plain: it finds what was lost
    assert rebuilt.returncode == 0, rebuilt.stderr
    status = run_acms(env, "--json", "status")
    assert status.returncode == 0, status.stderr
    (row,) = json.loads(status.stdout)["resources"]
    assert row["vector_units"] == row["text_units"] > 0


def test_a_wiped_graph_fails_status_and_graph_reads_until_a_reindex(
    remote: dict[str, Any],
) -> None:
    env, rid = remote["env"], remote["rid"]
    graph = SparqlEndpointGraphBackend(
        env["ACMS_SPARQL_QUERY_URL"],
        update_url=env["ACMS_SPARQL_UPDATE_URL"],
        store_url=env["ACMS_SPARQL_STORE_URL"],
    )
    try:
        assert graph.holds(rid)
        graph.delete(rid)  # the dataset lost this resource's graph
        assert not graph.holds(rid)
    finally:
        graph.close()
    url = env["ACMS_SPARQL_QUERY_URL"]
    one_error(run_acms(env, "status"), url, rid, "`acms reindex`")
    # Every graph read that finds nothing says why, instead of "no results".
    scope = ("--project", "local/sample")
    reads = [
        ("traverse", f"uko://{rid}", *scope),
        ("callers", "StockItem", *scope),
        ("callees", "reserveUnits", *scope),
        ("symbols", "inventory/store.py", *scope),
        ("sparql", "SELECT ?s ?p ?o WHERE { ?s ?p ?o }", *scope),
    ]
    for read in reads:
        one_error(run_acms(env, *read), url, rid, "`acms reindex`")
    rebuilt = run_acms(env, "reindex")  # plain: it finds what was lost
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert run_acms(env, "status").returncode == 0
    for read in reads:  # the control: each answers once the graph is written again
        done = run_acms(env, *read)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() and "no results" not in done.stdout, done.stdout


def test_a_read_of_a_missing_collection_creates_nothing(milvus_server: ServerProcess) -> None:
    """Nothing indexed yet (``required`` false): the read is empty; else an error."""
    from cleveragents.domain.models.acms.errors import IndexUnavailableError
    from cleveragents.infrastructure.acms.milvus_text import MilvusTextBackend

    name = unique_name("never_made")
    scope = frozenset({"01JD5TD11B000000000000000A"})
    fresh = MilvusTextBackend(milvus_server.uri, collection=name, required=lambda: False)
    try:
        assert fresh.search("anything", scope=scope) == []
        assert fresh.unit_uris("01JD5TD11B000000000000000A") == set()
        fresh.ping()
        fresh.delete("01JD5TD11B000000000000000A")
    finally:
        fresh.close()
    needed = MilvusTextBackend(milvus_server.uri, collection=name, required=lambda: True)
    try:
        with pytest.raises(IndexUnavailableError, match=name):
            needed.search("anything", scope=scope)
        with pytest.raises(IndexUnavailableError, match="does not exist"):
            needed.ping()
    finally:
        needed.close()
    assert name not in collections(milvus_server.uri)
