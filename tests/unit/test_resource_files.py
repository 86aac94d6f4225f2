"""resource_files lists the right files, in order, and reads their exact bytes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from cleveragents.application.services import resource_files
from cleveragents.application.services.resource_files import (
    BINARY_EXTENSIONS,
    MAX_FILE_BYTES,
    MAX_TOTAL_BYTES,
    SKIP_DIRS,
    ListedFile,
    decode_text,
    is_binary,
    list_files,
    read_file,
)
from cleveragents.domain.models.acms.errors import ResourceListingError
from gitrepo import git


def write(root: Path, rel: str, data: bytes | str = "x\n") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return path


def paths(root: Path, resource_type: str) -> list[str]:
    return [f.rel_path for f in list_files(root, resource_type)]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git checkout with committed, untracked, ignored and skipped-directory files."""
    root = tmp_path / "proj"
    write(root, "README.md", "# readme\n")
    write(root, "src/pkg/mod.py", "print('hi')\n")
    write(root, ".gitignore", "ignored.log\nsecret/\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    write(root, "untracked.txt", "new\n")
    write(root, "ignored.log", "noise\n")
    write(root, "secret/key.txt", "k\n")
    write(root, "node_modules/lib/index.js", "js\n")
    write(root, "src/pkg/__pycache__/mod.cpython-311.pyc", b"\x00\x01")
    write(root, "logo.png", b"\x89PNG\r\n\x1a\n")
    write(root, "LOGO.PNG", b"\x89PNG\r\n\x1a\n")
    return root


def test_constants_match_the_spec() -> None:
    assert MAX_FILE_BYTES == 256 * 1024
    assert MAX_TOTAL_BYTES == 10 * 1024 * 1024
    assert {".pyc", ".so", ".png", ".pdf", ".zip", ".parquet", ".woff2"} <= BINARY_EXTENSIONS
    assert all(ext == ext.lower() and ext.startswith(".") for ext in BINARY_EXTENSIONS)
    assert {".git", "__pycache__", "node_modules", ".venv", "dist", "build"} <= SKIP_DIRS
    assert all(hasattr(resource_files, name) for name in resource_files.__all__)


def test_git_checkout_lists_tracked_and_untracked_but_not_ignored(project: Path) -> None:
    assert paths(project, "git-checkout") == [
        ".gitignore",
        "README.md",
        "src/pkg/mod.py",
        "untracked.txt",
    ]
    assert paths(project, "git") == paths(project, "git-checkout")


def test_directory_type_walks_and_ignores_gitignore(project: Path) -> None:
    assert paths(project, "directory") == [
        ".gitignore",
        "README.md",
        "ignored.log",
        "secret/key.txt",
        "src/pkg/mod.py",
        "untracked.txt",
    ]


def test_skip_dirs_apply_to_git_output(project: Path) -> None:
    # Force-add files under skipped directories: git lists them, the hydrator must not.
    git(project, "add", "-f", "node_modules/lib/index.js", "src/pkg/__pycache__")
    with capture_logs() as logs:
        listed = paths(project, "git-checkout")
    assert not any("node_modules" in p or "__pycache__" in p for p in listed)
    skipped = {
        e["path"]: e["reason"] for e in logs if e["event"] == "context_hydrator.file_skipped"
    }
    assert skipped["node_modules/lib/index.js"] == "skip_dir"


def test_binary_extension_is_skipped_at_listing_and_by_is_binary(project: Path) -> None:
    write(project, "docs/diagram.png", b"not really a png")
    git(project, "add", "docs/diagram.png")
    for kind in ("git-checkout", "directory"):
        with capture_logs() as logs:
            listed = paths(project, kind)
        assert "docs/diagram.png" not in listed
        assert "logo.png" not in listed
        assert "LOGO.PNG" not in listed
        assert {"event": "context_hydrator.file_skipped", "path": "docs/diagram.png"}.items() <= (
            next(e for e in logs if e.get("path") == "docs/diagram.png").items()
        )
    assert is_binary("docs/diagram.png", b"text")
    assert is_binary("LOGO.PNG", b"")
    assert is_binary("a/b/archive.tar.gz", b"")


def test_is_binary_sniffs_nul_only_in_the_first_block() -> None:
    assert not is_binary("a.py", b"plain text")
    assert is_binary("a.py", b"abc\x00def")
    assert not is_binary("a.py", b"x" * 8192 + b"\x00")
    assert not is_binary("Makefile", b"all:\n")
    assert is_binary(".png", b"")


def test_decode_text_replaces_bad_bytes_and_strips_bom() -> None:
    assert decode_text("\ufeffhello".encode()) == "hello"
    assert decode_text(b"caf\xe9") == "caf\ufffd"
    assert decode_text("naïve".encode()) == "naïve"


def test_listing_is_lazy_metadata_only(tmp_path: Path) -> None:
    path = write(tmp_path, "a.txt", "hello")
    os.utime(path, ns=(1_000_000_000, 2_000_000_000))
    [listed] = list_files(tmp_path, "directory")
    assert listed == ListedFile(rel_path="a.txt", size=5, mtime_ns=2_000_000_000)


def test_large_file_is_listed_but_only_read_under_a_larger_cap(tmp_path: Path) -> None:
    data = os.urandom(300 * 1024)
    write(tmp_path, "big.txt", data)
    [listed] = list_files(tmp_path, "directory")
    assert listed.size == 300 * 1024
    with capture_logs() as logs:
        assert read_file(tmp_path, listed) is None
    assert logs[-1]["event"] == "context_hydrator.file_skipped"
    assert logs[-1]["reason"] == "too_large"
    got = read_file(tmp_path, listed, max_bytes=1024 * 1024)
    assert got is not None
    assert got.data == data
    assert got.size == len(data)


def test_exact_cap_is_accepted(tmp_path: Path) -> None:
    write(tmp_path, "f.txt", b"y" * 100)
    [listed] = list_files(tmp_path, "directory")
    got = read_file(tmp_path, listed, max_bytes=100)
    assert got is not None
    assert got.data == b"y" * 100
    assert read_file(tmp_path, listed, max_bytes=99) is None


def test_negative_cap_is_rejected(tmp_path: Path) -> None:
    write(tmp_path, "f.txt")
    [listed] = list_files(tmp_path, "directory")
    with pytest.raises(ValueError, match="max_bytes"):
        read_file(tmp_path, listed, max_bytes=-1)


def test_size_cap_counts_bytes_read_not_st_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that grows after fstat (st_size lies) is still refused."""
    write(tmp_path, "grows.txt", b"z" * 5000)
    [listed] = list_files(tmp_path, "directory")
    real_fstat = os.fstat

    class Shrunk:
        def __init__(self, st: os.stat_result) -> None:
            self.st_mode = st.st_mode
            self.st_size = 10
            self.st_mtime_ns = st.st_mtime_ns

    monkeypatch.setattr(os, "fstat", lambda fd: Shrunk(real_fstat(fd)))
    with capture_logs() as logs:
        assert read_file(tmp_path, listed, max_bytes=100) is None
    assert logs[-1]["reason"] == "too_large"
    assert logs[-1]["size"] == 101


def test_file_with_nul_byte_reads_and_is_binary(tmp_path: Path) -> None:
    write(tmp_path, "data.txt", b"head\x00tail")
    [listed] = list_files(tmp_path, "directory")
    got = read_file(tmp_path, listed)
    assert got is not None
    assert got.data == b"head\x00tail"
    assert is_binary(got.rel_path, got.data)


@pytest.mark.parametrize("kind", ["directory", "git-checkout"])
def test_non_utf8_file_name_survives(tmp_path: Path, kind: str) -> None:
    raw_root = os.fsencode(tmp_path)
    with open(os.path.join(raw_root, b"caf\xe9.py"), "wb") as fh:
        fh.write(b"x = 1\n")
    if kind == "git-checkout":
        git(tmp_path, "init", "-q")
        git(tmp_path, "add", "-A")
        git(tmp_path, "commit", "-q", "-m", "c")
    [listed] = list_files(tmp_path, kind)
    assert listed.rel_path == "caf\udce9.py"
    assert os.fsencode(listed.rel_path) == b"caf\xe9.py"
    got = read_file(tmp_path, listed)
    assert got is not None
    assert got.data == b"x = 1\n"


def test_listing_accepts_pathlike_and_str(tmp_path: Path) -> None:
    write(tmp_path, "a/b.txt")
    assert paths(tmp_path, "directory") == [f.rel_path for f in list_files(str(tmp_path), "x")]


def test_read_file_rejects_paths_that_leave_the_root(tmp_path: Path) -> None:
    write(tmp_path, "outside.txt", "secret")
    root = tmp_path / "root"
    root.mkdir()
    for rel in ("../outside.txt", "/etc/passwd", "a/../../outside.txt", "", "./x", "a//b"):
        with capture_logs() as logs:
            assert read_file(root, ListedFile(rel, 0, 0)) is None
        assert logs[-1]["reason"] == "outside_root"


def test_read_file_of_missing_root_returns_none(tmp_path: Path) -> None:
    assert read_file(tmp_path / "gone", ListedFile("a.txt", 1, 0)) is None


# Names drawn so collisions (same name as file and directory) and SKIP_DIRS happen often.
_NAMES = st.one_of(
    st.sampled_from(["a", "b", "src", "node_modules", ".git", "build", "env", "x.py", "é"]),
    st.text(alphabet="abcXYZ_-.é0", min_size=1, max_size=6).filter(lambda s: s not in (".", "..")),
)
_TREES = st.lists(
    st.tuples(st.lists(_NAMES, min_size=1, max_size=4), st.binary(max_size=300)),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(tree=_TREES)
def test_walk_lists_exactly_the_regular_files_outside_skip_dirs(
    tree: list[tuple[list[str], bytes]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        created: dict[str, bytes] = {}
        for parts, data in tree:
            path = root.joinpath(*parts)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.is_dir():
                    continue
                path.write_bytes(data)
            except (FileExistsError, NotADirectoryError):
                continue  # a component is already a file
            created["/".join(parts)] = data
        expected = {
            rel: data
            for rel, data in created.items()
            if not any(part in SKIP_DIRS for part in rel.split("/")[:-1])
            and not is_binary(rel, b"")
        }
        listed = list(list_files(root, "directory"))
        rels = [f.rel_path for f in listed]
        assert rels == sorted(expected)
        for entry in listed:
            got = read_file(root, entry)
            assert got is not None
            assert got.data == expected[entry.rel_path]
            assert entry.size == len(got.data)


def test_a_walked_listing_is_sorted_by_whole_path(tmp_path: Path) -> None:
    """The walk lists a directory's files before entering its subdirectories;
    the listing is still in whole-path order ('-' < '.' < '/')."""
    for rel in ("a/x.py", "a.py", "a-b/y.py", "a/b/z.py", "a/a.py", "b.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    listed = [f.rel_path for f in resource_files.list_resource(tmp_path, "directory").files]
    assert listed == ["a-b/y.py", "a.py", "a/a.py", "a/b/z.py", "a/x.py", "b.py"]


# --- the data directory inside a resource -------------------------------------


@pytest.mark.parametrize("resource_type", ["directory", "git-checkout"])
def test_an_excluded_directory_inside_the_root_is_not_listed(
    project: Path, resource_type: str
) -> None:
    data = project / "data"
    write(data, "catalog", "sqlite\n")
    write(data, ".gen/01ABC/text/meta.json", "{}\n")
    write(project, "database/schema.sql", "create table t (x int);\n")  # a sibling prefix
    before = paths(project, resource_type)

    listed = [
        f.rel_path
        for f in resource_files.list_resource(project, resource_type, exclude=[data]).files
    ]

    assert "data/catalog" in before  # listed without the exclusion: the test can fail
    assert listed == [p for p in before if not p.startswith("data/")]
    assert "database/schema.sql" in listed


def test_exclusions_are_compared_by_real_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "proj"
    write(root, "a.py")
    write(root, "data/catalog")
    link = tmp_path / "link-to-proj"
    link.symlink_to(root)
    monkeypatch.chdir(root)

    by_link = resource_files.list_resource(link, "directory", exclude=["data"])
    nested = resource_files.list_resource(root, "directory", exclude=[link / "data"])

    assert [f.rel_path for f in by_link.files] == ["a.py"]
    assert [f.rel_path for f in nested.files] == ["a.py"]


def test_an_exclusion_outside_or_above_the_root_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "home" / "proj"
    write(root, "a.py")
    write(root, "data/b.py")

    for elsewhere in (tmp_path / "other", tmp_path / "home", tmp_path):
        listed = resource_files.list_resource(root, "directory", exclude=[elsewhere])
        assert [f.rel_path for f in listed.files] == ["a.py", "data/b.py"]


def test_the_root_that_is_an_excluded_directory_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "a.py")

    with pytest.raises(ResourceListingError, match="is the data directory"):
        resource_files.list_resource(tmp_path, "directory", exclude=[tmp_path / "."])
