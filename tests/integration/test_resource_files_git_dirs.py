"""Git's own directories are never a project's files.

A bare clone inside a tree (``mirror.git``), a copied or renamed ``.git``, a
resource registered at a ``.git`` directory: their files are git's objects,
refs and config, and a config names its remotes, credentials included.  Each
test builds the repositories for real with git on ``tmp_path``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from cleveragents.application.services.resource_files import git_directory_of, list_files
from cleveragents.domain.models.acms.errors import ResourceListingError
from gitrepo import git

CREDENTIALS = "https://carol:ghpTok3n@example.com/x.git"


def repository(path: Path) -> Path:
    """A work tree with one commit and a remote whose URL holds credentials."""
    path.mkdir(parents=True)
    (path / "f.py").write_text("def f():\n    pass\n")
    git(path, "init", "-q")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "c")
    git(path, "remote", "add", "origin", CREDENTIALS)
    return path


def bare_clone(source: Path, target: Path) -> Path:
    git(source, "clone", "-q", "--bare", str(source), str(target))
    git(target, "remote", "set-url", "origin", CREDENTIALS)
    return target


def listed(root: Path, kind: str) -> list[str]:
    return [f.rel_path for f in list_files(root, kind)]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A project holding a bare clone, a copied .git under another name, and
    a directory that only looks like one (its HEAD is not a ref)."""
    source = repository(tmp_path / "source")
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "z.py").write_text("def z():\n    pass\n")
    bare_clone(source, root / "vendor" / "mirror.git")
    shutil.copytree(source / ".git", root / "backup-of-git")
    lookalike = root / "docs" / "layout"
    for sub in ("objects", "refs"):
        (lookalike / sub).mkdir(parents=True)
        (lookalike / sub / "README.md").write_text(f"# {sub}\n")
    (lookalike / "HEAD").write_text("the head of the layout\n")
    return root


LOOKALIKE = ["docs/layout/HEAD", "docs/layout/objects/README.md", "docs/layout/refs/README.md"]


def test_a_walk_lists_no_file_of_a_bare_clone_or_a_copied_git_directory(tree: Path) -> None:
    # Checked first: the fixture's clone really holds the credentials.
    assert CREDENTIALS in (tree / "vendor" / "mirror.git" / "config").read_text()
    with capture_logs() as logs:
        files = listed(tree, "directory")
    assert files == sorted([*LOOKALIKE, "src/z.py"])
    reasons = {
        e["path"]: e["reason"] for e in logs if e["event"] == "context_hydrator.file_skipped"
    }
    assert reasons["vendor/mirror.git"] == "git_directory"
    assert reasons["backup-of-git"] == "git_directory"


@pytest.mark.parametrize("tracked", [False, True], ids=["untracked", "committed"])
def test_a_git_listing_lists_no_file_of_a_bare_clone(tree: Path, tracked: bool) -> None:
    git(tree, "init", "-q")
    if tracked:  # git adds a bare clone's files as any others: only a .git is special
        git(tree, "add", "-A")
        git(tree, "commit", "-q", "-m", "c")
    assert not any("mirror.git" in p for p in listed(tree, "directory"))
    files = listed(tree, "git-checkout")
    assert files == sorted([*LOOKALIKE, "src/z.py"])


@pytest.mark.parametrize("where", [".git", ".git/hooks", "bare.git", "bare.git/refs"])
def test_a_root_that_is_or_lies_in_a_git_directory_is_told(tmp_path: Path, where: str) -> None:
    """``resource add`` refuses each (git_directory_of); a listing refuses
    what it can tell without opening anything outside the root (a ``.git``
    on the path, the root itself a repository): those registered before."""
    source = repository(tmp_path / "w")
    bare_clone(source, tmp_path / "bare.git")
    root = (source if where.startswith(".git") else tmp_path) / where
    assert git_directory_of(root) == str(root if "/" not in where else root.parent)
    if where == "bare.git/refs":
        return  # only its parents tell, and a listing opens nothing above the root
    with pytest.raises(ResourceListingError, match="a git repository's own directory"):
        list_files(root, "directory").__next__()
    with pytest.raises(ResourceListingError):  # ours, or git's "not a work tree"
        list_files(root, "git-checkout").__next__()


def test_git_directory_of_says_none_for_a_work_tree_and_a_lookalike(
    tmp_path: Path, tree: Path
) -> None:
    source = tmp_path / "source"
    assert git_directory_of(source) is None
    assert git_directory_of(source / "f.py") is None
    assert git_directory_of(tree / "docs" / "layout") is None
    assert git_directory_of(tree / "vendor" / "mirror.git" / "objects") == str(
        tree / "vendor" / "mirror.git"
    )


def test_a_linked_work_tree_inside_a_bare_clone_is_a_work_tree(tmp_path: Path) -> None:
    """``git worktree add main`` in ``proj.git``: ``proj.git/main`` is a work
    tree (its ``.git`` file), not git's files (a read-back found it refused)."""
    source = repository(tmp_path / "w")
    bare = bare_clone(source, tmp_path / "proj.git")
    git(bare, "worktree", "add", "-q", "main")
    assert git_directory_of(bare / "main") is None
    assert git_directory_of(bare / "main" / "f.py") is None
    assert git_directory_of(bare / "refs") == str(bare)
