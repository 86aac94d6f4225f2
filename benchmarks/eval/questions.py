"""Corpora nobody here wrote, and questions whose answers are known by construction.

Corpora (both installed with the project, no network):

- ``stdlib``: a subset of the interpreter's standard library (Python).
- ``mypyc-rt``: the C runtime library that ships inside the ``mypy`` wheel
  (``mypyc/lib-rt``, C sources and headers).

Definitions come from :mod:`ast` (Python) and tree-sitter (C).  Question kinds,
each answered by one definition (file, the line of its name, its span):

- ``identifier``: the bare name of a function, class or method defined exactly
  once in the corpus.
- ``docstring``: the first sentence of its docstring (Python) or of the
  comment right above it (C), unique in the corpus.
- ``calls``: the three rarest names it calls, a combination no other
  definition calls all of.
- ``code-line``: a line of code pasted from the definition's body as it is,
  punctuation included (``return _default_decoder.decode(s)``), kept when it
  holds a call, is 20-100 characters long, is not a comment or a string, and
  occurs exactly once in the corpus; the answer's lines are that one line.
- ``paraphrase``: the docstring sentence rewritten word by word with the
  written scheme in :data:`REWRITES`, kept only when none of its content words
  (nor their crude stems) occurs in the definition's own text, its
  documentation (a C function's comment above it) or its path.

The docstring and code-line questions are the ones an agent pastes: text with
punctuation (``(``, ``,``, ``:``, ``->``, quotes) that a query parser may refuse.
"""

from __future__ import annotations

import ast
import random
import re
import shutil
import sysconfig
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

STDLIB_QUICK = ("json", "logging", "concurrent", "http", "csv.py", "textwrap.py", "shlex.py")
STDLIB_FULL = (
    *STDLIB_QUICK,
    "asyncio",
    "email",
    "importlib",
    "unittest",
    "xml",
    "urllib",
    "collections",
    "argparse.py",
    "pathlib.py",
    "subprocess.py",
    "tarfile.py",
    "zipfile.py",
)


@dataclass(frozen=True)
class Definition:
    corpus: str
    path: str
    name: str  # bare name
    qualname: str
    line: int  # the line that holds the name
    start: int
    end: int
    doc: str  # first sentence, or ""
    calls: frozenset[str]
    # The first line of its documentation: the comment right above a C
    # function (outside its span); the definition's own start otherwise.
    doc_start: int = 0


@dataclass(frozen=True)
class Question:
    kind: str
    corpus: str
    query: str
    path: str
    line: int
    start: int
    end: int
    name: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


# ---------------------------------------------------------------- corpora


def copy_corpora(dest: Path, *, full: bool) -> dict[str, Path]:
    """Copy the corpora under ``dest`` (one directory each); return name -> root."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    roots = {"stdlib": dest / "stdlib", "mypyc-rt": dest / "mypyc-rt"}
    for item in STDLIB_FULL if full else STDLIB_QUICK:
        src = stdlib / item
        if src.is_dir():
            for f in sorted(src.rglob("*.py")):
                rel = f.relative_to(stdlib)
                if "test" in rel.parts[1:-1] or "tests" in rel.parts:
                    continue
                _copy(f, roots["stdlib"] / rel)
        elif src.is_file():
            _copy(src, roots["stdlib"] / item)
    import mypyc  # the C runtime ships inside the mypy wheel

    lib_rt = Path(mypyc.__file__).parent / "lib-rt"
    for f in sorted(lib_rt.rglob("*")):
        rel = f.relative_to(lib_rt)
        if f.suffix not in (".c", ".h") or not f.is_file():
            continue
        if not full and len(rel.parts) > 1:
            continue  # quick: the top-level runtime files only
        _copy(f, roots["mypyc-rt"] / rel)
    return roots


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


# ---------------------------------------------------------------- definitions

_SENTENCE_END = re.compile(r"(?<=[.!?])\s|\n\s*\n")


def first_sentence(doc: str) -> str:
    doc = doc.strip()
    if not doc:
        return ""
    head = _SENTENCE_END.split(doc, maxsplit=1)[0]
    return " ".join(head.split())


def python_definitions(root: Path, corpus: str) -> list[Definition]:
    out: list[Definition] = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        _walk(tree, rel, corpus, "", out)
    return out


def _walk(node: ast.AST, rel: str, corpus: str, prefix: str, out: list[Definition]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            qual = f"{prefix}{child.name}"
            calls = set()
            for sub in ast.walk(child):
                if isinstance(sub, ast.Call):
                    fn = sub.func
                    if isinstance(fn, ast.Name):
                        calls.add(fn.id)
                    elif isinstance(fn, ast.Attribute):
                        calls.add(fn.attr)
            start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
            out.append(
                Definition(
                    corpus,
                    rel,
                    child.name,
                    qual,
                    child.lineno,
                    start,
                    child.end_lineno or child.lineno,
                    first_sentence(ast.get_docstring(child) or ""),
                    frozenset(calls),
                )
            )
            _walk(child, rel, corpus, qual + ".", out)
        else:
            _walk(child, rel, corpus, prefix, out)


def c_definitions(root: Path, corpus: str) -> list[Definition]:
    from tree_sitter_language_pack import get_parser

    parser = get_parser("c")
    out: list[Definition] = []
    for f in sorted([*root.rglob("*.c"), *root.rglob("*.h")]):
        rel = f.relative_to(root).as_posix()
        data = f.read_bytes()
        tree = parser.parse(data)
        prev = None
        for node in tree.root_node.children:
            if node.type == "function_definition":
                name_node = _c_name(node)
                if name_node is not None:
                    doc = ""
                    doc_start = node.start_point[0] + 1
                    if (
                        prev is not None
                        and prev.type == "comment"
                        and node.start_point[0] - prev.end_point[0] <= 1
                    ):
                        doc = first_sentence(_comment_text(prev.text.decode("utf-8", "replace")))
                        doc_start = prev.start_point[0] + 1
                    calls = {
                        c.child_by_field_name("function").text.decode()
                        for c in _descendants(node)
                        if c.type == "call_expression"
                        and c.child_by_field_name("function") is not None
                        and c.child_by_field_name("function").type == "identifier"
                    }
                    name = name_node.text.decode()
                    out.append(
                        Definition(
                            corpus,
                            rel,
                            name,
                            name,
                            name_node.start_point[0] + 1,
                            node.start_point[0] + 1,
                            node.end_point[0] + 1,
                            doc,
                            frozenset(calls),
                            doc_start,
                        )
                    )
            prev = node
    return out


def _c_name(node):
    decl = node.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    if decl is None:
        return None
    ident = decl.child_by_field_name("declarator")
    return ident if ident is not None and ident.type == "identifier" else None


def _descendants(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


def _comment_text(raw: str) -> str:
    lines = []
    for line in raw.splitlines():
        line = re.sub(r"^\s*(/\*+|\*+/|\*+|//+)", "", line)
        line = re.sub(r"\*+/\s*$", "", line)
        lines.append(line.strip())
    return "\n".join(lines)


# ---------------------------------------------------------------- paraphrases

_STOP_TEXT = """a an the of to in on for and or is are be by with as at from this that it its
if not no into than then when which whose who there their these those one all any
each do does so but via per"""
STOPWORDS = frozenset(_STOP_TEXT.split())

# The written rewriting scheme: each docstring word -> words meaning the same
# thing, chosen to avoid programming vocabulary a definition would contain.
REWRITES: dict[str, str] = {
    "return": "give back",
    "returns": "gives back",
    "returned": "given back",
    "get": "obtain",
    "gets": "obtains",
    "set": "assign",
    "sets": "assigns",
    "create": "produce",
    "creates": "produces",
    "make": "produce",
    "new": "fresh",
    "read": "ingest",
    "reads": "ingests",
    "write": "emit",
    "writes": "emits",
    "file": "document on disk",
    "files": "documents on disk",
    "list": "sequence",
    "string": "piece of text",
    "strings": "pieces of text",
    "str": "piece of text",
    "text": "prose",
    "name": "label",
    "names": "labels",
    "value": "quantity",
    "values": "quantities",
    "object": "entity",
    "objects": "entities",
    "instance": "specimen",
    "class": "category",
    "method": "routine",
    "function": "routine",
    "call": "invoke",
    "called": "invoked",
    "calls": "invokes",
    "check": "verify",
    "checks": "verifies",
    "test": "probe",
    "tests": "probes",
    "true": "affirmative",
    "false": "negative",
    "error": "fault",
    "errors": "faults",
    "exception": "fault",
    "raise": "signal",
    "raises": "signals",
    "add": "append",
    "adds": "appends",
    "remove": "discard",
    "removes": "discards",
    "delete": "erase",
    "start": "begin",
    "starts": "begins",
    "stop": "halt",
    "close": "shut",
    "closes": "shuts",
    "open": "unseal",
    "opens": "unseals",
    "send": "transmit",
    "sends": "transmits",
    "receive": "accept incoming",
    "data": "information",
    "message": "note",
    "messages": "notes",
    "header": "heading",
    "headers": "headings",
    "line": "row of characters",
    "lines": "rows of characters",
    "number": "count",
    "convert": "transform",
    "converts": "transforms",
    "parse": "analyse",
    "parses": "analyses",
    "given": "supplied",
    "specified": "stated",
    "argument": "parameter supplied",
    "arguments": "parameters supplied",
    "default": "fallback",
    "current": "present",
    "handle": "deal with",
    "handles": "deals with",
    "handler": "responder",
    "process": "treat",
    "initialize": "prepare",
    "initialise": "prepare",
    "format": "lay out",
    "formats": "lays out",
    "formatted": "laid out",
    "output": "result emitted",
    "input": "incoming material",
    "encode": "serialise",
    "encoded": "serialised",
    "decode": "deserialise",
    "decoded": "deserialised",
    "path": "location",
    "directory": "folder",
    "dict": "mapping",
    "dictionary": "mapping",
    "key": "lookup label",
    "keys": "lookup labels",
    "item": "element",
    "items": "elements",
    "empty": "vacant",
    "size": "magnitude",
    "length": "extent",
    "type": "kind",
    "buffer": "holding area",
    "wait": "pause",
    "waits": "pauses",
    "run": "execute",
    "runs": "executes",
    "connection": "link",
    "server": "host machine",
    "client": "requester",
    "request": "petition",
    "response": "reply",
    "socket": "network endpoint",
    "stream": "flow",
    "record": "entry",
    "records": "entries",
    "log": "journal",
    "logger": "journaller",
    "logging": "journalling",
    "level": "tier",
    "event": "occurrence",
    "loop": "cycle",
    "task": "job",
    "tasks": "jobs",
    "future": "pending outcome",
    "result": "outcome",
    "results": "outcomes",
    "wrapper": "envelope",
    "copy": "duplicate",
    "pointer": "reference",
    "memory": "storage",
    "integer": "whole number",
    "int": "whole number",
    "allocate": "reserve",
    "free": "release",
    "array": "row",
    "tuple": "fixed group",
    "character": "glyph",
    "characters": "glyphs",
    "byte": "octet",
    "bytes": "octets",
    "empty.": "vacant.",
    "used": "employed",
    "use": "employ",
    "uses": "employs",
    "using": "employing",
    "which": "that",
    "whether": "if",
    "object.": "entity.",
}


def _words(text: str) -> list[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", text)
    return [w.lower() for w in re.findall(r"[A-Za-z]+", spaced)]


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def paraphrase(sentence: str) -> str:
    out = []
    for raw in sentence.split():
        word = raw.strip(".,;:()'\"`").lower()
        out.append(REWRITES.get(word, raw.strip("`'\"")))
    return " ".join(out)


def content_words(text: str) -> set[str]:
    return {w for w in _words(text) if w not in STOPWORDS and len(w) > 1}


def overlaps(query: str, answer_text: str) -> set[str]:
    """Content words of ``query`` found in ``answer_text`` (exactly or by stem)."""
    answer = content_words(answer_text)
    stems = {_stem(w) for w in answer}
    return {w for w in content_words(query) if w in answer or _stem(w) in stems}


# ---------------------------------------------------------------- questions


def build_questions(
    defs: list[Definition], roots: dict[str, Path], *, per_kind: int, seed: int = 12
) -> list[Question]:
    rnd = random.Random(seed)
    by_corpus: dict[str, list[Definition]] = {}
    for d in defs:
        by_corpus.setdefault(d.corpus, []).append(d)
    questions: list[Question] = []
    for corpus, items in sorted(by_corpus.items()):
        pool = list(items)
        rnd.shuffle(pool)
        for group in _corpus_questions(pool, roots[corpus]):
            questions.extend(group[:per_kind])
    return questions


def _corpus_questions(pool: list[Definition], root: Path) -> list[list[Question]]:
    name_count = Counter(d.name for d in pool)
    doc_count = Counter(d.doc for d in pool if d.doc)
    call_freq = Counter(c for d in pool for c in d.calls)
    lines_of: dict[str, list[str]] = {}

    def span_text(d: Definition, *, with_doc: bool = False) -> str:
        lines = lines_of.get(d.path)
        if lines is None:
            text = (root / d.path).read_text(encoding="utf-8", errors="replace")
            lines = lines_of[d.path] = text.splitlines()
        first = min(d.start, d.doc_start or d.start) if with_doc else d.start
        return "\n".join(lines[first - 1 : d.end]) + "\n" + d.path

    def span_lines(d: Definition) -> list[str]:
        span_text(d)
        return lines_of[d.path][d.start - 1 : d.end]

    line_count: Counter[str] = Counter()
    for f in sorted(root.rglob("*")):
        if f.is_file() and f.suffix in (".py", ".c", ".h"):
            text = f.read_text(encoding="utf-8", errors="replace")
            line_count.update(x.strip() for x in text.splitlines())

    def q(kind: str, d: Definition, query: str) -> Question:
        return Question(kind, d.corpus, query, d.path, d.line, d.start, d.end, d.qualname)

    ident = [
        q("identifier", d, d.name)
        for d in pool
        if name_count[d.name] == 1 and len(d.name) >= 4 and not d.name.startswith("__")
    ]
    docs = [
        q("docstring", d, d.doc)
        for d in pool
        if d.doc and doc_count[d.doc] == 1 and 4 <= len(d.doc.split()) <= 30
    ]
    calls = []
    for d in pool:
        named = sorted((c for c in d.calls if len(c) >= 4), key=lambda c: (call_freq[c], c))
        if len(named) < 3:
            continue
        pick = set(named[:3])
        if sum(1 for o in pool if pick <= o.calls) == 1:
            calls.append(q("calls", d, " ".join(sorted(pick))))
    pasted = []
    used_lines: set[tuple[str, int]] = set()
    for d in pool:
        found = _pasted_line(d, span_lines(d), line_count)
        if found is not None and (d.path, found[0]) not in used_lines:
            used_lines.add((d.path, found[0]))
            line, text = found
            pasted.append(
                Question("code-line", d.corpus, text, d.path, line, line, line, d.qualname)
            )
    paras = []
    for d in pool:
        if not d.doc or doc_count[d.doc] != 1:
            continue
        text = paraphrase(d.doc)
        if len(content_words(text)) < 3 or text.lower() == d.doc.lower():
            continue
        # Its own lines *and its documentation*: a C function's comment sits
        # above its span, and words the rewrite kept from it ("unboxing slow
        # path" -> "unboxing slow location") would match the answer's chunk.
        if overlaps(text, span_text(d, with_doc=True)):
            continue
        paras.append(q("paraphrase", d, text))
    return [ident, docs, pasted, calls, paras]


_CALL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\s*\(")
_NOT_CODE = re.compile(r"""^(?:#|//|/\*|\*|["']|[rbuf]+["']|@|def\s|class\s|async\s+def\s)""")


def _pasted_line(
    d: Definition, lines: list[str], line_count: Counter[str]
) -> tuple[int, str] | None:
    """The first body line of ``d`` fit to paste: (its line number, its text)."""
    in_string = False  # inside a triple-quoted string (a docstring's prose)
    for offset, raw in enumerate(lines):
        number = d.start + offset
        text = raw.strip()
        quotes = text.count('"""') + text.count("'''")
        was_in_string = in_string
        in_string ^= quotes % 2 == 1
        if was_in_string or quotes:
            continue
        if number <= d.line or not 20 <= len(text) <= 100:
            continue  # decorators, the definition line itself, too short/long
        if _NOT_CODE.match(text) or not _CALL.search(text) or line_count[text] != 1:
            continue
        return number, text
    return None
