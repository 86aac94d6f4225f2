"""Read the graph store layout of earlier versions, to convert it once.

That layout kept per resource ``graphs/<ULID>.nt`` (sorted N-Triples) and
``graphs/<ULID>.log`` (``+``/``-`` N-Triples lines, each write ending with a
``C`` commit line; a log without a base was the leftover of a deletion), and a
global ``generation`` counter.  :class:`~.graph_store.GraphStore` converts
such a store when it opens it (see :func:`read_resource`); nothing else
reads this format.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from cleveragents.infrastructure.acms.graph_store import Obj, Op, ResourceGraph

__all__ = ["read_resource"]

_UNESCAPE_RE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))", re.DOTALL)
_UNESCAPES = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'"}
_UNESCAPES["\\"] = "\\"
_NT_LINE = re.compile(
    r'<([^<>"\s]*)> <([^<>"\s]*)> '
    r'(?:<([^<>"\s]*)>|"([^"\\]*(?:\\.[^"\\]*)*)"(?:\^\^<([^<>"\s]*)>)?) \.'
)
_COMMIT = b"C\n"


def _unescape(m: re.Match[str]) -> str:
    code = m.group(1) or m.group(2)
    if code is not None:
        return chr(int(code, 16))
    char = m.group(3)
    if char not in _UNESCAPES:
        raise ValueError(f"bad escape \\{char}")
    return _UNESCAPES[char]


def _triple(line: str) -> tuple[str, str, Obj] | None:
    m = _NT_LINE.fullmatch(line)
    if m is None:
        if not line.strip() or line.startswith("#"):
            return None
        raise ValueError("a line is not an N-Triples triple this store wrote")
    s, p, iri, lexical, datatype = m.groups()
    intern = sys.intern
    if iri is not None:
        return intern(s), intern(p), intern(iri)
    value = _UNESCAPE_RE.sub(_unescape, lexical) if "\\" in lexical else lexical
    return intern(s), intern(p), (value, None if datatype is None else intern(datatype))


def read_resource(base: Path) -> ResourceGraph:
    """The graph in ``<ULID>.nt`` plus the committed part of ``<ULID>.log``.

    Raises:
        ValueError: a line this format never held (``UnicodeDecodeError`` included).
        OSError: the files cannot be read.
    """
    graph = ResourceGraph()
    for line in base.read_bytes().decode("utf-8", "surrogatepass").split("\n"):
        found = _triple(line.rstrip("\r"))
        if found is not None:
            graph.add(*found)
    try:
        data = base.with_suffix(".log").read_bytes()
    except FileNotFoundError:
        return graph
    end = data.rfind(b"\n" + _COMMIT)
    ops: list[Op] = []
    for raw in data[: end + 1].split(b"\n") if end >= 0 else []:
        if raw in (b"C", b""):
            continue
        sign = raw[:1]
        found = _triple(raw[1:].decode("utf-8", "surrogatepass"))
        if sign not in (b"+", b"-") or found is None:
            raise ValueError("a log line is not a change this store wrote")
        ops.append((sign == b"+", *found))
    graph.apply(ops)
    return graph
