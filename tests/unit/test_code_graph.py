"""Code facts (symbols, imports) and the graph triples of a file."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.application.services.chunking import chunk_text, make_units
from cleveragents.application.services.code_graph import (
    FileFacts,
    ModuleLookup,
    extract_facts,
    file_triples,
    module_index,
    python_module_name,
    root_package,
)
from cleveragents.domain.models.acms.backends import Literal
from cleveragents.domain.models.acms.uko import (
    UKO,
    file_uri,
    module_uri,
    resource_uri,
    unit_uri,
)
from codegraph_repo import assert_shared_objects

RID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
XSD_INTEGER = "http://www.w3.org/2001/XMLSchema#integer"


def test_python_module_names() -> None:
    assert python_module_name("pkg/mod.py") == "pkg.mod"
    assert python_module_name("pkg/__init__.py") == "pkg"
    assert python_module_name("src/pkg/x.py") == "pkg.x"
    assert python_module_name("src/pkg/__init__.pyi") == "pkg"
    assert python_module_name("setup.py") == "setup"
    assert python_module_name("my-dir/x.py") is None
    assert python_module_name("__init__.py") is None
    assert python_module_name("README.md") is None


def test_module_index_prefers_what_import_finds_from_the_root() -> None:
    index = module_index(
        ["pkg/__init__.py", "pkg/a.py", "pkg/a.pyi", "src/lib/b.py", "src/pkg/a.py", "docs/x.md"]
    )
    assert index == {"pkg": "pkg/__init__.py", "pkg.a": "pkg/a.py", "lib.b": "src/lib/b.py"}


def test_python_symbols_and_imports() -> None:
    text = '''
"""Doc."""
import os, os.path as osp
from typing import TYPE_CHECKING, Any
from . import sibling
from .. import up
from ..other.mod import thing as alias
from .local import *

LIMIT: int = 3
a, b = 1, 2

if TYPE_CHECKING:
    from collections.abc import Iterable

class Foo(Base):
    attr = 1

    @property
    def bar(self) -> int:
        def inner() -> None: ...
        import json
        return 1

    class Inner:
        async def go(self): ...

async def main() -> None: ...
'''
    facts = extract_facts("src/pkg/sub/mod.py", text, "python")
    assert facts.symbols == [
        ("LIMIT", "variable", 10),
        ("a", "variable", 11),
        ("b", "variable", 11),
        ("Foo", "class", 16),
        ("Foo.attr", "variable", 17),
        ("Foo.bar", "method", 20),
        ("Foo.Inner", "class", 25),
        ("Foo.Inner.go", "method", 26),
        ("main", "function", 28),
    ]
    assert facts.imports == [
        "os",
        "os.path",
        "typing",
        "typing.TYPE_CHECKING",
        "typing.Any",
        "pkg.sub",
        "pkg.sub.sibling",
        "pkg",
        "pkg.up",
        "pkg.other.mod",
        "pkg.other.mod.thing",
        "pkg.sub.local",
        "collections.abc",
        "collections.abc.Iterable",
        "json",
    ]
    assert facts.candidates == {
        "typing.TYPE_CHECKING",
        "typing.Any",
        "pkg.sub.sibling",
        "pkg.up",
        "pkg.other.mod.thing",
        "collections.abc.Iterable",
    }


def test_relative_import_escaping_the_root_is_dropped() -> None:
    facts = extract_facts("top.py", "from .. import x\nfrom . import y\n", "python")
    assert facts.imports == ["y"]
    assert facts.candidates == {"y"}


def test_python_regex_fallback_on_syntax_error() -> None:
    text = (
        "import os, sys as system\n"
        "from .util import (helper, other)\n"
        "class Broken(:\n"
        "    def method(self):\n"
        "        def local(): pass\n"
        "def top():\n"
        "    pass\n"
        "x = = 1\n"
    )
    facts = extract_facts("pkg/m.py", text, "python")
    assert facts.symbols == [
        ("Broken", "class", 3),
        ("Broken.method", "method", 4),
        ("top", "function", 6),
    ]
    assert facts.imports == ["os", "sys", "pkg.util", "pkg.util.helper", "pkg.util.other"]


def test_invalid_escape_warnings_do_not_escape() -> None:
    # pytest runs with -W error; the parser's SyntaxWarning must stay inside.
    facts = extract_facts("m.py", "import re\nPAT = '\\d+'\n", "python")
    assert ("PAT", "variable", 2) in facts.symbols


@pytest.mark.parametrize(
    "text",
    [
        "(" * 10_000 + "1" + ")" * 10_000,
        "x = " + "-" * 100_000 + "1",
        "x = " + "+".join(["1"] * 100_000),
        "x = a" + ".b" * 50_000,
        "x = f" + "()" * 50_000,
        "x = " + "[" * 10_000 + "]" * 10_000,
        "".join(" " * i + "if x:\n" for i in range(200)) + " " * 200 + "pass\n",
        "import os\x00\ndef f(): pass\n",
        "\x00" * 1000,
        "def f(:\n" * 10_000,
    ],
)
def test_pathological_python_does_not_raise(text: str) -> None:
    facts = extract_facts("p.py", text, "python")
    assert isinstance(facts, FileFacts)


def test_null_bytes_fall_back_to_regexes() -> None:
    facts = extract_facts("p.py", "import os\x00\ndef f(): pass\n", "python")
    assert facts.imports == ["os"]
    assert facts.symbols == [("f", "function", 2)]


LANGUAGES = [
    "python",
    "javascript",
    "typescript",
    "go",
    "rust",
    "java",
    "csharp",
    "kotlin",
    "c",
    "cpp",
    "ruby",
    "markdown",
    "text",
]


@settings(max_examples=300, deadline=None)
@given(text=st.text(), language=st.sampled_from(LANGUAGES))
def test_extract_facts_never_raises(text: str, language: str) -> None:
    facts = extract_facts("a/b.x", text, language)
    assert isinstance(facts, FileFacts)
    assert all(isinstance(line, int) and line >= 1 for _, _, line in facts.symbols)


code_fragments = st.sampled_from(
    [
        "def ",
        "class ",
        "import ",
        "from ",
        " import ",
        ".",
        "..",
        "(",
        ")",
        ":",
        "\n",
        "    ",
        "x",
        "Foo",
        "@",
        "async ",
        "=",
        ",",
        "*",
        "#",
        "'",
        '"',
        "\\",
        "\x00",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(code_fragments, max_size=80).map("".join))
def test_extract_facts_never_raises_on_python_like_text(text: str) -> None:
    facts = extract_facts("pkg/sub/m.py", text, "python")
    assert all(name for name in facts.imports)


def test_javascript_and_typescript() -> None:
    text = (
        "import React, { useState } from 'react';\n"
        'import "./styles.css";\n'
        "import type { T } from './types';\n"
        "export { x } from '../x';\n"
        "const fs = require('fs');\n"
        "const lazy = import('./lazy');\n"
        "export default function App() {}\n"
        "export async function load() {}\n"
        "export class Store {}\n"
        "export interface Props {}\n"
        "export const handler = async (e) => e;\n"
        "const LIMIT = 10;\n"
    )
    facts = extract_facts("a.ts", text, "typescript")
    assert facts.imports == [
        "react",
        "./styles.css",
        "./types",
        "../x",
        "fs",
        "./lazy",
    ]
    assert facts.symbols == [
        ("fs", "variable", 5),
        ("lazy", "variable", 6),
        ("App", "function", 7),
        ("load", "function", 8),
        ("Store", "class", 9),
        ("Props", "class", 10),
        ("handler", "function", 11),
        ("LIMIT", "variable", 12),
    ]


def test_go() -> None:
    text = (
        "package main\n\n"
        'import "fmt"\n'
        "import (\n"
        '\t"net/http"\n'
        '\tlog "github.com/x/log"\n'
        ")\n\n"
        "type Server struct{}\n"
        "func (s *Server) Run() error { return nil }\n"
        "func main() {}\n"
    )
    facts = extract_facts("main.go", text, "go")
    assert facts.imports == ["fmt", "net/http", "github.com/x/log"]
    assert facts.symbols == [
        ("Server", "class", 9),
        ("Server.Run", "method", 10),
        ("main", "function", 11),
    ]


def test_rust() -> None:
    text = (
        "use std::collections::HashMap;\n"
        "use crate::a::{b, c};\n"
        "extern crate serde;\n"
        "pub struct Point { x: i32 }\n"
        "impl Point {\n"
        "    pub fn new() -> Self { Point { x: 0 } }\n"
        "}\n"
        "impl<T> Display for Wrapper<T> {\n"
        "    fn fmt(&self) {}\n"
        "}\n"
        "pub(crate) async fn run() {}\n"
        "enum Kind { A }\n"
    )
    facts = extract_facts("src/lib.rs", text, "rust")
    assert facts.imports == ["std::collections::HashMap", "crate::a", "serde"]
    assert facts.symbols == [
        ("Point", "class", 4),
        ("Point.new", "method", 6),
        ("Wrapper.fmt", "method", 9),
        ("run", "function", 11),
        ("Kind", "class", 12),
    ]


def test_java() -> None:
    text = (
        "package a.b;\n"
        "import java.util.List;\n"
        "import static org.junit.Assert.assertEquals;\n"
        "import java.io.*;\n"
        "public final class Main {\n"
        "  private static class Helper {}\n"
        "}\n"
        "interface Shape {}\n"
    )
    facts = extract_facts("Main.java", text, "java")
    assert facts.imports == ["java.util.List", "org.junit.Assert.assertEquals", "java.io"]
    assert facts.symbols == [("Main", "class", 5), ("Helper", "class", 6), ("Shape", "class", 8)]


def test_c_ruby_and_unknown() -> None:
    assert extract_facts("a.c", '#include <stdio.h>\n#include "x.h"\n', "c").imports == [
        "stdio.h",
        "x.h",
    ]
    ruby = extract_facts("a.rb", "require 'json'\nclass A\n  def b\n  end\nend\n", "ruby")
    assert ruby.imports == ["json"]
    assert ruby.symbols == [("A", "class", 2), ("b", "method", 3)]
    assert extract_facts("a.md", "# x\nimport os\n", "markdown") == FileFacts()


def _triples_by_predicate(triples: list, predicate: str) -> list:
    return [t for t in triples if t[1] == UKO + predicate]


def test_triples_of_a_package_with_relative_imports() -> None:
    files = {
        "src/pkg/__init__.py": "from .core import Engine\nfrom . import util\n",
        "src/pkg/core.py": (
            "import os\nfrom typing import Any\nfrom .util import helper\n"
            "from .sub.deep import thing\nimport pkg.missing\n\nclass Engine:\n"
            "    def run(self):\n        pass\n"
        ),
        "src/pkg/util.py": "def helper():\n    return 1\n",
        "src/pkg/sub/__init__.py": "",
        "src/pkg/sub/deep.py": "from .. import core\nfrom ..util import helper\nthing = 1\n",
    }
    modules = module_index(files)
    assert modules["pkg.sub.deep"] == "src/pkg/sub/deep.py"

    def triples_of(path: str) -> list:
        text = files[path]
        return file_triples(
            RID.lower(),
            path,
            "python",
            chunk_text(text, "python"),
            extract_facts(path, text, "python"),
            modules,
        )

    def imports_of(path: str) -> set[str]:
        return {o for _, _, o in _triples_by_predicate(triples_of(path), "imports")}

    f = lambda p: file_uri(RID, p)  # noqa: E731
    assert imports_of("src/pkg/__init__.py") == {f("src/pkg/core.py"), f("src/pkg/util.py")}
    assert imports_of("src/pkg/core.py") == {
        module_uri("os"),
        module_uri("typing"),
        f("src/pkg/util.py"),
        f("src/pkg/sub/deep.py"),
        f("src/pkg/__init__.py"),  # pkg.missing resolves to its longest prefix
    }
    assert imports_of("src/pkg/sub/deep.py") == {
        f("src/pkg/__init__.py"),
        f("src/pkg/core.py"),
        f("src/pkg/util.py"),
    }

    triples = triples_of("src/pkg/core.py")
    file = f("src/pkg/core.py")
    assert triples[0] == (resource_uri(RID), UKO + "contains", file)
    assert (file, UKO + "inResource", resource_uri(RID)) in triples
    assert (file, UKO + "path", Literal("src/pkg/core.py")) in triples
    assert (file, UKO + "language", Literal("python")) in triples

    chunk_uris = {o for _, _, o in _triples_by_predicate(triples, "hasChunk")}
    units = make_units(RID, "src/pkg/core.py", files["src/pkg/core.py"])
    assert chunk_uris == {u.uko_uri for u in units}
    assert (units[0].uko_uri, UKO + "startLine", Literal("1", XSD_INTEGER)) in triples
    assert (units[0].uko_uri, UKO + "endLine", Literal("9", XSD_INTEGER)) in triples

    symbol = unit_uri(RID, "src/pkg/core.py", "sym=Engine.run")
    assert (file, UKO + "defines", symbol) in triples
    assert (symbol, UKO + "name", Literal("Engine.run")) in triples
    assert (symbol, UKO + "kind", Literal("method")) in triples

    # Deletion by subjects: everything but the first triple hangs off the file.
    symbol_uris = {o for _, _, o in _triples_by_predicate(triples, "defines")}
    subjects = {file} | chunk_uris | symbol_uris
    assert all(s in subjects for s, _, _ in triples[1:])


def test_self_import_and_duplicate_symbols() -> None:
    text = "from . import core\nif X:\n    def f(): pass\nelse:\n    def f(): pass\n"
    modules = {"pkg": "pkg/__init__.py", "pkg.core": "pkg/core.py"}
    facts = extract_facts("pkg/core.py", text, "python")
    assert facts.symbols == [("f", "function", 3), ("f", "function", 5)]
    triples = file_triples(RID, "pkg/core.py", "python", [], facts, modules)
    imports = [o for _, p, o in triples if p == UKO + "imports"]
    assert imports == [file_uri(RID, "pkg/__init__.py")]
    assert len([t for t in triples if t[1] == UKO + "defines"]) == 1


def test_other_languages_link_modules_only() -> None:
    facts = FileFacts(imports=["fmt", "pkg"])
    triples = file_triples(RID, "main.go", "go", [], facts, {"pkg": "pkg/__init__.py"})
    assert [o for _, p, o in triples if p == UKO + "imports"] == [
        module_uri("fmt"),
        module_uri("pkg"),
    ]


def test_stdlib_collections() -> None:
    path = Path(sysconfig.get_paths()["stdlib"]) / "collections" / "__init__.py"
    text = path.read_text(encoding="utf-8")
    facts = extract_facts("collections/__init__.py", text, "python")
    symbols = {(name, kind) for name, kind, _ in facts.symbols}
    assert ("OrderedDict", "class") in symbols
    assert ("OrderedDict.popitem", "method") in symbols
    assert ("namedtuple", "function") in symbols
    assert {"sys", "heapq", "_collections_abc", "itertools"} <= set(facts.imports)

    modules = module_index(["collections/__init__.py", "collections/abc.py"])
    triples = file_triples(
        RID, "collections/__init__.py", "python", chunk_text(text, "python"), facts, modules
    )
    imports = {o for _, p, o in triples if p == UKO + "imports"}
    assert module_uri("heapq") in imports
    assert module_uri("itertools.chain") not in imports  # a name, not a module


_SEGMENTS = st.sampled_from(["src", "pkg", "a", "b", "__init__", "my-dir", "x.y", "1a", "src2"])
_TAILS = st.sampled_from([".py", ".pyi", ".md", "", "/__init__.py", "/__init__.pyi"])


@settings(max_examples=200, deadline=None)
@given(
    paths=st.lists(
        st.tuples(st.lists(_SEGMENTS, min_size=1, max_size=4), _TAILS).map(
            lambda t: "/".join(t[0]) + t[1]
        ),
        max_size=30,
    ),
    probes=st.lists(st.lists(_SEGMENTS, min_size=1, max_size=4).map(".".join), max_size=10),
)
def test_module_lookup_agrees_with_module_index(paths: list[str], probes: list[str]) -> None:
    """The per-name lookup a small re-run uses finds exactly what the full index maps."""
    index = module_index(paths)
    lookup = ModuleLookup(paths)
    for name in [*index, *probes]:
        assert lookup.get(name) == index.get(name), name
    assert dict(lookup) == index


def test_module_lookup_resolves_imports_like_the_full_index() -> None:
    files = ["pkg/__init__.py", "pkg/core.py", "pkg/helpers.py", "src/lib/b.py"]
    text = "from pkg import helpers\nimport lib.b\n"
    chunks = chunk_text(text, "python")
    facts = extract_facts("pkg/core.py", text, "python")
    rid = "01JD5TD11B0000000000000000"
    full = file_triples(rid, "pkg/core.py", "python", chunks, facts, module_index(files))
    lazy = file_triples(rid, "pkg/core.py", "python", chunks, facts, ModuleLookup(files))
    assert full == lazy


def test_a_root_that_is_a_package_is_imported_by_its_name() -> None:
    # rdflib's own files import ``rdflib.namespace`` absolutely; indexed as
    # the resource (``rdflib/`` is the root), no path is ``rdflib/...``.
    files = ["__init__.py", "namespace/__init__.py", "graph.py", "plugins/store.py"]
    assert root_package("rdflib", files) == "rdflib"
    assert root_package("my-lib", files) is None  # not an importable name
    assert root_package("rdflib", ["graph.py"]) is None  # no __init__.py at the root
    lookup = ModuleLookup(files, "rdflib")
    assert lookup.get("rdflib.namespace") == "namespace/__init__.py"
    assert lookup.get("rdflib.plugins.store") == "plugins/store.py"
    assert lookup.get("rdflib") == "__init__.py"
    assert lookup.get("rdflibx.graph") is None
    assert lookup.get("graph") == "graph.py"  # the names from the root still work
    assert ModuleLookup(files).get("rdflib.namespace") is None
    # A path that claims the full name wins over the stripped one.
    nested = [*files, "rdflib/namespace.py"]
    assert ModuleLookup(nested, "rdflib").get("rdflib.namespace") == "rdflib/namespace.py"
    text = "from rdflib.namespace import RDF\nimport rdflib.graph\n"
    facts = extract_facts("plugins/store.py", text, "python")
    rid = "01JD5TD11B0000000000000000"
    chunks = chunk_text(text, "python")
    triples = file_triples(rid, "plugins/store.py", "python", chunks, facts, lookup)
    imported = {o for _, p, o in triples if p.endswith("imports")}
    assert imported == {file_uri(rid, "namespace/__init__.py"), file_uri(rid, "graph.py")}


def test_extract_facts_is_safe_from_many_threads() -> None:
    """CPython 3.11 can raise SystemError when two threads build ASTs at once;
    indexing from threads must give the same facts as doing it alone."""
    import sysconfig
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    files = sorted(Path(sysconfig.get_paths()["stdlib"], "json").glob("*.py"))
    texts = [(f.name, f.read_text()) for f in files] * 8
    alone = [extract_facts(name, text, "python") for name, text in texts]
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(lambda nt: extract_facts(nt[0], nt[1], "python"), texts))
    assert together == alone


def test_the_ast_path_shares_predicates_and_repeated_literals_too() -> None:
    text = "class A:\n    def f(self):\n        pass\n\n    def g(self):\n        pass\n"
    facts = extract_facts("pkg/core.py", text, "python")
    assert_shared_objects(
        file_triples(RID, "pkg/core.py", "python", chunk_text(text, "python"), facts, {})
    )
