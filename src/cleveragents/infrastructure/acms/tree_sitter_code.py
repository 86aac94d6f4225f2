"""A :class:`~cleveragents.domain.models.acms.code_facts.CodeParser` over tree-sitter.

Grammars come from PyPI ``tree-sitter-language-pack`` 0.13 (compiled into the
wheel; its 1.x line downloads grammars at run time, hence the pin below 1.0),
so parsing never touches the network.  Each language has one tree-sitter query
whose captures follow one convention, read by one extractor:

- ``@def.<kind>`` a definition node, with ``@name`` its name node (``@qname``:
  a qualified name such as C++ ``Circle::area``; ``@receiver_type``: a Go
  method's receiver type, which qualifies the method);
- ``@scope`` with ``@name``: a node that qualifies the definitions inside it
  but is not a symbol itself (a Rust ``impl`` block);
- ``@call`` with ``@name`` the called name and ``@receiver`` what precedes it;
- ``@import`` an import statement, read by a per-language function.

Inheritance is read from the definition nodes by a per-language function.  A
definition nested directly in a class-like definition (or a scope) becomes a
``method``; qualified names follow containment by byte range, so they do not
depend on how a grammar nests its nodes.  Rust macro arguments, token trees
to the grammar, are parsed again as code for their calls (at most
:data:`_MAX_MACRO_ROUNDS` parses of a file-sized text).

The queries run in C (``QueryCursor.matches``): Python only sees the matched
nodes, which keeps parsing the standard library within a small factor of
``ast``.  Nothing here raises on any text: tree-sitter recovers from syntax
errors (their count is reported), and a file over :data:`MAX_PARSE_BYTES` is
not parsed.

Hostile files are bounded, so one file can neither kill the indexing process
nor cost more than a small constant per byte (measured with
tree-sitter-language-pack 0.13 and py-tree-sitter 0.26):

- Two grammars' external scanners overflow on deep nesting and kill the
  process: Markdown (SIGSEGV at 255 open container blocks: ``>`` block
  quotes and list items, e.g. 300 ``>`` on one line) and Kotlin (SIGABRT at
  about 1,100 nested string templates ``"${``).  A cheap scan of the text
  before parsing measures that nesting (never below the real value) and a
  file over :data:`MAX_MARKDOWN_NESTING` or :data:`MAX_KOTLIN_TEMPLATES` is
  not parsed (``None``, logged as ``tree_sitter_code.parse_skipped``); it
  still gets its text units.  Kotlin's nested block comments cost the
  square of their depth (20,000 unclosed ``/*``: 4.6 s): a file nesting
  them deeper than :data:`MAX_KOTLIN_COMMENT_NESTING` is not parsed either.
  The other 13 grammars survived 100,000 levels
  of nested calls, brackets, blocks, strings, interpolations and heredocs.
- Query matching keeps one in-progress match per enclosing node, so on a
  deep tree it grows with the square of the depth (JS ``f(f(f(...)))``
  64,000 deep: 86 s).  Matches start no deeper than
  :data:`MAX_QUERY_DEPTH` tree levels, 100 times the deepest match in the
  Python standard library.
- Qualified names follow nesting, so ``n`` nested definitions cost ``n**2``
  characters (20,000 nested Ruby methods: 142 s, 2.7 GB).  Definitions
  nested deeper than :data:`MAX_DEFINITION_DEPTH` (the standard library's
  deepest is 7) or whose qualified name would pass
  :data:`MAX_QUALIFIED_NAME` characters are not symbols; their calls belong
  to the nearest enclosing symbol.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import tree_sitter
import tree_sitter_language_pack

from cleveragents._logging import get_logger
from cleveragents.domain.models.acms.code_facts import (
    CodeCall,
    CodeFacts,
    CodeImport,
    CodeInheritance,
    CodeSymbol,
)

__all__ = [
    "MAX_DEFINITION_DEPTH",
    "MAX_KOTLIN_TEMPLATES",
    "MAX_MARKDOWN_NESTING",
    "MAX_PARSE_BYTES",
    "MAX_QUALIFIED_NAME",
    "MAX_QUERY_DEPTH",
    "TreeSitterCodeParser",
]

#: Files larger than this are not parsed (generated bundles, data in code).
MAX_PARSE_BYTES = 2_000_000
#: Markdown files whose container nesting estimate passes this are not
#: parsed: the grammar crashes at 255 open blocks.
MAX_MARKDOWN_NESTING = 100
#: Kotlin files whose string templates nest deeper than this are not
#: parsed: the grammar aborts at about 1,100 nested templates.  Only a file
#: with more ``${`` in all is measured (by a lexer; each level needs one).
MAX_KOTLIN_TEMPLATES = 512
#: Kotlin files whose block comments nest deeper than this are not parsed:
#: the grammar's scanner is quadratic in that depth (20,000 unclosed
#: ``/*``: 4.6 s; a 1 MB file of them would take minutes).
MAX_KOTLIN_COMMENT_NESTING = 512
_BLOCK_COMMENT_MARK = re.compile(r"/\*|\*/")
#: Query matches start at most this many tree levels below the root.
MAX_QUERY_DEPTH = 10_000
#: Definitions nested deeper than this (scopes included) are not symbols.
MAX_DEFINITION_DEPTH = 64
#: Definitions whose qualified name would be longer are not symbols.
MAX_QUALIFIED_NAME = 1_000
_MAX_CALLS = 50_000
#: Rounds of reading Rust macro arguments as code (a macro in a macro's
#: arguments takes one more); each parses a text the size of the file.
_MAX_MACRO_ROUNDS = 3
_NOT_NEWLINE = re.compile(rb"[^\n]")
_MAX_SIGNATURE = 240
_MAX_DOC = 1_000
_MAX_DOC_LINES = 30

Node = tree_sitter.Node
# A call as matched: its node, the called name, the receiver's text, and the
# line of the called name (a chained call ``a\n  .b()`` starts on ``a``'s
# line, but its call site is where ``b`` is written).
_RawCall = tuple[Node, str, str | None, int]
_log = get_logger("cleveragents.acms.tree_sitter_code")

# ---------------------------------------------------------------- queries

_JS_COMMON = """
(function_declaration name: (identifier) @name) @def.function
(generator_function_declaration name: (identifier) @name) @def.function
(class_declaration name: (_) @name) @def.class
(method_definition name: (_) @name) @def.method
(variable_declarator name: (identifier) @name
  value: [(arrow_function) (function_expression) (generator_function)]) @def.function
(assignment_expression
  left: (member_expression object: (_) @receiver_type
    property: (property_identifier) @name)
  right: [(arrow_function) (function_expression) (generator_function)] @value) @def.function
(call_expression function: [(identifier) (super)] @name) @call
(call_expression function: (member_expression object: (_) @receiver
  property: (property_identifier) @name)) @call
(new_expression constructor: (identifier) @name) @call
(new_expression constructor: (member_expression object: (_) @receiver
  property: (property_identifier) @name)) @call
(import_statement) @import
(export_statement source: (_)) @import
(call_expression function: [(identifier) (import)] @import_fn
  arguments: (arguments . (string) @import_arg)) @import
"""

_TS_EXTRA = """
(abstract_class_declaration name: (_) @name) @def.class
(interface_declaration name: (_) @name) @def.interface
(type_alias_declaration name: (_) @name) @def.type
(enum_declaration name: (_) @name) @def.enum
(method_signature name: (_) @name) @def.method
(function_signature name: (_) @name) @def.function
(abstract_method_signature name: (_) @name) @def.method
(internal_module name: (_) @name) @def.namespace
"""

_QUERIES: dict[str, str] = {
    "python": """
(class_definition name: (identifier) @name) @def.class
(function_definition name: (identifier) @name) @def.function
(call function: (identifier) @name) @call
(call function: (attribute object: (_) @receiver attribute: (identifier) @name)) @call
(import_statement) @import
(import_from_statement) @import
(future_import_statement) @import
""",
    "javascript": _JS_COMMON,
    "typescript": _JS_COMMON + _TS_EXTRA,
    "tsx": _JS_COMMON + _TS_EXTRA,
    "go": """
(function_declaration name: (identifier) @name) @def.function
(method_declaration
  receiver: (parameter_list (parameter_declaration type: [
    (type_identifier) @receiver_type
    (pointer_type (type_identifier) @receiver_type)
    (generic_type type: (type_identifier) @receiver_type)
    (pointer_type (generic_type type: (type_identifier) @receiver_type))]))
  name: (field_identifier) @name) @def.method
(type_spec name: (type_identifier) @name type: (struct_type)) @def.class
(type_spec name: (type_identifier) @name type: (interface_type)) @def.interface
(type_spec name: (type_identifier) @name) @def.type
(type_alias name: (type_identifier) @name) @def.type
(method_elem name: (field_identifier) @name) @def.method
(source_file (const_declaration (const_spec name: (identifier) @name) @def.constant))
(source_file (var_declaration (var_spec name: (identifier) @name) @def.variable))
(source_file (var_declaration (var_spec_list (var_spec name: (identifier) @name) @def.variable)))
(call_expression function: (identifier) @name) @call
(call_expression function: (selector_expression operand: (_) @receiver
  field: (field_identifier) @name)) @call
(import_spec) @import
""",
    "rust": """
(function_item name: (identifier) @name) @def.function
(function_signature_item name: (identifier) @name) @def.function
(struct_item name: (type_identifier) @name) @def.class
(union_item name: (type_identifier) @name) @def.class
(enum_item name: (type_identifier) @name) @def.enum
(trait_item name: (type_identifier) @name) @def.trait
(type_item name: (type_identifier) @name) @def.type
(mod_item name: (identifier) @name body: (_)) @def.module
(impl_item type: (reference_type type: (_) @name)) @scope
(impl_item type: (_) @name) @scope
(call_expression function: [(identifier) @name
  (generic_function function: (identifier) @name)]) @call
(call_expression function: [
  (field_expression value: (_) @receiver field: (field_identifier) @name)
  (generic_function function: (field_expression value: (_) @receiver
    field: (field_identifier) @name))]) @call
(call_expression function: [
  (scoped_identifier path: (_) @receiver name: (identifier) @name)
  (generic_function function: (scoped_identifier path: (_) @receiver
    name: (identifier) @name))]) @call
(use_declaration) @import
(mod_item !body) @import
(macro_invocation (token_tree) @macro_args)
""",
    "java": """
(class_declaration name: (identifier) @name) @def.class
(record_declaration name: (identifier) @name) @def.class
(interface_declaration name: (identifier) @name) @def.interface
(annotation_type_declaration name: (identifier) @name) @def.interface
(enum_declaration name: (identifier) @name) @def.enum
(method_declaration name: (identifier) @name) @def.method
(constructor_declaration name: (identifier) @name) @def.constructor
(method_invocation object: (_) @receiver name: (identifier) @name) @call
(method_invocation !object name: (identifier) @name) @call
(object_creation_expression type: (_) @name) @call
(explicit_constructor_invocation object: (_) @receiver constructor: _ @name) @call
(explicit_constructor_invocation !object constructor: _ @name) @call
(import_declaration) @import
""",
    "c": """
(function_definition declarator: (function_declarator
  declarator: (identifier) @name)) @def.function
(function_definition declarator: (pointer_declarator declarator: (function_declarator
  declarator: (identifier) @name))) @def.function
(struct_specifier name: (type_identifier) @name body: (_)) @def.class
(union_specifier name: (type_identifier) @name body: (_)) @def.class
(enum_specifier name: (type_identifier) @name body: (_)) @def.enum
(type_definition declarator: (type_identifier) @name) @def.type
(call_expression function: (identifier) @name) @call
(call_expression function: (field_expression argument: (_) @receiver
  field: (field_identifier) @name)) @call
(preproc_include) @import
""",
    "cpp": """
(function_definition declarator: (function_declarator
  declarator: [(identifier) (field_identifier) (destructor_name) (operator_name)] @name))
  @def.function
(function_definition declarator: (pointer_declarator declarator: (function_declarator
  declarator: [(identifier) (field_identifier)] @name))) @def.function
(function_definition declarator: (reference_declarator (function_declarator
  declarator: [(identifier) (field_identifier)] @name))) @def.function
(function_definition declarator: (function_declarator
  declarator: (qualified_identifier) @qname)) @def.function
(class_specifier name: (type_identifier) @name body: (_)) @def.class
(struct_specifier name: (type_identifier) @name body: (_)) @def.class
(union_specifier name: (type_identifier) @name body: (_)) @def.class
(enum_specifier name: (type_identifier) @name body: (_)) @def.enum
(namespace_definition name: (_) @name) @def.namespace
(type_definition declarator: (type_identifier) @name) @def.type
(alias_declaration name: (type_identifier) @name) @def.type
(call_expression function: (identifier) @name) @call
(call_expression function: (field_expression argument: (_) @receiver
  field: (field_identifier) @name)) @call
(call_expression function: (qualified_identifier scope: (_) @receiver
  name: (identifier) @name)) @call
(new_expression type: (type_identifier) @name) @call
(preproc_include) @import
""",
    "csharp": """
(class_declaration name: (identifier) @name) @def.class
(struct_declaration name: (identifier) @name) @def.class
(record_declaration name: (identifier) @name) @def.class
(interface_declaration name: (identifier) @name) @def.interface
(enum_declaration name: (identifier) @name) @def.enum
(namespace_declaration name: (_) @name) @def.namespace
(method_declaration name: (identifier) @name) @def.method
(constructor_declaration name: (identifier) @name) @def.constructor
(invocation_expression function: (identifier) @name) @call
(invocation_expression function: (member_access_expression expression: (_) @receiver
  name: (identifier) @name)) @call
(object_creation_expression type: (_) @name) @call
(constructor_initializer ["base" "this"] @name) @call
(primary_constructor_base_type . (_) @name) @call
(base_list (_) @name . (argument_list)) @call
(using_directive) @import
""",
    "ruby": """
(class name: (_) @name) @def.class
(module name: (_) @name) @def.module
(method name: (_) @name) @def.function
(singleton_method name: (_) @name) @def.function
(call receiver: (_) @receiver method: (identifier) @name) @call
(call !receiver method: (identifier) @name) @call
""",
    "php": """
(function_definition name: (name) @name) @def.function
(class_declaration name: (name) @name) @def.class
(interface_declaration name: (name) @name) @def.interface
(trait_declaration name: (name) @name) @def.trait
(enum_declaration name: (name) @name) @def.enum
(method_declaration name: (name) @name) @def.method
(function_call_expression function: (_) @name) @call
(member_call_expression object: (_) @receiver name: (name) @name) @call
(scoped_call_expression scope: (_) @receiver name: (name) @name) @call
(object_creation_expression [(name) (qualified_name)] @name) @call
(namespace_use_clause) @import
(require_once_expression) @import
(require_expression) @import
(include_expression) @import
(include_once_expression) @import
""",
    "kotlin": """
(class_declaration (type_identifier) @name) @def.class
(object_declaration (type_identifier) @name) @def.class
(function_declaration (simple_identifier) @name) @def.function
(secondary_constructor "constructor" @name) @def.constructor
(call_expression . (simple_identifier) @name) @call
(call_expression . (navigation_expression (_) @receiver
  (navigation_suffix (simple_identifier) @name))) @call
(constructor_delegation_call ["this" "super"] @name) @call
(delegation_specifier (constructor_invocation (user_type) @name)) @call
(import_header) @import
""",
    "shell": """
(function_definition name: (word) @name) @def.function
(command name: (command_name (word) @name)) @call
""",
    "markdown": """
(atx_heading heading_content: (_) @name) @def.heading
(setext_heading heading_content: (_) @name) @def.heading
""",
}

#: Language names of the project (``chunking.detect_language``) -> grammar names.
_GRAMMAR = {"shell": "bash"}

_JS_LIKE = frozenset({"javascript", "typescript", "tsx"})
# TypeScript declarations without a body: an overload signature is not the
# symbol when the implementation follows it (the graph keeps one symbol per
# qualified name); alone (an interface, a ``.d.ts`` file) the first one is.
_TS_SIGNATURES = frozenset({"method_signature", "function_signature"})
_CLASS_LIKE = frozenset({"class", "interface", "enum", "trait", "scope"})
_CALLABLE = frozenset({"function", "method", "constructor"})
_RUBY_NOT_CALLS = frozenset(
    {
        "require",
        "require_relative",
        "load",
        "include",
        "extend",
        "prepend",
        "attr_reader",
        "attr_writer",
        "attr_accessor",
        "private",
        "public",
        "protected",
        "module_function",
    }
)
_WRAPPERS = frozenset(
    {
        "decorated_definition",
        "export_statement",
        "template_declaration",
        "ambient_declaration",
        "lexical_declaration",
        "variable_declaration",
        "variable_declarator",
        "type_declaration",
        "expression_statement",  # JavaScript's ``res.send = function ...``
    }
)
# Code points from plane 4 up (unassigned planes, tags, private use) crash
# grammars' external scanners: the markdown grammar of tree-sitter-language-pack
# 0.13 reads out of bounds on "1\U000e0001" and the process dies with SIGSEGV
# (found by test_any_text_in_any_language_never_raises; planes 0-3 passed
# 3,000 random code points in three contexts in every grammar).  They are
# replaced before parsing by a plane-1 symbol of the same UTF-8 length, so
# byte offsets, lines and names elsewhere stay exact.
_HIGH_PLANES = re.compile("[\U00040000-\U0010ffff]")
_HIGH_PLANE_STAND_IN = "\U0001f532"
# A Markdown line's container prefix: indentation, ``>`` and list markers.
_MD_CONTAINER_PREFIX = re.compile(
    r"^(?:[ \t>]|[-*+](?=[ \t\r\n]|$)|\d{1,9}[.)](?=[ \t\r\n]|$))+", re.M
)
_GENERIC_ARGS = re.compile(r"<.*$", re.S)
_WS = re.compile(r"\s+")
_COMMENT_MARKERS = re.compile(r"^\s*(?:/\*\*?|\*/|///?!?|//|#+|\*|--)\s?")
_COMMENT_END = re.compile(r"\s*\*+/\s*$")
_XML_TAG = re.compile(r"</?\w+[^>]*>")
_INTERFACE_NAME = re.compile(r"I[A-Z]")
_JS_NAME = re.compile(r"[A-Za-z_$][\w$]*")


def _text(node: Node | None) -> str:
    if node is None or node.text is None:
        return ""
    return node.text.decode("utf-8", "replace")


def _line(node: Node) -> int:
    return node.start_point[0] + 1


def _bare_type(text: str) -> str:
    """``Comparable<Circle>`` -> ``Comparable``; ``pkg.Base`` stays."""
    return _WS.sub("", _GENERIC_ARGS.sub("", text)).lstrip("\\")


def _unquote(text: str) -> str:
    return text.strip().strip("\"'`<>")


# ---------------------------------------------------------------- imports per language


def _python_imports(node: Node) -> list[CodeImport]:
    line = _line(node)
    if node.type == "import_statement":
        out = []
        for child in node.children_by_field_name("name"):
            target = child.child_by_field_name("name") if child.type == "aliased_import" else child
            out.append(CodeImport(_text(target), line))
        return out
    if node.type == "future_import_statement":
        return [CodeImport("__future__", line)]
    module = node.child_by_field_name("module_name")
    names = []
    for child in node.children_by_field_name("name"):
        target = child.child_by_field_name("name") if child.type == "aliased_import" else child
        names.append(_text(target))
    if any(c.type == "wildcard_import" for c in node.children):
        names.append("*")
    return [CodeImport(_text(module), line, tuple(names))]


def _js_imports(node: Node) -> list[CodeImport]:
    if node.type == "call_expression":
        fn = node.child_by_field_name("function")
        if fn is None or _text(fn) not in ("require", "import"):
            return []
        args = node.child_by_field_name("arguments")
        first = args.named_children[0] if args is not None and args.named_children else None
        return [CodeImport(_unquote(_text(first)), _line(node))] if first is not None else []
    source = node.child_by_field_name("source")
    if source is None:
        return []
    names: list[str] = []
    for spec in _descendants(node, "import_specifier", "export_specifier"):
        name = spec.child_by_field_name("name")
        if name is not None:
            names.append(_text(name))
    return [CodeImport(_unquote(_text(source)), _line(node), tuple(names))]


def _go_imports(node: Node) -> list[CodeImport]:
    path = node.child_by_field_name("path")
    return [CodeImport(_unquote(_text(path)), _line(node))] if path is not None else []


def _rust_imports(node: Node) -> list[CodeImport]:
    if node.type == "mod_item":
        name = node.child_by_field_name("name")
        return [CodeImport("self::" + _text(name), _line(node))] if name is not None else []
    argument = node.child_by_field_name("argument")
    return [CodeImport(_WS.sub("", _text(argument)), _line(node))] if argument else []


def _java_imports(node: Node) -> list[CodeImport]:
    names = [c for c in node.named_children if c.type in ("scoped_identifier", "identifier")]
    if not names:
        return []
    target = _text(names[0])
    if any(c.type == "asterisk" for c in node.children):
        target += ".*"
    return [CodeImport(target, _line(node))]


def _c_imports(node: Node) -> list[CodeImport]:
    path = node.child_by_field_name("path")
    return [CodeImport(_unquote(_text(path)), _line(node))] if path is not None else []


def _csharp_imports(node: Node) -> list[CodeImport]:
    names = [c for c in node.named_children if c.type in ("qualified_name", "identifier")]
    return [CodeImport(_text(names[-1]), _line(node))] if names else []


def _php_imports(node: Node) -> list[CodeImport]:
    if node.type == "namespace_use_clause":
        names = [c for c in node.named_children if c.type in ("qualified_name", "name")]
        return [CodeImport(_text(names[0]).lstrip("\\"), _line(node))] if names else []
    strings = list(_descendants(node, "string", "encapsed_string"))
    return [CodeImport(_unquote(_text(strings[0])), _line(node))] if strings else []


def _kotlin_imports(node: Node) -> list[CodeImport]:
    names = [c for c in node.named_children if c.type == "identifier"]
    if not names:
        return []
    target = _text(names[0])
    if any(c.type == "wildcard_import" for c in node.named_children):
        target += ".*"
    return [CodeImport(target, _line(node))]


_IMPORTS: dict[str, Callable[[Node], list[CodeImport]]] = {
    "python": _python_imports,
    "javascript": _js_imports,
    "typescript": _js_imports,
    "tsx": _js_imports,
    "go": _go_imports,
    "rust": _rust_imports,
    "java": _java_imports,
    "c": _c_imports,
    "cpp": _c_imports,
    "csharp": _csharp_imports,
    "php": _php_imports,
    "kotlin": _kotlin_imports,
}


def _descendants(node: Node, *types: str) -> Iterable[Node]:
    stack = list(reversed(node.named_children))
    while stack:
        child = stack.pop()
        if child.type in types:
            yield child
        else:
            stack.extend(reversed(child.named_children))


# ---------------------------------------------------------------- inheritance per language


def _python_bases(node: Node) -> list[tuple[str, str]]:
    supers = node.child_by_field_name("superclasses")
    if supers is None:
        return []
    return [
        (_text(c), "inherits")
        for c in supers.named_children
        if c.type in ("identifier", "attribute")
    ]


def _js_bases(node: Node) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for heritage in node.named_children:
        if heritage.type == "class_heritage":
            for clause in heritage.named_children:
                if clause.type == "extends_clause":
                    out += [(_bare_type(_text(v)), "inherits") for v in _values(clause)]
                elif clause.type == "implements_clause":
                    out += [(_bare_type(_text(t)), "implements") for t in clause.named_children]
                else:  # JavaScript: `extends <expression>` without a clause node
                    out.append((_bare_type(_text(clause)), "inherits"))
        elif heritage.type == "extends_type_clause":  # interface A extends B, C
            out += [(_bare_type(_text(t)), "inherits") for t in heritage.named_children]
    return out


def _values(clause: Node) -> list[Node]:
    values = clause.children_by_field_name("value")
    return values or [c for c in clause.named_children if c.type != "type_arguments"]


def _java_bases(node: Node) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    superclass = node.child_by_field_name("superclass")
    if superclass is not None:
        out += [(_bare_type(_text(t)), "inherits") for t in superclass.named_children]
    for child in node.named_children:
        if child.type in ("super_interfaces", "extends_interfaces"):
            kind = "implements" if child.type == "super_interfaces" else "inherits"
            for type_list in child.named_children:
                out += [(_bare_type(_text(t)), kind) for t in type_list.named_children]
    return out


# Predeclared Go types: in an interface they are a constraint's type set
# (``interface { int }``), not an embedded interface (``error`` is one).
_GO_PREDECLARED = frozenset(
    [
        "any",
        "bool",
        "byte",
        "comparable",
        "complex64",
        "complex128",
        "float32",
        "float64",
        "int",
        "int8",
        "int16",
        "int32",
        "int64",
        "rune",
        "string",
        "uint",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "uintptr",
    ]
)
_GO_TYPE_NAMES = frozenset({"type_identifier", "qualified_type", "generic_type"})


def _go_bases(node: Node) -> list[tuple[str, str]]:
    """An interface's embedded interfaces (``Reader`` in ``ReadWriter``; a
    union or ``~T`` is a type set, not one) and a struct's embedded types
    (``*Base``, ``sync.Mutex``): their methods are the type's own, so they
    are ``inherits``."""
    body = node.child_by_field_name("type")
    found: list[Node] = []
    if body is not None and body.type == "interface_type":
        for elem in body.named_children:
            if elem.type == "type_elem" and len(elem.named_children) == 1:
                found.append(elem.named_children[0])
    elif body is not None and body.type == "struct_type":
        fields = next((c for c in body.named_children if c.type == "field_declaration_list"), None)
        for field in fields.named_children if fields is not None else ():
            if field.type == "field_declaration" and field.child_by_field_name("name") is None:
                embedded = field.child_by_field_name("type")
                if embedded is not None:
                    found.append(embedded)
    out: list[tuple[str, str]] = []
    for t in found:
        if t.type == "generic_type":
            t = t.child_by_field_name("type") or t
        name = _text(t)
        if t.type in _GO_TYPE_NAMES and name not in _GO_PREDECLARED:
            out.append((name, "inherits"))
    return out


def _cpp_bases(node: Node) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for clause in node.named_children:
        if clause.type == "base_class_clause":
            out += [
                (_bare_type(_text(t)).replace("::", "."), "inherits")
                for t in clause.named_children
                if t.type not in ("access_specifier", "virtual")
            ]
    return out


def _csharp_bases(node: Node) -> list[tuple[str, str]]:
    """C# does not mark which base is a class; by convention an interface is
    named ``IFoo``, and only the first base of a class can be a class."""
    out: list[tuple[str, str]] = []
    # A record class may extend a class too (a ``record struct`` may not); a
    # base that a primary constructor calls (``class B(int x) : A(x)``,
    # ``record R(int X) : Base(X)``) is named without its arguments.
    may_extend = node.type == "class_declaration" or (
        node.type == "record_declaration" and not any(c.type == "struct" for c in node.children)
    )
    for clause in node.named_children:
        if clause.type == "base_list":
            types = [t for t in clause.named_children if t.type != "argument_list"]
            for i, t in enumerate(types):
                if t.type == "primary_constructor_base_type":
                    t = t.named_children[0] if t.named_children else t
                name = _bare_type(_text(t))
                is_class = i == 0 and may_extend and not _INTERFACE_NAME.match(name)
                out.append((name, "inherits" if is_class else "implements"))
    return out


def _ruby_bases(node: Node) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    superclass = node.child_by_field_name("superclass")
    if superclass is not None:
        out += [(_text(t), "inherits") for t in superclass.named_children]
    body = node.child_by_field_name("body")
    for call in body.named_children if body is not None else ():
        method = call.child_by_field_name("method") if call.type == "call" else None
        if method is not None and _text(method) in ("include", "prepend", "extend"):
            args = call.child_by_field_name("arguments")
            for arg in args.named_children if args is not None else ():
                out.append((_text(arg), "implements"))
    return out


def _php_bases(node: Node) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for clause in node.named_children:
        if clause.type in ("base_clause", "class_interface_clause"):
            kind = "inherits" if clause.type == "base_clause" else "implements"
            out += [(_text(t).lstrip("\\"), kind) for t in clause.named_children]
    return out


def _kotlin_bases(node: Node) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for spec in node.named_children:
        if spec.type != "delegation_specifier":
            continue
        for child in spec.named_children:
            if child.type == "constructor_invocation":
                types = [c for c in child.named_children if c.type == "user_type"]
                out += [(_bare_type(_text(t)), "inherits") for t in types]
            elif child.type == "user_type":
                out.append((_bare_type(_text(child)), "implements"))
    return out


_BASES: dict[str, Callable[[Node], list[tuple[str, str]]]] = {
    "python": _python_bases,
    "javascript": _js_bases,
    "typescript": _js_bases,
    "tsx": _js_bases,
    "go": _go_bases,
    "java": _java_bases,
    "cpp": _cpp_bases,
    "csharp": _csharp_bases,
    "ruby": _ruby_bases,
    "php": _php_bases,
    "kotlin": _kotlin_bases,
}


# ---------------------------------------------------------------- signatures and docs


def _signature(node: Node, source: bytes, start: int | None = None) -> str:
    """The definition from ``start`` (default: its first byte) up to its body."""
    begin = node.start_byte if start is None else start
    body = node.child_by_field_name("body")
    if body is None:
        body = next(
            (c for c in node.named_children if c.type in ("class_body", "function_body")), None
        )
    if body is None and node.type == "secondary_constructor":  # Kotlin: its ``{`` opens it
        body = next((c for c in node.children if c.type == "{"), None)
    end = body.start_byte if body is not None and body.start_byte > begin else None
    # A comment between the header and the body (Python's comments after the
    # colon, a C-like one before the brace) is not part of the signature.
    comment = next(
        (
            c
            for c in node.children
            if "comment" in c.type and c.start_byte > begin and (end is None or c.start_byte < end)
        ),
        None,
    )
    if comment is not None:
        end = comment.start_byte
    if end is None:
        newline = source.find(b"\n", begin, node.end_byte)
        end = newline if newline != -1 else node.end_byte
    text = source[begin : min(end, begin + 4 * _MAX_SIGNATURE)]
    sig = _WS.sub(" ", text.decode("utf-8", "replace")).strip().rstrip("{:=").rstrip()
    return sig[:_MAX_SIGNATURE]


def _python_docstring(node: Node) -> str:
    body = node.child_by_field_name("body")
    first = body.named_children[0] if body is not None and body.named_children else None
    if first is not None and first.type == "expression_statement" and first.named_children:
        first = first.named_children[0]
    string = first
    if string is None or string.type != "string":
        return ""
    content = [c for c in string.named_children if c.type == "string_content"]
    return _clean_doc(_text(content[0]) if content else "")


def _leading_comment(node: Node) -> str:
    anchor = node
    while anchor.parent is not None and anchor.parent.type in _WRAPPERS:
        anchor = anchor.parent
    lines: list[str] = []
    expected_end = anchor.start_point[0]
    sibling = anchor.prev_named_sibling
    while sibling is not None and len(lines) < _MAX_DOC_LINES:
        if sibling.type in ("attribute_item", "decorator", "annotation"):
            expected_end = sibling.start_point[0]
        elif "comment" in sibling.type and sibling.end_point[0] >= expected_end - 1:
            lines[:0] = _text(sibling).splitlines()
            expected_end = sibling.start_point[0]
        else:
            break
        sibling = sibling.prev_named_sibling
    return _clean_doc(
        "\n".join(_COMMENT_END.sub("", _COMMENT_MARKERS.sub("", line)) for line in lines)
    )


def _clean_doc(text: str) -> str:
    text = _XML_TAG.sub("", text)
    lines = [line.strip() for line in text.strip().splitlines()]
    return "\n".join(line for line in lines if line and line != "*/")[:_MAX_DOC]


# ---------------------------------------------------------------- the parser


@dataclass(slots=True)
class _Def:
    node: Node
    name: str
    kind: str
    prefix: str  # qualifier from the syntax itself (Go receiver, C++ Circle::)
    order: int  # pattern index: the first pattern wins for one node


class TreeSitterCodeParser:
    """Code facts for the languages of :data:`_QUERIES` (15 grammars).

    Safe to share between threads: parsers are per thread, compiled queries
    are shared (tree-sitter queries are immutable; cursors are per call).
    """

    def __init__(self) -> None:
        self._queries: dict[str, tree_sitter.Query] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    def languages(self) -> frozenset[str]:
        """The language names :meth:`parse` reads."""
        return frozenset(_QUERIES)

    def parse(self, text: str, language: str) -> CodeFacts | None:
        """The facts of ``text``; ``None`` for an unknown language or a file
        over :data:`MAX_PARSE_BYTES`.  Never raises on any text."""
        if language not in _QUERIES:
            return None
        if not text.isascii():
            text = _HIGH_PLANES.sub(_HIGH_PLANE_STAND_IN, text)
        source = text.encode("utf-8", "surrogatepass")
        if len(source) > MAX_PARSE_BYTES:
            return None
        hostile = _hostile_nesting(text, language)
        if hostile is not None:
            reason, depth, limit = hostile
            _log.info(
                "tree_sitter_code.parse_skipped",
                language=language,
                reason=reason,
                depth=depth,
                limit=limit,
                bytes=len(source),
            )
            return None
        try:
            return self._parse(source, language)
        except (ValueError, RecursionError, MemoryError, UnicodeError):
            return CodeFacts(language=language, syntax_errors=1)

    # ------------------------------------------------------------ internals

    def _parser(self, language: str) -> tree_sitter.Parser:
        parsers: dict[str, tree_sitter.Parser] | None = getattr(self._local, "parsers", None)
        if parsers is None:
            parsers = self._local.parsers = {}
        parser = parsers.get(language)
        if parser is None:
            parser = parsers[language] = tree_sitter_language_pack.get_parser(
                _GRAMMAR.get(language, language)  # type: ignore[arg-type]
            )
        return parser

    def _query(self, language: str) -> tree_sitter.Query:
        with self._lock:
            query = self._queries.get(language)
            if query is None:
                grammar = tree_sitter_language_pack.get_language(
                    _GRAMMAR.get(language, language)  # type: ignore[arg-type]
                )
                query = self._queries[language] = tree_sitter.Query(grammar, _QUERIES[language])
            return query

    def _parse(self, source: bytes, language: str) -> CodeFacts:
        tree = self._parser(language).parse(source)
        root = tree.root_node
        defs: dict[tuple[int, int], _Def] = {}
        calls: list[_RawCall] = []
        imports: list[CodeImport] = []
        read_imports = _IMPORTS.get(language)
        cursor = tree_sitter.QueryCursor(self._query(language))
        cursor.set_max_start_depth(MAX_QUERY_DEPTH)
        macro_args: list[Node] = []
        for order, caps in cursor.matches(root):
            if "macro_args" in caps:
                macro_args.append(caps["macro_args"][0])
                continue
            self._collect(language, order, caps, defs, calls, imports, read_imports)
        if macro_args:
            calls += self._macro_calls(source, macro_args, _MAX_CALLS - len(calls))
        if language == "go" and _go_generated(source, root):
            defs = {k: d for k, d in defs.items() if d.kind not in _GO_VALUES}
        symbols, spans = _qualify(sorted(defs.values(), key=_def_order), source, language)
        bases = _bases(language, spans)
        return CodeFacts(
            language=language,
            symbols=tuple(symbols),
            imports=tuple(imports),
            calls=tuple(_calls(calls, spans, language)),
            bases=tuple(bases),
            syntax_errors=_error_count(root),
        )

    def _macro_calls(self, source: bytes, args: list[Node], room: int) -> list[_RawCall]:
        """The calls in Rust macro arguments (``assert_eq!(v.len(), 3)``,
        ``format!("{}", f(x))``), which the grammar leaves as token trees.
        Arguments in ``(...)`` or ``[...]`` are read as code: a text the
        size of the file, blank (newlines kept) but for each ``!(args)``
        written as ``;X(args)``, is parsed, so the calls found keep their
        offsets and lines; a macro in those arguments takes another round."""
        out: list[_RawCall] = []
        for _ in range(_MAX_MACRO_ROUNDS):
            text = bytearray(_NOT_NEWLINE.sub(b" ", source))
            stand_ins: set[int] = set()
            for tree_node in args:
                start, end = tree_node.start_byte, tree_node.end_byte
                opening, closing = source[start : start + 1], source[end - 1 : end]
                if (
                    start < 2
                    or source[start - 1 : start] != b"!"
                    or opening + closing
                    not in (
                        b"()",
                        b"[]",
                    )
                ):
                    continue
                text[start:end] = source[start:end]
                text[start - 2 : start] = b";X"
                text[start : start + 1], text[end - 1 : end] = b"(", b")"
                stand_ins.add(start - 1)
            if not stand_ins:
                break
            source = bytes(text)
            cursor = tree_sitter.QueryCursor(self._query("rust"))
            cursor.set_max_start_depth(MAX_QUERY_DEPTH)
            args = []
            for _order, caps in cursor.matches(self._parser("rust").parse(source).root_node):
                if "macro_args" in caps:
                    args.append(caps["macro_args"][0])
                elif "call" in caps and "name" in caps and len(out) < room:
                    name = caps["name"][0]
                    if name.start_byte not in stand_ins:
                        receiver = caps.get("receiver")
                        out.append(
                            (
                                caps["call"][0],
                                _text(name),
                                _text(receiver[0]) if receiver else None,
                                _line(name),
                            )
                        )
        return out

    @staticmethod
    def _collect(
        language: str,
        order: int,
        caps: dict[str, list[Node]],
        defs: dict[tuple[int, int], _Def],
        calls: list[_RawCall],
        imports: list[CodeImport],
        read_imports: Callable[[Node], list[CodeImport]] | None,
    ) -> None:
        if "import" in caps:
            if read_imports is not None:
                imports.extend(read_imports(caps["import"][0]))
            return
        if "call" in caps:
            if language == "shell" and "name" in caps and _text(caps["name"][0]) in ("source", "."):
                args = caps["call"][0].children_by_field_name("argument")
                if args:
                    imports.append(CodeImport(_unquote(_text(args[0])), _line(caps["call"][0])))
                return
            if language in _JS_LIKE and "name" in caps and _text(caps["name"][0]) == "require":
                return
            if (
                language == "ruby"
                and "receiver" not in caps
                and _text(caps.get("name", [None])[0]) in ("require", "require_relative", "load")
            ):
                arg_list = caps["call"][0].child_by_field_name("arguments")
                named = arg_list.named_children if arg_list is not None else []
                first = named[0] if named else None
                if first is not None and first.type == "string":
                    imports.append(CodeImport(_unquote(_text(first)), _line(caps["call"][0])))
                return
            if len(calls) < _MAX_CALLS and "name" in caps:
                receiver = caps.get("receiver")
                name = _text(caps["name"][0])
                constructor_callee = _CONSTRUCTOR_CALLS.get(caps["call"][0].type)
                if constructor_callee is not None:
                    name = constructor_callee(caps["call"][0], name)
                calls.append(
                    (
                        caps["call"][0],
                        name,
                        _text(receiver[0]) if receiver else None,
                        _line(caps["name"][0]),
                    )
                )
            return
        for cap, nodes in caps.items():
            if not (cap.startswith("def.") or cap == "scope"):
                continue
            node = nodes[0]
            kind = "scope" if cap == "scope" else cap[4:]
            prefix = ""
            if "qname" in caps:
                parts = _text(caps["qname"][0]).replace("::", ".").split(".")
                name, prefix = parts[-1], ".".join(parts[:-1])
            elif "name" in caps:
                name = _text(caps["name"][0])
                if "receiver_type" in caps:
                    prefix = _text(caps["receiver_type"][0])
                if language in _JS_LIKE and "value" in caps:
                    owner = _js_owner(prefix, name, caps["value"][0])
                    if owner is None:
                        return
                    prefix, name, kind = owner
            else:
                return
            if kind == "scope":
                name = _bare_type(name).replace("::", ".")
            if language == "markdown":
                name = _WS.sub(" ", name).strip()
                section = node.parent
                if (
                    section is not None
                    and section.type == "section"
                    and section.named_children[0] == node
                ):
                    node = section
            elif language == "kotlin" and node.type == "secondary_constructor":
                # Named after its class, as Java's and C#'s constructors are.
                klass = _enclosing(node, _KOTLIN_TYPES, 3)
                named = klass.named_children if klass is not None else []
                name = _text(next((c for c in named if c.type == "type_identifier"), None)) or name
            elif language == "kotlin" and kind == "class":
                keywords = {c.type for c in node.children if not c.is_named}
                modifiers = _text(
                    next((c for c in node.named_children if c.type == "modifiers"), None)
                )
                if "interface" in keywords:
                    kind = "interface"
                elif "enum" in modifiers.split():
                    kind = "enum"
            elif language == "go" and kind in _GO_VALUES:
                if name == "_":
                    return
                node = _go_value_node(node, caps["name"][0])
            name = name.strip()
            key = (node.start_byte, node.end_byte)
            if name and (key not in defs or defs[key].order > order):
                defs[key] = _Def(node, name, kind, prefix, order)


_GO_VALUES = frozenset({"constant", "variable"})


# Go's mark of a generated file (``go help generate``), above the package clause.
_GO_GENERATED = re.compile(rb"^// Code generated .* DO NOT EDIT\.$", re.M)


def _go_generated(source: bytes, root: Node) -> bool:
    """Whether a Go file says it is generated.  Its package constants and
    variables are no symbols: they are tables (syscall's ``zerrors_*.go``:
    75% of the standard library's 183,000), which would triple the graph of
    such a package (syscall: 4.5x) for names text search finds as well."""
    clause = next((c for c in root.named_children if c.type == "package_clause"), None)
    end = clause.start_byte if clause is not None else min(len(source), 4096)
    return _GO_GENERATED.search(source, 0, end) is not None


def _go_value_node(spec: Node, name: Node) -> Node:
    """The node of a Go package-level constant or variable: its declaration
    when that is one spec on one line (``const A = 1``: the keyword in the
    signature, the comment above as its doc), else its spec (one of a
    group), or its name when the spec declares several (``var a, b int``:
    each name a symbol, so neither nests in the other)."""
    if len(spec.children_by_field_name("name")) > 1:
        return name
    decl = spec.parent
    if (
        decl is not None
        and decl.type in ("const_declaration", "var_declaration")
        and decl.start_point[0] == spec.start_point[0]
        and sum(1 for c in decl.named_children if c.type == spec.type) == 1
    ):
        return decl
    return spec


_JAVA_TYPES = frozenset({"class_declaration", "record_declaration", "enum_declaration"})
_KOTLIN_TYPES = frozenset({"class_declaration"})


def _enclosing(node: Node, types: frozenset[str], steps: int) -> Node | None:
    """The nearest ancestor of ``node`` of one of ``types``, at most
    ``steps`` nodes up (a constructor call's class)."""
    parent = node.parent
    for _ in range(steps):
        if parent is None:
            return None
        if parent.type in types:
            return parent
        parent = parent.parent
    return None


def _java_constructor_callee(call: Node, keyword: str) -> str:
    """The called name of Java's ``super(...)`` and ``this(...)`` (the
    constructor call that opens a constructor): the constructor they run,
    named by its class as ``new Foo(...)`` is, so ``callers Foo`` finds
    them with the ``new`` calls: ``super`` is the superclass (``Object``
    when the class extends none), ``this`` the class itself.  The class is
    at most five nodes up (body, constructor, class or enum body, class);
    ``keyword`` itself when it is not found (a syntax error)."""
    node = _enclosing(call, _JAVA_TYPES, 6)
    if node is None:
        return keyword
    if keyword == "this":
        return _text(node.child_by_field_name("name")) or keyword
    superclass = node.child_by_field_name("superclass")
    types = superclass.named_children if superclass is not None else []
    return _bare_type(_text(types[0])) if types else "Object"


_CSHARP_TYPES = frozenset({"class_declaration", "struct_declaration", "record_declaration"})


def _csharp_constructor_callee(call: Node, keyword: str) -> str:
    """The called name of C#'s constructor initializer (``: base(...)``,
    ``: this(...)``), by Java's rule: ``base`` is the base class (the base
    :func:`_csharp_bases` takes for a class, ``object`` when there is none:
    ``System.Object`` as C# writes it, ``new object()``'s callee), ``this``
    the class or struct itself.  The class is three nodes up (constructor,
    declaration list, class); ``keyword`` itself when it is not found."""
    node = _enclosing(call, _CSHARP_TYPES, 4)
    if node is None:
        return keyword
    if keyword == "this":
        return _text(node.child_by_field_name("name")) or keyword
    base = next((b for b, kind in _csharp_bases(node) if kind == "inherits"), "")
    return base or "object"


def _kotlin_constructor_callee(call: Node, keyword: str) -> str:
    """The called name of a Kotlin secondary constructor's delegation
    (``constructor(...) : super(...)``, ``: this(...)``), by Java's rule:
    ``this`` is the class itself, ``super`` its superclass, ``Any`` when it
    lists no supertype.  Which supertype is the class the grammar cannot
    tell (``super(...)`` is only allowed without a primary constructor, so
    none is written ``A(...)``): the first one listed, where Kotlin style
    puts the superclass.  The class is three nodes up (constructor, class
    body, class); ``keyword`` itself when it is not found."""
    node = _enclosing(call, _KOTLIN_TYPES, 4)
    if node is None:
        return keyword
    if keyword == "this":
        name = next((c for c in node.named_children if c.type == "type_identifier"), None)
        return _text(name) or keyword
    for spec in node.named_children:
        if spec.type != "delegation_specifier":
            continue
        for child in spec.named_children:
            if child.type == "constructor_invocation":
                child = next((c for c in child.named_children if c.type == "user_type"), child)
            if child.type == "user_type":
                return _bare_type(_text(child))
    return "Any"


#: The constructor calls that open a constructor, by node type -> their callee.
_CONSTRUCTOR_CALLS: dict[str, Callable[[Node, str], str]] = {
    "explicit_constructor_invocation": _java_constructor_callee,
    "constructor_initializer": _csharp_constructor_callee,
    "constructor_delegation_call": _kotlin_constructor_callee,
}


def _js_owner(target: str, name: str, value: Node) -> tuple[str, str, str] | None:
    """``(prefix, name, kind)`` of a function assigned to ``target.name``
    (CommonJS and prototype style): ``res.send = function`` is ``res.send``,
    ``Foo.prototype.bar = function`` the method ``Foo.bar``, ``exports.f``
    and ``module.exports.f`` plain ``f``, ``module.exports = function g``
    ``g`` (``None`` when that function has no name); ``this.f`` belongs to
    the enclosing definition."""
    parts = target.split(".")
    kind = "method" if "prototype" in parts else "function"
    parts = [p for p in parts if p != "prototype"]
    if parts[:1] == ["this"]:
        parts = parts[1:]
    if parts[:2] == ["module", "exports"]:
        parts = parts[2:]
    elif parts[:1] == ["exports"]:
        parts = parts[1:]
    elif parts == ["module"] and name == "exports":
        own = value.child_by_field_name("name")
        return ("", _text(own), kind) if own is not None else None
    if not all(_JS_NAME.fullmatch(p) for p in parts):
        parts = []  # a computed object (``a[i].f``): the name alone
    return ".".join(parts), name, kind


def _hostile_nesting(text: str, language: str) -> tuple[str, int, int] | None:
    """``(reason, depth, limit)`` when ``text`` nests deep enough to crash
    the grammar of ``language``, else ``None``.  Linear in the text."""
    if language == "markdown":
        deepest = 0
        for match in _MD_CONTAINER_PREFIX.finditer(text):
            # Each open container needs one '>' or marker on its line, or
            # (a list item carried on) at least two columns of indentation;
            # digits and the spaces after markers only add to the estimate.
            # A line with no marker opens no container (indentation alone,
            # e.g. a diagram in a fenced block, only carries open ones on).
            prefix = match.group()
            spaces = prefix.count(" ") + 4 * prefix.count("\t")
            markers = len(prefix) - prefix.count(" ") - prefix.count("\t")
            if not markers:
                continue
            deepest = max(deepest, markers + spaces // 2)
            if deepest > MAX_MARKDOWN_NESTING:
                return ("markdown container nesting", deepest, MAX_MARKDOWN_NESTING)
    elif language == "kotlin":
        # Fewer ``${`` in all than the bound cannot nest past it; more are
        # measured (a big file with many flat templates is ordinary).
        if text.count("${") > MAX_KOTLIN_TEMPLATES:
            nested = _kotlin_template_depth(text)
            if nested > MAX_KOTLIN_TEMPLATES:
                return ("kotlin string templates", nested, MAX_KOTLIN_TEMPLATES)
        if text.count("/*") > MAX_KOTLIN_COMMENT_NESTING:
            depth = deepest = 0
            for match in _BLOCK_COMMENT_MARK.finditer(text):
                depth = depth + 1 if match.group() == "/*" else max(depth - 1, 0)
                deepest = max(deepest, depth)
            if deepest > MAX_KOTLIN_COMMENT_NESTING:
                return ("kotlin nested block comments", deepest, MAX_KOTLIN_COMMENT_NESTING)
    return None


_KOTLIN_TOKEN = re.compile(r'\$\{|"""|"|\\.|[{}\n\']|//|/\*|\*/')
_KOTLIN_CHAR = re.compile(r"'(?:\\.|[^\\'\n])*'")


def _kotlin_template_depth(text: str) -> int:
    """How deep Kotlin string templates (``"${ ... }"``) nest: a lexer of
    strings, raw strings, templates, braces, comments and character
    literals, stepping from token to token.  Linear in the text."""
    stack = ["code"]  # frames: code, brace, template (both code), str, raw
    templates = deepest = comment = pos = 0
    while (match := _KOTLIN_TOKEN.search(text, pos)) is not None:
        token, top, pos = match.group(), stack[-1], match.end()
        if comment:  # Kotlin block comments nest
            comment += 1 if token == "/*" else -1 if token == "*/" else 0
        elif top in ("str", "raw"):
            if top == "raw" and token[0] == "\\":
                pos = match.start() + 1  # no escapes in a raw string
            elif token == "${":
                stack.append("template")
                templates += 1
                deepest = max(deepest, templates)
            elif (token == '"' and top == "str") or (token == '"""' and top == "raw"):
                stack.pop()
            elif token == "\n" and top == "str":
                stack.pop()  # a plain string ends with its line
        elif token == "/*":
            comment = 1
        elif token == "//":
            end = text.find("\n", pos)
            pos = len(text) if end < 0 else end
        elif token == "'":  # a character literal, in code only
            char = _KOTLIN_CHAR.match(text, match.start())
            if char is not None:
                pos = char.end()
        elif token in ('"', '"""'):
            stack.append("str" if token == '"' else "raw")
        elif token in ("{", "${"):
            stack.append("brace")
        elif token == "}" and len(stack) > 1:
            if top == "template":
                templates -= 1
            stack.pop()
    return deepest


def _def_order(d: _Def) -> tuple[int, int]:
    return (d.node.start_byte, -d.node.end_byte)


@dataclass(slots=True)
class _Span:
    start: int
    end: int
    qualified: str
    kind: str
    node: Node


def _qualify(
    defs: list[_Def], source: bytes, language: str
) -> tuple[list[CodeSymbol], list[_Span]]:
    """Qualified names by byte-range containment; methods are the callables
    directly inside a class-like definition."""
    stack: list[_Span] = []
    spans: list[_Span] = []
    symbols: list[CodeSymbol] = []
    stubs: set[int] = set()  # the symbols that are ``@overload`` stubs
    skip_until = -1  # end of the last definition left out with its insides
    for d in defs:
        if d.node.start_byte < skip_until:
            continue
        while stack and stack[-1].end <= d.node.start_byte:
            stack.pop()
        if len(stack) >= MAX_DEFINITION_DEPTH:
            skip_until = d.node.end_byte
            continue
        parent = stack[-1] if stack else None
        kind = d.kind
        if kind == "function" and parent is not None and parent.kind in _CLASS_LIKE:
            kind = "method"
        if language == "markdown":
            qualified = parent.qualified + " > " + d.name if parent is not None else d.name
        else:
            outer = parent.qualified if parent is not None else ""
            qualified = ".".join(part for part in (outer, d.prefix, d.name) if part)
        if len(qualified) > MAX_QUALIFIED_NAME:
            skip_until = d.node.end_byte
            continue
        span = _Span(d.node.start_byte, d.node.end_byte, qualified, kind, d.node)
        stack.append(span)
        spans.append(span)
        if kind == "scope":
            continue
        doc = _python_docstring(d.node) if language == "python" else ""
        if language != "markdown":
            doc = doc or _leading_comment(d.node)
        if (language == "python" and _is_overload(d.node)) or (
            language in _JS_LIKE and d.node.type in _TS_SIGNATURES
        ):
            stubs.add(len(symbols))
        start = _after_annotations(d.node, language)
        symbols.append(
            CodeSymbol(
                name=d.name,
                qualified_name=qualified,
                kind=kind,
                start_line=start.start_point[0] + 1,
                end_line=_end_line(d.node),
                signature=(
                    _signature(d.node, source, start.start_byte)
                    if language != "markdown"
                    else d.name
                ),
                doc=doc,
                annotated_line=_line(d.node) if start is not d.node else 0,
            )
        )
    return (_without_overload_stubs(symbols, stubs) if stubs else symbols), spans


#: Per language, the nodes before a declaration's first modifier or keyword
#: that are its annotations (or comments among them): Java's and Kotlin's
#: inside its ``modifiers``, C#'s attribute lists directly in it.
_ANNOTATIONS: dict[str, frozenset[str]] = {
    "java": frozenset({"annotation", "marker_annotation", "line_comment", "block_comment"}),
    "kotlin": frozenset({"annotation", "line_comment", "multiline_comment"}),
    "csharp": frozenset({"attribute_list", "comment"}),
}


def _after_annotations(node: Node, language: str) -> Node:
    """Where a Java, Kotlin or C# declaration starts once its annotations
    (``@Override``, ``[Obsolete]``, and comments among them) are left out:
    its first modifier or keyword after them, as a Python definition starts
    at ``def`` below its decorators; ``node`` when it has none."""
    skip = _ANNOTATIONS.get(language)
    first = node.children[0] if node.children else None
    if skip is None or first is None:
        return node
    if first.type == "modifiers":
        rest = (c for c in first.children if c.type not in skip)
        found = next(rest, None) or first.next_sibling
    elif first.type == "attribute_list":
        found = first
    else:
        return node
    while found is not None and found.type in skip:
        found = found.next_sibling
    return found if found is not None else node


def _without_overload_stubs(symbols: list[CodeSymbol], stubs: set[int]) -> list[CodeSymbol]:
    """``symbols`` less the ``@overload`` stubs (indexes ``stubs``; in
    TypeScript the overload signatures) of a name that also has an
    implementation: the symbol (its lines, signature and doc) is the
    function that runs.  A name with stubs alone (a
    ``.pyi`` file, a Protocol) keeps its first stub."""
    implemented = {s.qualified_name for i, s in enumerate(symbols) if i not in stubs}
    kept: list[CodeSymbol] = []
    first: set[str] = set()
    for i, sym in enumerate(symbols):
        if i in stubs:
            if sym.qualified_name in implemented or sym.qualified_name in first:
                continue
            first.add(sym.qualified_name)
        kept.append(sym)
    return kept


def _is_overload(node: Node) -> bool:
    """A Python definition decorated ``@overload`` (``typing.overload``)."""
    wrapper = node.parent
    if wrapper is None or wrapper.type != "decorated_definition":
        return False
    for child in wrapper.children:
        if child.type == "decorator":
            name = _text(child).lstrip("@").strip()
            if name == "overload" or name.endswith(".overload"):
                return True
    return False


def _end_line(node: Node) -> int:
    """The node's last line; a node ending at column 0 (its trailing newline
    included, as Markdown sections do) ends on the line before."""
    start, (row, column) = node.start_point[0], node.end_point
    return row if column == 0 and row > start else row + 1


def _calls(calls: list[_RawCall], spans: list[_Span], language: str) -> list[CodeCall]:
    """Each call with its innermost enclosing definition: one sweep over the
    calls and the (properly nested, start-sorted) spans, not a scan per call."""
    located = sorted(
        (
            (node.start_byte, node.end_byte, line, name, receiver)
            for node, name, receiver, line in calls
        ),
        key=lambda c: c[0],
    )
    out: list[CodeCall] = []
    stack: list[_Span] = []
    ptr = 0
    for start, end, line, name, receiver in located:
        while ptr < len(spans) and spans[ptr].start <= start:
            while stack and stack[-1].end <= spans[ptr].start:
                stack.pop()
            if spans[ptr].kind != "heading":
                stack.append(spans[ptr])
            ptr += 1
        while stack and stack[-1].end < end:
            stack.pop()
        callee = name.replace("::", ".").rsplit("\\", 1)[-1].rsplit(".", 1)[-1].strip()
        if not callee or (language == "ruby" and callee in _RUBY_NOT_CALLS and not receiver):
            continue
        if not callee.isidentifier():  # an identifier is bare already (~300k calls)
            callee = _bare_type(callee) or callee
        caller = stack[-1].qualified if stack else None
        out.append(CodeCall(callee=callee, line=line, caller=caller, receiver=receiver))
    out.sort(key=lambda c: c.line)
    return out


def _bases(language: str, spans: list[_Span]) -> list[CodeInheritance]:
    read = _BASES.get(language)
    out: list[CodeInheritance] = []
    for span in spans:
        node = span.node
        if span.kind == "scope":
            trait = node.child_by_field_name("trait") if language == "rust" else None
            if trait is not None:
                out.append(
                    CodeInheritance(
                        span.qualified, _bare_type(_text(trait)), "implements", _line(node)
                    )
                )
            continue
        if read is None or span.kind not in _CLASS_LIKE:
            continue
        for base, kind in read(node):
            if base:
                out.append(CodeInheritance(span.qualified, base, kind, _line(node)))
    return out


def _error_count(root: Node) -> int:
    if not root.has_error:
        return 0
    count = 0
    stack = [root]
    while stack and count < 1000:
        node = stack.pop()
        if node.is_error or node.is_missing:
            count += 1
        elif node.has_error:
            stack.extend(node.children)
    return count
