"""Graph triples from tree-sitter code facts: symbols, calls, bases, imports
resolved to files, over a small multi-language repository written here."""

from __future__ import annotations

import pytest

from cleveragents.application.services.chunking import chunk_text
from cleveragents.application.services.code_graph import (
    PathLookup,
    chunk_starts,
    code_triples,
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


def _parsed_triples(path: str, text: str, language: str) -> set[tuple[str, str, object]]:
    facts = PARSER.parse(text, language)
    assert facts is not None
    return set(code_triples(RID, path, language, chunk_text(text, language), facts, PathLookup({})))


def _symbol_lines(t: set[tuple[str, str, object]], uri: str) -> tuple[int, int]:
    lines = {
        p: int(o.value)  # type: ignore[attr-defined]
        for s, p, o in t
        if s == uri and p in (UKO + "line", UKO + "endLine")
    }
    return lines[UKO + "line"], lines[UKO + "endLine"]


def test_each_overload_is_a_symbol_of_its_own_with_its_lines_and_calls() -> None:
    """Java overloads (one qualified name defined twice in a file) were one
    symbol, the first: the second's lines could not be read and its calls
    were charged to the first.  Each later one is ``Name~2``, ``Name~3``;
    all keep the plain name, so a lookup by name finds every one."""
    text = (
        "class Shapes {\n"  # 1
        "    int area(int side) {\n"  # 2
        "        return square(side);\n"  # 3
        "    }\n"  # 4
        "    int area(int w, int h) {\n"  # 5
        "        return multiply(w, h);\n"  # 6
        "    }\n"  # 7
        "    int area(String name) { return lookup(name); }\n"  # 8
        "}\n"
    )
    t = _parsed_triples("Shapes.java", text, "java")
    first, second, third = (
        sym("Shapes.java", name) for name in ("Shapes.area", "Shapes.area~2", "Shapes.area~3")
    )
    own = file_uri(RID, "Shapes.java")
    defined = {o for s, p, o in t if s == own and p == UKO + "defines"}
    assert {first, second, third} <= defined
    assert [_symbol_lines(t, u) for u in (first, second, third)] == [(2, 4), (5, 7), (8, 8)]
    for uri in (first, second, third):
        assert (uri, UKO + "name", Literal("Shapes.area")) in t
        assert (uri, UKO + "named", name_uri("area")) in t
        assert (sym("Shapes.java", "Shapes"), UKO + "hasMember", uri) in t
    calls = {(s, o) for s, p, o in t if p == UKO + "calls"}
    assert (first, name_uri("square")) in calls
    assert (second, name_uri("multiply")) in calls
    assert (third, name_uri("lookup")) in calls
    assert (first, name_uri("multiply")) not in calls


def test_a_python_property_setter_and_duplicate_headings_are_symbols_too() -> None:
    text = (
        "class C:\n"  # 1
        "    @property\n"  # 2
        "    def x(self):\n"  # 3
        "        return self._x\n"  # 4
        "\n"
        "    @x.setter\n"  # 6
        "    def x(self, value):\n"  # 7
        "        def check(v):\n"  # 8
        "            return validate(v)\n"  # 9
        "        self._x = check(value)\n"  # 10
    )
    t = _parsed_triples("c.py", text, "python")
    getter, setter = sym("c.py", "C.x"), sym("c.py", "C.x~2")
    assert _symbol_lines(t, getter)[0] == 3
    assert _symbol_lines(t, setter) == (7, 10)
    # The function nested in the setter is the setter's member.
    check = sym("c.py", "C.x.check")
    assert (setter, UKO + "hasMember", check) in t
    assert (check, UKO + "calls", name_uri("validate")) in t
    md = "# Guide\n\n## Example\n\none\n\n## Example\n\ntwo\n"
    t = _parsed_triples("guide.md", md, "markdown")
    names = sorted(s for s, p, _ in t if p == UKO + "name")
    assert names == sorted(
        sym("guide.md", n) for n in ("Guide", "Guide > Example", "Guide > Example~2")
    )


def test_a_call_in_an_overload_s_annotation_is_charged_to_that_overload() -> None:
    text = (
        "class S {\n"  # 1
        "    int area(int a) { return a; }\n"  # 2
        "    @Cached(key = keyOf())\n"  # 3
        "    int area(int w, int h) { return w * h; }\n"  # 4
        "}\n"
    )
    t = _parsed_triples("S.java", text, "java")
    calls = {(s, o) for s, p, o in t if p == UKO + "calls"}
    assert (sym("S.java", "S.area~2"), name_uri("keyOf")) in calls
    assert (sym("S.java", "S.area"), name_uri("keyOf")) not in calls


def test_thousands_of_definitions_of_one_name_are_numbered_in_one_pass() -> None:
    """A file of 30,000 ``## Example`` headings (or generated overloads): the
    keys were found by scanning from ``~2`` each time (quadratic: 8,000
    took 4.3 s, 30,000 over a minute); a name that is literally ``Q~n``
    still never shares a URI."""
    n = 30_000
    text = "# T\n\n## Example~3\n\n" + "".join(f"## Example\n\nx{i}\n\n" for i in range(n))
    t = _parsed_triples("many.md", text, "markdown")
    subjects = [s for s, p, _ in t if p == UKO + "name"]
    assert len(subjects) == len(set(subjects)) == n + 2
    assert sym("many.md", f"T > Example~{n + 1}") in subjects  # ~3 was taken
    assert sym("many.md", "T > Example~3") in subjects


def test_a_call_goes_to_the_overload_holding_it_among_many() -> None:
    body = "".join(
        f"    int f(int a{i}) {{\n        return g{i}(a{i});\n    }}\n" for i in range(300)
    )
    t = _parsed_triples("F.java", "class F {\n" + body + "}\n", "java")
    calls = {(s, o) for s, p, o in t if p == UKO + "calls"}
    assert (sym("F.java", "F.f"), name_uri("g0")) in calls
    assert (sym("F.java", "F.f~150"), name_uri("g149")) in calls
    assert (sym("F.java", "F.f~300"), name_uri("g299")) in calls
    assert len(calls) == 300
