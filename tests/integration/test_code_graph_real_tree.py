"""Call edges on a real C tree nobody here wrote: mypyc's runtime library
(``mypyc/lib-rt``, installed with the dev extra's mypy).

The oracle is a grep of ``name(`` over the same files with comments, string
and character literals and preprocessor directives blanked out (a small lexer
written here, independent of tree-sitter), definitions (column 0) excluded.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cleveragents.infrastructure.acms.tree_sitter_code import TreeSitterCodeParser

mypyc = pytest.importorskip("mypyc")
LIB_RT = Path(mypyc.__file__).parent / "lib-rt"
CHOSEN = ("CPyTagged_StealFromObject", "CPy_DomainError", "CPyTagged_FromSsize_t")


def blank_non_code(text: str) -> str:
    """Comments, literals and preprocessor lines replaced by spaces; newlines kept."""
    out = list(text)
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if (at_line_start and c == "#") or (
            at_line_start and text[i:].lstrip(" \t").startswith("#")
        ):
            # A directive runs to the end of the line, continued by backslashes.
            while i < n and not (text[i] == "\n" and text[i - 1] != "\\"):
                out[i] = " "
                i += 1
            continue
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out[i] = " "
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end == -1 else end + 2
            for j in range(i, end):
                if out[j] != "\n":
                    out[j] = " "
            i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            for k in range(i, min(j + 1, n)):
                if out[k] != "\n":
                    out[k] = " "
            i = j + 1
            at_line_start = False
            continue
        at_line_start = c == "\n" or (at_line_start and c in " \t")
        i += 1
    return "".join(out)


def grep_call_sites(name: str) -> set[tuple[str, int]]:
    pattern = re.compile(rf"\b{re.escape(name)}\s*\(")
    sites: set[tuple[str, int]] = set()
    for path in sorted(LIB_RT.glob("*.c")):
        code = blank_non_code(path.read_text(encoding="utf-8", errors="replace"))
        for number, line in enumerate(code.splitlines(), 1):
            if pattern.search(line) and line[:1] in (" ", "\t"):
                sites.add((path.name, number))
    return sites


def test_the_oracle_blanks_comments_strings_and_directives() -> None:
    code = 'a(); // f(x)\n/* f(y)\n f(z) */ s = "f(w)";\n#define G f(v)\n  f(u);\n'
    blanked = blank_non_code(code)
    assert [m.start() for m in re.finditer(r"\bf\(", blanked)] == [code.index("f(u)")]


def test_callers_match_grep_of_call_sites_on_mypyc_lib_rt() -> None:
    parser = TreeSitterCodeParser()
    found: dict[str, set[tuple[str, int]]] = {name: set() for name in CHOSEN}
    for path in sorted(LIB_RT.glob("*.c")):
        facts = parser.parse(path.read_text(encoding="utf-8", errors="replace"), "c")
        assert facts is not None
        for call in facts.calls:
            if call.callee in found:
                found[call.callee].add((path.name, call.line))
    for name in CHOSEN:
        expected = grep_call_sites(name)
        assert len(expected) >= 3, name
        assert found[name] == expected, name
