"""Exact-identifier acceptance test (issue 12, "Done when"): for 50 definitions
taken from a code base nobody here wrote, a search for the bare name ranks the
chunk that defines it first.

The code base is part of the running interpreter's standard library
(:data:`PACKAGES`).  The definitions are picked with :mod:`ast`,
deterministically: names defined exactly once in the whole package set (a
``def``/``class`` at any depth), 4+ characters, not dunders; top-level
functions, classes and methods, sampled with a fixed seed (:data:`MIX`).
The files holding them are indexed with the real engines through
:class:`AcmsOperations`, together with distractors: every file of the package
set that mentions one of the names without defining it (the files where a
grep for the name would land).  Each name is searched in the default query
mode; the expected first hit is the unit whose line range holds the
definition's ``def``/``class`` line (chunks do not overlap, so exactly one).
The answer comes from :mod:`ast`, never from the code under test.
"""

from __future__ import annotations

import ast
import random
import re
import shutil
import sysconfig
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cleveragents.application.container import build_container
from cleveragents.application.services.operations import AcmsOperations
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.domain.models.acms.uko import path_of

STDLIB = Path(sysconfig.get_paths()["stdlib"])
PACKAGES = ("json", "logging", "http", "concurrent", "csv.py", "textwrap.py", "shlex.py")
MIX = {"function": 17, "class": 17, "method": 16}  # 50 definitions
SEED = 12


@dataclass(frozen=True)
class Definition:
    kind: str  # function (top level), class, method
    path: str  # relative to the stdlib
    name: str
    line: int  # the def/class line (decorators excluded)
    owner: str = ""  # a method's class


def package_files() -> list[Path]:
    files: list[Path] = []
    for item in PACKAGES:
        source = STDLIB / item
        found = sorted(source.rglob("*.py")) if source.is_dir() else [source]
        files += [f for f in found if not {"test", "tests"} & set(f.relative_to(STDLIB).parts)]
    return files


def _definitions(tree: ast.AST, rel: str) -> Iterator[tuple[Definition, bool]]:
    """Every def/class with whether it may be picked (not nested in a function)."""

    def walk(node: ast.AST, owner: str, cls: str = "") -> Iterator[tuple[Definition, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                kind = {"module": "function", "class": "method"}.get(owner, "nested")
                method = kind == "method"
                found = Definition(kind, rel, child.name, child.lineno, cls if method else "")
                yield found, kind != "nested"
                yield from walk(child, "function")
            elif isinstance(child, ast.ClassDef):
                yield Definition("class", rel, child.name, child.lineno), owner != "function"
                yield from walk(child, "class" if owner != "function" else "function", child.name)
            else:
                yield from walk(child, owner, cls)

    yield from walk(tree, "module")


def pick_definitions() -> tuple[list[Definition], dict[str, str]]:
    """The 50 definitions and the text of every file of the package set."""
    texts = {
        f.relative_to(STDLIB).as_posix(): f.read_text(encoding="utf-8") for f in package_files()
    }
    found = [
        pair for rel, text in sorted(texts.items()) for pair in _definitions(ast.parse(text), rel)
    ]
    count = Counter(d.name for d, _ in found)
    candidates = [
        d
        for d, pickable in found
        if pickable and count[d.name] == 1 and len(d.name) >= 4 and not d.name.startswith("__")
    ]
    rnd = random.Random(SEED)
    picked: list[Definition] = []
    for kind, n in MIX.items():
        pool = sorted((d for d in candidates if d.kind == kind), key=lambda d: (d.path, d.line))
        picked += rnd.sample(pool, n)
    return picked, texts


@dataclass
class Indexed:
    view: ScopedView
    picked: list[Definition]
    files: int


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Indexed]:
    picked, texts = pick_definitions()
    names = re.compile(r"\b(?:" + "|".join(re.escape(d.name) for d in picked) + r")\b")
    keep = {d.path for d in picked} | {rel for rel, text in texts.items() if names.search(text)}
    base = tmp_path_factory.mktemp("exact-identifier")
    root = base / "stdlib"
    for rel in sorted(keep):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(STDLIB / rel, root / rel)
    ops = AcmsOperations.from_container(build_container("local", base / "data", embedder="hashing"))
    ops.add_project("test/stdlib")
    rid = ops.add_resource(str(root), "test/stdlib", "directory").resource_id
    ops.reindex()
    yield Indexed(ops.view(frozenset({rid})), picked, len(keep))


def test_fifty_definitions_are_picked_as_specified() -> None:
    picked, texts = pick_definitions()
    assert len(picked) == 50
    assert Counter(d.kind for d in picked) == Counter(MIX)
    assert len({d.name for d in picked}) == 50
    for d in picked:
        line = texts[d.path].splitlines()[d.line - 1]
        keyword = "class" if d.kind == "class" else "def"
        assert re.match(rf"\s*(async\s+)?{keyword}\s+{d.name}\b", line), (d, line)


# History: 21 of 50 came first before the symbol field (a name's mentions
# outranked its definition); 45 with the first weights, which boosted whole
# names only for multi-part identifiers and folded case (misses: ``_resolve``,
# ``Manager`` behind the property ``manager``, ``Handler``, ``Executor``,
# ``running``).  A lone word is now an identifier, and ``symbol_case`` breaks
# case ties.
def test_the_defining_chunk_ranks_first_for_its_bare_name(indexed: Indexed) -> None:
    assert indexed.files > len({d.path for d in indexed.picked})  # distractors are indexed
    misses = []
    for d in indexed.picked:
        results = indexed.view.search(d.name, max_results=10)
        ranked = [
            (path_of(r.uko_uri), int(r.metadata["start_line"]), int(r.metadata["end_line"]))
            for r in results
        ]
        defining = [i for i, (p, lo, hi) in enumerate(ranked) if p == d.path and lo <= d.line <= hi]
        if defining[:1] != [0]:
            rank = defining[0] + 1 if defining else None
            misses.append(f"{d.kind} {d.name} ({d.path}:{d.line}): rank {rank}, first {ranked[:1]}")
    assert not misses, f"{len(misses)} of 50 not first:\n" + "\n".join(misses)


def test_the_defining_chunk_ranks_first_for_a_methods_qualified_name(indexed: Indexed) -> None:
    """``Class.method``, as ``symbols``, ``callers`` and ``read #sym=`` print a
    method: its definition first, not the chunks that mention both words
    (the name was taken for a list of two names, and its definition lost
    its boost: rdflib's ``Graph.parse`` ranked 73rd)."""
    methods = [d for d in indexed.picked if d.kind == "method"]
    assert len(methods) == MIX["method"] and all(d.owner for d in methods)
    firsts, misses = 0, []
    for d in methods:
        results = indexed.view.search(f"{d.owner}.{d.name}", max_results=10)
        ranked = [
            (path_of(r.uko_uri), int(r.metadata["start_line"]), int(r.metadata["end_line"]))
            for r in results
        ]
        defining = [i for i, (p, lo, hi) in enumerate(ranked) if p == d.path and lo <= d.line <= hi]
        firsts += defining[:1] == [0]
        if defining[:1] != [0]:
            rank = defining[0] + 1 if defining else None
            misses.append(
                f"{d.owner}.{d.name} ({d.path}:{d.line}): rank {rank}, first {ranked[:1]}"
            )
    # History: 8 of 16 first when the name was taken for a list of two;
    # 14 with the qualifier's words at full weight, 15 at W_QUALIFIER = 0.25
    # (DefaultCookiePolicy.return_ok_domain 2nd, behind CookieJar's chunk
    # full of cookie, policy and domain); 16 with qualified names indexed
    # whole (``symbol_exact``).
    assert firsts == 16, "\n".join(misses)
