"""Facts about a source file (symbols, imports) and the graph triples that record them.

Python is read with :mod:`ast`; other languages, and Python that does not
parse, with line-oriented regular expressions (best effort).  Nothing here
raises on bad input: a file that cannot be understood yields fewer facts.

Import names are the language's own: dotted modules for Python and Java
(``a.b.c``), paths for Rust (``std::io``), strings as written for
JavaScript/TypeScript, Go, C/C++ and Ruby (``./util``, ``net/http``,
``stdio.h``).  Only Python imports are resolved to files of the resource.
"""

from __future__ import annotations

import ast
import bisect
import functools
import re
import threading
import warnings
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from urllib.parse import quote

from cleveragents.application.services.chunking import Chunk
from cleveragents.domain.models.acms.backends import Literal, WriteTriple
from cleveragents.domain.models.acms.code_facts import CodeFacts
from cleveragents.domain.models.acms.uko import (
    PREDICATES,
    file_uri,
    module_uri,
    name_uri,
    resource_uri,
    unit_uri,
)
from cleveragents.domain.models.acms.ulids import canonical_ulid

__all__ = [
    "FileFacts",
    "ModuleLookup",
    "PathLookup",
    "chunk_starts",
    "code_triples",
    "extract_facts",
    "file_triples",
    "module_index",
    "parser_language",
    "python_module_name",
    "resolve_import",
    "root_package",
]

_XSD_INTEGER = "http://www.w3.org/2001/XMLSchema#integer"

_P = PREDICATES


# Line numbers, symbol kinds and languages repeat: one Literal object each
# (frozen, so shared safely), as the predicates are (``uko.PREDICATES``).
@functools.lru_cache(maxsize=4096, typed=True)  # 1.0 and True: two keys
def _integer(n: int) -> Literal:
    return Literal(str(n), _XSD_INTEGER)


@functools.lru_cache(maxsize=256, typed=True)
def _word(value: str) -> Literal:
    return Literal(value)


# ast builds a Python object per node; past this size a file is read with the
# regex fallback, whose memory use is linear and small.
_MAX_AST_CHARS = 2_000_000


@dataclass(frozen=True, slots=True)
class FileFacts:
    """What a file defines and imports.

    Attributes:
        symbols: ``(qualified name, kind, line)`` per definition, in source
            order; kind is ``"class"``, ``"function"``, ``"method"`` or
            ``"variable"`` (types such as structs, interfaces and enums count
            as ``"class"``).  Names may repeat (a function defined in both
            branches of an ``if``).
        imports: imported names, without duplicates, in first-seen order.
            For Python, ``from a import b`` yields both ``"a"`` and the
            candidate ``"a.b"``, because ``b`` may be a submodule or just a
            name defined in ``a``; relative imports are made absolute from
            the file's package.
        candidates: the members of ``imports`` that are only such ``a.b``
            candidates: :func:`file_triples` links them when they resolve
            to a file of the resource and otherwise drops them (``"a"`` is
            linked anyway), so ``from typing import Any`` does not invent a
            module ``typing.Any``.
    """

    symbols: list[tuple[str, str, int]] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)
    candidates: frozenset[str] = frozenset()


# ---------------------------------------------------------------- Python modules


def python_module_name(rel_path: str) -> str | None:
    """Dotted module name of a Python file inside a resource, or None.

    ``pkg/mod.py`` -> ``pkg.mod``, ``pkg/__init__.py`` -> ``pkg``; a leading
    ``src/`` is dropped (``src/pkg/x.py`` -> ``pkg.x``).  None for non-Python
    files and paths that are not importable names (``my-dir/x.py``).
    """
    path = PurePosixPath(rel_path.strip("/"))
    if path.suffix not in (".py", ".pyi"):
        return None
    parts = [*path.parent.parts, path.stem]
    if parts and parts[0] == "src" and len(parts) > 1:
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts.pop()
    if not parts or not all(part.isidentifier() for part in parts):
        return None
    return ".".join(parts)


def module_index(rel_paths: Iterable[str]) -> dict[str, str]:
    """Map the dotted names of a resource's Python files to their relative paths.

    When two files claim one name, the one that ``import`` from the resource
    root would find wins: a path without the ``src/`` prefix over one with
    it, ``.py`` over ``.pyi``, then the lexically smaller path.
    """
    best: dict[str, tuple[bool, bool, str]] = {}
    for rel in rel_paths:
        name = python_module_name(rel)
        if name is None:
            continue
        clean = rel.strip("/")
        rank = (clean.startswith("src/"), clean.endswith(".pyi"), rel)
        if name not in best or rank < best[name]:
            best[name] = rank
    return {name: rank[2] for name, rank in best.items()}


_ROOT_INITS = ("__init__.py", "__init__.pyi")


def root_package(root_name: str, rel_paths: Collection[str]) -> str | None:
    """The package name a resource's root directory is imported by: its
    name, when it lists an ``__init__.py`` at the root and the name is an
    identifier (``rdflib``); else None."""
    if root_name.isidentifier() and any(p in rel_paths for p in _ROOT_INITS):
        return root_name
    return None


class ModuleLookup(Mapping[str, str]):
    """What :func:`module_index` maps, found per name on demand.

    ``module_index`` visits every path; a session that re-indexes a few files
    of a large resource only resolves those files' imports, so this looks a
    dotted name up by building the few paths that could define it
    (``[src/]a/b.py``, ``[src/]a/b/__init__.py``, and ``.pyi``) and checking
    them against the listed paths, with the same preference order.
    Iterating (rarely needed) builds the whole index once.

    A resource whose root is itself a package (``rdflib/`` indexed as the
    resource, ``__init__.py`` at its root) is imported by that package's
    name: ``package`` (see :func:`root_package`) makes ``rdflib.namespace``
    find ``namespace/__init__.py`` when no path of the resource claims the
    full name.
    """

    __slots__ = ("_all", "_cache", "_package", "_paths")

    def __init__(self, rel_paths: Iterable[str], package: str | None = None) -> None:
        self._paths = rel_paths if isinstance(rel_paths, set | frozenset) else set(rel_paths)
        self._package = package
        self._cache: dict[str, str | None] = {}
        self._all: dict[str, str] | None = None

    def __getitem__(self, name: str) -> str:
        if name in self._cache:
            found = self._cache[name]
        else:
            found = self._cache[name] = self._find(name)
        if found is None:
            raise KeyError(name)
        return found

    def _find(self, name: str) -> str | None:
        found = self._find_path(name)
        package = self._package
        if found is None and package is not None and name.startswith(package):
            if name == package:
                return next((p for p in _ROOT_INITS if p in self._paths), None)
            if name[len(package)] == ".":
                return self._find_path(name[len(package) + 1 :])
        return found

    def _find_path(self, name: str) -> str | None:
        stem = name.replace(".", "/")
        best: tuple[bool, bool, str] | None = None
        for prefix in ("", "src/"):
            for tail in (".py", ".pyi", "/__init__.py", "/__init__.pyi"):
                rel = prefix + stem + tail
                if rel not in self._paths or python_module_name(rel) != name:
                    continue
                rank = (rel.startswith("src/"), rel.endswith(".pyi"), rel)
                if best is None or rank < best:
                    best = rank
        return None if best is None else best[2]

    def _index(self) -> dict[str, str]:
        if self._all is None:
            self._all = module_index(self._paths)
        return self._all

    def __iter__(self) -> Iterator[str]:
        return iter(self._index())

    def __len__(self) -> int:
        return len(self._index())


def _package_of(rel_path: str) -> list[str] | None:
    """The package a Python file's relative imports start from, as parts."""
    path = PurePosixPath(rel_path.strip("/"))
    parts = list(path.parent.parts)
    if parts and parts[0] == "src":
        parts = parts[1:]
    if not all(part.isidentifier() for part in parts):
        return None
    return parts


# ---------------------------------------------------------------- extraction


def extract_facts(rel_path: str, text: str, language: str) -> FileFacts:
    """Symbols and imports of a file; never raises on any text.

    Python is parsed with :mod:`ast` (warnings silenced); when that fails
    (syntax errors, null bytes, nesting too deep, files over 2 MB) the regex
    reader is used instead.  Other languages use regexes: JS/TS ``import``,
    ``export ... from``, ``require()``, functions, classes and top-level
    consts; Go imports, ``func`` (methods as ``Type.Name``) and ``type``;
    Rust ``use``, ``extern crate``, ``fn`` (methods in ``impl`` blocks as
    ``Type.name``), ``struct``/``enum``/``trait``; Java/Kotlin/C#/Scala
    imports/usings and classes; C/C++ ``#include``; Ruby ``require``,
    ``def``, ``class``, ``module``.
    """
    try:
        if language == "python":
            return _python_facts(rel_path, text)
        reader = _READERS.get(language)
        return reader(text) if reader is not None else FileFacts()
    except (RecursionError, MemoryError, ValueError, re.error):
        return FileFacts()


class _Collector:
    def __init__(self) -> None:
        self.symbols: list[tuple[str, str, int]] = []
        self.imports: dict[str, None] = {}
        self.candidates: set[str] = set()

    def add_import(self, name: str, *, candidate: bool = False) -> None:
        if not name or name in self.imports:
            return
        self.imports[name] = None
        if candidate:
            self.candidates.add(name)

    def facts(self) -> FileFacts:
        explicit = {name for name in self.imports if name not in self.candidates}
        return FileFacts(
            symbols=self.symbols,
            imports=list(self.imports),
            candidates=frozenset(self.candidates - explicit),
        )


# CPython 3.11's AST builder keeps its recursion depth in shared state:
# parsing in two threads at once can fail with "SystemError: AST constructor
# recursion depth mismatch" (seen in CI), and warnings.catch_warnings() swaps
# process-wide filters.  Both are serialised here.
_AST_LOCK = threading.Lock()


def _python_facts(rel_path: str, text: str) -> FileFacts:
    if len(text) <= _MAX_AST_CHARS:
        try:
            with _AST_LOCK, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError, SystemError):
            pass
        else:
            return _python_ast_facts(rel_path, tree)
    return _python_regex_facts(rel_path, text)


def _absolute(rel_path: str, level: int, module: str | None) -> str | None:
    """The absolute module a relative import names, or None if it escapes."""
    if level == 0:
        return module
    package = _package_of(rel_path)
    if package is None or level - 1 > len(package):
        return None
    base = package[: len(package) - (level - 1)]
    if module:
        base = [*base, *module.split(".")]
    return ".".join(base)


def _add_from_import(
    out: _Collector, rel_path: str, level: int, module: str | None, names: Iterable[str]
) -> None:
    base = _absolute(rel_path, level, module)
    if base is None:
        return
    out.add_import(base)
    for name in names:
        if name != "*":
            out.add_import(f"{base}.{name}" if base else name, candidate=True)


def _python_ast_facts(rel_path: str, tree: ast.Module) -> FileFacts:
    out = _Collector()
    _python_defs(tree.body, "", in_class=False, out=out.symbols)
    for node in _statements(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.add_import(alias.name)
        elif isinstance(node, ast.ImportFrom):
            names = [alias.name for alias in node.names]
            _add_from_import(out, rel_path, node.level, node.module, names)
    return out.facts()


def _statements(tree: ast.Module) -> Iterator[ast.AST]:
    """Every statement of the module, nested ones included, never descending
    into expressions: imports are statements, and expressions are most of a
    tree's nodes (walking them all cost ~40% of indexing the stdlib).
    Iterative, so deep nesting cannot overflow the stack."""
    stack: list[ast.AST] = list(reversed(tree.body))
    while stack:
        node = stack.pop()
        yield node
        for _name, value in ast.iter_fields(node):
            if (
                isinstance(value, list)
                and value
                and isinstance(value[0], ast.stmt | ast.excepthandler | ast.match_case)
            ):
                stack.extend(reversed(value))


def _python_defs(
    body: list[ast.stmt], prefix: str, *, in_class: bool, out: list[tuple[str, str, int]]
) -> None:
    # Statement nesting is bounded by the parser (100 indentation levels),
    # so this recursion is shallow.
    for node in body:
        if isinstance(node, ast.ClassDef):
            name = prefix + node.name
            out.append((name, "class", node.lineno))
            _python_defs(node.body, name + ".", in_class=True, out=out)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.append((prefix + node.name, "method" if in_class else "function", node.lineno))
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name_node in _assigned_names(target):
                    out.append((prefix + name_node.id, "variable", name_node.lineno))
        elif isinstance(node, ast.If | ast.Try | ast.With | ast.AsyncWith):
            # Definitions under `if TYPE_CHECKING:`, `try: ... except ImportError:`.
            for block in _sub_bodies(node):
                _python_defs(block, prefix, in_class=in_class, out=out)


def _assigned_names(target: ast.expr) -> list[ast.Name]:
    if isinstance(target, ast.Name):
        return [target]
    if isinstance(target, ast.Tuple | ast.List):
        return [elt for elt in target.elts if isinstance(elt, ast.Name)]
    return []


def _sub_bodies(node: ast.stmt) -> list[list[ast.stmt]]:
    if isinstance(node, ast.If):
        return [node.body, node.orelse]
    if isinstance(node, ast.Try):
        return [node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody]
    if isinstance(node, ast.With | ast.AsyncWith):
        return [node.body]
    return []


_PY_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+([^\W\d]\w*)", re.M)
_PY_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w. \t,]+)", re.M)
_PY_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+\(?([\w \t,]+|\*)", re.M)
_AS = re.compile(r"[ \t]+as[ \t]+\w+")


def _python_regex_facts(rel_path: str, text: str) -> FileFacts:
    out = _Collector()
    classes: list[tuple[int, str]] = []  # (indent, qualified name) of enclosing classes
    in_function: list[int] = []  # indents of enclosing functions
    for m in _PY_DEF.finditer(text):
        indent = len(m.group(1).expandtabs())
        while classes and classes[-1][0] >= indent:
            classes.pop()
        while in_function and in_function[-1] >= indent:
            in_function.pop()
        if in_function:
            continue  # locals of a function are not the file's symbols
        line = text.count("\n", 0, m.start()) + 1
        keyword, name = m.group(2), m.group(3)
        qualified = f"{classes[-1][1]}.{name}" if classes else name
        if keyword == "class":
            out.symbols.append((qualified, "class", line))
            classes.append((indent, qualified))
        else:
            out.symbols.append((qualified, "method" if classes else "function", line))
            in_function.append(indent)
    for m in _PY_IMPORT.finditer(text):
        for part in _AS.sub("", m.group(1)).split(","):
            name = part.strip()
            if _is_dotted(name):
                out.add_import(name)
    for m in _PY_FROM.finditer(text):
        level, module = len(m.group(1)), m.group(2) or None
        if module is not None and not _is_dotted(module):
            continue
        names = [n.strip() for n in _AS.sub("", m.group(3)).split(",")]
        valid = [n for n in names if n == "*" or n.isidentifier()]
        _add_from_import(out, rel_path, level, module, valid)
    return out.facts()


def _is_dotted(name: str) -> bool:
    return bool(name) and all(part.isidentifier() for part in name.split("."))


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


# ---------------------------------------------------------------- other languages

_JS_IMPORT = re.compile(
    r"""(?:^|[;\s])(?:import|export)\s+(?:type\s+)?(?:[\w$*{}\s,]+?\s+from\s+)?['"]([^'"\n]+)['"]"""
)
_JS_DYNAMIC = re.compile(r"""\b(?:require|import)\s*\(\s*['"]([^'"\n]+)['"]\s*\)""")
_JS_FUNCTION = re.compile(
    r"^(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*([\w$]+)", re.M
)
_JS_CLASS = re.compile(
    r"^(?:export\s+)?(?:default\s+)?(?:declare\s+)?(?:abstract\s+)?"
    r"(class|interface|enum)\s+([\w$]+)",
    re.M,
)
_JS_CONST = re.compile(
    r"^(?:export\s+)?(?:const|let|var)\s+([\w$]+)\s*(?::[^=\n]*)?=\s*(async\s+)?"
    r"(function\b|\([^)\n]*\)\s*=>|[\w$]+\s*=>)?",
    re.M,
)


def _js_facts(text: str) -> FileFacts:
    out = _Collector()
    found: list[tuple[int, str, str]] = []
    for m in _JS_FUNCTION.finditer(text):
        found.append((m.start(), m.group(1), "function"))
    for m in _JS_CLASS.finditer(text):
        found.append((m.start(), m.group(2), "class"))
    for m in _JS_CONST.finditer(text):
        found.append((m.start(), m.group(1), "function" if m.group(3) else "variable"))
    out.symbols.extend((name, kind, _line_of(text, pos)) for pos, name, kind in sorted(found))
    imports = [(m.start(), m.group(1)) for m in _JS_IMPORT.finditer(text)]
    imports += [(m.start(), m.group(1)) for m in _JS_DYNAMIC.finditer(text)]
    for _, name in sorted(imports):
        out.add_import(name)
    return out.facts()


_GO_IMPORT_ONE = re.compile(r"""^import\s+(?:[\w.]+\s+)?"([^"\n]+)\"""", re.M)
_GO_IMPORT_BLOCK = re.compile(r"^import\s*\(([^)]*)\)", re.M)
_GO_QUOTED = re.compile(r'"([^"\n]+)"')
_GO_FUNC = re.compile(r"^func\s+(?:\(\s*\w*\s*\*?\s*([\w]+)(?:\[[^\]]*\])?\s*\)\s*)?(\w+)", re.M)
_GO_TYPE = re.compile(r"^type\s+(\w+)", re.M)
_GO_TYPE_GROUP = re.compile(r"^type\s*\(([^)]*)\)", re.M)
_GO_GROUP_NAME = re.compile(r"^\s+(\w+)\s", re.M)


def _go_facts(text: str) -> FileFacts:
    out = _Collector()
    imports = [(m.start(), m.group(1)) for m in _GO_IMPORT_ONE.finditer(text)]
    for block in _GO_IMPORT_BLOCK.finditer(text):
        imports += [(block.start(1) + m.start(), m.group(1)) for m in _GO_QUOTED.finditer(block[1])]
    for _, name in sorted(imports):
        out.add_import(name)
    found: list[tuple[int, str, str]] = []
    for m in _GO_FUNC.finditer(text):
        receiver, name = m.group(1), m.group(2)
        if receiver:
            found.append((m.start(), f"{receiver}.{name}", "method"))
        else:
            found.append((m.start(), name, "function"))
    for m in _GO_TYPE.finditer(text):
        found.append((m.start(), m.group(1), "class"))
    for group in _GO_TYPE_GROUP.finditer(text):
        for m in _GO_GROUP_NAME.finditer(group[1]):
            found.append((group.start(1) + m.start(1), m.group(1), "class"))
    out.symbols.extend((name, kind, _line_of(text, pos)) for pos, name, kind in sorted(found))
    return out.facts()


_RUST_USE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+((?:::)?[\w:]+)", re.M)
_RUST_CRATE = re.compile(r"^\s*extern\s+crate\s+(\w+)", re.M)
_RUST_ITEM = re.compile(
    r"^([ \t]*)(?:pub(?:\([^)]*\))?\s+)?"
    r"(?:(?:async|unsafe|const|default|extern(?:\s+\"[^\"]*\")?)\s+)*"
    r"(fn|struct|enum|trait|union|type|impl)\b(?:\s*<[^>\n]*>)?\s*([\w:]+)?"
    r"(?:\s*<[^>\n]*>)?(?:\s+for\s+([\w:]+))?",
    re.M,
)


def _rust_facts(text: str) -> FileFacts:
    out = _Collector()
    imports = [(m.start(), m.group(1).rstrip(":")) for m in _RUST_USE.finditer(text)]
    imports += [(m.start(), m.group(1)) for m in _RUST_CRATE.finditer(text)]
    for _, name in sorted(imports):
        out.add_import(name)
    impl_for: str | None = None
    for m in _RUST_ITEM.finditer(text):
        indent, keyword, name, target = m.group(1), m.group(2), m.group(3), m.group(4)
        line = _line_of(text, m.start())
        if keyword == "impl":
            impl_for = (target or name or "").rsplit("::", 1)[-1] or None
            continue
        if not name:
            continue
        if not indent:
            impl_for = None
        if keyword == "fn":
            if impl_for is not None:
                out.symbols.append((f"{impl_for}.{name}", "method", line))
            elif not indent:
                out.symbols.append((name, "function", line))
        elif not indent:
            out.symbols.append((name, "class", line))
    return out.facts()


_JAVA_IMPORT = re.compile(r"^\s*import\s+(?:static\s+)?(\w+(?:\.\w+)*)(?:\.\*)?\s*;?", re.M)
_CSHARP_USING = re.compile(
    r"^\s*(?:global\s+)?using\s+(?:static\s+)?(?:\w+\s*=\s*)?([\w.]+)\s*;", re.M
)
_JAVA_CLASS = re.compile(
    r"^\s*(?:(?:public|private|protected|internal|abstract|final|static|sealed|partial|"
    r"open|data|inner|non-sealed|readonly)\s+)*(class|interface|enum|record|struct|object)\s+(\w+)",
    re.M,
)


def _java_facts(text: str) -> FileFacts:
    out = _Collector()
    for m in _JAVA_IMPORT.finditer(text):
        out.add_import(m.group(1))
    for m in _CSHARP_USING.finditer(text):
        out.add_import(m.group(1))
    for m in _JAVA_CLASS.finditer(text):
        out.symbols.append((m.group(2), "class", _line_of(text, m.start(2))))
    return out.facts()


_C_INCLUDE = re.compile(r"^\s*#\s*include\s*[<\"]([^>\"\n]+)[>\"]", re.M)


def _c_facts(text: str) -> FileFacts:
    out = _Collector()
    for m in _C_INCLUDE.finditer(text):
        out.add_import(m.group(1))
    for m in _JAVA_CLASS.finditer(text):
        if m.group(1) in ("class", "struct", "enum"):
            out.symbols.append((m.group(2), "class", _line_of(text, m.start(2))))
    return out.facts()


_RUBY_REQUIRE = re.compile(r"""^\s*require(?:_relative)?\s*\(?\s*['"]([^'"\n]+)['"]""", re.M)
_RUBY_DEF = re.compile(r"^([ \t]*)(def|class|module)\s+(?:self\.)?([\w:.?!=]+)", re.M)


def _ruby_facts(text: str) -> FileFacts:
    out = _Collector()
    for m in _RUBY_REQUIRE.finditer(text):
        out.add_import(m.group(1))
    for m in _RUBY_DEF.finditer(text):
        kind = "function" if m.group(2) == "def" else "class"
        if kind == "function" and m.group(1):
            kind = "method"
        out.symbols.append((m.group(3), kind, _line_of(text, m.start())))
    return out.facts()


_READERS = {
    "javascript": _js_facts,
    "typescript": _js_facts,
    "go": _go_facts,
    "rust": _rust_facts,
    "java": _java_facts,
    "kotlin": _java_facts,
    "scala": _java_facts,
    "csharp": _java_facts,
    "c": _c_facts,
    "cpp": _c_facts,
    "ruby": _ruby_facts,
}


# ---------------------------------------------------------------- triples


def _resolve(name: str, modules: Mapping[str, str]) -> str | None:
    """Path of the file ``name`` or its longest importable prefix names, or None."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        path = modules.get(".".join(parts[:end]))
        if path is not None:
            return path
    return None


def file_triples(
    resource_id: str,
    rel_path: str,
    language: str,
    chunks: Sequence[Chunk],
    facts: FileFacts,
    modules: Mapping[str, str],
) -> list[WriteTriple]:
    """The graph triples that describe one file of a resource.

    The first triple is ``<resource> uko:contains <file>``; the subject of
    every other triple is the file URI, a chunk URI (``<file>#L1-L40``, the
    URIs :func:`~cleveragents.application.services.chunking.make_units`
    gives) or a symbol URI (``<file>#sym=Foo.bar``).  So the indexer replaces
    a file by deleting the subjects ``{file} | chunk URIs | symbol URIs``
    (the previous call's subjects) and the one ``contains`` triple.

    Written: ``contains``, ``inResource``, ``path`` and ``language``
    literals, ``hasChunk`` per chunk with ``startLine``/``endLine``
    (``xsd:integer`` literals), ``defines`` per distinct symbol name (first
    occurrence wins) with ``name`` and ``kind`` literals, and ``imports``.

    A Python import links to the file it resolves to in ``modules`` (see
    :func:`module_index`), trying the whole dotted name then ever shorter
    prefixes; an import that resolves to this file itself is left out.  An
    import that resolves to no file links to ``module_uri(name)``, except
    ``from a import b`` candidates (:attr:`FileFacts.candidates`), which are
    dropped.  Other languages' imports always link to ``module_uri(name)``.

    Raises:
        TypeError / ValueError: ``resource_id`` is not a ULID or ``rel_path`` is empty.
    """
    rid = canonical_ulid(resource_id)
    resource = resource_uri(rid)
    file = file_uri(rid, rel_path)
    triples: list[WriteTriple] = [
        (resource, _P["contains"], file),
        (file, _P["inResource"], resource),
        (file, _P["path"], Literal(rel_path)),
        (file, _P["language"], _word(language)),
    ]
    for chunk in chunks:
        chunk_uri = unit_uri(rid, rel_path, f"L{chunk.start_line}-L{chunk.end_line}")
        triples += [
            (file, _P["hasChunk"], chunk_uri),
            (chunk_uri, _P["startLine"], _integer(chunk.start_line)),
            (chunk_uri, _P["endLine"], _integer(chunk.end_line)),
        ]
    seen: set[str] = set()
    for name, kind, line in facts.symbols:
        if name in seen:
            continue
        seen.add(name)
        symbol = unit_uri(rid, rel_path, f"sym={name}")
        triples += [
            (file, _P["defines"], symbol),
            (symbol, _P["name"], Literal(name)),
            (symbol, _P["kind"], _word(kind)),
            (symbol, _P["line"], _integer(line)),
        ]
    targets: dict[str, None] = {}
    for name in facts.imports:
        path = _resolve(name, modules) if language == "python" else None
        if path is not None:
            if path != rel_path:
                targets[file_uri(rid, path)] = None
        elif name not in facts.candidates:
            targets[module_uri(name)] = None
    triples += [(file, _P["imports"], target) for target in targets]
    return triples


# ---------------------------------------------------------------- code facts (tree-sitter)

_MAX_DOC_LITERAL = 300
_FRAGMENT_SAFE = "-._~=,:"  # as uko.unit_uri quotes a fragment
_LAST_LINE = 1 << 62  # past any line: bisects to after every definition starting on one
_MAX_PACKAGE_FILES = 50
_JS_EXTENSIONS = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts", ".d.ts")
_SAME_OBJECT = frozenset({"self", "this", "cls", "@", "$this", "static", "super()"})


class PathLookup:
    """The files of a resource, for resolving imports to files.

    Built from the listed relative paths; directory listings are made on
    first need.  Python names go through :class:`ModuleLookup`.
    """

    __slots__ = ("_dirs", "_modules", "_paths")

    def __init__(self, rel_paths: Iterable[str], package: str | None = None) -> None:
        self._paths = rel_paths if isinstance(rel_paths, set | frozenset) else set(rel_paths)
        self._modules = ModuleLookup(self._paths, package)
        self._dirs: dict[str, list[str]] | None = None

    @property
    def modules(self) -> ModuleLookup:
        """Python dotted names -> paths."""
        return self._modules

    def has(self, rel_path: str) -> bool:
        """Whether the resource lists ``rel_path``."""
        return rel_path in self._paths

    def files_in(self, directory: str) -> list[str]:
        """The files directly inside ``directory`` (``""`` is the root), sorted."""
        if self._dirs is None:
            dirs: dict[str, list[str]] = {}
            for path in self._paths:
                parent = path.rsplit("/", 1)[0] if "/" in path else ""
                dirs.setdefault(parent, []).append(path)
            for files in dirs.values():
                files.sort()
            self._dirs = dirs
        return self._dirs.get(directory.strip("/"), [])

    def directories_ending_with(self, suffix: str) -> list[str]:
        """Directories whose path is ``suffix`` or ends with ``/suffix``."""
        self.files_in("")
        assert self._dirs is not None
        suffix = suffix.strip("/")
        return sorted(d for d in self._dirs if d == suffix or d.endswith("/" + suffix))


def _normalise(parts: Iterable[str]) -> str | None:
    out: list[str] = []
    for part in parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not out:
                return None
            out.pop()
        else:
            out.append(part)
    return "/".join(out)


def resolve_import(
    rel_path: str, language: str, target: str, names: Sequence[str], files: PathLookup
) -> list[str]:
    """Files of the resource an import names, where the language makes it decidable.

    Python: dotted and relative modules (``from . import x`` tries the
    submodule ``x``); JavaScript/TypeScript: relative specifiers with the
    usual extensions and ``index`` files; Go: the package directory whose path
    ends the import path (its ``.go`` files, tests excluded); Java/Kotlin:
    ``a.b.C`` -> ``a/b/C.java`` anywhere under a source root, ``a.b.*`` -> the
    files of ``a/b``; C/C++: ``"x.h"`` next to the including file or from the
    root; Ruby ``require_relative``; shell ``source ./x.sh``.  Anything else
    resolves to nothing (the import stays a module node).
    """
    directory = rel_path.rsplit("/", 1)[0] if "/" in rel_path else ""
    if language == "python":
        return _python_targets(rel_path, target, names, files)
    if language in ("javascript", "typescript", "tsx"):
        if not target.startswith("."):
            return []
        base = _normalise([*directory.split("/"), *target.split("/")])
        if base is None:
            return []
        if files.has(base):
            return [base]
        for ext in _JS_EXTENSIONS:
            if files.has(base + ext):
                return [base + ext]
        for ext in _JS_EXTENSIONS:
            if files.has(f"{base}/index{ext}"):
                return [f"{base}/index{ext}"]
        return []
    if language == "go":
        parts = target.split("/")
        for start in range(len(parts)):
            found = files.directories_ending_with("/".join(parts[start:]))
            if found:
                pkg = [
                    f
                    for f in files.files_in(found[0])
                    if f.endswith(".go") and not f.endswith("_test.go")
                ]
                return pkg[:_MAX_PACKAGE_FILES]
        return []
    if language in ("java", "kotlin"):
        wildcard = target.endswith(".*")
        dotted = target[:-2] if wildcard else target
        path = dotted.replace(".", "/")
        if wildcard:
            found = files.directories_ending_with(path)
            return files.files_in(found[0])[:_MAX_PACKAGE_FILES] if found else []
        for ext in (".java", ".kt"):
            parent = path.rsplit("/", 1)[0] if "/" in path else ""
            for d in files.directories_ending_with(parent) if parent else [""]:
                candidate = f"{d}/{path.rsplit('/', 1)[-1]}{ext}" if d else path + ext
                if files.has(candidate):
                    return [candidate]
        return []
    if language in ("c", "cpp", "ruby", "shell", "php"):
        if language == "ruby" and not target.endswith(".rb"):
            target += ".rb"
        for base in (directory, ""):
            found_path = _normalise([*base.split("/"), *target.split("/")])
            if found_path is not None and files.has(found_path):
                return [found_path]
        return []
    return []


def _python_targets(
    rel_path: str, target: str, names: Sequence[str], files: PathLookup
) -> list[str]:
    level = len(target) - len(target.lstrip("."))
    module = _absolute(rel_path, level, target[level:] or None)
    if module is None:
        return []
    out: list[str] = []
    for name in names:
        if name != "*":
            sub = files.modules.get(f"{module}.{name}" if module else name)
            if sub is not None:
                out.append(sub)
    if module:
        found = _resolve(module, files.modules)
        if found is not None:
            out.append(found)
    return list(dict.fromkeys(out))


def code_triples(
    resource_id: str,
    rel_path: str,
    language: str,
    chunks: Sequence[Chunk],
    facts: CodeFacts,
    files: PathLookup,
) -> list[WriteTriple]:
    """The graph triples of one file from its tree-sitter facts.

    The file-level triples of :func:`file_triples`, plus per symbol
    (``<file>#sym=Foo.bar``; a qualified name defined again in the file, an
    overload, a property's setter, a repeated heading, is ``Foo.bar~2``,
    ``Foo.bar~3`` in source order): ``defines``, ``name`` (qualified, the
    same for every definition of it),
    ``kind``, ``line``/``endLine`` (``xsd:integer``), ``signature``, ``doc``
    (first 300 characters), ``named`` -> the name node of its bare name
    (``urn:uko:name:NAME``, which joins definitions and calls across the
    files of a scope), ``hasMember`` from a class-like symbol to the symbols
    directly inside it; ``calls`` from the calling symbol (or the file, at
    module level) to the called symbol when this file defines exactly one
    symbol of that name (and the call has no receiver other than
    ``self``/``this``), else to the name node; ``callSites`` per calling
    symbol, one literal listing the lines of its calls by callee name
    (``"scale:7;square:7,12"``: one triple per caller rather than several per
    call keeps the graph near 2x the size of a graph without calls);
    ``inherits``/``implements`` to a symbol of this file or a name node;
    ``imports`` resolved to files by :func:`resolve_import`, else to
    ``module_uri(target)``.

    Every subject is the file or a URI under it (plus the resource's one
    ``contains`` edge), so a file's triples are replaced by subject as before.
    """
    rid = canonical_ulid(resource_id)
    triples = file_triples(rid, rel_path, language, chunks, FileFacts(), {})
    file = file_uri(rid, rel_path)
    # Per qualified name, each definition's (start, end, URI) in source order,
    # and the latest one seen (the parent of the definitions nested in it).
    defined: dict[str, list[tuple[int, int, str]]] = {}
    latest: dict[str, str] = {}
    keys: set[str] = set()
    count: dict[str, int] = {}  # definitions of each qualified name so far
    by_bare: dict[str, list[str]] = {}
    for sym in facts.symbols:
        # An overload, a setter, a repeated heading: ``~n`` from the name's
        # own count (a scan from ~2 each time was quadratic: 8,000 repeated
        # headings took 4.3 s); past a name that is literally ``Q~n``.
        n = count.get(sym.qualified_name, 0) + 1
        key = sym.qualified_name if n == 1 else f"{sym.qualified_name}~{n}"
        while key in keys:
            n += 1
            key = f"{sym.qualified_name}~{n}"
        count[sym.qualified_name] = n
        keys.add(key)
        uri = file + "#" + quote(f"sym={key}", safe=_FRAGMENT_SAFE)
        by_bare.setdefault(sym.name, []).append(uri)
        triples += [
            (file, _P["defines"], uri),
            (uri, _P["name"], Literal(sym.qualified_name)),
            (uri, _P["kind"], _word(sym.kind)),
            (uri, _P["line"], _integer(sym.start_line)),
            (uri, _P["endLine"], _integer(sym.end_line)),
            (uri, _P["named"], name_uri(sym.name)),
        ]
        if sym.signature:
            triples.append((uri, _P["signature"], Literal(sym.signature)))
        if sym.doc:
            triples.append((uri, _P["doc"], Literal(sym.doc[:_MAX_DOC_LITERAL])))
        parent = sym.qualified_name.rsplit(".", 1)[0] if "." in sym.qualified_name else None
        if parent is not None and parent in latest:
            triples.append((latest[parent], _P["hasMember"], uri))
        latest[sym.qualified_name] = uri
        first_line = sym.annotated_line or sym.start_line  # a call in ``@Ann(f())`` is its
        defined.setdefault(sym.qualified_name, []).append((first_line, sym.end_line, uri))

    def definition_at(qualified: str, line: int) -> str | None:
        """The definition of ``qualified`` whose lines (annotations included)
        hold ``line``; the first one when none does.  Definitions of one
        name follow each other without nesting: the last one starting at or
        before ``line`` is the only candidate (found by bisection, so a
        file of thousands of overloads costs no scan per call)."""
        found = defined.get(qualified)
        if not found:
            return None
        if len(found) > 1:
            at = bisect.bisect_right(found, (line, _LAST_LINE, "")) - 1
            if at >= 0 and found[at][0] <= line <= found[at][1]:
                return found[at][2]
        return found[0][2]

    def target_of(name: str, receiver: str | None) -> str:
        local = by_bare.get(name, [])
        if len(local) == 1 and (receiver is None or receiver in _SAME_OBJECT):
            return local[0]
        return name_uri(name)

    edges: dict[tuple[str, str], None] = {}
    sites: dict[str, dict[str, list[int]]] = {}
    for call in facts.calls:
        source = (definition_at(call.caller, call.line) if call.caller else None) or file
        edges[(source, target_of(call.callee, call.receiver))] = None
        lines = sites.setdefault(source, {}).setdefault(call.callee, [])
        if not lines or lines[-1] != call.line:
            lines.append(call.line)
    for source, by_callee in sites.items():
        listing = ";".join(
            f"{callee}:{','.join(map(str, lines))}" for callee, lines in sorted(by_callee.items())
        )
        triples.append((source, _P["callSites"], Literal(listing)))
    triples += [(s, _P["calls"], o) for s, o in edges]
    for base in facts.bases:
        subject = definition_at(base.symbol, base.line)
        if subject is not None:
            bare = base.base.rsplit(".", 1)[-1]
            triples.append((subject, _P[base.kind], target_of(bare, None)))
    targets: dict[str, None] = {}
    for imp in facts.imports:
        found = resolve_import(rel_path, language, imp.target, imp.names, files)
        for path in found:
            if path != rel_path:
                targets[file_uri(rid, path)] = None
        if not found and imp.target:
            targets[module_uri(imp.target)] = None
    triples += [(file, _P["imports"], target) for target in targets]
    return list(dict.fromkeys(triples))


def parser_language(rel_path: str, language: str) -> str:
    """The grammar a file is parsed with: ``tsx`` for ``.tsx`` files (the
    TypeScript grammar does not read JSX), else the project's language name."""
    return "tsx" if rel_path.lower().endswith(".tsx") else language


def chunk_starts(facts: CodeFacts) -> list[int]:
    """1-based lines where the file's top-level definitions begin, for
    :func:`~cleveragents.application.services.chunking.chunk_text`: the
    definitions outside any other, or directly inside a namespace or module
    (a C# class in its namespace is a block of its own), their annotations
    included.  Go's package constants and variables are none: a spec of a
    ``const (...)`` group would split the group from its keyword."""
    kinds = {s.qualified_name: s.kind for s in facts.symbols}
    starts: set[int] = set()
    for sym in facts.symbols:
        if sym.kind in ("constant", "variable"):
            continue
        parent = sym.qualified_name.rsplit(".", 1)[0] if "." in sym.qualified_name else None
        if parent is None or kinds.get(parent, "namespace") in ("namespace", "module"):
            starts.add(sym.annotated_line or sym.start_line)
    return sorted(starts)
