"""The CLI as a user runs it, against what a hostile repository or query can do:
a checkout git refuses, secret files, escape sequences in names and contents,
a closed pipe, and engine warnings."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gitrepo import FOREIGN_UID, git

REPO = Path(__file__).resolve().parents[2]
REINDEX = REPO / "scripts" / "reindex.py"

# Terminal controls a repository can plant: colour, title, clipboard (OSC 52),
# bidi override, 8-bit CSI.
ATTACKS = ("\x1b[", "\x1b]", "\x07", "\u202e", "\x9b")


class Cli:
    def __init__(self, base: Path, **env: str) -> None:
        self.env = {**os.environ, "ACMS_DATA_DIR": str(base / "data"), **env}
        self.env.pop("ACMS_PROFILE", None)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cleveragents.acms", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=180,
            errors="surrogateescape",
        )

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def reindex_script(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(REINDEX), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=180,
        )


def foreign_env(base: Path) -> dict[str, str]:
    """Environment in which git trusts nothing (no global or system config)."""
    empty = base / "empty-gitconfig"
    empty.write_text("")
    env = {"GIT_CONFIG_GLOBAL": str(empty), "GIT_CONFIG_NOSYSTEM": "1"}
    if os.geteuid() != 0:
        env["GIT_TEST_ASSUME_DIFFERENT_OWNER"] = "1"
    return env


def hand_over(root: Path) -> None:
    """As root, give the checkout to another uid (as a bind mount in Docker does)."""
    if os.geteuid() == 0:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in (*dirnames, *filenames):
                os.lchown(os.path.join(dirpath, name), FOREIGN_UID, FOREIGN_UID)
        os.lchown(root, FOREIGN_UID, FOREIGN_UID)


def test_a_checkout_git_refuses_fails_the_reindex_naming_the_fix(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir()
    (good / "good.py").write_text("def goodmarker():\n    pass\n")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a.py").write_text("def tracked():\n    pass\n")
    (bad / ".gitignore").write_text("private.txt\n")
    git(bad, "init", "-q")
    git(bad, "add", "-A")
    git(bad, "commit", "-qm", "c")
    (bad / "private.txt").write_text("ignoredmarker\n")

    cli = Cli(tmp_path, **foreign_env(tmp_path))
    cli.ok("project", "add", "local/p")
    bad_id = cli.ok("resource", "add", str(bad), "--project", "local/p").strip()
    good_id = cli.ok("resource", "add", str(good), "--project", "local/p").strip()
    hand_over(bad)  # (not root: GIT_TEST_ASSUME_DIFFERENT_OWNER makes it foreign already)

    for done in (cli.run("reindex"), cli.reindex_script()):
        assert done.returncode == 1, (done.stdout, done.stderr)
        [line] = [ln for ln in done.stderr.splitlines() if bad_id in ln]
        assert "dubious ownership" in line
        assert f"git config --global --add safe.directory {bad}" in line
        assert "Traceback" not in done.stderr
        assert f"failed: {bad_id}" in done.stdout  # the summary names it too
    # The other resource was indexed; nothing of the refused checkout was walked.
    assert "goodmarker" in cli.ok("search", "text", "goodmarker", "--project", "local/p")
    assert "no results" in cli.ok("search", "text", "ignoredmarker", "--project", "local/p")
    report = json.loads(cli.run("--json", "reindex").stdout)
    assert set(report["failed"]) == {bad_id} and good_id in report["resources"]
    status = json.loads(cli.ok("--json", "status"))
    never = {r["resource_id"]: r["last_indexed_at"] for r in status["resources"]}
    assert never[bad_id] is None and never[good_id]

    # Registering it again without --type (--force: it is already in the
    # project): the type cannot be guessed, say why.
    added = cli.run("resource", "add", str(bad), "--project", "local/p", "--force")
    assert added.returncode == 1
    assert "dubious ownership" in added.stderr and "safe.directory" in added.stderr
    # A rebuild stops before swapping anything in.
    rebuilt = cli.reindex_script("--rebuild")
    assert rebuilt.returncode == 1 and "live indexes unchanged" in rebuilt.stderr
    assert "goodmarker" in cli.ok("search", "text", "goodmarker", "--project", "local/p")


def test_secret_override_is_registered_counted_and_shown(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "certs").mkdir(parents=True)
    (repo / "main.py").write_text("def main():\n    pass\n")
    (repo / ".env").write_text("TOKEN=envmarker\n")
    (repo / "id_rsa").write_text("rsamarker\n")
    (repo / "certs" / "ca.pem").write_text("pemmarker\n")
    cli = Cli(tmp_path)
    cli.ok("project", "add", "local/p")
    default = cli.ok("resource", "add", str(repo), "--project", "local/p", "--type", "directory")
    # The same tree three times, on purpose (--force), each with its own override.
    allow = cli.ok(
        "resource", "add", str(repo), "--project", "local/p", "--type", "directory",
        "--allow-secret-pattern", "certs/*.pem", "--force",
    )  # fmt: skip
    off = cli.ok(
        "resource", "add", str(repo), "--project", "local/p", "--no-secret-filter", "--force"
    )
    default, allow, off = default.strip(), allow.strip(), off.strip()

    summary = cli.ok("reindex")
    assert "secrets skipped: 5" in summary  # 3 + 2 + 0
    status = {r["resource_id"]: r for r in json.loads(cli.ok("--json", "status"))["resources"]}
    assert status[default]["secret_filter"] == {"enabled": True, "allow": []}
    assert status[default]["secrets_skipped"] == 3
    assert status[allow]["secret_filter"] == {"enabled": True, "allow": ["certs/*.pem"]}
    assert status[allow]["secrets_skipped"] == 2
    assert status[off]["secret_filter"] == {"enabled": False, "allow": []}
    assert status[off]["secrets_skipped"] == 0
    human = cli.ok("status")
    assert "secrets: on skipped=3" in human
    assert "secrets: on (allow: certs/*.pem) skipped=2" in human
    assert "secrets: OFF skipped=0" in human

    def hits(marker: str, rid: str) -> bool:
        return marker in cli.ok("search", "text", marker, "--resource", rid)

    assert not any(hits(m, default) for m in ("envmarker", "rsamarker", "pemmarker"))
    assert hits("pemmarker", allow) and not hits("envmarker", allow)
    assert all(hits(m, off) for m in ("envmarker", "rsamarker", "pemmarker"))

    bad = cli.run(
        "resource", "add", str(repo), "--project", "local/p", "--allow-secret-pattern=", "--force"
    )
    assert bad.returncode == 2 and "allow-pattern" in bad.stderr

    # The override can be replaced later; the next reindex applies it.
    assert "secrets: on (allow: .env)" in cli.ok(
        "resource", "secrets", default, "--allow-secret-pattern", ".env"
    )
    assert "secrets: on skipped=0" in cli.ok("resource", "secrets", off)  # back to the default
    assert "secrets: on (allow: .env)" in cli.ok("resource", "list")
    cli.ok("reindex")
    assert hits("envmarker", default) and not hits("rsamarker", default)
    assert not any(hits(m, off) for m in ("envmarker", "rsamarker", "pemmarker"))
    missing = cli.run("resource", "secrets", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert missing.returncode == 2 and "no resource" in missing.stderr


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("hostile")
    repo = base / "repo"
    repo.mkdir()
    names = {
        "osc52": "clip\x1b]52;c;SGVsbG8=\x07.txt",
        "newline": "two\n0.999  forged.py:1-1.txt",
        "bidi": "evil\u202etxt.py",
        "colour": "red\x1b[31m.txt",
    }
    for name in names.values():
        (repo / name).write_text("escmarker\n")
    (repo / "code.py").write_text(
        'X = "escmarker \x1b[31mRED\x1b]0;title\x07 \x9b31m \u202e done"\n'
    )
    cli = Cli(base)
    cli.ok("project", "add", "local/h")
    rid = cli.ok("resource", "add", str(repo), "--project", "local/h").strip()
    cli.ok("reindex")
    return {"cli": cli, "names": names, "rid": rid}


def test_names_and_snippets_cannot_drive_the_terminal(hostile: dict[str, Any]) -> None:
    cli: Cli = hostile["cli"]
    out = cli.ok("search", "text", "escmarker", "--project", "local/h", "--max-results", "50")
    assert not any(a in out for a in ATTACKS), repr(out)
    # 5 hits, 2 lines each: the newline in a file name forged no line.
    assert len(out.splitlines()) == 10
    assert "two\\n0.999  forged.py:1-1.txt" in out
    assert "clip\\x1b]52;c;SGVsbG8=\\x07.txt" in out
    assert "evil\\u202etxt.py" in out
    assert "\\x1b[31mRED" in out  # the snippet, escaped
    # JSON keeps every byte exactly (json escapes them).
    results = json.loads(cli.ok("--json", "search", "text", "escmarker", "--project", "local/h"))
    assert {r["metadata"]["path"] for r in results} >= set(hostile["names"].values())
    raw = cli.ok("--json", "search", "text", "escmarker", "--project", "local/h")
    assert not any(a in raw for a in ATTACKS)


def test_graph_literals_and_error_messages_are_escaped(hostile: dict[str, Any]) -> None:
    cli: Cli = hostile["cli"]
    rid = hostile["rid"]
    rows = cli.ok("sparql", "SELECT ?s ?p ?o WHERE { ?s ?p ?o }", "--project", "local/h")
    assert not any(a in rows for a in ATTACKS), repr(rows)
    assert "clip\\x1b]52;c;SGVsbG8=\\x07.txt" in rows
    literal = cli.ok(
        "sparql",
        "SELECT ?s ?p ?o WHERE { BIND(<urn:s> AS ?s) BIND(<urn:p> AS ?p) "
        'BIND("a\\u001b]0;x\\u0007b" AS ?o) }',
        "--project",
        "local/h",
    )
    assert "a\\x1b]0;x\\x07b" in literal and "\x1b" not in literal
    triples = cli.ok("triples", f"uko://{rid}/code.py", "--resource", rid)
    assert not any(a in triples for a in ATTACKS)
    for args in (
        ("search", "text", "\x1b]52;c;QQ==\x07(", "--syntax", "tantivy", "--project", "local/h"),
        ("sparql", "SELECT \x1b[31m ?s WHERE {", "--project", "local/h"),
        ("project", "add", "\x1b]0;pwned\x07"),
    ):
        done = cli.run(*args)
        assert done.returncode == 2, done.stderr
        assert not any(a in done.stderr for a in ATTACKS), repr(done.stderr)
        assert len(done.stderr.splitlines()) == 1


def test_engine_warnings_print_one_line_and_no_traceback(hostile: dict[str, Any]) -> None:
    cli: Cli = hostile["cli"]
    for literal in (
        '"abc"^^<http://www.w3.org/2001/XMLSchema#integer>',
        '"<a"^^<http://www.w3.org/1999/02/22-rdf-syntax-ns#XMLLiteral>',
        '"2026-13-45"^^<http://www.w3.org/2001/XMLSchema#date>',
    ):
        done = cli.run(
            "sparql",
            f"SELECT ?s ?p ?o WHERE {{ BIND(<urn:s> AS ?s) BIND(<urn:p> AS ?p) "
            f"BIND({literal} AS ?o) }}",
            "--project",
            "local/h",
        )
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr and 'File "' not in done.stderr
        lines = done.stderr.splitlines()
        assert len(lines) <= 2, lines  # at most one per warning (parse + result)
        for line in lines:
            event = json.loads(line)  # structured, one line each
            assert event["level"] == "warning"


def test_a_closed_pipe_ends_quietly_with_the_sigpipe_status(tmp_path: Path) -> None:
    """``acms project list | head -1`` with more output than a pipe holds."""
    cli = Cli(tmp_path)
    cli.ok("project", "add", "local/first")
    # Over 64 KB of listing, written in one transaction (the registry's own
    # add() commits each project durably, which takes minutes for thousands).
    with sqlite3.connect(tmp_path / "data" / "registry.sqlite3") as conn:
        conn.executemany(
            "INSERT INTO projects VALUES (?, '2026-01-01')",
            [(f"local/project-with-a-long-name-{i:05d}",) for i in range(3000)],
        )
    conn.close()
    script = (
        f'"{sys.executable}" -m cleveragents.acms project list | head -1; '
        'echo "status=${PIPESTATUS[0]}" >&2'
    )
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=cli.env, timeout=120
    )
    assert done.stdout.splitlines() == ["local/first  0 resource(s)"]
    assert done.stderr.splitlines() == ["status=141"], done.stderr
    # A reader that is gone before the first write: same status, nothing on stderr.
    proc = subprocess.Popen(
        [sys.executable, "-m", "cleveragents.acms", "project", "list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli.env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert err == b""
