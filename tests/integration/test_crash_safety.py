"""Crash safety: ``scripts/reindex.py`` (and ``--rebuild``, ``resource remove``)
killed with SIGKILL at every write step and at random moments.

Each scenario copies a template (two resources: copies of stdlib packages,
indexed once), changes some files (v2: two edited, one touched, one deleted,
one added; a third edited), runs the command under ``ACMS_FAULT_AT=<step>[:<n>]`` (or kills it
after a random delay), and then checks that

- every index opens without repair (the backends are built and ``status`` runs);
- every file present before and after the change is in text, vector and graph
  with all the units of one of its versions (old or new: never lost);

then changes the files again (v3: one edited again, one reverted to its v1
bytes, the v2-added file deleted, another added), so that units of a crashed
version become orphans, and checks that the next reindex succeeds without
waiting for a writer lock, that ``scripts/reindex.py --verify`` passes, and
that each index holds exactly the units of the final files.

The crash points are the index store's (``infrastructure/acms/index_store.py``
owns every write step; ``tests/unit/test_index_store.py`` crashes the same
steps in process, in milliseconds).  Scenarios run two at a time (they are
subprocess-bound); each test reports one scenario.
``benchmarks/soak_crash.py`` is the long random soak.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cleveragents.application.container import build_container
from cleveragents.application.services.chunking import chunk_text, detect_language, make_units
from cleveragents.application.services.code_graph import (
    PathLookup,
    chunk_starts,
    code_triples,
    extract_facts,
    file_triples,
    module_index,
    parser_language,
)
from cleveragents.application.services.operations import AcmsOperations
from cleveragents.application.services.resource_files import decode_text
from cleveragents.domain.models.acms.uko import UKO, file_uri, path_of, resource_uri
from cleveragents.infrastructure.acms.fault_injection import ENV_VAR, STEPS
from cleveragents.infrastructure.acms.tree_sitter_code import TreeSitterCodeParser

REPO = Path(__file__).resolve().parents[2]
REINDEX = REPO / "scripts" / "reindex.py"
STDLIB = Path(sysconfig.get_paths()["stdlib"])
PACKAGES = ("json", "wsgiref")
SEED = int(os.environ.get("CRASH_SEED", "20240611"))
WORKERS = 2

# ---------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    id: str
    command: str = "reindex"  # reindex | rebuild | remove
    fault: str | None = None  # ACMS_FAULT_AT, or None for a random-delay kill
    delay: float = 0.0
    pre_fault: str | None = None  # a first crashed reindex, then v3, then the fault
    next_command: str = "reindex"  # reindex | rebuild

    @property
    def verify_cli(self) -> bool:
        return self.fault is None or self.command == "rebuild" or self.pre_fault is not None


def _scenarios() -> list[Scenario]:
    out = [
        Scenario("index.dirty", fault="index.dirty"),
        Scenario("index.text", fault="index.text"),
        Scenario("index.vector:2", fault="index.vector:2"),
        Scenario("index.graph", fault="index.graph"),
        Scenario("index.commit", fault="index.commit"),
        Scenario("index.catalog", fault="index.catalog"),
        Scenario("index.touch", fault="index.touch"),
        Scenario("delete.catalog", fault="delete.catalog"),
        Scenario("delete.text:2", fault="delete.text:2"),
        Scenario("delete.vector", fault="delete.vector"),
        Scenario("delete.graph", fault="delete.graph"),
        Scenario("index.clean", fault="index.clean"),
        # A dirty resource (killed before its catalog rows), changed again,
        # then killed part way through the orphan sweep.
        Scenario("sweep.text", fault="sweep.text", pre_fault="index.graph"),
        Scenario("sweep.vector", fault="sweep.vector", pre_fault="index.graph"),
        Scenario("sweep.graph", fault="sweep.graph", pre_fault="index.graph"),
        Scenario("resource.delete:2", command="remove", fault="resource.delete:2"),
        Scenario("rebuild.staged", command="rebuild", fault="rebuild.staged"),
        Scenario("rebuild.swap:1", command="rebuild", fault="rebuild.swap:1"),
        Scenario(
            "rebuild.swap:2", command="rebuild", fault="rebuild.swap:2", next_command="rebuild"
        ),
        Scenario("rebuild.swap:3", command="rebuild", fault="rebuild.swap:3"),
        Scenario("rebuild.swap:4", command="rebuild", fault="rebuild.swap:4"),
        Scenario("rebuild.done", command="rebuild", fault="rebuild.done"),
    ]
    rng = random.Random(SEED)
    out += [Scenario(f"random-{i}", delay=round(rng.uniform(0.6, 2.6), 3)) for i in range(5)]
    return out


SCENARIOS = _scenarios()


# Steps whose crash needs another setting between runs (a change of embedder),
# crashed and repaired in their own test.
COVERED_ELSEWHERE = {"reembed.vector": "tests/e2e/test_embedder_switch_cli.py"}


def test_every_fault_step_has_a_scenario() -> None:
    covered = {s.fault.partition(":")[0] for s in SCENARIOS if s.fault}
    assert covered | set(COVERED_ELSEWHERE) == set(STEPS)
    assert not covered & set(COVERED_ELSEWHERE)
    for path in COVERED_ELSEWHERE.values():
        assert (Path(__file__).resolve().parents[2] / path).is_file()


# ---------------------------------------------------------------- the world


def run(
    args: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def acms(*args: str) -> list[str]:
    return ["-m", "cleveragents.acms", *args]


def base_env(data: Path) -> dict[str, str]:
    env = {**os.environ, "ACMS_DATA_DIR": str(data)}
    for name in ("ACMS_PROFILE", ENV_VAR):
        env.pop(name, None)
    return env


@dataclass
class Template:
    root: Path
    rids: dict[str, str]  # package name -> resource ULID


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    root = tmp_path_factory.mktemp("crash-template")
    data = root / "data"
    env = base_env(data)
    assert run(acms("project", "add", "local/crash"), env).returncode == 0
    rids = {}
    for name in PACKAGES:
        shutil.copytree(
            STDLIB / name, root / "src" / name, ignore=shutil.ignore_patterns("__pycache__")
        )
        done = run(
            acms("resource", "add", str(root / "src" / name), "--project", "local/crash"), env
        )
        assert done.returncode == 0, done.stderr
        rids[name] = done.stdout.strip()
    done = run([str(REINDEX)], env)
    assert done.returncode == 0, done.stderr
    return Template(root, rids)


@dataclass
class World:
    """One scenario's copy of the template and the history of its files."""

    root: Path
    rids: dict[str, str]
    # (package, path) -> every content it has had, oldest first (None: absent)
    history: dict[tuple[str, str], list[bytes | None]] = field(default_factory=dict)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def src(self, name: str) -> Path:
        return self.root / "src" / name

    def env(self, fault: str | None = None) -> dict[str, str]:
        env = base_env(self.data)
        if fault:
            env[ENV_VAR] = fault
        return env

    def current(self, name: str) -> dict[str, bytes]:
        base = self.src(name)
        return {
            p.relative_to(base).as_posix(): p.read_bytes()
            for p in sorted(base.rglob("*"))
            if p.is_file()
        }

    def history_paths(self, name: str) -> list[str]:
        """The .py files of the template (v1), whatever happened to them since."""
        return [
            p
            for (n, p), versions in self.history.items()
            if n == name and p.endswith(".py") and "added" not in p and versions[0] is not None
        ]

    def record(self) -> None:
        for name in self.rids:
            now = self.current(name)
            for path in now.keys() | {p for (n, p) in self.history if n == name}:
                versions = self.history.setdefault((name, path), [])
                content = now.get(path)
                if not versions or versions[-1] != content:
                    versions.append(content)


def copy_world(template: Template, root: Path) -> World:
    shutil.copytree(template.root / "src", root / "src")  # copy2: mtimes kept
    shutil.copytree(template.root / "data", root / "data")
    registry = sqlite3.connect(root / "data" / "registry.sqlite3")
    with registry:
        registry.execute(
            "UPDATE resources SET location = replace(location, ?, ?)",
            (str(template.root / "src"), str(root / "src")),
        )
    registry.close()
    world = World(root, dict(template.rids))
    world.record()
    return world


def change_v2(world: World) -> None:
    for name in world.rids:
        base = world.src(name)
        files = sorted(world.history_paths(name))
        # files[4] is changed only here: the common case of a crashed run.
        for i, path in enumerate((files[0], files[1], files[4])):
            old = (base / path).read_text()
            (base / path).write_text(f"def crash_v2_marker_{i}():\n    return {i}\n\n\n{old}")
        later = time.time_ns() + 5_000_000_000
        os.utime(base / files[2], ns=(later, later))  # touched: same bytes
        (base / files[3]).unlink()
        (base / "crash_added_v2.py").write_text("def added_in_v2():\n    return 'v2'\n")
    world.record()


def change_v3(world: World, template: Template) -> None:
    for name in world.rids:
        base = world.src(name)
        files = sorted(world.history_paths(name))
        first, second, deleted = files[0], files[1], files[3]
        v1 = world.history[(name, second)][0]
        assert v1 is not None
        old = (base / first).read_text()
        (base / first).write_text(f"class CrashV3Marker:\n    pass\n\n\n{old}\n# v3\n")
        (base / second).write_bytes(v1)  # reverted: the catalog may hold this hash
        # Restored from a copy that kept its mtime: size and mtime match the
        # catalog row the v2 run may have failed to remove.
        shutil.copy2(template.root / "src" / name / deleted, base / deleted)
        (base / "crash_added_v2.py").unlink()
        (base / "crash_added_v3.py").write_text("def added_in_v3():\n    return 'v3'\n")
    world.record()


# ---------------------------------------------------------------- expectations


_PARSER = TreeSitterCodeParser()


def expected(rid: str, path: str, data: bytes) -> tuple[set[str], set[str]]:
    """The unit URIs and graph subjects the indexer writes for this content."""
    text = decode_text(data)
    language = detect_language(path)
    # As the indexer plans it: chunks and graph from the tree-sitter facts.
    parsed = _PARSER.parse(text, parser_language(path, language))
    if parsed is not None:
        chunks = chunk_text(text, language, starts=chunk_starts(parsed))
        triples = code_triples(rid, path, language, chunks, parsed, PathLookup([path]))
    else:
        chunks = chunk_text(text, language)
        facts = extract_facts(path, text, language)
        triples = file_triples(rid, path, language, chunks, facts, module_index([path]))
    units = {u.uko_uri for u in make_units(rid, path, text, language=language, chunks=chunks)}
    own = file_uri(rid, path)
    subjects = {t[0] for t in triples if t[0].startswith(own)} | {own}
    return units, subjects


@dataclass
class Seen:
    text: dict[str, set[str]]
    vector: dict[str, set[str]]
    graph: dict[str, set[str]]
    contains: set[str]


def by_path(uris: set[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for uri in uris:
        path = path_of(uri)
        if path is not None:
            out.setdefault(path, set()).add(uri)
    return out


def open_and_read(world: World, *, verify: bool = False) -> tuple[dict[str, Seen], list[str]]:
    """Open every index as a user would (status), and read what each holds;
    ``verify``: also run the checks of ``reindex.py --verify``, in process."""
    container = build_container("local", world.data)
    problems: list[str] = []
    seen: dict[str, Seen] = {}
    try:
        ops = AcmsOperations.from_container(container)
        status = ops.status()
        if len(status["resources"]) != len(world.rids):
            problems.append(f"status lists {len(status['resources'])} resources")
        if verify:
            problems += [f"verify: {p}" for p in ops.verify()]
        text, vector, graph = (
            container.text_backend(),
            container.vector_backend(),
            container.graph_backend(),
        )
        for name, rid in world.rids.items():
            contains = {
                o
                for _s, p, o in graph.get_triples(resource_uri(rid), scope=frozenset({rid})).triples
                if p == UKO + "contains"
            }
            seen[name] = Seen(
                by_path(text.unit_uris(rid)),
                by_path(vector.unit_uris(rid)),
                by_path(graph.subjects(rid)),
                contains,
            )
    finally:
        for backend in (
            container.text_backend(),
            container.vector_backend(),
            container.graph_backend(),
        ):
            backend.close()
        container.indexer().catalog.close()  # type: ignore[union-attr]
    return seen, problems


def check_never_lost(
    world: World, seen: dict[str, Seen], before: dict[str, dict[str, bytes]]
) -> list[str]:
    """Files present before and after the change hold all units of a version."""
    problems = []
    for name, rid in world.rids.items():
        after = world.current(name)
        for path in sorted(before[name].keys() & after.keys()):
            versions = [v for v in world.history[(name, path)] if v is not None]
            wanted = [expected(rid, path, v) for v in versions]
            have = seen[name]
            for index, got, pick in (
                ("text", have.text.get(path, set()), 0),
                ("vector", have.vector.get(path, set()), 0),
                ("graph", have.graph.get(path, set()), 1),
            ):
                if not got or not any(w[pick] <= got for w in wanted):
                    problems.append(f"{name}/{path}: {index} holds no complete version")
    return problems


def check_exact(world: World, seen: dict[str, Seen]) -> list[str]:
    """After the next run: every index holds exactly the final files' units."""
    problems = []
    for name, rid in world.rids.items():
        files = world.current(name)
        want = {path: expected(rid, path, data) for path, data in files.items()}
        have = seen[name]
        for index, got, pick in (
            ("text", have.text, 0),
            ("vector", have.vector, 0),
            ("graph", have.graph, 1),
        ):
            for path in sorted(got.keys() | want.keys()):
                w = want[path][pick] if path in want else set()
                if got.get(path, set()) != w:
                    problems.append(f"{name}/{path}: {index} differs from the final file")
        if have.contains != {file_uri(rid, p) for p in files}:
            problems.append(f"{name}: contains edges differ from the final files")
    return problems


# ---------------------------------------------------------------- one scenario


def crash(world: World, scenario: Scenario, fault: str | None, delay: float) -> str:
    """Run the command; return how it ended ('killed', 'finished' or a problem)."""
    if scenario.command == "remove":
        args = acms("resource", "remove", world.rids[PACKAGES[0]])
    elif scenario.command == "rebuild":
        args = [str(REINDEX), "--rebuild"]
    else:
        args = [str(REINDEX)]
    if fault is not None:
        done = run(args, world.env(fault))
        if done.returncode != -signal.SIGKILL:
            return f"{fault} never reached (exit {done.returncode}): {done.stderr[-300:]}"
        return "killed"
    proc = subprocess.Popen(
        [sys.executable, *args],
        env=world.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return "killed"
    return "finished"


def play(template: Template, root: Path, scenario: Scenario) -> list[str]:
    world = copy_world(template, root)
    before = {name: world.current(name) for name in world.rids}
    change_v2(world)
    if scenario.pre_fault:
        ended = crash(world, Scenario("pre"), scenario.pre_fault, 0)
        if ended != "killed":
            return [f"pre-crash: {ended}"]
        before = {name: world.current(name) for name in world.rids}
        change_v3(world, template)
    ended = crash(world, scenario, scenario.fault, scenario.delay)
    if ended not in ("killed", "finished"):
        return [ended]
    if (world.data / ".rebuild" / "text").exists() and scenario.command != "rebuild":
        return ["a .rebuild/ appeared without a rebuild"]
    seen, problems = open_and_read(world)
    if scenario.command != "remove":  # removal may legitimately have happened
        problems += check_never_lost(world, seen, before)
    if not scenario.pre_fault:
        change_v3(world, template)
    next_args = [str(REINDEX), "--log-level", "info", "--lock-timeout", "10"]
    if scenario.next_command == "rebuild":
        next_args.append("--rebuild")
    done = run(next_args, world.env())
    if done.returncode != 0:
        return [*problems, f"next {scenario.next_command} failed: {done.stderr[-500:]}"]
    if "writer_lock_busy" in done.stderr:
        problems.append("the next run waited for a stale tantivy writer lock")
    if (world.data / ".rebuild").exists():
        problems.append("a stale .rebuild/ survived the next run")
    # The script itself for some scenarios; the same check in process for the
    # others (a Python start-up less each: CI time).
    if scenario.verify_cli:
        verify = run([str(REINDEX), "--verify"], world.env())
        if verify.returncode != 0:
            problems.append(f"verify failed: {verify.stdout.strip()[:500]}")
    seen, more = open_and_read(world, verify=not scenario.verify_cli)
    return [*problems, *more, *check_exact(world, seen)]


@pytest.fixture(scope="module")
def outcomes(
    template: Template, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, list[str]]]:
    wanted = {
        item.callspec.params["scenario"].id
        for item in request.session.items
        if item.originalname == "test_crash_point" and hasattr(item, "callspec")
    }
    todo = [s for s in SCENARIOS if s.id in wanted]
    base = tmp_path_factory.mktemp("crash")
    started = time.perf_counter()
    with ThreadPoolExecutor(WORKERS) as pool:
        results = dict(
            zip(
                [s.id for s in todo],
                pool.map(lambda s: play(template, base / s.id.replace(":", "-"), s), todo),
                strict=True,
            )
        )
    print(f"\n{len(todo)} crash scenarios in {time.perf_counter() - started:.1f} s (seed {SEED})")
    yield results


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_crash_point(scenario: Scenario, outcomes: dict[str, list[str]]) -> None:
    assert outcomes[scenario.id] == []


def test_fault_hook_rejects_an_unknown_step() -> None:
    done = run(
        ["-c", "import cleveragents.infrastructure.acms.fault_injection"],
        {**os.environ, ENV_VAR: "no.such.step"},
    )
    assert done.returncode != 0
    assert "unknown step" in done.stderr


def test_a_clean_rerun_scans_nothing(template: Template, tmp_path: Path) -> None:
    """The dirty marker costs nothing when nothing changed: no index writes, no marker."""
    world = copy_world(template, tmp_path / "w")
    container = build_container("local", world.data)
    indexer: Any = container.indexer()
    try:
        for name, rid in world.rids.items():
            stats = indexer.index_resource(rid, world.src(name), "directory")
            assert (stats.files_read, stats.index_writes) == (0, 0)
            assert indexer.catalog.get_meta(f"dirty:{rid}") is None
    finally:
        for backend in (
            container.text_backend(),
            container.vector_backend(),
            container.graph_backend(),
        ):
            backend.close()
        indexer.catalog.close()
