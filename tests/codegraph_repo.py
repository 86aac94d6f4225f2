"""A small multi-language repository for the code-graph tests, and its triples."""

from __future__ import annotations

import textwrap

from cleveragents.application.services.chunking import chunk_text
from cleveragents.application.services.code_graph import PathLookup, code_triples
from cleveragents.domain.models.acms.backends import Literal
from cleveragents.domain.models.acms.uko import PREDICATES, UKO, unit_uri
from cleveragents.infrastructure.acms.tree_sitter_code import TreeSitterCodeParser

RID = "01JD5TD11B0000000000000000"
PARSER = TreeSitterCodeParser()

REPO = {
    "pkg/__init__.py": "",
    "pkg/shapes.py": """
        from .base import Shape
        from . import mathx


        class Circle(Shape):
            def area(self):
                return mathx.square(self.r) * self.scale()

            def scale(self):
                return 1
        """,
    "pkg/base.py": """
        class Shape:
            def area(self):
                raise NotImplementedError
        """,
    "pkg/mathx.py": """
        def square(x):
            return x * x
        """,
    "web/app.ts": """
        import { Circle } from "./shapes";
        import { helper } from "../lib";
        import express from "express";

        export function main(): void {
          helper(new Circle());
        }
        """,
    "web/shapes.ts": "export class Circle {}\n",
    "lib/index.ts": "export function helper(x: unknown) { return x; }\n",
    "go/cmd/main.go": """
        package main

        import "example.com/app/geom"

        func main() { geom.Area() }
        """,
    "go/geom/area.go": "package geom\n\nfunc Area() int { return 1 }\n",
    "go/geom/area_test.go": "package geom\n",
    "java/src/com/acme/App.java": """
        package com.acme;
        import com.acme.util.MathUtil;
        import com.acme.model.*;
        class App { }
        """,
    "java/src/com/acme/util/MathUtil.java": "package com.acme.util;\nclass MathUtil {}\n",
    "java/src/com/acme/model/A.java": "package com.acme.model;\nclass A {}\n",
    "java/src/com/acme/model/B.java": "package com.acme.model;\nclass B {}\n",
}
LANG = {".py": "python", ".ts": "typescript", ".go": "go", ".java": "java"}


def source(path: str) -> str:
    return textwrap.dedent(REPO[path]).lstrip("\n")


def triples_of(path: str) -> list[tuple[str, str, object]]:
    language = LANG[path[path.rindex(".") :]]
    text = source(path)
    facts = PARSER.parse(text, language)
    assert facts is not None
    chunks = chunk_text(text, language)
    return code_triples(RID, path, language, chunks, facts, PathLookup(REPO))


def sym(path: str, name: str) -> str:
    return unit_uri(RID, path, f"sym={name}")


def assert_shared_objects(triples: list[tuple[str, str, object]]) -> None:
    """Every predicate is the vocabulary's one string object
    (``uko.PREDICATES``), and equal typed literals (line
    numbers), kinds or languages one ``Literal``: a triple refers to them, it does not
    carry a copy (the batches a writer holds, and the pickles the planning
    workers send it, were ~90 bytes per triple larger)."""
    first: dict[object, object] = {}
    kinds = 0
    for _, p, o in triples:
        assert p.startswith(UKO) and PREDICATES[p[len(UKO) :]] is p, p
        if isinstance(o, Literal) and (o.datatype or p in (UKO + "kind", UKO + "language")):
            kinds += p == UKO + "kind"
            assert first.setdefault(o, o) is o, o
    assert kinds > 1
