"""A name defined more than once in one file (Java/C#/Kotlin/TypeScript
overloads, a Python property's setter, two ``## Example`` headings) is one
symbol per definition, as an agent reads them: each with its own lines and
its own calls, all found by the name.

Before, the graph kept the first definition only: ``read Shapes.java#sym=
Shapes.area`` showed one overload of three, ``symbols`` listed one, and the
calls made in the others were charged to it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cleveragents.application.services.agent_session import AgentSession
from session_repo import indexed_session

SHAPES = (
    "class Shapes {\n"  # 1
    "    int area(int side) {\n"  # 2
    "        return square(side);\n"  # 3
    "    }\n"  # 4
    "    int area(int w, int h) {\n"  # 5
    "        return multiply(w, h);\n"  # 6
    "    }\n"  # 7
    "    int total() {\n"  # 8
    "        return area(2) + area(3, 4);\n"  # 9
    "    }\n"  # 10
    "}\n"
)
MODEL = (
    "class Model:\n"  # 1
    "    @property\n"  # 2
    "    def size(self):\n"  # 3
    "        return self._size\n"  # 4
    "\n"
    "    @size.setter\n"  # 6
    "    def size(self, value):\n"  # 7
    "        self._size = clamp(value)\n"  # 8
)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentSession]:
    files = {
        "Shapes.java": SHAPES,
        "model.py": MODEL,
        "g.kt": "class Größe {\n    fun fläche(a: Int) = a\n    fun fläche(a: String) = b(a)\n}\n",
    }
    with indexed_session(tmp_path_factory.mktemp("overloads"), files) as session:
        yield session


def test_symbols_lists_every_overload_with_its_lines(session: AgentSession) -> None:
    rows = session.symbols("Shapes.java")["results"]
    areas = [(r["name"], r["line"], r["end_line"]) for r in rows if r["name"] == "Shapes.area"]
    assert sorted(areas, key=lambda a: a[1]) == [("Shapes.area", 2, 4), ("Shapes.area", 5, 7)]
    uris = sorted(r["uri"].rsplit("#", 1)[1] for r in rows if r["name"] == "Shapes.area")
    assert uris == ["sym=Shapes.area", "sym=Shapes.area~2"]


def test_read_gives_the_overload_its_uri_names(session: AgentSession) -> None:
    second = session.read("Shapes.java#sym=Shapes.area~2")["results"]
    assert [r["line"] for r in second] == [5, 6, 7]
    setter = session.read("model.py#sym=Model.size~2")["results"]
    assert [r["text"].strip() for r in setter] == [
        "def size(self, value):",
        "self._size = clamp(value)",
    ]


def test_callers_and_callees_of_a_name_cover_every_definition(session: AgentSession) -> None:
    callers = session.callers("Shapes.area")
    assert callers["defined"] == 2
    assert [(r["caller"], r["lines"]) for r in callers["results"]] == [("Shapes.total", [9])]
    # What each overload calls, charged to that overload.
    callees = session.callees("Shapes.area")
    assert callees["defined"] == 2
    by_from = {(r["from"].rsplit("#", 1)[1], r["name"]) for r in callees["results"]}
    assert by_from == {("sym=Shapes.area", "square"), ("sym=Shapes.area~2", "multiply")}
    one = session.callees("Shapes.java#sym=Shapes.area~2")
    assert [r["name"] for r in one["results"]] == ["multiply"]
    assert session.callers("Model.size")["defined"] == 2
    assert [r["name"] for r in session.callees("Model.size")["results"]] == ["clamp"]


def test_a_caller_named_as_callers_prints_it_is_that_one_definition(
    session: AgentSession,
) -> None:
    one = session.callees("Shapes.area~2")
    assert (one["defined"], [r["name"] for r in one["results"]]) == (1, ["multiply"])
    assert session.callees("Model.size~2")["defined"] == 1
    assert session.callees("Model.size~3")["defined"] == 0


def test_callers_of_one_overload_s_uri_are_the_callers_of_its_name(
    session: AgentSession,
) -> None:
    """A call is resolved by name (the overload it runs needs types), so the
    callers of ``Shapes.area~2``'s URI are those of ``area``, with their
    lines; before, the URI's bare name was taken as ``area~2`` and matched
    nothing."""
    for target in ("Shapes.java#sym=Shapes.area~2", "Shapes.area~2", "Shapes.area"):
        found = session.callers(target)["results"]
        assert [(r["caller"], r["lines"]) for r in found] == [("Shapes.total", [9])], target


def test_a_qualified_name_that_is_not_ascii_finds_every_definition(
    session: AgentSession,
) -> None:
    """The URIs quote a fragment's non-ASCII characters (``#sym=Größe.fläche``);
    a qualified name is compared with them as written."""
    assert session.callees("Größe.fläche")["defined"] == 2
    assert [r["name"] for r in session.callees("Größe.fläche~2")["results"]] == ["b"]
