"""Definitions and call edges on a real Go tree nobody here wrote: the Go
standard library's sources (``$GOROOT/src``; Debian's ``golang-src``).

No pip package of the dev extra ships Go sources, so the test is skipped
where no Go toolchain's sources are found.  The oracle is a small lexer
written here, independent of tree-sitter: comments, string, raw string and
rune literals blanked out, then

- definitions: ``func Name(``, ``func (r *Recv) Name(`` (``Recv.Name``),
  ``type Name`` at column 0 and the specs of a ``type ( ... )`` group;
  ``const``/``var`` names at column 0 and in ``const ( ... )``/``var ( ... )``
  groups (one tab in), ``_`` left out, none in a file marked generated
  (``// Code generated ... DO NOT EDIT.``);
- call sites: a grep of ``pkg.Name(``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cleveragents.infrastructure.acms.tree_sitter_code import TreeSitterCodeParser

PACKAGES = ("bufio", "bytes", "errors", "fmt", "io", "os", "sort", "strconv", "strings")
CHOSEN = (("fmt", "Errorf"), ("errors", "New"), ("strings", "HasPrefix"), ("io", "ReadFull"))


def go_root_src() -> Path | None:
    candidates: list[Path] = []
    go = shutil.which("go")
    if go is not None:
        try:
            done = subprocess.run(
                [go, "env", "GOROOT"], capture_output=True, text=True, timeout=30, check=False
            )
        except (OSError, subprocess.SubprocessError):
            done = None
        if done is not None and done.returncode == 0 and done.stdout.strip():
            candidates.append(Path(done.stdout.strip()) / "src")
    for pattern in ("/usr/lib/go*/src", "/usr/share/go*/src", "/usr/local/go/src"):
        candidates += sorted(Path("/").glob(pattern.lstrip("/")), reverse=True)
    for src in candidates:
        if (src / "fmt" / "print.go").is_file():
            return src
    return None


GO_SRC = go_root_src()
pytestmark = pytest.mark.skipif(
    GO_SRC is None, reason="no Go standard library sources (golang-src, or a Go toolchain)"
)


def blank_non_code(text: str) -> str:
    """Comments and literals replaced by spaces; newlines kept."""
    out = list(text)
    i, n = 0, len(text)

    def kill(start: int, end: int) -> None:
        for k in range(start, min(end, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end == -1 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end == -1 else end + 2
        elif text[i] == "`":
            end = text.find("`", i + 1)
            end = n if end == -1 else end + 1
        elif text[i] in "\"'":
            end = i + 1
            while end < n and text[end] != text[i] and text[end] != "\n":
                end += 2 if text[end] == "\\" else 1
            end += 1
        else:
            i += 1
            continue
        kill(i, end)
        i = end
    return "".join(out)


_FUNC = re.compile(r"func\s+(\w+)\s*[\[(]")
_METHOD = re.compile(r"func\s*\(\s*(?:\w+\s+)?\*?\s*(\w+)\s*(?:\[[^\]]*\])?\s*\)\s*(\w+)\s*[\[(]")
_TYPE = re.compile(r"type\s+(\w+)\b")
_GROUPED_TYPE = re.compile(r"\t(\w+)\s*(?:\[[^\]]*\])?\s*(?:=\s*)?\S")
_NAMES = r"(\w+(?:\s*,\s*\w+)*)"
_VALUE = re.compile(rf"(?:const|var)\s+{_NAMES}")
_GROUPED_VALUE = re.compile(rf"\t{_NAMES}")


def _values(names: str, number: int) -> set[tuple[str, int]]:
    return {(n.strip(), number) for n in names.split(",") if n.strip() != "_"}


_GENERATED = re.compile(r"^// Code generated .* DO NOT EDIT\.$", re.M)


def oracle_definitions(code: str, text: str = "") -> set[tuple[str, int]]:
    """``code``'s definitions (its text blanked of comments and literals,
    ``text`` as written: a generated file's mark is a comment)."""
    out: set[tuple[str, int]] = set()
    in_group = in_values = False
    header = text.split("\npackage ", 1)[0]
    values = not _GENERATED.search(header)
    for number, line in enumerate(code.splitlines(), 1):
        if in_group:
            if line.startswith(")"):
                in_group = False
            elif match := _GROUPED_TYPE.match(line):
                out.add((match.group(1), number))
        elif in_values:
            if line.startswith(")"):
                in_values = False
            elif values and (match := _GROUPED_VALUE.match(line)):
                out |= _values(match.group(1), number)
        elif line.startswith(("const (", "var (")):
            in_values = True
        elif match := _VALUE.match(line):
            out |= _values(match.group(1), number) if values else set()
        elif match := _METHOD.match(line):
            out.add((f"{match.group(1)}.{match.group(2)}", number))
        elif match := _FUNC.match(line):
            out.add((match.group(1), number))
        elif line.startswith("type ("):
            in_group = True
        elif match := _TYPE.match(line):
            out.add((match.group(1), number))
    return out


def go_files() -> list[Path]:
    assert GO_SRC is not None
    return [path for pkg in PACKAGES for path in sorted((GO_SRC / pkg).glob("*.go"))]


def test_the_oracle_blanks_comments_and_literals() -> None:
    code = 'a() // fmt.Errorf(x)\n/* fmt.Errorf(y) */ s := "fmt.Errorf(z)" + `\nfmt.Errorf(w)`\n'
    assert "Errorf" not in blank_non_code(code)
    assert oracle_definitions("type (\n\tA = int\n\tb struct{}\n)\nfunc (x *T[K]) M() {}\n") == {
        ("A", 2),
        ("b", 3),
        ("T.M", 5),
    }
    values = "const C = 1\nvar (\n\ta, _ = f(\n\t\tx)\n\tb int\n)\nvar _ = g\n"
    assert oracle_definitions(values) == {("C", 1), ("a", 3), ("b", 5)}
    generated = "// Code generated by x; DO NOT EDIT.\n\npackage p\n\nconst C = 1\n"
    assert oracle_definitions(generated, generated) == set()


def test_definitions_match_the_oracle_on_the_go_standard_library() -> None:
    parser = TreeSitterCodeParser()
    missing: list[tuple[str, str, int]] = []
    total = total_values = 0
    for path in go_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        facts = parser.parse(text, "go")
        assert facts is not None, path
        found = {(s.qualified_name, s.start_line) for s in facts.symbols}
        expected = oracle_definitions(blank_non_code(text), text)
        total += len(expected)
        missing += [(path.name, name, line) for name, line in sorted(expected - found)]
        # Every top-level function the parser reports is one the oracle sees.
        top_functions = {
            (s.qualified_name, s.start_line)
            for s in facts.symbols
            if s.kind == "function" and "." not in s.qualified_name
        }
        assert top_functions <= expected, (path.name, sorted(top_functions - expected)[:5])
        # And every package constant and variable.
        values = {
            (s.qualified_name, s.start_line)
            for s in facts.symbols
            if s.kind in ("constant", "variable")
        }
        assert values <= expected, (path.name, sorted(values - expected)[:5])
        total_values += len(values)
    assert total > 1000
    assert total_values > 400
    assert missing == []


def test_callers_match_grep_of_call_sites_on_the_go_standard_library() -> None:
    parser = TreeSitterCodeParser()
    found: dict[tuple[str, str], set[tuple[str, int]]] = {key: set() for key in CHOSEN}
    expected: dict[tuple[str, str], set[tuple[str, int]]] = {key: set() for key in CHOSEN}
    patterns = {key: re.compile(rf"(?<![\w.]){key[0]}\s*\.\s*{key[1]}\s*\(") for key in CHOSEN}
    for path in go_files():
        name = f"{path.parent.name}/{path.name}"
        text = path.read_text(encoding="utf-8", errors="replace")
        facts = parser.parse(text, "go")
        assert facts is not None, path
        for call in facts.calls:
            key = (call.receiver or "", call.callee)
            if key in found:
                found[key].add((name, call.line))
        for number, line in enumerate(blank_non_code(text).splitlines(), 1):
            for key, pattern in patterns.items():
                if pattern.search(line):
                    expected[key].add((name, number))
    for key in CHOSEN:
        assert len(expected[key]) >= 3, key
        assert found[key] == expected[key], key
