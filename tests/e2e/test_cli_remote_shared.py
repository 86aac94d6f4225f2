"""Two deployments (data directories) on the same servers, in the same
collections and SPARQL dataset (the default names make that the natural
set-up): a plain ``reindex`` of one prunes only its own resources, and its
``--verify`` reports none of the other's.  A removal stopped midway is
still pruned.  Against Milvus Lite and Oxigraph on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

from cli_process import cli_env, run_acms
from remote_servers import ServerProcess, milvus_server, oxigraph_server, remote_env

__all__ = ["milvus_server", "oxigraph_server"]  # fixtures, re-exported for pytest

REINDEX = (str(Path(__file__).resolve().parents[2] / "scripts" / "reindex.py"),)


def tree(root: Path, word: str) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "m.py").write_text(f"def {word}():\n    return 1\n")
    return root


def found(env: dict[str, str], word: str, project: str) -> bool:
    done = run_acms(env, "--json", "search", "text", word, "--project", project)
    assert done.returncode == 0, done.stderr
    return bool(json.loads(done.stdout))


def test_deployments_sharing_servers_do_not_prune_each_other(
    milvus_server: ServerProcess, oxigraph_server: ServerProcess, tmp_path: Path
) -> None:
    first = remote_env(cli_env(tmp_path / "a"), milvus_server, oxigraph_server, "shared")
    # The same servers, collections and dataset; another data directory.
    second = {**first, **cli_env(tmp_path / "b")}
    second["ACMS_PROFILE"] = "remote"
    rids: dict[str, str] = {}
    for env, name in ((first, "wombatword"), (second, "quollword")):
        assert run_acms(env, "project", "add", f"local/{name}").returncode == 0
        added = run_acms(
            env, "resource", "add", str(tree(tmp_path / name, name)), "--project", f"local/{name}"
        )
        assert added.returncode == 0, added.stderr
        rids[name] = added.stdout.strip()
    try:
        assert run_acms(first, "reindex").returncode == 0
        done = run_acms(second, "--json", "reindex")  # a plain reindex: it prunes
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["pruned"] == []
        assert found(first, "wombatword", "local/wombatword")
        assert found(second, "quollword", "local/quollword")
        for env in (first, second):
            verified = run_acms(env, "--verify", program=REINDEX)
            assert verified.returncode == 0, verified.stdout + verified.stderr

        # The second deployment's registry lost (removed, as README says to
        # do with a damaged one) and its tree registered again: the next plain
        # reindex there prunes the old resource, which its catalog knows,
        # and only that one.
        (tmp_path / "b" / "registry.sqlite3").unlink()
        assert run_acms(second, "project", "add", "local/quollword").returncode == 0
        again = run_acms(
            second, "resource", "add", str(tmp_path / "quollword"), "--project", "local/quollword"
        )
        assert again.returncode == 0, again.stderr
        done = run_acms(second, "--json", "reindex")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["pruned"] == [rids["quollword"]]
        rids["quollword"] = again.stdout.strip()
        assert found(second, "quollword", "local/quollword")
        assert found(first, "wombatword", "local/wombatword")
    finally:
        run_acms(first, "resource", "remove", rids["wombatword"])
        run_acms(second, "resource", "remove", rids["quollword"])
