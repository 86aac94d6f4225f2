"""The ``acms`` CLI and ``scripts/reindex.py`` driven as a user runs them:
subprocesses on a temporary data directory, two projects with distinct
marker words."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cleveragents.domain.models.acms.uko import UKO
from gitrepo import git

REPO = Path(__file__).resolve().parents[2]
REINDEX = REPO / "scripts" / "reindex.py"


def write_project(root: Path, marker: str) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "core.py").write_text(
        f"from pkg import helpers\n\n\nclass {marker.title()}Engine:\n"
        f'    """The {marker} engine."""\n\n    def run(self):\n'
        f"        return helpers.{marker}_helper()\n"
    )
    (root / "pkg" / "helpers.py").write_text(f"def {marker}_helper():\n    return '{marker}'\n")
    return root


class Cli:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.env = {**os.environ, "ACMS_DATA_DIR": str(data_dir)}
        self.env.pop("ACMS_PROFILE", None)

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "cleveragents.acms", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
        )
        if ok:
            assert done.returncode == 0, done.stderr
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run("--json", *args).stdout)

    def reindex(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(REINDEX), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=300,
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("e2e")
    cli = Cli(base / "data")
    ids = {}
    for name, marker in (("alpha", "aardvark"), ("bravo", "bumblebee")):
        src = write_project(base / name, marker)
        cli.run("project", "add", f"local/{name}")
        ids[name] = cli.run(
            "resource", "add", str(src), "--project", f"local/{name}"
        ).stdout.strip()
    done = cli.reindex("--json")
    assert done.returncode == 0, done.stderr
    return {"cli": cli, "ids": ids, "base": base, "report": json.loads(done.stdout)}


def test_resource_add_prints_a_ulid_and_reindex_reports(world: dict[str, Any]) -> None:
    ids, report = world["ids"], world["report"]
    assert all(len(rid) == 26 and rid.isupper() for rid in ids.values())
    assert set(report["resources"]) == set(ids.values())
    assert report["total"]["files_indexed"] == 6
    listed = world["cli"].json("resource", "list", "--project", "local/alpha")
    assert [r["resource_id"] for r in listed] == [ids["alpha"]]


@pytest.mark.parametrize("mode", ["text", "vector", "hybrid"])
@pytest.mark.parametrize("option", ["--top-k", "--max-results"])
def test_every_search_mode_takes_both_spellings_of_the_result_count(
    world: dict[str, Any], mode: str, option: str
) -> None:
    """README shows --top-k for vector search: a user tries it on text too."""
    query = "aardvark OR engine OR helper" if mode == "text" else "aardvark engine helper"
    cli, scope = world["cli"], ("--project", "local/alpha")
    answer = cli.json("search", mode, query, *scope, option, "1")
    hits = answer["results"] if mode == "hybrid" else answer
    assert len(hits) == 1, answer
    more = cli.json("search", mode, query, *scope, option, "2")
    assert len(more["results"] if mode == "hybrid" else more) == 2


@pytest.mark.parametrize(("own", "other"), [("alpha", "bravo"), ("bravo", "alpha")])
def test_every_query_kind_stays_in_its_project(world: dict[str, Any], own: str, other: str) -> None:
    cli = world["cli"]
    markers = {"alpha": "aardvark", "bravo": "bumblebee"}
    mine, theirs = markers[own], markers[other]
    scope = ("--project", f"local/{own}")

    text = cli.json("search", "text", f"{mine} OR {theirs} OR engine", *scope)
    assert text and all(world["ids"][own] in r["uko_uri"] for r in text)
    assert any(mine in r["content"] for r in text)
    assert not any(theirs in r["content"] for r in text)

    vector = cli.json("search", "vector", f"{theirs} engine helper", *scope, "--top-k", "50")
    assert vector and all(world["ids"][own] in r["uko_uri"] for r in vector)

    rows = cli.json("sparql", "SELECT ?s ?p ?o WHERE { ?s ?p ?o }", *scope)["triples"]
    flat = json.dumps(rows)
    assert mine in flat.lower() and theirs not in flat.lower()

    core = f"uko://{world['ids'][own]}/pkg/core.py"
    triples = cli.json("triples", core, *scope)["triples"]
    assert triples and all(t[0] == core for t in triples)
    walked = cli.json("traverse", core, "--depth", "1", *scope)["triples"]
    assert [core, "https://cleveragents.dev/ns/uko#imports", core.replace("core", "helpers")] in (
        walked
    )
    # Asking about the other project's node through this scope is refused.
    other_core = f"uko://{world['ids'][other]}/pkg/core.py"
    for command in ("triples", "traverse"):
        done = cli.run("--json", command, other_core, *scope, ok=False)
        assert done.returncode == 2 and done.stdout == ""
        assert "outside this session's scope" in done.stderr
        assert theirs not in done.stderr.lower()


def test_a_file_path_stands_for_its_node_in_each_in_scope_resource(
    world: dict[str, Any],
) -> None:
    cli, ids = world["cli"], world["ids"]
    cores = {name: f"uko://{rid}/pkg/core.py" for name, rid in ids.items()}
    alpha = ("--project", "local/alpha")
    for command, extra in (("triples", ()), ("traverse", ("--depth", "2"))):
        by_iri = cli.json(command, cores["alpha"], *extra, *alpha)["triples"]
        assert by_iri
        assert cli.json(command, "pkg/core.py", *extra, *alpha)["triples"] == by_iri
        assert cli.json(command, "./pkg/core.py", *extra, *alpha)["triples"] == by_iri
    # Both projects in scope: the path names both files, each triple once.
    both = (*alpha, "--project", "local/bravo")
    union = cli.json("triples", "pkg/core.py", *both)["triples"]
    expected = sorted(
        tuple(t)
        for name in ("alpha", "bravo")
        for t in cli.json("triples", cores[name], *both)["triples"]
    )
    assert [tuple(t) for t in union] == expected
    assert {t[0] for t in union} == set(cores.values())
    walked = cli.json("traverse", "pkg/core.py", "--depth", "1", *both)["triples"]
    assert {t[0] for t in walked} == set(cores.values()) and len(walked) == len(
        {tuple(t) for t in walked}
    )
    text = cli.run("triples", "pkg/core.py", *alpha).stdout
    assert cores["alpha"] in text and ids["bravo"] not in text
    # Backwards along one predicate: who imports pkg/helpers.py, by path.
    helpers = {name: cores[name].replace("core", "helpers") for name in cores}
    imports = "https://cleveragents.dev/ns/uko#imports"
    importers = cli.json(
        "traverse", "pkg/helpers.py", "--depth", "1", "--direction", "in",
        "--predicate", "imports", *both,
    )["triples"]  # fmt: skip
    assert sorted(map(tuple, importers)) == sorted(
        (cores[name], imports, helpers[name]) for name in cores
    )
    assert cli.json(
        "traverse", "pkg/helpers.py", "--depth", "1", "--direction", "in",
        "--predicate", imports, *both,
    )["triples"] == importers  # fmt: skip
    # read takes the path of the one in-scope file; of two, it names both.
    read = cli.json("read", "pkg/helpers.py#L1-L2", *alpha)
    assert read == cli.json("read", f"uko://{ids['alpha']}/pkg/helpers.py#L1-L2", *alpha)
    assert read["results"][0]["text"] == "def aardvark_helper():"
    two = cli.run("read", "pkg/core.py", *both, ok=False)
    assert two.returncode == 2 and "2 resources" in two.stderr and cores["bravo"] in two.stderr


def test_removing_a_project_names_the_resources_it_leaves_registered(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "data")
    missing = cli.run("search", "text", "x", "--project", "local/gone", ok=False)
    assert missing.returncode == 2 and "no data directory at" in missing.stderr
    assert str(tmp_path / "data") in missing.stderr
    (tmp_path / "data").mkdir()
    empty = cli.run("search", "text", "x", "--project", "local/gone", ok=False)
    assert empty.returncode == 2 and "holds no projects" in empty.stderr
    assert str(tmp_path / "data") in empty.stderr
    src = write_project(tmp_path / "gone", "gecko")
    cli.run("project", "add", "local/gone")
    cli.run("project", "add", "local/stays")
    rid = cli.run("resource", "add", str(src), "--project", "local/gone").stdout.strip()
    # A file inside the resource is first of all not a directory.
    inner = cli.run(
        "resource", "add", str(src / "pkg" / "core.py"), "--project", "local/gone", ok=False
    )
    assert inner.returncode == 2 and "not a directory" in inner.stderr
    shared = write_project(tmp_path / "shared", "shrike")
    other = cli.run("resource", "add", str(shared), "--project", "local/stays").stdout.strip()
    done = cli.run("project", "remove", "local/gone")
    assert rid in done.stdout and "stay registered" in done.stdout and other not in done.stdout
    assert sorted(r["resource_id"] for r in cli.json("resource", "list")) == sorted([rid, other])
    cli.run("project", "add", "local/empty")
    assert cli.json("project", "remove", "local/empty") == {
        "removed": "local/empty",
        "resources_kept": [],
    }
    again = cli.run("search", "text", "x", "--project", "local/gone", ok=False)
    assert again.returncode == 2 and "see 'acms project list'" in again.stderr


def test_a_resource_whose_directory_is_gone_is_named_on_stderr_and_kept(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "data")
    src = write_project(tmp_path / "moth", "moth")
    cli.run("project", "add", "local/moth")
    rid = cli.run("resource", "add", str(src), "--project", "local/moth").stdout.strip()
    assert cli.reindex().returncode == 0
    shutil.rmtree(src)
    for done in (cli.reindex("--json"), cli.run("reindex")):
        assert done.returncode == 0, done.stderr
        assert f"resource {rid}: its directory is gone" in done.stderr
        assert f"acms resource remove {rid}" in done.stderr
    assert cli.json("search", "text", "moth_helper", "--project", "local/moth")  # kept
    # A rebuild would drop its units: it stops before building anything.
    for done in (cli.reindex("--rebuild"), cli.run("reindex", "--rebuild", ok=False)):
        assert done.returncode == 1, done.stderr
        assert "rebuild stopped, live indexes unchanged" in done.stderr
        assert rid in done.stderr and "acms resource remove" in done.stderr
    assert cli.json("search", "text", "moth_helper", "--project", "local/moth")
    status = {r["resource_id"]: r for r in cli.json("status")["resources"]}
    assert status[rid]["text_units"] > 0


def test_a_resource_whose_directory_is_empty_is_kept_until_files_come_back(
    tmp_path: Path,
) -> None:
    """An unmounted volume leaves an empty mount point: its units are kept
    (a warning names it) and a rebuild refuses; once a file is there, the
    directory is indexed as it is."""
    cli = Cli(tmp_path / "data")
    src = write_project(tmp_path / "mount", "marten")
    cli.run("project", "add", "local/mount")
    rid = cli.run("resource", "add", str(src), "--project", "local/mount").stdout.strip()
    assert cli.reindex().returncode == 0
    for entry in list(src.iterdir()):
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for done in (cli.reindex("--json"), cli.run("reindex")):
        assert done.returncode == 0, done.stderr
        assert f"resource {rid}: its directory is empty" in done.stderr
        assert f"acms resource remove {rid}" in done.stderr
    assert json.loads(cli.reindex("--json").stdout)["empty_locations"] == [rid]
    assert cli.json("search", "text", "marten_helper", "--project", "local/mount")  # kept
    done = cli.run("reindex", "--rebuild", ok=False)
    assert done.returncode == 1 and "rebuild stopped, live indexes unchanged" in done.stderr
    assert f"{rid} ({src}) is empty" in done.stderr
    assert cli.json("search", "text", "marten_helper", "--project", "local/mount")
    # A directory with something in it is what it holds: the old files go.
    (src / "fresh.py").write_text("def weasel_only():\n    return 1\n")
    done = cli.reindex("--json")
    assert done.returncode == 0 and "is empty" not in done.stderr
    assert not cli.json("search", "text", "marten_helper", "--project", "local/mount")
    assert cli.json("search", "text", "weasel_only", "--project", "local/mount")


def test_human_output_shows_uri_lines_score_and_snippet(world: dict[str, Any]) -> None:
    out = world["cli"].run("search", "text", "aardvark", "--project", "local/alpha").stdout
    assert "pkg/helpers.py:1-2" in out and "uko://" in out and "aardvark_helper" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("search", "text", "x", "--resource", "not-a-ulid"), "not a valid ULID"),
        (("search", "text", "x", "--project", "local/nope"), "no project named 'local/nope'"),
        (
            ("search", "text", "foo(", "--syntax", "tantivy", "--project", "local/alpha"),
            "invalid query",
        ),
        (("sparql", "SELECT ?s WHERE {", "--project", "local/alpha"), "SPARQL"),
        (
            (
                "sparql",
                "SELECT ?s ?p ?o WHERE { SERVICE <http://127.0.0.1:9/> { ?s ?p ?o } }",
                "--project",
                "local/alpha",
            ),
            "SERVICE",
        ),
        (("search", "text", "x"), "needs a scope"),
        (("search", "text", "x", "--project", "local/alpha", "--max-results", "0"), "positive"),
        (("traverse", "urn:x", "--depth", "-1", "--project", "local/alpha"), "negative"),
        # A path no in-scope resource indexes is an error, not "no triples".
        (("traverse", "pkg/absent.py", "--project", "local/alpha"), "neither an IRI nor"),
        (
            ("traverse", "pkg/core.py", "--predicate", "importz", "--project", "local/alpha"),
            "unknown predicate 'importz'",
        ),
        (("triples", "helpers", "--project", "local/alpha"), "neither an IRI nor"),
        (("symbols", "/abs/pkg/core.py", "--project", "local/alpha"), "neither an IRI nor"),
        (
            ("sparql", "SELECT ?s WHERE { ?s ?p ?o }", "--project", "local/alpha"),
            "--results answers any SELECT",
        ),
        (("read", "pkg/core.py#L90-L99", "--project", "local/alpha"), "past its end"),
        (
            ("search", "text", "x", "--lang", "pyhton", "--project", "local/alpha"),
            "did you mean 'python'",
        ),
        (("resource", "remove", "01ARZ3NDEKTSV4RRFFQ69G5FAV"), "no resource"),
        (("project", "add", "Bad Name"), "invalid project name"),
        (("project", "add", "local/alpha"), "already exists"),
        (("resource", "add", "/nonexistent/dir", "--project", "local/alpha"), "not a directory"),
        (("resource", "add", "", "--project", "local/alpha"), "the path is empty"),
        (
            ("search", "text", "-x", "--project", "local/alpha"),
            "'-x' is taken for an option: put a query or path that begins with '-' after '--'",
        ),
        (("frobnicate",), "invalid choice"),
    ],
)
def test_bad_input_exits_2_with_one_clear_line(
    world: dict[str, Any], args: tuple[str, ...], message: str
) -> None:
    done = world["cli"].run(*args, ok=False)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert message in lines[0]
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_a_query_that_begins_with_a_dash_goes_after_double_dash(world: dict[str, Any]) -> None:
    done = world["cli"].run("search", "text", "--project", "local/alpha", "--", "-aardvark")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_a_root_swapped_for_a_symlink_is_neither_indexed_nor_read_through(
    tmp_path: Path,
) -> None:
    """Found by a reviewer: roots are registered resolved, yet ``mv real
    real.orig; ln -s other real`` made the next reindex index ``other/`` as
    the resource, and ``read`` serve it."""
    cli = Cli(tmp_path / "data")
    real = write_project(tmp_path / "real", "realm")
    other = write_project(tmp_path / "other", "outsider")
    cli.run("project", "add", "local/p")
    rid = cli.run("resource", "add", str(real), "--project", "local/p").stdout.strip()
    assert cli.run("reindex").returncode == 0
    real.rename(tmp_path / "real.orig")
    real.symlink_to(other, target_is_directory=True)
    done = cli.run("reindex", ok=False)
    assert done.returncode == 1, done.stderr
    assert f"resource {rid}" in done.stderr and "is a symlink now" in done.stderr
    assert "Traceback" not in done.stderr
    found = cli.json("search", "text", "outsider", "--project", "local/p")
    assert found == []
    kept = cli.json("search", "text", "realm", "--project", "local/p")
    assert kept, "the resource's indexed files are kept"
    read = cli.run("read", "pkg/helpers.py", "--project", "local/p", ok=False)
    assert read.returncode == 2 and "is a symlink now" in read.stderr
    assert "outsider" not in read.stdout


@pytest.mark.parametrize("where", [".git", ".git/refs"])
def test_resource_add_refuses_a_git_directory(world: dict[str, Any], where: str) -> None:
    """Its files are git's objects and config (remote URLs with credentials),
    never a project's: refused in one line naming the work tree to register."""
    work_tree = world["base"] / f"repo-{where.replace('/', '-')}"
    write_project(work_tree, "gitdir")
    git(work_tree, "init", "-q")
    done = world["cli"].run(
        "resource", "add", str(work_tree / where), "--project", "local/alpha", ok=False
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    [line] = done.stderr.strip().splitlines()
    assert f"the git repository directory {work_tree / '.git'}" in line
    assert "register the work tree" in line and done.stdout == ""
    listed = world["cli"].json("resource", "list", "--project", "local/alpha")
    assert len(listed) == 1


@pytest.mark.parametrize(
    "extra",
    [("--full",), ("--project", "local/alpha"), ("--resource", "01ARZ3NDEKTSV4RRFFQ69G5FAV")],
)
def test_rebuild_refuses_a_selection_or_full_in_both_entry_points(
    world: dict[str, Any], extra: tuple[str, ...]
) -> None:
    cli = world["cli"]
    for done in (
        cli.run("reindex", "--rebuild", *extra, ok=False),
        cli.reindex("--rebuild", *extra),
    ):
        assert done.returncode == 2, (done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert (
            "--rebuild rebuilds every resource: drop --project, --resource and --full" in lines[0]
        )


def test_verify_tells_units_of_a_resource_not_registered_here_apart(tmp_path: Path) -> None:
    """Units no registered resource owns (a registry restored from an older
    backup; another deployment's, on shared servers) got the hint
    'reindex --full --resource <it>', which fails: no such resource."""
    cli = Cli(tmp_path / "data")
    cli.run("project", "add", "local/x")
    cli.run("resource", "add", str(write_project(tmp_path / "x", "xenon")), "--project", "local/x")
    assert cli.reindex().returncode == 0
    db = sqlite3.connect(tmp_path / "data" / "registry.sqlite3")
    with db:  # the registry forgets it; its units stay
        db.execute("DELETE FROM project_resources")
        db.execute("DELETE FROM resources")
    db.close()
    bad = cli.reindex("--verify")
    assert bad.returncode == 1
    assert "--resource" not in bad.stderr
    assert "1 resource(s) not registered here hold units" in bad.stderr
    assert "a plain 'reindex' deletes them" in bad.stderr
    assert cli.reindex().returncode == 0
    assert cli.reindex("--verify").returncode == 0


def test_verify_passes_then_fails_after_tampering(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "data")
    cli.run("project", "add", "local/x")
    cli.run("resource", "add", str(write_project(tmp_path / "x", "xenon")), "--project", "local/x")
    assert cli.reindex().returncode == 0
    ok = cli.reindex("--verify")
    assert ok.returncode == 0, ok.stderr
    assert "agree" in ok.stdout
    db = sqlite3.connect(tmp_path / "data" / "vectors" / "vectors.sqlite3")
    with db:
        db.execute("DELETE FROM units WHERE id = (SELECT min(id) FROM units)")
        db.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
    db.close()
    bad = cli.reindex("--verify", "--json")
    assert bad.returncode == 1
    report = json.loads(bad.stdout)
    assert report["ok"] is False and report["problems"][0]["index"] == "vector"
    assert "verify failed" in bad.stderr
    # The next reindex does not notice (the catalog says nothing changed);
    # the message names what repairs it, and it does.
    rid = report["problems"][0]["resource_id"]
    assert f"'reindex --full --resource {rid}' writes their units again" in bad.stderr
    assert cli.reindex("--full", "--resource", rid).returncode == 0
    assert cli.reindex("--verify").returncode == 0
    # So does a rebuild.
    db = sqlite3.connect(tmp_path / "data" / "vectors" / "vectors.sqlite3")
    with db:
        db.execute("DELETE FROM units WHERE id = (SELECT min(id) FROM units)")
        db.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
    db.close()
    assert cli.reindex("--verify").returncode == 1
    assert cli.reindex("--rebuild").returncode == 0
    assert cli.reindex("--verify").returncode == 0


def test_removing_a_resource_removes_its_results(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "data")
    cli.run("project", "add", "local/y")
    rid = cli.run(
        "resource", "add", str(write_project(tmp_path / "y", "yak")), "--project", "local/y"
    ).stdout.strip()
    assert cli.reindex().returncode == 0
    assert cli.json("search", "text", "yak", "--resource", rid)
    cli.run("resource", "remove", rid)
    status = cli.json("status")
    assert status["resources"] == []
    done = cli.run("search", "text", "yak", "--resource", rid, ok=False)
    assert done.returncode == 2 and "no resource" in done.stderr
    # Nothing of it is left in any index.
    assert cli.reindex("--verify").returncode == 0


def test_a_second_reindex_waits_then_gives_up_clearly(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "data")
    cli.run("project", "add", "local/w")
    with open(tmp_path / "data" / "reindex.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        done = cli.reindex("--lock-timeout", "0.5")
    assert done.returncode == 1
    assert "another reindex is running" in done.stderr
    assert "Traceback" not in done.stderr
    assert cli.reindex("--lock-timeout", "0.5").returncode == 0


def test_reader_sees_a_rebuild_without_reopening(tmp_path: Path) -> None:
    """An agent host keeps its backends open across a rebuild by another process."""
    from cleveragents.application.container import build_container
    from cleveragents.domain.models.acms.scope import ScopedView

    cli = Cli(tmp_path / "data")
    cli.run("project", "add", "local/z")
    src = write_project(tmp_path / "z", "zebra")
    rid = cli.run("resource", "add", str(src), "--project", "local/z").stdout.strip()
    assert cli.reindex().returncode == 0
    c = build_container("local", tmp_path / "data")
    view = ScopedView(c.text_backend(), c.vector_backend(), c.graph_backend(), frozenset({rid}))
    emb = c.embedder().embed(["zebra"])[0].tolist()
    assert view.search("zebra") and view.similarity_search(emb)
    (src / "pkg" / "helpers.py").write_text("def quagga_helper():\n    return 'quagga'\n")
    assert cli.reindex("--rebuild").returncode == 0
    assert [r.metadata["path"] for r in view.search("quagga")] == ["pkg/helpers.py"]
    emb = c.embedder().embed(["quagga_helper quagga"])[0].tolist()
    assert view.similarity_search(emb, top_k=1)[0].metadata["path"] == "pkg/helpers.py"
    helpers = f"uko://{rid}/pkg/helpers.py"
    names = view.sparql_query(
        f"SELECT ?s ?p ?n WHERE {{ <{helpers}> ?p ?s . ?s <{UKO}name> ?n }}"
    ).triples
    assert [n for _, _, n in names] == ["quagga_helper"]
    for backend in (c.text_backend(), c.vector_backend(), c.graph_backend()):
        backend.close()


def test_console_script_and_module_are_the_same_program(tmp_path: Path) -> None:
    exe = shutil.which("acms", path=str(Path(sys.executable).parent))
    assert exe is not None
    via_script = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True)
    via_module = Cli(tmp_path).run("--help")
    assert via_script.stdout == via_module.stdout
    assert "reindex" in via_script.stdout


def test_quickstart_indexes_the_sample_and_runs_each_query_kind(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "quickstart.py"), "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for heading in ("== text search", "== vector search", "== SPARQL", "== traverse"):
        assert heading in out
    assert "README.md:1" in out  # the sample's marker word was found
    assert "InventoryStore" in out  # a symbol from the graph
    bad = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "quickstart.py"), str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "not a directory" in bad.stderr


_ENGINE_PROBE = (
    "import importlib, json, sys\n"
    "import cleveragents.cli.main as m\n"
    "code = m.main(sys.argv[1:])\n"
    "engines = sorted(e for e in ('tantivy', 'faiss', 'rdflib', 'numpy') if e in sys.modules)\n"
    "unused = ('pydantic', 'yaml', 'starlette', 'ulid')\n"
    "loaded = sorted(u for u in unused if u in sys.modules)\n"
    "for name in unused:\n"
    "    importlib.import_module(name)  # still importable after the command\n"
    "print(json.dumps([engines, loaded]), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


@pytest.mark.parametrize(
    ("args", "engines"),
    [
        (("search", "text", "aardvark"), ["tantivy"]),
        (("search", "vector", "aardvark engine"), ["faiss", "numpy"]),
        (("sparql", "SELECT ?s ?p ?o WHERE { ?s ?p ?o } LIMIT 1"), ["rdflib"]),
        (("triples", "uko://x"), []),  # the graph store reads plain strings
        (("traverse", "uko://x"), []),
        # The agent session's graph questions build no embedder (no numpy).
        (("symbols", "pkg/core.py"), []),
        (("callers", "parse"), []),
        (("project", "list"), []),
        # Counting and writing vectors is SQLite: FAISS loads with a search.
        (("status",), ["numpy", "tantivy"]),
        (("reindex",), ["numpy", "tantivy"]),
        (("resource", "list"), []),
    ],
)
def test_each_command_imports_only_the_engine_it_queries(
    world: dict[str, Any], args: tuple[str, ...], engines: list[str]
) -> None:
    """Each command loads the engines it uses and nothing it never uses:
    not dependency-injector's integrations (pydantic, PyYAML, Starlette;
    installed for the MCP service) nor python-ulid (it makes ids, and these
    commands make none), which still import afterwards."""
    cli = world["cli"]
    unscoped = ("project", "resource", "status", "reindex")
    scope = ("--project", "local/alpha") if args[0] not in unscoped else ()
    done = subprocess.run(
        [sys.executable, "-c", _ENGINE_PROBE, *args, *scope],
        capture_output=True,
        text=True,
        env=cli.env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stderr.strip().splitlines()[-1]) == [engines, []]


def test_a_broken_dependency_injector_is_one_line_not_a_traceback(world: dict[str, Any]) -> None:
    """Entry points import dependency-injector early (without its unused
    integrations); if that import breaks, the command still fails in one
    line through the usual error handling.  Here pydantic is set to None in
    sys.modules, which makes dependency-injector's import raise
    AttributeError."""
    probe = (
        "import sys\n"
        "sys.modules['pydantic'] = None\n"
        "import cleveragents.cli.main as m\n"
        "sys.exit(m.main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "project", "list"],
        capture_output=True,
        text=True,
        env=world["cli"].env,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("acms: internal error: AttributeError")


def test_status_and_reindex_after_the_registry_is_lost(tmp_path: Path) -> None:
    """A deleted registry: ``status`` warns that the indexes hold resources the
    registry lacks, and ``reindex`` refuses (exit 1) instead of pruning them all."""
    cli = Cli(tmp_path / "data")
    src = write_project(tmp_path / "vole", "vole")
    cli.run("project", "add", "local/vole")
    cli.run("resource", "add", str(src), "--project", "local/vole")
    assert cli.reindex().returncode == 0
    for path in (tmp_path / "data").glob("registry.sqlite3*"):
        path.unlink()
    status = cli.run("status")
    assert "the registry lists no projects while the indexes hold 1" in status.stderr
    done = cli.run("reindex", ok=False)
    assert done.returncode == 1, done.stderr
    assert "restore it from a backup" in done.stderr and "Traceback" not in done.stderr
    assert cli.json("status")["unregistered"]
