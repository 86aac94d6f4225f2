"""The ``remote`` profile end to end: configured from the environment,
``scripts/reindex.py --profile remote`` indexes the sample resource into the
real servers and ``--verify`` passes, a ``ScopedView`` over the container
answers, and no secret ever reaches an output, a log line or an error."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from cleveragents.application.container import build_container
from cleveragents.application.remote_profile import remote_settings
from cleveragents.domain.models.acms.errors import IndexUnavailableError
from cleveragents.domain.models.acms.scope import ScopedView
from remote_servers import ServerProcess, free_port, milvus_server, oxigraph_server

__all__ = ["milvus_server", "oxigraph_server"]  # fixtures, re-exported for pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample"
TOKEN = "milvus-T0ken-Secret"
PASSWORD = "sparql-Pa55-Secret"


def remote_env(milvus: str, sparql: str, **extra: str) -> dict[str, str]:
    return {
        "ACMS_MILVUS_URI": milvus,
        "ACMS_MILVUS_TOKEN": TOKEN,
        "ACMS_SPARQL_QUERY_URL": sparql + "/query",
        "ACMS_SPARQL_UPDATE_URL": sparql + "/update",
        "ACMS_SPARQL_STORE_URL": sparql + "/store",
        "ACMS_SPARQL_USER": "acms",
        "ACMS_SPARQL_PASSWORD": PASSWORD,
        "ACMS_MILVUS_TEXT_COLLECTION": "profile_text",
        "ACMS_MILVUS_VECTOR_COLLECTION": "profile_vectors",
        "ACMS_REMOTE_TIMEOUT": "20",
        **extra,
    }


@pytest.fixture
def env(
    milvus_server: ServerProcess, oxigraph_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    values = remote_env(milvus_server.uri, oxigraph_server.uri)
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    yield values


def run(args: list[str], env: dict[str, str], data_dir: Path) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, *args, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        env=full,
        cwd=ROOT,
    )


def register_sample(data_dir: Path) -> str:
    """Register the sample resource in a project, in process (the registry is
    local in every profile; subprocesses are kept for what is under test)."""
    c = build_container("stub", data_dir)
    c.project_repository().add("local/sample")
    resource = c.resource_registry().register(str(SAMPLE), "directory")
    c.project_repository().link("local/sample", resource.resource_id)
    return resource.resource_id


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert TOKEN not in text
        assert PASSWORD not in text


@pytest.mark.parametrize(
    "missing",
    ["ACMS_MILVUS_URI", "ACMS_SPARQL_QUERY_URL", "ACMS_SPARQL_UPDATE_URL", "ACMS_SPARQL_STORE_URL"],
)
def test_a_missing_variable_is_named(missing: str) -> None:
    values = remote_env("http://127.0.0.1:1", "http://127.0.0.1:2")
    del values[missing]
    with pytest.raises(ValueError, match=missing):
        remote_settings(values)


def test_settings_hide_secrets() -> None:
    settings = remote_settings(remote_env("http://u:pw@127.0.0.1:1", "http://127.0.0.1:2"))
    assert_no_secret(repr(settings), str(settings.public()))
    assert "pw@" not in str(settings.public())
    assert settings.public()["milvus_token"] == "set"


def test_half_basic_auth_is_refused() -> None:
    values = remote_env("http://127.0.0.1:1", "http://127.0.0.1:2")
    del values["ACMS_SPARQL_PASSWORD"]
    with pytest.raises(ValueError, match="both"):
        remote_settings(values)


def test_building_and_failing_never_logs_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    for key, value in remote_env(dead, dead, ACMS_REMOTE_TIMEOUT="1").items():
        monkeypatch.setenv(key, value)
    caplog.set_level("DEBUG")
    with capture_logs() as logs:
        c = build_container("remote", tmp_path)
        errors = []
        for make in (c.text_backend, c.vector_backend):
            with pytest.raises(IndexUnavailableError) as info:
                make()
            errors.append(repr(info.value) + str(info.value.__cause__))
        graph = c.graph_backend()
        with pytest.raises(IndexUnavailableError) as info:
            graph.get_triples("urn:x", scope=frozenset({"01JD5TD11B000000000000000A"}))
        errors.append(repr(info.value) + str(info.value.__cause__))
        graph.close()
    assert any(e["event"] == "acms.container.remote_profile" for e in logs)
    assert_no_secret(repr(logs), caplog.text, *errors)


def test_reindex_verify_and_query_the_sample(tmp_path: Path, env: dict[str, str]) -> None:
    data = tmp_path / "data"
    rid = register_sample(data)
    indexed = run(
        ["scripts/reindex.py", "--profile", "remote", "--json", "--log-level", "debug"], env, data
    )
    assert indexed.returncode == 0, indexed.stderr
    verified = run(["scripts/reindex.py", "--profile", "remote", "--verify"], env, data)
    assert verified.returncode == 0, verified.stderr
    assert "agree" in verified.stdout
    refused = run(["scripts/reindex.py", "--profile", "remote", "--rebuild"], env, data)
    assert refused.returncode == 2
    assert_no_secret(
        indexed.stdout, indexed.stderr, verified.stdout, verified.stderr, refused.stderr
    )

    c = build_container("remote", data)
    view = ScopedView(c.text_backend(), c.vector_backend(), c.graph_backend(), frozenset({rid}))
    try:
        hits = view.search("quokkasample")
        assert hits and all(h.uko_uri.startswith(f"uko://{rid}/") for h in hits)
        vector = view.similarity_search(c.embedder().embed(["inventory service"])[0].tolist())
        assert vector
        triples = view.traverse(f"uko://{rid}", depth=2).triples
        assert triples
        other = ScopedView(
            c.text_backend(),
            c.vector_backend(),
            c.graph_backend(),
            frozenset({"01JD5TD11B000000000000000Z"}),
        )
        assert other.search("quokkasample") == []
        assert other.sparql_query("SELECT ?s ?p ?o WHERE { ?s ?p ?o }").triples == []
    finally:
        for backend in (c.text_backend(), c.vector_backend(), c.graph_backend()):
            if hasattr(backend, "delete"):
                backend.delete(rid)
            backend.close()


def test_unreachable_servers_fail_with_one_line_and_no_secret(tmp_path: Path) -> None:
    dead = f"http://acms:{TOKEN}@127.0.0.1:{free_port()}"
    env = remote_env(dead, f"http://127.0.0.1:{free_port()}", ACMS_REMOTE_TIMEOUT="1")
    data = tmp_path / "data"
    register_sample(data)
    done = run(["scripts/reindex.py", "--profile", "remote"], env, data)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert_no_secret(done.stdout, done.stderr)


@pytest.mark.parametrize(("chosen", "prefix"), [("hashing", "hashing"), ("minilm", "minilm")])
def test_the_remote_profile_uses_the_embedder_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chosen: str, prefix: str
) -> None:
    # It always used the hashing embedder: ACMS_EMBEDDER=minilm was ignored
    # under remote, so its vectors were not the ones a local index holds.
    dead = f"http://127.0.0.1:{free_port()}"
    for key, value in remote_env(dead, dead).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("ACMS_EMBEDDER", chosen)
    monkeypatch.delenv("ACMS_EMBEDDING_DIM", raising=False)
    c = build_container("remote", tmp_path)
    embedder = c.embedder()
    assert embedder.name.startswith(prefix), embedder.name
    assert embedder.dimension == 384
