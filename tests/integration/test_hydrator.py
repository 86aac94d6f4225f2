"""The hydrator over a real git repository full of awkward files, feeding real
Tantivy / FAISS / rdflib indexes on disk, incrementally."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cleveragents.application.container import build_container
from cleveragents.application.services import context_tier_hydrator as hydrator_module
from cleveragents.application.services import indexer as indexer_module
from cleveragents.application.services.context_tier_hydrator import (
    hydrate_tiers_for_plan,
    hydrate_tiers_from_project,
)
from cleveragents.application.services.context_tier_service import ContextTierService
from cleveragents.application.services.indexer import Indexer
from cleveragents.application.services.resource_files import list_resource
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.domain.models.acms.tiers import ContextTier
from cleveragents.domain.models.acms.uko import UKO, file_uri, path_of
from cleveragents.infrastructure.acms.index_store import ManagedIndexStore
from cleveragents.infrastructure.acms.sqlite_registry import open_registry
from gitrepo import git

NON_UTF8 = os.fsdecode(b"caf\xe9.py")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "node_modules" / "dep").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "core.py").write_text(
        "from pkg import util\nimport json\n\n\nclass AlphaEngine:\n"
        "    def runQuickly(self):\n        return util.helper_function()\n"
    )
    (root / "pkg" / "util.py").write_text("def helper_function():\n    return 42\n")
    (root / "README.md").write_text("# Demo\n\nzebracorn marker word\n")
    (root / ".gitignore").write_text("ignored.log\n")
    (root / "ignored.log").write_text("ignoredmarker\n")
    (root / "node_modules" / "dep" / "index.js").write_text("function nodeModulesMarker() {}\n")
    (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    (root / "big.txt").write_text("bigfilemarker\n" + "x" * (300 * 1024))
    (root / "huge.txt").write_text("hugefilemarker\n" + "y" * (1200 * 1024))
    (root / "nul.txt").write_bytes(b"nulmarker\x00binary")
    os.symlink("/etc/passwd", root / "passwd_link")
    os.symlink("loop", root / "loop")
    (root / os.fsencode(NON_UTF8).decode("utf-8", "surrogateescape")).write_text(
        "def cafe_function():\n    pass\n"
    )
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    (root / "notes.txt").write_text("untrackedmarker\n")  # untracked, not ignored
    os.mkfifo(root / "fifo")
    return root


EXPECTED_FRAGMENTS = {
    ".gitignore",
    "README.md",
    "notes.txt",
    "pkg/__init__.py",
    "pkg/core.py",
    "pkg/util.py",
    NON_UTF8,
}
# Indexed: the fragments (an empty file has no chunk) plus the 300 KB file,
# which is over the tier's 256 KB cap but under the index's 1 MB cap.
EXPECTED_INDEXED = (EXPECTED_FRAGMENTS - {"pkg/__init__.py"}) | {"big.txt"}


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Any]:
    c = build_container("local", tmp_path / "data", embedding_dimension=64)
    yield c
    c.text_backend().close()
    c.vector_backend().close()
    c.graph_backend().close()


def indexed_paths(c: Any, rid: str) -> set[str]:
    return {path_of(u) for u in c.text_backend().unit_uris(rid)} - {None}


RID = "01JD0000000000000000000000"
ONLY = frozenset({RID})


def test_exactly_the_right_files_become_fragments_and_units(repo: Path, container: Any) -> None:
    tiers = ContextTierService()
    n = hydrate_tiers_from_project(
        tiers, "local/demo", RID, str(repo), "git-checkout", indexer=container.indexer()
    )
    fragments = tiers.fragments(ContextTier.HOT)
    assert n == len(fragments)
    assert {f.metadata["path"] for f in fragments} == EXPECTED_FRAGMENTS
    for f in fragments:
        assert f.metadata["detail_depth"] == "1"
        assert f.metadata["relevance_score"] == "0.5"
        assert f.tier is ContextTier.HOT
    assert indexed_paths(container, RID) == EXPECTED_INDEXED
    assert {path_of(u) for u in container.vector_backend().unit_uris(RID)} == EXPECTED_INDEXED
    assert "root:" not in " ".join(f.content for f in fragments)  # /etc/passwd never read

    view = ScopedView(
        container.text_backend(),
        container.vector_backend(),
        container.graph_backend(),
        frozenset({RID}),
    )
    for marker in ("zebracorn", "untrackedmarker", "bigfilemarker"):
        assert view.search(marker), marker
    for marker in ("ignoredmarker", "nodeModulesMarker", "hugefilemarker", "nulmarker"):
        assert view.search(marker, syntax="tantivy") == [], marker  # the whole name
    # Identifier parts find code; metadata carries the line range.
    hit = view.search("quickly")[0]
    assert hit.metadata["path"] == "pkg/core.py"
    assert hit.metadata["language"] == "python"
    assert int(hit.metadata["start_line"]) <= 6 <= int(hit.metadata["end_line"])
    # The graph: core.py imports util.py (a file of the same resource).
    core, util = file_uri(RID, "pkg/core.py"), file_uri(RID, "pkg/util.py")
    reached = view.traverse(core, depth=1).triples
    assert (core, UKO + "imports", util) in reached
    names = view.sparql_query(
        f"SELECT ?f ?p ?n WHERE {{ ?f <{UKO}defines> ?s . ?s <{UKO}name> ?n . BIND(?f AS ?p) }}"
    ).triples
    assert (core, core, "AlphaEngine") in names


@pytest.mark.parametrize("kind", ["directory", "git-checkout"])
def test_a_data_directory_inside_the_resource_is_not_hydrated(repo: Path, kind: str) -> None:
    # `resource add .` from a checkout with the default ./data: the indexes'
    # own files (meta.json, the catalog) became fragments and units, and
    # every run found its own writes changed.
    c = build_container("local", repo / "data", embedding_dimension=64)
    try:
        for _ in range(2):
            tiers = ContextTierService()
            hydrate_tiers_from_project(
                tiers, "local/demo", RID, str(repo), kind, indexer=c.indexer()
            )
            paths = {f.metadata["path"] for f in tiers.fragments(ContextTier.HOT)}
            assert not any(p.startswith("data/") for p in paths), sorted(paths)
            assert not any(p.startswith("data/") for p in indexed_paths(c, RID))
    finally:
        c.text_backend().close()
        c.vector_backend().close()
        c.graph_backend().close()


def test_directory_type_walks_without_git(repo: Path, container: Any) -> None:
    tiers = ContextTierService()
    hydrate_tiers_from_project(tiers, "local/demo", RID, str(repo), "directory")
    paths = {f.metadata["path"] for f in tiers.fragments()}
    assert paths == EXPECTED_FRAGMENTS | {"ignored.log"}


@pytest.mark.parametrize("kind", ["git-checkout", "directory"])
def test_symlinks_are_counted_as_skipped_and_never_followed(
    repo: Path, container: Any, kind: str
) -> None:
    """The reindex summary's ``skipped`` counts them: left out with only a
    debug log, they read as "skipped: 0" while the files they name were not
    indexed."""
    (repo / "pkg" / "util_link.py").symlink_to("util.py")  # inside the resource
    (repo / "etc_dir").symlink_to("/etc", target_is_directory=True)
    stats = container.indexer().index_resource(RID, repo, kind)
    # passwd_link, loop (committed), util_link.py and etc_dir (untracked).
    assert stats.skipped.get("symlink") == 4, stats.skipped
    assert stats.files_skipped >= 4
    indexed = indexed_paths(container, RID)
    assert not {"passwd_link", "loop", "pkg/util_link.py", "etc_dir"} & indexed
    assert not any(p.startswith("etc_dir/") for p in indexed)
    again = container.indexer().index_resource(RID, repo, kind)  # every run counts them
    assert again.skipped.get("symlink") == 4


@pytest.mark.parametrize("kind", ["git-checkout", "directory"])
def test_binary_extensions_and_special_files_are_counted_as_skipped(
    repo: Path, container: Any, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left out at listing with only a debug log, as symlinks were: the
    summary's ``skipped`` left out a binary by its extension, and a FIFO, a
    socket or a device file of a walked resource (git lists none of them)."""
    monkeypatch.chdir(repo)  # a relative bind keeps under the 108-byte sun_path limit
    specials = ["fifo", "app.sock"]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind("app.sock")
        with contextlib.suppress(PermissionError):  # a device needs CAP_MKNOD
            os.mknod(repo / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
            specials.append("null")
        stats = container.indexer().index_resource(RID, repo, kind)
        again = container.indexer().index_resource(RID, repo, kind)  # every run counts them
    walked = len(specials) if kind == "directory" else 0
    # image.png by its extension; nul.txt by its content, when it is read.
    assert stats.skipped.get("binary") == 2, stats.skipped
    assert again.skipped.get("binary") == 1, again.skipped
    assert stats.skipped.get("not_regular", 0) == walked == again.skipped.get("not_regular", 0)
    assert again.files_skipped == sum(again.skipped.values())
    assert not {"image.png", *specials} & indexed_paths(container, RID)


def test_rerun_reads_nothing_and_touching_one_file_reindexes_only_it(
    repo: Path, container: Any
) -> None:
    ix: Indexer = container.indexer()
    first = ix.index_resource(RID, repo)
    assert first.files_indexed == len(EXPECTED_INDEXED) + 1  # + the binary nul.txt, no units
    again = ix.index_resource(RID, repo)
    assert (again.files_read, again.bytes_read, again.index_writes, again.units_written) == (
        0,
        0,
        0,
        0,
    )
    # Symlinks and binaries by their extension are skipped at listing, so never seen.
    at_listing = len(list_resource(repo, "git-checkout").left_out)
    assert at_listing == 3  # passwd_link, loop, image.png
    assert again.files_unchanged == again.files_seen - again.files_skipped + at_listing

    # mtime only: read, hash equal, no index write.
    os.utime(repo / "README.md", ns=(1, 1))
    touched = ix.index_resource(RID, repo)
    assert (touched.files_read, touched.files_touched, touched.files_indexed) == (1, 1, 0)
    assert touched.units_written == 0

    # New content in one file: only that file is re-indexed.
    (repo / "pkg" / "util.py").write_text("def renamed_function():\n    return 43\n")
    changed = ix.index_resource(RID, repo)
    assert (changed.files_read, changed.files_indexed) == (1, 1)
    scope = frozenset({RID})
    text = container.text_backend()
    assert text.search("renamed", scope=scope)
    assert text.search("helper", scope=scope) == [] or all(
        r.metadata["path"] != "pkg/util.py" for r in text.search("helper", scope=scope)
    )

    # A vanished file's units go, from all three indexes.
    (repo / "notes.txt").unlink()
    gone = ix.index_resource(RID, repo)
    assert gone.files_deleted == 1
    assert "notes.txt" not in indexed_paths(container, RID)
    assert (
        container.graph_backend().get_triples(file_uri(RID, "notes.txt"), scope=ONLY).triples == []
    )
    contains = container.graph_backend().get_triples(f"uko://{RID}", scope=ONLY).triples
    assert (f"uko://{RID}", UKO + "contains", file_uri(RID, "notes.txt")) not in contains
    assert (f"uko://{RID}", UKO + "contains", file_uri(RID, "README.md")) in contains


def test_removed_resource_loses_every_unit(repo: Path, container: Any) -> None:
    ix: Indexer = container.indexer()
    ix.index_resource(RID, repo)
    assert ix.prune(keep=[]) == [RID]
    assert container.text_backend().resource_ids() == set()
    assert container.vector_backend().resource_ids() == set()
    assert container.graph_backend().resource_ids() == set()
    assert ix.catalog.records(RID) == {}


class ExplodingGraph:
    """Delegates to the real graph backend but fails every write."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def upsert(self, *args: Any, **kwargs: Any) -> None:
        raise OSError("disk full (injected)")


def exploding_indexer(container: Any, catalog: Any, **batches: int) -> Indexer:
    """An indexer over the container's text and vector indexes and catalog
    whose every graph write fails (``batches``: the store's batch sizes)."""
    store = ManagedIndexStore.over(
        container.text_backend(),
        container.vector_backend(),
        ExplodingGraph(container.graph_backend()),  # type: ignore[arg-type]
        catalog,
        **batches,
    )
    return Indexer(store, container.embedder())


def changed_then_exploding(repo: Path, container: Any, **batches: int) -> tuple[Indexer, Indexer]:
    """``repo`` indexed, then ``pkg/util.py`` rewritten: the container's
    indexer, and one whose every graph write fails (:func:`exploding_indexer`)."""
    ix: Indexer = container.indexer()
    ix.index_resource(RID, repo)
    (repo / "pkg" / "util.py").write_text("def replacement_function():\n    pass\n")
    return ix, exploding_indexer(container, ix.catalog, **batches)


def test_a_failed_write_never_loses_a_file_and_the_next_run_repairs(
    repo: Path, container: Any
) -> None:
    ix, broken = changed_then_exploding(repo, container)
    with pytest.raises(OSError, match="injected"):
        broken.index_resource(RID, repo)
    # The file is still in every index (old or new version), never missing.
    assert "pkg/util.py" in indexed_paths(container, RID)
    assert container.graph_backend().get_triples(file_uri(RID, "pkg/util.py"), scope=ONLY).triples
    # The catalog still holds the old hash, so the next run redoes the file.
    repaired = ix.index_resource(RID, repo)
    assert repaired.files_indexed == 1
    assert container.text_backend().search("replacement", scope=frozenset({RID}))


def test_tier_budget_limits_fragments_but_not_the_index(
    repo: Path, container: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hydrator_module, "MAX_TOTAL_BYTES", 40)
    tiers = ContextTierService()
    hydrate_tiers_from_project(
        tiers, "local/demo", RID, str(repo), "git-checkout", indexer=container.indexer()
    )
    assert sum(len(f.content.encode()) for f in tiers.fragments()) <= 40
    assert len(tiers.fragments()) < len(EXPECTED_FRAGMENTS)
    assert indexed_paths(container, RID) == EXPECTED_INDEXED


def test_storing_stops_when_the_budget_is_reached(
    tmp_path: Path, container: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seed: "Hydration stops when this budget is reached": no file after
    the first one that does not fit is stored, even one that would; a plan's
    resources share one budget; the index still covers every file."""
    monkeypatch.setattr(hydrator_module, "MAX_TOTAL_BYTES", 40)
    one, two = tmp_path / "one", tmp_path / "two"
    for root, files in ((one, {"a.txt": 30, "b.txt": 20, "c.txt": 5}), (two, {"d.txt": 5})):
        root.mkdir()
        for name, size in files.items():
            (root / name).write_text(name[0] * size)
    tiers = ContextTierService()
    n = hydrate_tiers_from_project(tiers, "local/demo", RID, str(one), "directory")
    assert n == 1 and [f.metadata["path"] for f in tiers.fragments()] == ["a.txt"]

    projects, resources = open_registry(tmp_path / "reg.sqlite3")
    projects.add("local/demo")
    first = resources.register(one, "directory")
    second = resources.register(two, "directory")
    projects.link("local/demo", first.resource_id)
    projects.link("local/demo", second.resource_id)
    tiers = ContextTierService()
    n = hydrate_tiers_for_plan(
        tiers, ["local/demo"], projects, resources, indexer=container.indexer()
    )
    assert n == 1 and [f.metadata["path"] for f in tiers.fragments()] == ["a.txt"]
    for rid, names in (
        (first.resource_id, {"a.txt", "b.txt", "c.txt"}),
        (second.resource_id, {"d.txt"}),
    ):
        assert indexed_paths(container, rid) == names
    # A file that is never stored (binary, secret) does not end storing.
    three = tmp_path / "three"
    three.mkdir()
    (three / "a.txt").write_text("a" * 30)
    (three / "b.bin.txt").write_bytes(b"\x00" * 20)
    (three / "c.txt").write_text("c" * 5)
    tiers = ContextTierService()
    assert hydrate_tiers_from_project(tiers, "local/demo", RID, str(three), "directory") == 2
    assert [f.metadata["path"] for f in tiers.fragments()] == ["a.txt", "c.txt"]
    # Alone, the second resource has its own budget.
    tiers = ContextTierService()
    assert hydrate_tiers_from_project(tiers, "local/demo", RID, str(two), "directory") == 1


def test_plan_hydration_and_the_seed_log_events(repo: Path, tmp_path: Path, container: Any) -> None:
    projects, resources = open_registry(tmp_path / "reg.sqlite3")
    projects.add("local/demo")
    projects.add("local/empty")
    res = resources.register(repo, "git-checkout")
    projects.link("local/demo", res.resource_id)
    gone = resources.register(tmp_path, "directory")
    projects.link("local/demo", gone.resource_id)
    resources.remove(gone.resource_id)

    class Registry:
        """The real registry, plus one resource whose location vanished and one unknown."""

        def get(self, rid: str) -> Any:
            if rid == "missing":
                return type(res)("01JD0000000000000000000001", str(tmp_path / "nope"), "directory")
            return resources.get(rid)

    class Projects:
        def get(self, name: str) -> Any:
            if name == "local/ghosts":
                return type(projects.get("local/demo"))("local/ghosts", ("missing", "unknown"))
            return projects.get(name)

    tiers = ContextTierService()
    with capture_logs() as logs:
        n = hydrate_tiers_for_plan(
            tiers,
            ["local/demo", "local/none", "local/empty", "local/ghosts"],
            Projects(),
            Registry(),
            indexer=container.indexer(),
        )
    assert n == len(EXPECTED_FRAGMENTS)
    levels = {(e["event"], e["log_level"]) for e in logs}
    assert {
        ("context_hydrator.project_not_found", "debug"),
        ("context_hydrator.no_linked_resources", "debug"),
        ("context_hydrator.resource_not_found", "debug"),
        ("context_hydrator.skip_missing_location", "warning"),
        ("context_hydrator.hydrated", "info"),
    } <= levels
    done = next(e for e in logs if e["event"] == "context_hydrator.hydrated")
    assert done["fragments_stored"] == n
    assert done["total_bytes"] == sum(len(f.content.encode()) for f in tiers.fragments())


def test_a_resource_of_two_of_the_plans_projects_is_hydrated_once(
    repo: Path, tmp_path: Path, container: Any
) -> None:
    """Linked to two projects of the plan (and one project named twice): its
    fragments were stored once per link, the same contents spending the
    shared budget twice over."""
    projects, resources = open_registry(tmp_path / "reg.sqlite3")
    res = resources.register(repo, "git-checkout")
    for name in ("local/a", "local/b"):
        projects.add(name)
        projects.link(name, res.resource_id)
    tiers = ContextTierService()
    n = hydrate_tiers_for_plan(
        tiers,
        ["local/a", "local/b", "local/a"],
        projects,
        resources,
        indexer=container.indexer(),
    )
    paths = [f.metadata["path"] for f in tiers.fragments()]
    assert n == len(paths) == len(EXPECTED_FRAGMENTS)
    assert sorted(paths) == sorted(set(paths))


def test_store_failure_is_logged_and_skipped(repo: Path) -> None:
    class Failing(ContextTierService):
        def store(self, fragment: Any) -> None:
            if fragment.metadata["path"] == "README.md":
                raise RuntimeError("full")
            super().store(fragment)

    tiers = Failing()
    with capture_logs() as logs:
        n = hydrate_tiers_from_project(tiers, "local/demo", RID, str(repo))
    assert n == len(EXPECTED_FRAGMENTS) - 1
    failed = [e for e in logs if e["event"] == "context_hydrator.store_failed"]
    assert [(e["path"], e["log_level"]) for e in failed] == [("README.md", "debug")]


def test_a_rerun_fetches_full_records_only_for_changed_or_vanished_files(
    repo: Path, container: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean re-run compares (size, mtime) only: it decodes no record's units,
    and one changed file costs one record fetch, not the resource's."""
    ix: Indexer = container.indexer()
    ix.index_resource(RID, repo)
    catalog = ix.catalog
    fetched: list[list[str]] = []
    real_get = catalog.get

    def no_records(resource_id: str) -> Any:
        raise AssertionError("a clean session must not load every record")

    def spy_get(resource_id: str, paths: Any) -> Any:
        fetched.append(list(paths))
        return real_get(resource_id, fetched[-1])

    monkeypatch.setattr(catalog, "records", no_records)
    monkeypatch.setattr(catalog, "get", spy_get)
    again = ix.index_resource(RID, repo)
    assert (again.files_read, again.index_writes) == (0, 0)
    assert fetched == []

    (repo / "pkg" / "util.py").write_text("def renamed_function():\n    return 43\n")
    (repo / "notes.txt").unlink()
    changed = ix.index_resource(RID, repo)
    assert (changed.files_read, changed.files_indexed, changed.files_deleted) == (1, 1, 1)
    assert fetched == [["pkg/util.py"], ["notes.txt"]]
    assert "notes.txt" not in indexed_paths(container, RID)
    assert container.text_backend().search("renamed", scope=frozenset({RID}))


def test_a_hydration_that_fails_mid_way_leaves_the_resource_writable(
    repo: Path, container: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A write failing while files are still being visited (not at the final
    # commit) must still end the store session: before, the text index kept
    # the resource's staged writer (and its shard's writer lock), so every
    # later session of the resource in this process failed ("already grouped").
    ix: Indexer = container.indexer()
    hydrate_tiers_from_project(ContextTierService(), "p", RID, str(repo), indexer=ix)
    (repo / "pkg" / "util.py").write_text("def replacement_function():\n    pass\n")
    (repo / "pkg" / "core.py").write_text("def other_replacement():\n    pass\n")
    # The first changed file's graph write fails at once.
    broken = exploding_indexer(container, ix.catalog, batch_units=1, batch_triples=1)
    monkeypatch.setattr(indexer_module, "_EMBED_BATCH", 1)  # each file written as visited
    with pytest.raises(OSError, match="injected") as failure:
        hydrate_tiers_from_project(ContextTierService(), "p", RID, str(repo), indexer=broken)
    assert any(
        f.f_code.co_name == "visit" for f, _ in traceback.walk_tb(failure.value.__traceback__)
    )
    assert "pkg/util.py" in indexed_paths(container, RID)
    # The host still holds the error (and so its frames), as one that logs it does.
    assert failure.value.__traceback__ is not None
    repaired = ix.index_resource(RID, repo)
    assert repaired.files_indexed == 2
    assert container.text_backend().search("replacement", scope=ONLY)
    del failure


def test_an_index_run_failing_at_its_end_leaves_the_resource_writable(
    repo: Path, container: Any
) -> None:
    # The same, for a write that fails while the session's last files are
    # handed on (IndexSession.finish), before the store's commit.
    ix, broken = changed_then_exploding(repo, container, batch_units=1, batch_triples=1)
    with pytest.raises(OSError, match="injected") as failure:
        broken.index_resource(RID, repo)
    assert failure.value.__traceback__ is not None
    assert ix.index_resource(RID, repo).files_indexed == 1
    assert container.text_backend().search("replacement", scope=ONLY)
    del failure


def test_a_session_whose_finish_failed_refuses_to_finish_again(repo: Path, container: Any) -> None:
    ix, broken = changed_then_exploding(repo, container, batch_units=1, batch_triples=1)
    session = broken.session(RID, repo, ["pkg/util.py"])
    listed = [f for f in list_resource(repo, "directory").files if f.rel_path == "pkg/util.py"]
    session.visit_all(listed)
    with pytest.raises(OSError, match="injected"):
        session.finish()
    with pytest.raises(RuntimeError, match="failed"):  # not a silent success
        session.finish()
    assert ix.index_resource(RID, repo).files_indexed == 1  # its store session ended


def test_operations_hydrate_shares_one_budget_and_names_an_unknown_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cleveragents.bootstrap import bootstrap
    from cleveragents.domain.models.acms.errors import NotFoundError

    monkeypatch.setattr(hydrator_module, "MAX_TOTAL_BYTES", 40)
    ops = bootstrap(tmp_path / "data", embedding_dimension=16)
    try:
        ops.add_project("local/demo")
        for name, size in (("one", 30), ("two", 30)):
            root = tmp_path / name
            root.mkdir()
            (root / f"{name}.txt").write_text("x" * size)
            ops.add_resource(str(root), "local/demo", "directory")
        tiers = ContextTierService()
        assert ops.hydrate(tiers, ["local/demo"]) == 1
        assert len(tiers.fragments()) == 1
        with pytest.raises(NotFoundError):
            ops.hydrate(ContextTierService(), ["local/nope"])
    finally:
        ops.close()
