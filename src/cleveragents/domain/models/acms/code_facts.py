"""What a source file defines, imports, calls and extends: the code-graph facts.

These are plain values produced by a :class:`CodeParser` (the tree-sitter
adapter lives in ``infrastructure``) and turned into UKO triples by the
application layer.  Names are the language's own, as written in the source:
resolution to files and symbols of a resource happens later, where the whole
resource is known.

Lines are 1-based and inclusive.  Qualified names join the names of the
enclosing definitions with ``.`` (``Circle.area``, ``geo.Circle.area``; a Go
method is qualified by its receiver type, a Rust method by its ``impl`` type).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = [
    "SYMBOL_KINDS",
    "CodeCall",
    "CodeFacts",
    "CodeImport",
    "CodeInheritance",
    "CodeParser",
    "CodeSymbol",
]

#: The kinds a symbol may have.  Structs, records and objects are ``class``;
#: Rust traits and Ruby/PHP modules and traits keep their own names;
#: ``constant`` and ``variable`` are Go's package-level ``const`` and ``var``.
SYMBOL_KINDS = frozenset(
    {
        "constant",
        "variable",
        "class",
        "interface",
        "enum",
        "trait",
        "module",
        "namespace",
        "type",
        "function",
        "method",
        "constructor",
        "heading",
    }
)


@dataclass(frozen=True, slots=True)
class CodeSymbol:
    """One definition.

    Attributes:
        name: the bare name (``area``).
        qualified_name: enclosing definitions joined by ``.`` (``Circle.area``).
        kind: one of :data:`SYMBOL_KINDS`.
        start_line / end_line: the definition's lines, decorators and
            attached comments excluded, 1-based, inclusive.
        signature: the definition up to its body, whitespace collapsed,
            at most 240 characters.
        doc: the docstring or the comment directly above, markers removed,
            at most 1,000 characters ("" when there is none).
        annotated_line: the first line of the annotations the definition's
            own syntax holds above ``start_line`` (Java's ``@Override``, C#'s
            ``[Obsolete]``), where a chunk of it begins; 0 when there are none.
    """

    name: str
    qualified_name: str
    kind: str
    start_line: int
    end_line: int
    signature: str = ""
    doc: str = ""
    annotated_line: int = 0

    def __post_init__(self) -> None:
        if not self.name or not self.qualified_name:
            raise ValueError("a symbol needs a name")
        if self.kind not in SYMBOL_KINDS:
            raise ValueError(f"unknown symbol kind {self.kind!r}")
        if not 1 <= self.start_line <= self.end_line:
            raise ValueError("symbol lines must satisfy 1 <= start_line <= end_line")


@dataclass(frozen=True, slots=True)
class CodeImport:
    """An import as written (``os.path``, ``./util``, ``stdio.h``, ``..pkg``).

    ``names`` are the imported members where the syntax lists them
    (``from a import b, c`` -> ``("b", "c")``).
    """

    target: str
    line: int
    names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CodeCall:
    """A call site: ``callee`` is the called name without its receiver
    (``self.baz(x)`` -> ``baz``), ``receiver`` the text before it when there
    is one, ``caller`` the qualified name of the innermost enclosing
    definition (``None`` at module level)."""

    callee: str
    line: int
    caller: str | None = None
    receiver: str | None = None


@dataclass(frozen=True, slots=True)
class CodeInheritance:
    """``symbol`` (qualified) extends (``inherits``) or ``implements`` ``base``."""

    symbol: str
    base: str
    kind: str
    line: int

    def __post_init__(self) -> None:
        if self.kind not in ("inherits", "implements"):
            raise ValueError(f"unknown inheritance kind {self.kind!r}")


@dataclass(frozen=True, slots=True)
class CodeFacts:
    """Everything a parser found in one file, in source order."""

    language: str
    symbols: tuple[CodeSymbol, ...] = ()
    imports: tuple[CodeImport, ...] = ()
    calls: tuple[CodeCall, ...] = ()
    bases: tuple[CodeInheritance, ...] = ()
    syntax_errors: int = 0
    extra: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class CodeParser(Protocol):
    """Reads code facts out of source text.  Implementations never raise on
    any text: a file that cannot be understood yields fewer facts."""

    def languages(self) -> frozenset[str]:
        """The language names :meth:`parse` understands."""
        ...

    def parse(self, text: str, language: str) -> CodeFacts | None:
        """The facts of ``text`` in ``language``; ``None`` for a language this
        parser does not know or a file it will not read (too large)."""
        ...
