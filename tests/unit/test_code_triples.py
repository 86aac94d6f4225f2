"""Graph triples from tree-sitter code facts: symbols, calls, bases, imports
resolved to files, over a small multi-language repository written here."""

from __future__ import annotations

import pytest

from cleveragents.application.services.chunking import chunk_text
from cleveragents.application.services.code_graph import (
    PathLookup,
    chunk_starts,
    resolve_import,
)
from cleveragents.domain.models.acms.backends import Literal
from cleveragents.domain.models.acms.uko import UKO, file_uri, module_uri, name_uri
from codegraph_repo import PARSER, REPO, RID, assert_shared_objects, sym, triples_of


def test_symbols_carry_ranges_signature_and_members() -> None:
    t = set(triples_of("pkg/shapes.py"))
    circle, area = sym("pkg/shapes.py", "Circle"), sym("pkg/shapes.py", "Circle.area")
    xsd = "http://www.w3.org/2001/XMLSchema#integer"
    assert (file_uri(RID, "pkg/shapes.py"), UKO + "defines", circle) in t
    assert (area, UKO + "kind", Literal("method")) in t
    assert (area, UKO + "line", Literal("6", xsd)) in t
    assert (area, UKO + "endLine", Literal("7", xsd)) in t
    assert (area, UKO + "signature", Literal("def area(self)")) in t
    assert (area, UKO + "named", name_uri("area")) in t
    assert (circle, UKO + "hasMember", area) in t


def test_calls_link_to_this_files_symbol_or_to_a_name_node_with_their_line() -> None:
    t = set(triples_of("pkg/shapes.py"))
    area = sym("pkg/shapes.py", "Circle.area")
    calls = {(s, o) for s, p, o in t if p == UKO + "calls"}
    assert calls == {
        (area, name_uri("square")),  # mathx.square: another file, by name
        (area, sym("pkg/shapes.py", "Circle.scale")),  # self.scale(): this file
    }
    assert (area, UKO + "callSites", Literal("scale:7;square:7")) in t


def test_bases_and_subjects_stay_under_the_file() -> None:
    t = triples_of("pkg/shapes.py")
    assert (sym("pkg/shapes.py", "Circle"), UKO + "inherits", name_uri("Shape")) in t
    own = file_uri(RID, "pkg/shapes.py")
    odd = [s for s, p, _ in t if not s.startswith(own) and p != UKO + "contains"]
    assert odd == []
    assert len(t) == len(set(t))


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("pkg/shapes.py", {"pkg/base.py", "pkg/mathx.py", "pkg/__init__.py"}),
        ("web/app.ts", {"web/shapes.ts", "lib/index.ts", module_uri("express")}),
        ("go/cmd/main.go", {"go/geom/area.go"}),
        (
            "java/src/com/acme/App.java",
            {
                "java/src/com/acme/util/MathUtil.java",
                "java/src/com/acme/model/A.java",
                "java/src/com/acme/model/B.java",
            },
        ),
    ],
)
def test_imports_resolve_to_files_where_the_language_decides(path: str, expected: set[str]) -> None:
    targets = {o for _, p, o in triples_of(path) if p == UKO + "imports"}
    want = {e if e.startswith("urn:") else file_uri(RID, e) for e in expected}
    assert targets == want


def test_unresolvable_imports_resolve_to_nothing() -> None:
    files = PathLookup(REPO)
    assert resolve_import("web/app.ts", "typescript", "../../outside", (), files) == []
    assert resolve_import("web/app.ts", "typescript", "./missing", (), files) == []
    assert resolve_import("go/cmd/main.go", "go", "fmt", (), files) == []
    assert resolve_import("pkg/shapes.py", "python", "...toofar", ("x",), files) == []


def test_chunks_follow_top_level_symbols() -> None:
    text = "import os\n\n\ndef a():\n    return 1\n\n\nclass B:\n    def m(self):\n        pass\n"
    facts = PARSER.parse(text, "python")
    assert facts is not None
    assert chunk_starts(facts) == [4, 8]


def test_chunks_follow_parsed_definitions_with_decorators_and_comments() -> None:
    text = (
        "import os\n\n\n# About a.\n@cache\ndef a():\n    return 1\n\n\n"
        "class B:\n    def m(self):\n        pass\n"
    )
    facts = PARSER.parse(text, "python")
    assert facts is not None
    chunks = chunk_text(text, "python", max_lines=6, starts=chunk_starts(facts))
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 3), (4, 9), (10, 12)]


def test_csharp_classes_in_a_namespace_are_blocks_of_their_own() -> None:
    text = (
        "namespace N\n{\n    class A\n    {\n        void F() { }\n    }\n\n"
        "    class B\n    {\n        void G() { }\n    }\n}\n"
    )
    facts = PARSER.parse(text, "csharp")
    assert facts is not None
    assert chunk_starts(facts) == [1, 3, 8]
    chunks = chunk_text(text, "csharp", max_lines=5, starts=chunk_starts(facts))
    assert [c.start_line for c in chunks] == [1, 3, 8]


def test_equal_predicates_and_repeated_literals_are_one_object() -> None:
    assert_shared_objects([t for path in REPO for t in triples_of(path)])
