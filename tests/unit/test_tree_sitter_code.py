"""Code facts read by tree-sitter, one small realistic repository per language.

Each fixture is a few files written for these tests (imports between them, a
class hierarchy, calls across files); the expected symbols, line ranges,
imports, calls and bases were written by hand from the fixture text.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.application.services.code_graph import chunk_starts
from cleveragents.domain.models.acms.code_facts import CodeFacts
from cleveragents.infrastructure.acms.tree_sitter_code import (
    MAX_PARSE_BYTES,
    TreeSitterCodeParser,
)

PARSER = TreeSitterCodeParser()


def facts(text: str, language: str) -> CodeFacts:
    out = PARSER.parse(textwrap.dedent(text).lstrip("\n"), language)
    assert out is not None
    assert out.syntax_errors == 0
    return out


def symbols(f: CodeFacts) -> set[tuple[str, str, int, int]]:
    return {(s.kind, s.qualified_name, s.start_line, s.end_line) for s in f.symbols}


def imports(f: CodeFacts) -> set[str]:
    return {i.target for i in f.imports}


def calls(f: CodeFacts) -> set[tuple[str | None, str, int]]:
    return {(c.caller, c.callee, c.line) for c in f.calls}


def bases(f: CodeFacts) -> set[tuple[str, str, str]]:
    return {(b.symbol, b.kind, b.base) for b in f.bases}


# ---------------------------------------------------------------- Python


PY_SHAPES = """
import math
from .base import Shape, Named


class Circle(Shape, Named):
    \"\"\"A circle of radius r.\"\"\"

    def __init__(self, r):
        super().__init__("circle")
        self.r = r

    def area(self):
        return math.pi * square(self.r)


def square(x):
    return x * x
"""

PY_BASE = """
class Named:
    def __init__(self, name):
        self.name = name


class Shape:
    def area(self):
        raise NotImplementedError
"""


def test_python_overload_stubs_are_not_the_symbol() -> None:
    # ``read #sym=Graph.serialize`` returned the first stub (8 lines of
    # ``...``): the symbol is the implementation, after its stubs.
    f = facts(
        """
        import typing
        from typing import overload


        class Graph:
            @overload
            def serialize(self, dest: None = None) -> str: ...

            @typing.overload
            def serialize(self, dest: str) -> None: ...

            def serialize(self, dest=None):
                \"\"\"Write the graph.\"\"\"
                return write(dest)


        @overload
        def load(x: int) -> int: ...
        def load(x):
            return x
        """,
        "python",
    )
    assert symbols(f) == {
        ("class", "Graph", 5, 14),
        ("method", "Graph.serialize", 12, 14),
        ("function", "load", 19, 20),
    }
    (serialize,) = [s for s in f.symbols if s.name == "serialize"]
    assert serialize.doc == "Write the graph."
    assert ("Graph.serialize", "write", 14) in calls(f)


def test_python_overloads_without_an_implementation_stay_symbols() -> None:
    # A .pyi stub file or a Protocol has only the stubs: the first one is the
    # symbol (dropping them all lost the function from the graph and search).
    f = facts(
        """
        from typing import Protocol, overload


        class Graph:
            @overload
            def serialize(self, dest: None = None) -> str: ...
            @overload
            def serialize(self, dest: str) -> None: ...


        class P(Protocol):
            @overload
            def m(self, x: int) -> int: ...
            @overload
            def m(self, x: str) -> str: ...
        """,
        "python",
    )
    assert symbols(f) == {
        ("class", "Graph", 4, 8),
        ("method", "Graph.serialize", 6, 6),
        ("class", "P", 11, 15),
        ("method", "P.m", 13, 13),
    }


def test_python_repository() -> None:
    shapes = facts(PY_SHAPES, "python")
    assert symbols(shapes) == {
        ("class", "Circle", 5, 13),
        ("method", "Circle.__init__", 8, 10),
        ("method", "Circle.area", 12, 13),
        ("function", "square", 16, 17),
    }
    circle = next(s for s in shapes.symbols if s.name == "Circle")
    assert circle.doc == "A circle of radius r."
    assert circle.signature == "class Circle(Shape, Named)"
    assert imports(shapes) == {"math", ".base"}
    assert next(i for i in shapes.imports if i.target == ".base").names == ("Shape", "Named")
    assert calls(shapes) == {
        ("Circle.__init__", "super", 9),
        ("Circle.__init__", "__init__", 9),
        ("Circle.area", "square", 13),
    }
    assert bases(shapes) == {("Circle", "inherits", "Shape"), ("Circle", "inherits", "Named")}
    base = facts(PY_BASE, "python")
    assert symbols(base) == {
        ("class", "Named", 1, 3),
        ("method", "Named.__init__", 2, 3),
        ("class", "Shape", 6, 8),
        ("method", "Shape.area", 7, 8),
    }
    assert calls(base) == set()


# ---------------------------------------------------------------- JavaScript / TypeScript


JS_APP = """
import { Shape } from './shape.js';
const util = require('./util');

/** A circle. */
export class Circle extends Shape {
  constructor(r) {
    super();
    this.r = r;
  }
  area() {
    return Math.PI * util.square(this.r);
  }
}

export const describe = (s) => `${s.area()}`;

function main() {
  const c = new Circle(2);
  console.log(describe(c));
}
"""


def test_javascript_repository() -> None:
    app = facts(JS_APP, "javascript")
    assert symbols(app) == {
        ("class", "Circle", 5, 13),
        ("method", "Circle.constructor", 6, 9),
        ("method", "Circle.area", 10, 12),
        ("function", "describe", 15, 15),
        ("function", "main", 17, 20),
    }
    assert next(s for s in app.symbols if s.name == "Circle").doc == "A circle."
    assert imports(app) == {"./shape.js", "./util"}
    assert calls(app) == {
        ("Circle.constructor", "super", 7),
        ("Circle.area", "square", 11),
        ("describe", "area", 15),
        ("main", "Circle", 18),
        ("main", "log", 19),
        ("main", "describe", 19),
    }
    assert bases(app) == {("Circle", "inherits", "Shape")}


TS_SHAPES = """
import { Drawable, Point } from "./types";
import * as geo from "../geo";

export interface Sized extends Drawable {
  size(): number;
}

export abstract class Base {
  abstract area(): number;
}

export class Square extends Base implements Sized, Drawable {
  constructor(private side: number) {
    super();
  }
  area(): number {
    return geo.mul(this.side, this.side);
  }
  size(): number {
    return this.area();
  }
  draw(p: Point): void {}
}

export type Side = number;
export enum Kind { A, B }
"""


@pytest.mark.parametrize("language", ["typescript", "tsx"])
def test_typescript_repository(language: str) -> None:
    shapes = facts(TS_SHAPES, language)
    assert symbols(shapes) == {
        ("interface", "Sized", 4, 6),
        ("method", "Sized.size", 5, 5),
        ("class", "Base", 8, 10),
        ("method", "Base.area", 9, 9),
        ("class", "Square", 12, 23),
        ("method", "Square.constructor", 13, 15),
        ("method", "Square.area", 16, 18),
        ("method", "Square.size", 19, 21),
        ("method", "Square.draw", 22, 22),
        ("type", "Side", 25, 25),
        ("enum", "Kind", 26, 26),
    }
    assert imports(shapes) == {"./types", "../geo"}
    assert calls(shapes) == {
        ("Square.constructor", "super", 14),
        ("Square.area", "mul", 17),
        ("Square.size", "area", 20),
    }
    assert bases(shapes) == {
        ("Sized", "inherits", "Drawable"),
        ("Square", "inherits", "Base"),
        ("Square", "implements", "Sized"),
        ("Square", "implements", "Drawable"),
    }


# ---------------------------------------------------------------- Go


GO_SHAPES = """
package shapes

import (
	"fmt"
	"example.com/app/mathx"
)

// Shape has an area.
type Shape interface {
	Area() float64
}

// Circle is round.
type Circle struct {
	R float64
}

// Area of the circle.
func (c *Circle) Area() float64 {
	return mathx.Pi * square(c.R)
}

func square(x float64) float64 {
	return x * x
}

func Print(s Shape) {
	fmt.Println(s.Area())
}
"""


def test_go_repository() -> None:
    shapes = facts(GO_SHAPES, "go")
    assert symbols(shapes) == {
        ("interface", "Shape", 9, 11),
        ("method", "Shape.Area", 10, 10),
        ("class", "Circle", 14, 16),
        ("method", "Circle.Area", 19, 21),
        ("function", "square", 23, 25),
        ("function", "Print", 27, 29),
    }
    docs = {s.qualified_name: s.doc for s in shapes.symbols}
    assert docs["Shape"] == "Shape has an area."
    assert docs["Circle.Area"] == "Area of the circle."
    assert imports(shapes) == {"fmt", "example.com/app/mathx"}
    assert calls(shapes) == {
        ("Circle.Area", "square", 20),
        ("Print", "Println", 28),
        ("Print", "Area", 28),
    }


# ---------------------------------------------------------------- Rust


RUST_LIB = """
use std::fmt;
use crate::geometry::{square, Pi};
mod geometry;

/// Anything with an area.
pub trait Shape {
    fn area(&self) -> f64;
}

pub struct Circle {
    r: f64,
}

impl Shape for Circle {
    fn area(&self) -> f64 {
        Pi * square(self.r)
    }
}

impl Circle {
    pub fn new(r: f64) -> Self {
        Circle { r }
    }
}

pub fn total(shapes: &[Box<dyn Shape>]) -> f64 {
    shapes.iter().map(|s| s.area()).sum()
}
"""


def test_rust_repository() -> None:
    lib = facts(RUST_LIB, "rust")
    assert symbols(lib) == {
        ("trait", "Shape", 6, 8),
        ("method", "Shape.area", 7, 7),
        ("class", "Circle", 10, 12),
        ("method", "Circle.area", 15, 17),
        ("method", "Circle.new", 21, 23),
        ("function", "total", 26, 28),
    }
    assert next(s for s in lib.symbols if s.name == "Shape").doc == "Anything with an area."
    assert imports(lib) == {"std::fmt", "crate::geometry::{square,Pi}", "self::geometry"}
    assert calls(lib) == {
        ("Circle.area", "square", 16),
        ("total", "iter", 27),
        ("total", "map", 27),
        ("total", "area", 27),
        ("total", "sum", 27),
    }
    assert bases(lib) == {("Circle", "implements", "Shape")}


# ---------------------------------------------------------------- Java


JAVA_CIRCLE = """
package com.acme.shapes;

import java.util.List;
import com.acme.util.*;

/** A circle. */
public class Circle extends Shape implements Comparable<Circle>, Drawable {
    private final double r;

    public Circle(double r) {
        super("circle");
        this.r = r;
    }

    @Override
    public double area() {
        return Math.PI * MathUtil.square(r);
    }

    public static List<Circle> many(int n) {
        return Circles.build(n, Circle::new);
    }
}

interface Drawable extends Paintable {
    void draw();
}
"""


def test_java_repository() -> None:
    circle = facts(JAVA_CIRCLE, "java")
    assert symbols(circle) == {
        ("class", "Circle", 7, 23),
        ("constructor", "Circle.Circle", 10, 13),
        ("method", "Circle.area", 16, 18),  # below its @Override
        ("method", "Circle.many", 20, 22),
        ("interface", "Drawable", 25, 27),
        ("method", "Drawable.draw", 26, 26),
    }
    assert next(s for s in circle.symbols if s.name == "Circle").doc == "A circle."
    assert imports(circle) == {"java.util.List", "com.acme.util.*"}
    assert calls(circle) == {
        ("Circle.Circle", "Shape", 11),  # super("circle")
        ("Circle.area", "square", 17),
        ("Circle.many", "build", 21),
    }
    assert bases(circle) == {
        ("Circle", "inherits", "Shape"),
        ("Circle", "implements", "Comparable"),
        ("Circle", "implements", "Drawable"),
        ("Drawable", "inherits", "Paintable"),
    }


# ---------------------------------------------------------------- C / C++


C_MAIN = """
#include <stdio.h>
#include "shapes.h"

/* A point in the plane. */
struct point {
    int x, y;
};

typedef struct point point_t;

static int square(int x) {
    return x * x;
}

int main(void) {
    point_t p = {3, 4};
    printf("%d\\n", square(p.x) + shapes_area(&p));
    return 0;
}
"""


def test_c_repository() -> None:
    main = facts(C_MAIN, "c")
    assert symbols(main) == {
        ("class", "point", 5, 7),
        ("type", "point_t", 9, 9),
        ("function", "square", 11, 13),
        ("function", "main", 15, 19),
    }
    assert next(s for s in main.symbols if s.name == "point").doc == "A point in the plane."
    assert imports(main) == {"stdio.h", "shapes.h"}
    assert calls(main) == {
        ("main", "printf", 17),
        ("main", "square", 17),
        ("main", "shapes_area", 17),
    }


CPP_SHAPES = """
#include <cmath>
#include "shape.hpp"

namespace geo {

// A circle.
class Circle : public Shape, private Counted {
public:
    explicit Circle(double r) : r_(r) {}
    double area() const override { return M_PI * square(r_); }
private:
    double r_;
};

double Circle::perimeter() const {
    return 2 * M_PI * r_ * std::abs(scale());
}

}  // namespace geo
"""


def test_cpp_repository() -> None:
    shapes = facts(CPP_SHAPES, "cpp")
    assert symbols(shapes) == {
        ("namespace", "geo", 4, 19),
        ("class", "geo.Circle", 7, 13),
        ("method", "geo.Circle.Circle", 9, 9),
        ("method", "geo.Circle.area", 10, 10),
        ("function", "geo.Circle.perimeter", 15, 17),
    }
    assert next(s for s in shapes.symbols if s.name == "Circle" and s.kind == "class").doc == (
        "A circle."
    )
    assert imports(shapes) == {"cmath", "shape.hpp"}
    assert calls(shapes) == {
        ("geo.Circle.area", "square", 10),
        ("geo.Circle.perimeter", "abs", 16),
        ("geo.Circle.perimeter", "scale", 16),
    }
    assert bases(shapes) == {
        ("geo.Circle", "inherits", "Shape"),
        ("geo.Circle", "inherits", "Counted"),
    }


# ---------------------------------------------------------------- C#


CSHARP_SHAPES = """
using System;
using Acme.Util;

namespace Acme.Shapes
{
    /// <summary>A circle.</summary>
    public class Circle : Shape, IDrawable
    {
        public Circle(double r) { R = r; }

        public double Area()
        {
            return Math.PI * MathUtil.Square(R);
        }

        public void Draw() => Console.WriteLine(Area());
    }

    public interface IDrawable : IPaintable
    {
        void Draw();
    }
}
"""


def test_csharp_repository() -> None:
    shapes = facts(CSHARP_SHAPES, "csharp")
    assert symbols(shapes) == {
        ("namespace", "Acme.Shapes", 4, 23),
        ("class", "Acme.Shapes.Circle", 7, 17),
        ("constructor", "Acme.Shapes.Circle.Circle", 9, 9),
        ("method", "Acme.Shapes.Circle.Area", 11, 14),
        ("method", "Acme.Shapes.Circle.Draw", 16, 16),
        ("interface", "Acme.Shapes.IDrawable", 19, 22),
        ("method", "Acme.Shapes.IDrawable.Draw", 21, 21),
    }
    circle = next(s for s in shapes.symbols if s.qualified_name == "Acme.Shapes.Circle")
    assert circle.doc == "A circle."
    assert imports(shapes) == {"System", "Acme.Util"}
    assert calls(shapes) == {
        ("Acme.Shapes.Circle.Area", "Square", 13),
        ("Acme.Shapes.Circle.Draw", "WriteLine", 16),
        ("Acme.Shapes.Circle.Draw", "Area", 16),
    }
    assert bases(shapes) == {
        ("Acme.Shapes.Circle", "inherits", "Shape"),
        ("Acme.Shapes.Circle", "implements", "IDrawable"),
        ("Acme.Shapes.IDrawable", "implements", "IPaintable"),
    }


# ---------------------------------------------------------------- Ruby


RUBY_SHAPES = """
require 'json'
require_relative 'shapes/base'

# A circle.
class Circle < Shape
  include Comparable

  def initialize(r)
    @r = r
  end

  def area
    Math::PI * square(@r)
  end

  def self.unit
    new(1)
  end
end

module Geometry
  def self.total(shapes)
    shapes.sum(&:area)
  end
end
"""


def test_ruby_repository() -> None:
    shapes = facts(RUBY_SHAPES, "ruby")
    assert symbols(shapes) == {
        ("class", "Circle", 5, 19),
        ("method", "Circle.initialize", 8, 10),
        ("method", "Circle.area", 12, 14),
        ("method", "Circle.unit", 16, 18),
        ("module", "Geometry", 21, 25),
        ("function", "Geometry.total", 22, 24),
    }
    assert next(s for s in shapes.symbols if s.name == "Circle").doc == "A circle."
    assert imports(shapes) == {"json", "shapes/base"}
    assert calls(shapes) == {
        ("Circle.area", "square", 13),
        ("Circle.unit", "new", 17),
        ("Geometry.total", "sum", 23),
    }
    assert bases(shapes) == {
        ("Circle", "inherits", "Shape"),
        ("Circle", "implements", "Comparable"),
    }


# ---------------------------------------------------------------- PHP


PHP_SHAPES = """
<?php
namespace Acme\\Shapes;

use Acme\\Util\\MathUtil;
require_once __DIR__ . '/base.php';

/** A circle. */
class Circle extends Shape implements Drawable
{
    public function area(): float
    {
        return M_PI * MathUtil::square($this->r) + $this->scale();
    }
}

function make_circle(float $r): Circle
{
    return new Circle($r);
}
"""


def test_php_repository() -> None:
    shapes = facts(PHP_SHAPES, "php")
    assert symbols(shapes) == {
        ("class", "Circle", 8, 14),
        ("method", "Circle.area", 10, 13),
        ("function", "make_circle", 16, 19),
    }
    assert next(s for s in shapes.symbols if s.name == "Circle").doc == "A circle."
    assert imports(shapes) == {"Acme\\Util\\MathUtil", "/base.php"}
    assert calls(shapes) == {
        ("Circle.area", "square", 12),
        ("Circle.area", "scale", 12),
        ("make_circle", "Circle", 18),
    }
    assert bases(shapes) == {("Circle", "inherits", "Shape"), ("Circle", "implements", "Drawable")}


# ---------------------------------------------------------------- Kotlin


KOTLIN_SHAPES = """
package com.acme.shapes

import com.acme.util.MathUtil
import kotlin.math.*

class Circle(val r: Double) : Shape(), Drawable {
    override fun area(): Double = PI * MathUtil.square(r)

    override fun draw() {
        println(area())
    }
}

interface Drawable {
    fun draw()
}

fun unit(): Circle = Circle(1.0)
"""


def test_kotlin_repository() -> None:
    shapes = facts(KOTLIN_SHAPES, "kotlin")
    assert symbols(shapes) == {
        ("class", "Circle", 6, 12),
        ("method", "Circle.area", 7, 7),
        ("method", "Circle.draw", 9, 11),
        ("interface", "Drawable", 14, 16),
        ("method", "Drawable.draw", 15, 15),
        ("function", "unit", 18, 18),
    }
    assert imports(shapes) == {"com.acme.util.MathUtil", "kotlin.math.*"}
    assert calls(shapes) == {
        ("Circle", "Shape", 6),  # : Shape()
        ("Circle.area", "square", 7),
        ("Circle.draw", "println", 10),
        ("Circle.draw", "area", 10),
        ("unit", "Circle", 18),
    }
    assert bases(shapes) == {("Circle", "inherits", "Shape"), ("Circle", "implements", "Drawable")}


# ---------------------------------------------------------------- shell and Markdown


def test_bash_functions_sources_and_commands() -> None:
    script = facts(
        """
        #!/bin/sh
        . ./lib/common.sh
        source "$HOME/.profile"

        # Say hello.
        greet() {
            log_info "hello $1"
        }

        greet world
        """,
        "shell",
    )
    assert symbols(script) == {("function", "greet", 6, 8)}
    assert next(iter(script.symbols)).doc == "Say hello."
    assert imports(script) == {"./lib/common.sh", "$HOME/.profile"}
    assert calls(script) == {("greet", "log_info", 7), (None, "greet", 10)}


def test_markdown_headings_nest() -> None:
    doc = facts(
        """
        # Guide

        Intro.

        ## Install

        ```sh
        # not a heading
        ```

        ## Use
        Text.
        """,
        "markdown",
    )
    assert {(s.kind, s.qualified_name, s.start_line) for s in doc.symbols} == {
        ("heading", "Guide", 1),
        ("heading", "Guide > Install", 5),
        ("heading", "Guide > Use", 11),
    }


# ---------------------------------------------------------------- robustness


def test_broken_code_still_yields_facts_and_counts_errors() -> None:
    out = PARSER.parse("def ok():\n    return 1\n\ndef broken(:\n    pass\n", "python")
    assert out is not None
    assert out.syntax_errors > 0
    assert ("function", "ok", 1, 2) in symbols(out)


def test_unknown_language_and_huge_files_are_not_parsed() -> None:
    assert PARSER.parse("x", "cobol") is None
    assert PARSER.parse("x = 1\n" * (MAX_PARSE_BYTES // 6 + 1), "python") is None


def test_every_declared_language_compiles_its_query() -> None:
    for language in sorted(PARSER.languages()):
        assert PARSER.parse("\n", language) is not None, language
    assert len(PARSER.languages()) >= 14


def test_parsing_opens_no_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network touched")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    fresh = TreeSitterCodeParser()
    for language in sorted(fresh.languages()):
        assert fresh.parse("x\n", language) is not None


@settings(max_examples=150, deadline=None)
@given(
    text=st.text(st.characters(codec="utf-8"), max_size=400),
    language=st.sampled_from(sorted(PARSER.languages())),
)
def test_any_text_in_any_language_never_raises(text: str, language: str) -> None:
    out = PARSER.parse(text, language)
    assert out is not None
    lines = text.count("\n") + 1
    for s in out.symbols:
        assert 1 <= s.start_line <= s.end_line <= lines
    for c in out.calls:
        assert 1 <= c.line <= lines


def test_code_points_from_plane_4_up_do_not_crash_a_grammar() -> None:
    """ "1" + U+E0001 made the markdown scanner read out of bounds (SIGSEGV),
    so it runs in a child: a crash fails this test instead of the worker."""
    code = (
        "from cleveragents.infrastructure.acms.tree_sitter_code import TreeSitterCodeParser\n"
        "p = TreeSitterCodeParser()\n"
        "for cp in (0xE0001, 0x10FFFF, 0x586A2, 0xF0000, 0x40000):\n"
        "    for lang in sorted(p.languages()):\n"
        "        c = chr(cp)\n"
        "        for text in ('1' + c, c * 3 + '\\n# ' + c, 'x = \"' + c):\n"
        "            out = p.parse(text, lang)\n"
        "            assert out is not None, lang\n"
        "print('ok')\n"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "ok"
    # The stand-in keeps byte offsets: a name after the character is still read.
    facts = PARSER.parse("# \U000e0001 Title\n\ndef f(): pass\n", "python")
    assert facts is not None
    assert [s.name for s in facts.symbols] == ["f"]


@pytest.mark.parametrize(
    ("text", "language", "signature"),
    [
        (
            # asyncio/events.py: comments between the colon and the body
            """
            def _get_event_loop(stacklevel=3):
                # This internal method is going away in Python 3.12, left here only for
                # backwards compatibility with 3.10.0 - 3.10.8 and 3.11.0.
                # See GH-99949 for more details.
                current_loop = _get_running_loop()
                return current_loop
            """,
            "python",
            "def _get_event_loop(stacklevel=3)",
        ),
        (
            """
            class Loop:  # the loop
                # its state
                state = 1
            """,
            "python",
            "class Loop",
        ),
        ("function f(a, b) // a note\n{ return a }\n", "javascript", "function f(a, b)"),
        ("fn f(a: i32) -> i32 /* a note */ { a }\n", "rust", "fn f(a: i32) -> i32"),
    ],
)
def test_a_comment_between_header_and_body_is_not_in_the_signature(
    text: str, language: str, signature: str
) -> None:
    assert facts(text, language).symbols[0].signature == signature


# ---------------------------------------------------------------- found on real trees


@pytest.mark.parametrize(
    ("text", "language", "expected"),
    [
        (
            # rxjs bindCallbackInternals.ts
            """
            function f() {
              return source
                .pipe(map(x))
                .subscribe(g);
            }
            """,
            "typescript",
            {("f", "pipe", 3), ("f", "map", 3), ("f", "subscribe", 4)},
        ),
        (
            # rubygems resolver.rb
            """
            def f
              list
                .sort_by { |s| s }
                .freeze
            end
            """,
            "ruby",
            {("f", "sort_by", 3), ("f", "freeze", 4)},
        ),
        (
            """
            class A {
                void f() {
                    builder
                        .add(1)
                        .build();
                }
            }
            """,
            "java",
            {("A.f", "add", 4), ("A.f", "build", 5)},
        ),
    ],
)
def test_a_chained_call_is_on_the_line_of_its_name(
    text: str, language: str, expected: set[tuple[str, str, int]]
) -> None:
    """A call's line is where its name is written (what grep finds), not
    where its receiver chain starts."""
    assert calls(facts(text, language)) == expected


def test_javascript_functions_assigned_to_members_are_symbols() -> None:
    """express/lib/response.js defines its API as ``res.send = function send``:
    those were no symbols at all."""
    out = facts(
        """
        var res = Object.create(http.ServerResponse.prototype);
        module.exports = res;

        /** Send a response. */
        res.send = function send(body) {
          this.set('Content-Type', 'text/html');
        };
        Router.prototype.handle = function (req) { next(); };
        exports.init = (app) => app;
        module.exports.compile = function () {};
        module.exports = function query(options) {};
        module.exports = function () {};
        items[0].f = function () {};
        $.fn.plugin = function () {};
        """,
        "javascript",
    )
    assert symbols(out) == {
        ("function", "res.send", 5, 7),
        ("method", "Router.handle", 8, 8),
        ("function", "init", 9, 9),
        ("function", "compile", 10, 10),
        ("function", "query", 11, 11),
        ("function", "f", 13, 13),
        ("function", "$.fn.plugin", 14, 14),
    }
    assert next(s for s in out.symbols if s.name == "send").doc == "Send a response."
    assert ("res.send", "set", 6) in calls(out)
    assert ("Router.handle", "next", 8) in calls(out)


def test_go_type_aliases_and_interface_methods_are_symbols() -> None:
    """os/types.go: ``type FileInfo = fs.FileInfo`` was no symbol; io.go's
    ``Reader`` interface listed no ``Read``."""
    out = facts(
        """
        package os

        type FileInfo = fs.FileInfo

        type ReadCloser interface {
        \tCloser
        \tRead(p []byte) (n int, err error)
        }

        type (
        \tMode = uint32
        \tfile struct{}
        )
        """,
        "go",
    )
    assert symbols(out) == {
        ("type", "FileInfo", 3, 3),
        ("interface", "ReadCloser", 5, 8),
        ("method", "ReadCloser.Read", 7, 7),
        ("type", "Mode", 11, 11),
        ("class", "file", 12, 12),
    }


def test_rust_impl_for_a_reference_and_turbofish_calls() -> None:
    """alloc/vec/mod.rs: ``impl IntoIterator for &'a Vec<T>`` qualified its
    methods ``&'aVec.into_iter``; ``collect::<Vec<_>>()`` and
    ``mem::size_of::<T>()`` were no calls."""
    out = facts(
        """
        impl<'a, T, A: Allocator> IntoIterator for &'a mut Vec<T, A> {
            fn into_iter(self) -> IterMut<'a, T> {
                let n = mem::size_of::<T>();
                self.iter_mut().collect::<Vec<_>>();
                g::<u8>(n)
            }
        }
        impl Read for &[u8] {}
        """,
        "rust",
    )
    assert symbols(out) == {
        ("method", "Vec.into_iter", 2, 6),
    }
    assert calls(out) == {
        ("Vec.into_iter", "size_of", 3),
        ("Vec.into_iter", "iter_mut", 4),
        ("Vec.into_iter", "collect", 4),
        ("Vec.into_iter", "g", 5),
    }
    assert bases(out) == {
        ("Vec", "implements", "IntoIterator"),
        ("[u8]", "implements", "Read"),
    }


def test_typescript_overload_signatures_are_not_the_symbol() -> None:
    """rxjs Observable.ts: ``subscribe`` and ``pipe`` were recorded at their
    first overload signature, not at the implementation (in the graph each
    signature would have been a symbol ``subscribe~2``, ``~3``); ``.d.ts``
    functions were no symbols."""
    out = facts(
        """
        export class Observable<T> {
          subscribe(next: (value: T) => void): Subscription;
          subscribe(observer?: Observer<T>): Subscription;
          subscribe(x?: any): Subscription {
            return this._trySubscribe(x);
          }
        }
        export function of<T>(value: T): Observable<T>;
        export function of(...values: any[]): Observable<any> {
          return from(values);
        }
        export declare function merge<T>(a: T): Observable<T>;
        export declare function merge<T>(a: T, b: T): Observable<T>;
        interface Observer<T> {
          next(value: T): void;
          next(): void;
        }
        """,
        "typescript",
    )
    assert symbols(out) == {
        ("class", "Observable", 1, 7),
        ("method", "Observable.subscribe", 4, 6),
        ("function", "of", 9, 11),
        ("function", "merge", 12, 12),
        ("interface", "Observer", 14, 17),
        ("method", "Observer.next", 15, 15),
    }


def test_rust_calls_in_macro_arguments_are_calls() -> None:
    """The grammar leaves macro arguments as token trees: on alloc/core/std
    ``.len()`` calls were found at 63% of their sites, ``.unwrap()`` at 40%
    (``assert_eq!(heap.pop().unwrap(), ...)``, ``debug_assert!(i < v.len())``)."""
    out = facts(
        """
        fn check(v: &Vec<u8>) {
            assert_eq!(v.len(), count(v));
            debug_assert!(
                v.first()
                    .is_some(),
                "{}", format!("{}", describe(v)),
            );
            let w = vec![make(1), Vec::new()];
            thread_local! { static K: u8 = init(); }
        }
        """,
        "rust",
    )
    assert calls(out) == {
        ("check", "len", 2),
        ("check", "count", 2),
        ("check", "first", 4),
        ("check", "is_some", 5),
        ("check", "describe", 6),
        ("check", "make", 8),
        ("check", "new", 8),
    }
    nested = PARSER.parse("fn f() { " + "a!(" * 50_000 + "g()" + ")" * 50_000 + " }", "rust")
    assert nested is not None


def test_java_super_and_this_constructor_calls_are_calls_of_the_constructor_run() -> None:
    """``super(...)`` and ``this(...)`` were no call edges (481 of them in
    java.util): ``super(...)`` calls the superclass's constructor, named by
    the superclass as ``new AbstractList(...)`` is (``Object`` when the
    class extends none), ``this(...)`` the class's own."""
    out = facts(
        """
        class Stack<E> extends java.util.Vector<E> {
            Stack(int n) {
                super(
                    n);
            }
            Stack() {
                this(size());
            }
            class Node extends Map.Entry<K, V> {
                Node() { Stack.this.super(); }
            }
        }
        class Plain {
            Plain() { super(); }
        }
        record Pair(int a, int b) {
            Pair() { this(0, 0); }
        }
        enum Color {
            RED;
            Color() { this(1); }
            Color(int x) {}
        }
        """,
        "java",
    )
    assert calls(out) == {
        ("Stack.Stack", "Vector", 3),
        ("Stack.Stack", "Stack", 7),
        ("Stack.Stack", "size", 7),
        ("Stack.Node.Node", "Entry", 10),
        ("Plain.Plain", "Object", 14),
        ("Pair.Pair", "Pair", 17),
        ("Color.Color", "Color", 21),
    }
    receivers = {c.callee: c.receiver for c in out.calls}
    assert receivers["Entry"] == "Stack.this"
    assert receivers["Vector"] is None


def test_go_package_constants_and_variables_are_symbols() -> None:
    """``io.EOF``, ``os.ErrNotExist``, ``math.MaxInt64`` were no symbols (1,467
    package-level specs in the sampled standard library), so ``symbols``
    and search by definition missed them.  A declaration of one spec is the
    symbol (``const A = 1``, its doc above it); in a group each spec is;
    names inside functions and ``_`` are not."""
    out = facts(
        """
        package io

        // EOF is the error Read returns at the end.
        var EOF = errors.New("EOF")

        const (
        \t// SeekStart means relative to the origin.
        \tSeekStart = iota
        \tSeekCurrent
        )

        var (
        \terrWhence  = errors.New("Seek: invalid whence")
        \tlow, high int
        \t_ = check()
        )

        func f() {
        \tconst local = 1
        \tvar v = 2
        }
        """,
        "go",
    )
    assert symbols(out) == {
        ("variable", "EOF", 4, 4),
        ("constant", "SeekStart", 8, 8),
        ("constant", "SeekCurrent", 9, 9),
        ("variable", "errWhence", 13, 13),
        ("variable", "low", 14, 14),
        ("variable", "high", 14, 14),
        ("function", "f", 18, 21),
    }
    by_name = {s.name: s for s in out.symbols}
    assert by_name["EOF"].doc == "EOF is the error Read returns at the end."
    assert by_name["EOF"].signature == 'var EOF = errors.New("EOF")'
    assert by_name["SeekStart"].doc == "SeekStart means relative to the origin."
    assert by_name["SeekStart"].signature == "SeekStart = iota"
    assert calls(out) == {("EOF", "New", 4), ("errWhence", "New", 13), (None, "check", 15)}
    # Chunks begin where they did: a spec would cut its group from "const (".
    assert chunk_starts(out) == [18]


def test_go_generated_files_constants_are_no_symbols() -> None:
    """syscall's zerrors_*.go tables are 75% of the standard library's
    package constants and would triple its graph; a generated file's
    functions and types are still symbols."""
    text = (
        "// mkerrors.sh -m64\n// Code generated by the command above; DO NOT EDIT.\n\n"
        "package syscall\n\nconst (\n\tEPERM = Errno(0x1)\n)\n\n"
        "var errors = [...]string{}\n\nfunc (e Errno) Error() string { return f() }\n"
    )
    generated = PARSER.parse(text, "go")
    assert generated is not None
    assert symbols(generated) == {("method", "Errno.Error", 12, 12)}
    written = PARSER.parse(text.replace("DO NOT EDIT.", "edit at will."), "go")
    assert written is not None
    assert {s.name for s in written.symbols} == {"EPERM", "errors", "Error"}


def test_go_embedded_interfaces_and_structs_are_inheritance() -> None:
    """``type ReadWriter interface { Reader; Writer }`` recorded no bases,
    so ``traverse --predicate inherits`` found no interface built on
    ``io.Reader``; an embedded struct (``*Base``) is inherited the same way."""
    out = facts(
        """
        package io

        type ReadWriter interface {
        \tReader
        \tio.Writer
        \t~int | float64
        \tClose() error
        }

        type File struct {
        \t*Base
        \tsync.Mutex
        \tList[int]
        \tname string
        }
        """,
        "go",
    )
    assert bases(out) == {
        ("ReadWriter", "inherits", "Reader"),
        ("ReadWriter", "inherits", "io.Writer"),
        ("File", "inherits", "Base"),
        ("File", "inherits", "sync.Mutex"),
        ("File", "inherits", "List"),
    }


def test_java_symbols_start_at_their_declaration_not_their_annotations() -> None:
    """2,136 of java.util's 8,646 symbols started on an ``@Override`` or
    ``@SuppressWarnings`` line: "line N" is the declaration, as a Python
    symbol's is its ``def`` (decorators excluded, as ``CodeSymbol`` says);
    its chunk still begins at the annotations and its comment."""
    text = textwrap.dedent(
        """
        package p;

        import java.util.List;
        /** A list. */
        @SuppressWarnings({"unchecked",
                           "rawtypes"})
        public class Items {
            /** The size. */
            @Override
            @Deprecated(since = "9") public int size() { return 0; }

            @Override
            // a remark
            public
            String toString() { return ""; }

            Items() {}
        }
        """
    ).lstrip("\n")
    out = PARSER.parse(text, "java")
    assert out is not None and out.syntax_errors == 0
    assert symbols(out) == {
        ("class", "Items", 7, 18),
        ("method", "Items.size", 10, 10),
        ("method", "Items.toString", 14, 15),
        ("constructor", "Items.Items", 17, 17),
    }
    by_name = {s.qualified_name: s for s in out.symbols}
    assert by_name["Items.size"].signature == "public int size()"
    assert by_name["Items.size"].doc == "The size."
    assert by_name["Items"].signature == "public class Items"
    assert by_name["Items"].doc == "A list."
    assert chunk_starts(out) == [5]  # the class's chunk begins at its annotations


def test_csharp_base_and_this_constructor_initializers_are_calls_of_the_constructor_run() -> None:
    """``: base(...)`` and ``: this(...)`` were no call edges, so ``callers
    Shape`` missed every subclass constructor: as Java's ``super(...)``,
    ``base`` calls the base class's constructor, named by the class (``object``
    when the class has none), ``this`` the class's or struct's own."""
    out = facts(
        """
        class Circle : Acme.Shape<double>, IDrawable {
            Circle(double r)
                : base(
                    r) { }
            Circle() : this(Unit()) { }
        }
        class Plain : IDrawable {
            Plain() : base() { }
        }
        struct Point {
            Point(int x) : this() { }
        }
        """,
        "csharp",
    )
    assert calls(out) == {
        ("Circle.Circle", "Shape", 3),
        ("Circle.Circle", "Circle", 5),
        ("Circle.Circle", "Unit", 5),
        ("Plain.Plain", "object", 8),
        ("Point.Point", "Point", 11),
    }


def test_kotlin_constructor_delegation_and_superclass_calls_are_calls() -> None:
    """A secondary constructor's ``: super(...)``/``: this(...)`` and a class
    header's ``: Shape(...)`` (the primary constructor calling the
    superclass's) were no call edges, so ``callers Shape`` missed every
    subclass.  As Java's ``super(...)``: the callee is the class whose
    constructor runs (``super``: the first supertype, ``Any`` when none).
    Secondary constructors are symbols named after their class, as Java's
    constructors are, and the callers of what they call (they were none,
    and the class was charged with their calls)."""
    out = facts(
        """
        @Deprecated("old")
        open class Circle(r: Double) : acme.Shape<Double>(r), Drawable {
            constructor(d: Int) : this(d.toDouble())
        }
        class View : Base, Drawable {
            constructor() : super(
                make())
        }
        class Plain {
            constructor() : super()
        }
        object Unit : Circle(1.0)
        fun anon() = object : Shape(2.0) {}
        """,
        "kotlin",
    )
    assert calls(out) == {
        ("Circle", "Shape", 2),
        ("Circle.Circle", "Circle", 3),
        ("Circle.Circle", "toDouble", 3),
        ("View.View", "Base", 6),
        ("View.View", "make", 7),
        ("Plain.Plain", "Any", 10),
        ("Unit", "Circle", 12),
        ("anon", "Shape", 13),
    }
    constructors = {s for s in symbols(out) if s[0] == "constructor"}
    assert constructors == {
        ("constructor", "Circle.Circle", 3, 3),
        ("constructor", "View.View", 6, 7),
        ("constructor", "Plain.Plain", 10, 10),
    }
    signatures = {s.signature for s in out.symbols if s.kind == "constructor"}
    assert "constructor(d: Int) : this(d.toDouble())" in signatures


def test_csharp_symbols_start_at_their_declaration_not_their_attributes() -> None:
    """As Java's annotations: a C# symbol started on its ``[Obsolete]`` line;
    its line and signature are the declaration's, its chunk still begins
    at the attributes."""
    out = facts(
        """
        using System;
        /// <summary>Items.</summary>
        [Serializable]
        // a remark
        public class Items {
            [Obsolete("no")]
            [Other] public Items(int n) { }

            [A]
            /* x */
            [B] int Size() => 0;
            void Plain() { }
        }
        """,
        "csharp",
    )
    assert symbols(out) == {
        ("class", "Items", 5, 13),
        ("constructor", "Items.Items", 7, 7),
        ("method", "Items.Size", 11, 11),
        ("method", "Items.Plain", 12, 12),
    }
    by_name = {s.qualified_name: s for s in out.symbols}
    assert by_name["Items"].signature == "public class Items"
    assert by_name["Items"].doc == "Items."
    assert by_name["Items.Items"].signature == "public Items(int n)"
    assert by_name["Items.Size"].signature == "int Size()"
    assert chunk_starts(out) == [3]  # the class's chunk begins at its attributes


def test_kotlin_symbols_start_at_their_declaration_not_their_annotations() -> None:
    """As Java's: a Kotlin symbol started on its ``@Deprecated`` line; its
    line and signature are the declaration's, its chunk still begins at the
    annotations."""
    out = facts(
        """
        // Items.
        @Deprecated("no")
        // a remark
        open class Items {
            @Suppress("u") fun size() = 0

            @Test
            /* x */ @Other
            override fun toString() = ""
        }
        """,
        "kotlin",
    )
    assert symbols(out) == {
        ("class", "Items", 4, 10),
        ("method", "Items.size", 5, 5),
        ("method", "Items.toString", 9, 9),
    }
    by_name = {s.qualified_name: s for s in out.symbols}
    assert by_name["Items"].signature == "open class Items"
    assert by_name["Items"].doc == "Items."
    assert by_name["Items.size"].signature == "fun size()"
    assert by_name["Items.toString"].signature == "override fun toString()"
    assert chunk_starts(out) == [2]  # the class's chunk begins at its annotations


def test_a_kotlin_secondary_constructor_s_signature_stops_at_its_body() -> None:
    out = facts(
        """
        class A(val x: Int) {
            @Inject constructor(s: String) : this(s.length) {
                init()
            }
        }
        """,
        "kotlin",
    )
    (ctor,) = [s for s in out.symbols if s.kind == "constructor"]
    assert (ctor.qualified_name, ctor.start_line, ctor.end_line) == ("A.A", 2, 4)
    assert ctor.signature == "constructor(s: String) : this(s.length)"
    assert ("A.A", "init", 3) in calls(out)


def test_csharp_primary_constructor_bases_are_calls_and_records_extend() -> None:
    """C# 12 primary constructors and records: ``class B(int x) : A(x)``
    listed its argument list ``(x)`` as an interface B implements, and
    ``record R(int X) : Base(X)`` "implemented" ``Base(X)``; neither base
    constructor call was a call.  A record class may extend a class; a
    ``record struct`` only implements."""
    out = facts(
        """
        class B(int x) : A(x), IFoo {
            void M() { }
        }
        record R(int X) : Base(X);
        record struct P(int Y) : IEquatable<P>;
        class D : Generic<int>, IBar { }
        """,
        "csharp",
    )
    assert bases(out) == {
        ("B", "inherits", "A"),
        ("B", "implements", "IFoo"),
        ("R", "inherits", "Base"),
        ("P", "implements", "IEquatable"),
        ("D", "inherits", "Generic"),
        ("D", "implements", "IBar"),
    }
    assert calls(out) == {("B", "A", 1), ("R", "Base", 4)}
