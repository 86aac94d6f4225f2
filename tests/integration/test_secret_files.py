"""Secret files in a real repository never reach a tier fragment or an index.

A git checkout holds one file of each secret kind, each with its own marker
word.  After hydration into real Tantivy / FAISS / rdflib indexes on disk, no
text search, vector search, SPARQL query, catalog row or tier fragment
mentions any of them; with the filter off the same markers are found (so the
checks can see a leak), and turning the filter on removes them again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cleveragents.application.container import build_container
from cleveragents.application.services.context_tier_hydrator import (
    hydrate_tiers_for_plan,
    hydrate_tiers_from_project,
)
from cleveragents.application.services.context_tier_service import ContextTierService
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.domain.models.acms.secret_filter import SecretFilter
from cleveragents.domain.models.acms.uko import path_of
from cleveragents.infrastructure.acms.sqlite_registry import open_registry
from gitrepo import git, make_foreign

RID = "01JD0000000000000000000000"

SECRET_PATHS = [
    ".env",
    "app/.env.production",
    "deploy/prod.env",
    "certs/server.pem",
    "certs/tls.key",
    "id_rsa",
    "keys/id_ed25519",
    "keys/id_ecdsa",
    "keys/id_dsa",
    "home/.ssh/config",
    ".npmrc",
    ".pypirc",
    ".netrc",
    "_netrc",
    ".git-credentials",
    "gcp/credentials.json",
    "gcp/my-project-service-account.json",
    "client_secret_42.json",
    "home/.aws/credentials",
    "home/.docker/config.json",
    "home/.kube/config",
    ".htpasswd",
    "infra/terraform.tfstate",
    ".bash_history",
]
# Binary containers: their marker sits in text so a leak would be searchable.
SECRET_PATHS += ["certs/bundle.p12", "certs/bundle.pfx", "java/store.jks", "vault.kdbx"]
# Ordinary names, secret contents (assembled here so this file holds no token).
CONTENT_SECRETS = {
    "app/aws.py": "KEY = 'AKIA" + "Q3EGRL5ZXN7MVB2H'\n",
    "docs/setup.md": "export GITHUB_TOKEN=ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8" + "\n",
    "deploy/values.yaml": "tls: |\n  -----BEGIN RSA " + "PRIVATE KEY-----\n  MIIE\n",
    "bot/slack.js": "const token = 'xoxb-" + "123456789012-abcdefghijkl';\n",
}
SECRET_PATHS += list(CONTENT_SECRETS)
MARKERS = {path: f"secretmarker{i}" for i, path in enumerate(SECRET_PATHS)}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for path, marker in MARKERS.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(
            f"token = {marker}\npassword = {marker}\n{CONTENT_SECRETS.get(path, '')}"
        )
    (root / "README.md").write_text("# Demo\n\npublicmarker\n")
    # AWS's documented example key is not a secret.
    (root / "docs").mkdir(exist_ok=True)
    (root / "docs" / "aws.md").write_text("examplemarker AKIAIOSFODNN7EXAMPLE\n")
    (root / ".env.example").write_text("API_TOKEN=templatemarker\n")
    (root / "app").mkdir(exist_ok=True)
    (root / "app" / "settings.py").write_text("def load_settings():\n    return 'codemarker'\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    return root


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Any]:
    c = build_container("local", tmp_path / "data", embedding_dimension=64)
    yield c
    c.text_backend().close()
    c.vector_backend().close()
    c.graph_backend().close()


def view_of(c: Any) -> ScopedView:
    return ScopedView(c.text_backend(), c.vector_backend(), c.graph_backend(), frozenset({RID}))


def leaks(c: Any, tiers: ContextTierService) -> dict[str, set[str]]:
    """Every secret path or marker each store gives back (empty sets: no leak)."""
    view = view_of(c)
    secret_paths = set(SECRET_PATHS)
    found: dict[str, set[str]] = {"text": set(), "vector": set(), "graph": set()}
    for path, marker in MARKERS.items():
        for hit in view.search(marker, max_results=50, syntax="tantivy"):
            found["text"].add(hit.metadata.get("path", "?"))
        query = c.embedder().embed([f"token = {marker}\npassword = {marker}\n"])[0].tolist()
        for vhit in view.similarity_search(query, top_k=50):
            if vhit.metadata.get("path") in secret_paths or "secretmarker" in vhit.content:
                found["vector"].add(vhit.metadata.get("path", "?"))
        del path
    rows = view.sparql_query("SELECT ?s ?p ?o WHERE { ?s ?p ?o }").triples
    for row in rows:
        for term in row:
            if path_of(term) in secret_paths or term in secret_paths or "secretmarker" in term:
                found["graph"].add(term)
    found["catalog"] = set(c.indexer().catalog.records(RID)) & secret_paths
    found["tier"] = {
        f.metadata["path"]
        for f in tiers.fragments()
        if f.metadata["path"] in secret_paths or "secretmarker" in f.content
    }
    return found


def no_leaks(found: dict[str, set[str]]) -> bool:
    return not any(found.values())


def test_no_secret_reaches_a_tier_or_any_index(repo: Path, container: Any) -> None:
    tiers = ContextTierService()
    with capture_logs() as logs:
        hydrate_tiers_from_project(
            tiers, "local/demo", RID, str(repo), "git-checkout", indexer=container.indexer()
        )
    assert leaks(container, tiers) == {
        "text": set(),
        "vector": set(),
        "graph": set(),
        "catalog": set(),
        "tier": set(),
    }
    # Ordinary files and the committed template are there.
    view = view_of(container)
    for marker in ("publicmarker", "templatemarker", "codemarker"):
        assert view.search(marker), marker
    assert view.search("examplemarker")
    assert {f.metadata["path"] for f in tiers.fragments()} == {
        "README.md",
        ".env.example",
        "app/settings.py",
        "docs/aws.md",
    }
    # Each skip is logged with its path, reason and rule (or token kind), at INFO.
    skips = {
        e["path"]: e
        for e in logs
        if e["event"] == "context_hydrator.file_skipped"
        and e["reason"] in ("secret", "secret_content")
    }
    assert set(skips) == set(SECRET_PATHS)
    assert all(e["log_level"] == "info" for e in skips.values())
    by_content = {p: e["kind"] for p, e in skips.items() if e["reason"] == "secret_content"}
    assert by_content == {
        "app/aws.py": "aws_key_id",
        "docs/setup.md": "github_token",
        "deploy/values.yaml": "private_key",
        "bot/slack.js": "slack_token",
    }
    assert all(skips[p]["rule"] for p in set(SECRET_PATHS) - set(CONTENT_SECRETS))
    # And counted: a re-run (reading on its own) reports every one of them,
    # and still indexes none.
    stats = container.indexer().index_resource(RID, repo, "git-checkout", full=True)
    assert stats.skipped["secret"] == len(SECRET_PATHS)
    assert no_leaks(leaks(container, ContextTierService()))


def test_with_the_filter_off_secrets_are_found_and_turning_it_on_removes_them(
    repo: Path, container: Any
) -> None:
    """The leak checks can fail: with the filter off they see every secret.
    An index built before the filter existed is cleaned by the next run."""
    tiers = ContextTierService()
    off = SecretFilter(enabled=False)
    hydrate_tiers_from_project(
        tiers,
        "local/demo",
        RID,
        str(repo),
        "git-checkout",
        indexer=container.indexer(),
        secrets=off,
    )
    found = leaks(container, tiers)
    # Binary containers (.p12, .kdbx, ...) are text here, so every kind is indexed.
    assert found["text"] == set(SECRET_PATHS)
    assert found["catalog"] == set(SECRET_PATHS)
    assert found["tier"] == set(SECRET_PATHS)
    assert found["vector"] and found["graph"]

    # The next run drops every file the name rules deny, unread ...
    stats = container.indexer().index_resource(RID, repo, "git-checkout")
    by_name = set(SECRET_PATHS) - set(CONTENT_SECRETS)
    assert stats.skipped["secret"] == len(by_name)
    assert stats.files_deleted == len(by_name)
    assert leaks(container, ContextTierService())["text"] == set(CONTENT_SECRETS)
    # ... and content is checked when a file is read: unchanged files are not
    # re-read, so a full run (or an edit) drops the rest.
    stats = container.indexer().index_resource(RID, repo, "git-checkout", full=True)
    assert stats.skipped["secret"] == len(SECRET_PATHS)
    after = leaks(container, ContextTierService())
    assert no_leaks(after), after


def test_allow_patterns_let_only_the_matching_secrets_in(repo: Path, container: Any) -> None:
    tiers = ContextTierService()
    allow = SecretFilter(allow=["certs/*.pem", ".npmrc"])
    hydrate_tiers_from_project(
        tiers,
        "local/demo",
        RID,
        str(repo),
        "git-checkout",
        indexer=container.indexer(),
        secrets=allow,
    )
    found = leaks(container, tiers)
    assert found["text"] == {"certs/server.pem", ".npmrc"}
    assert found["tier"] == {"certs/server.pem", ".npmrc"}


def test_plan_hydration_uses_each_resources_registered_override(
    repo: Path, container: Any, tmp_path: Path
) -> None:
    projects, resources = open_registry(tmp_path / "registry.sqlite3")
    projects.add("local/demo")
    default = resources.register(repo, "git-checkout")
    opened = resources.register(repo, "git-checkout", secret_allow=(".env",))
    projects.link("local/demo", default.resource_id)
    projects.link("local/demo", opened.resource_id)
    tiers = ContextTierService()
    hydrate_tiers_for_plan(tiers, ["local/demo"], projects, resources)
    paths = [f.metadata["path"] for f in tiers.fragments()]
    # Only the resource that allowed .env contributed it, once.
    assert paths.count(".env") == 1
    assert not set(paths) & (set(SECRET_PATHS) - {".env"})


def test_a_git_checkout_git_refuses_hydrates_nothing_and_keeps_its_units(
    repo: Path, container: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dubious ownership: no walk (which would list ignored files), no empty
    session (which would delete the resource's units), a warning."""
    (repo / ".gitignore").write_text("local.txt\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore")
    (repo / "local.txt").write_text("ignoredmarker\n")
    hydrate_tiers_from_project(
        ContextTierService(), "local/demo", RID, str(repo), indexer=container.indexer()
    )
    before = container.text_backend().unit_uris(RID)
    assert before
    make_foreign(repo, monkeypatch)
    tiers = ContextTierService()
    with capture_logs() as logs:
        n = hydrate_tiers_from_project(
            tiers, "local/demo", RID, str(repo), indexer=container.indexer()
        )
    assert n == 0 and tiers.fragments() == []
    [failed] = [e for e in logs if e["event"] == "context_hydrator.listing_failed"]
    assert failed["log_level"] == "warning" and "safe.directory" in failed["error"]
    assert container.text_backend().unit_uris(RID) == before
    assert view_of(container).search("ignoredmarker") == []
