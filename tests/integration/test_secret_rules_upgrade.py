"""A release whose secret rules find more re-reads every file on the next
reindex: a file the new rules deny leaves every index, without --full."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cleveragents.application.services import indexer as indexer_module
from cleveragents.bootstrap import bootstrap
from cleveragents.domain.models.acms import secret_filter

# Assembled at run time, so this file holds no key.
PGP = b"-----BEGIN PGP " + b"PRIVATE KEY BLOCK-----\n\nwombatkeymaterial\n-----END PGP BLOCK-----\n"


def _search(data: Path, rid: str, query: str) -> list[str]:
    ops = bootstrap(data, embedding_dimension=16)
    try:
        return [r.uko_uri for r in ops.view(frozenset({rid})).search(query)]
    finally:
        ops.close()


def test_a_file_the_new_rules_deny_leaves_the_index_on_the_next_reindex(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "notes.py").write_bytes(b"x = 1\n" + PGP)
    (tree / "plain.py").write_text("def quokka_plain():\n    return 1\n")
    data = tmp_path / "data"
    # The previous release: its rules missed a PGP key block.
    with monkeypatch.context() as old:
        old.setattr(indexer_module, "SECRET_RULES_VERSION", "secrets-1")
        old.setattr(
            secret_filter,
            "_TOKEN_CHECKS",
            (
                ("private_key", (b"PRIVATE KEY-",), re.compile(rb"-----BEGIN[ A-Z0-9]+KEY-----")),
                *secret_filter._TOKEN_CHECKS[1:],
            ),
        )
        ops = bootstrap(data, embedding_dimension=16)
        try:
            ops.add_project("local/p")
            rid = ops.add_resource(str(tree), "local/p").resource_id
            ops.reindex(jobs=1)  # the old rules are patched into this process only
        finally:
            ops.close()
        assert any(
            u.endswith("/notes.py") or "/notes.py#" in u
            for u in _search(data, rid, "wombatkeymaterial")
        )
    # This release: an incremental reindex, no file changed.
    ops = bootstrap(data, embedding_dimension=16)
    try:
        report = ops.reindex()
        counts = ops.status()["resources"][0]
    finally:
        ops.close()
    assert report.resources[rid].files_read == 2  # every file read again
    assert report.total.skipped.get("secret", 0) == 1
    assert _search(data, rid, "wombatkeymaterial") == []
    assert _search(data, rid, "quokka_plain")
    assert counts["secrets_skipped"] == 1
