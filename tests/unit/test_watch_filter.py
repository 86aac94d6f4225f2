"""Which changes ``acms watch`` acts on: whatever can change what a reindex
lists or reads, and nothing the listing never enters."""

from __future__ import annotations

import pytest

from cleveragents.cli.watch import indexed_change

ROOT = "/work/proj/"
# A root under directories that the listing skips inside a resource: only
# the part below the root counts.
BUILD_ROOT = "/home/u/build/env/proj/"


@pytest.mark.parametrize(
    "rel",
    [
        "a.py",
        "notes~",  # editors' files the reindex indexes (watchfiles' default filter dropped them)
        "flycheck_util.py",
        ".#lock",
        ".gitignore",
        "sub/.git",  # a nested repository appears or goes: git lists differently
        ".git/info/exclude",
        "sub/.git/info/exclude",
        "tools/build",  # a file named as a skipped directory is a file
    ],
)
def test_changes_that_can_change_the_listing_are_acted_on(rel: str) -> None:
    assert indexed_change(ROOT + rel, [ROOT])
    assert indexed_change(BUILD_ROOT + rel, [ROOT, BUILD_ROOT])


@pytest.mark.parametrize(
    "rel",
    [
        ".git/index",
        ".git/objects/ab/cdef",
        "sub/.git/HEAD",
        "node_modules/x/index.js",
        "pkg/__pycache__/m.cpython-311.pyc",
        "build/out.o",
        ".venv/lib/site.py",
        ".a.py.swp",  # vim's swap file: never read, rewritten while editing
        "img/logo.PNG",
        "pkg/x.pyc",
    ],
)
def test_changes_the_listing_never_enters_are_not(rel: str) -> None:
    assert not indexed_change(ROOT + rel, [ROOT])
    assert not indexed_change(BUILD_ROOT + rel, [ROOT, BUILD_ROOT])
