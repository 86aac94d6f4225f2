"""A name qualified by its module, as code imports it (``json.loads``,
``email.message.Message.get_payload``), names that definition for
``callers`` and ``callees``.

Found by a reviewer on the standard library: ``callers json.loads`` said
"nothing in scope defines this name" and lost ``load``, the caller in its
own file (a call there points at the symbol, not at the name); ``callees
json.loads`` answered nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cleveragents.application.services.agent_session import AgentSession, _module_qualified
from session_repo import indexed_session

FILES = {
    "pkg/__init__.py": (
        "def loads(s):\n"  # 1
        "    return decode(s)\n"  # 2
        "\n"
        "def load(fp):\n"  # 4
        "    return loads(fp.read())\n"  # 5
    ),
    "pkg/message.py": (
        "class Message:\n"  # 1
        "    def get_payload(self):\n"  # 2
        "        return self._payload\n"  # 3
        "\n"
        "    def walk(self):\n"  # 5
        "        return self.get_payload()\n"  # 6
    ),
    "tool.py": "import pkg\n\n\ndef main():\n    return pkg.loads('x')\n",
}


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentSession]:
    with indexed_session(tmp_path_factory.mktemp("modq"), FILES, "local/m") as session:
        yield session


def callers_of(session: AgentSession, target: str) -> tuple[int, set[tuple[str, str]]]:
    found = session.callers(target)
    return found["defined"], {(r["path"], r["caller"]) for r in found["results"]}


def test_callers_of_a_module_qualified_name_are_its_callers(session: AgentSession) -> None:
    defined, found = callers_of(session, "pkg.loads")
    assert defined == 1
    assert found == {("pkg/__init__.py", "load"), ("tool.py", "main")}
    assert callers_of(session, "loads") == (1, found)
    defined, found = callers_of(session, "pkg.message.Message.get_payload")
    assert (defined, found) == (1, {("pkg/message.py", "Message.walk")})
    assert callers_of(session, "message.Message.get_payload")[0] == 1


def test_callees_of_a_module_qualified_name(session: AgentSession) -> None:
    found = session.callees("pkg.loads")
    assert found["defined"] == 1
    assert [r["name"] for r in found["results"]] == ["decode"]


def test_another_module_s_name_is_not_this_definition(session: AgentSession) -> None:
    assert session.callees("other.loads")["defined"] == 0
    assert session.callers("pkg.message.loads")["defined"] == 0


@pytest.mark.parametrize(
    ("uri", "qualified"),
    [
        ("uko://01JD5TD11B0000000000000000/json/__init__.py#sym=loads", "json.loads"),
        (
            "uko://01JD5TD11B0000000000000000/email/message.py#sym=Message.get_payload~2",
            "email.message.Message.get_payload",
        ),
        ("uko://01JD5TD11B0000000000000000/src/index.ts#sym=main", "src.main"),
        ("uko://01JD5TD11B0000000000000000/src/index.d.ts#sym=T", "src.T"),
        ("uko://01JD5TD11B0000000000000000/a/mod.rs#sym=f", "a.f"),
        # A Python module named index.py or mod.py is a module (a read-back).
        ("uko://01JD5TD11B0000000000000000/search/index.py#sym=build", "search.index.build"),
        ("uko://01JD5TD11B0000000000000000/m/mod.py#sym=f", "m.mod.f"),
        ("uko://01JD5TD11B0000000000000000/a.py", None),
    ],
)
def test_a_symbol_uri_qualified_by_its_module(uri: str, qualified: str | None) -> None:
    assert _module_qualified(uri) == qualified


def test_a_caller_reached_by_the_name_alone_says_so(session: AgentSession) -> None:
    """Found by a reviewer: ``callers JSONDecoder.decode`` listed every
    ``.decode(...)`` with nothing to tell them from the calls of that
    definition.  A call resolved to the definition (in its own file) is not
    ``by_name``; one that only names it is."""
    rows = {r["caller"]: r["by_name"] for r in session.callers("pkg.loads")["results"]}
    assert rows == {"load": False, "main": True}


def test_the_cli_marks_by_name_rows_of_a_qualified_target() -> None:
    from cleveragents.cli.main import _session_text

    rows = [
        {
            "uri": "uko://01JD5TD11B0000000000000000/a.py#sym=f",
            "path": "a.py",
            "caller": "f",
            "lines": [3],
            "by_name": False,
        },
        {
            "uri": "uko://01JD5TD11B0000000000000000/b.py#sym=g",
            "path": "b.py",
            "caller": "g",
            "lines": [7],
            "by_name": True,
        },
    ]
    qualified = _session_text({"tool": "callers", "target": "pkg.loads", "results": rows})
    assert qualified.splitlines() == ["a.py:3  f", "b.py:7  g  (by name)"]
    bare = _session_text({"tool": "callers", "target": "loads", "results": rows})
    assert "(by name)" not in bare
