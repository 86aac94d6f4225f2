"""An answer never silently leaves something out: whatever a cap or a budget
drops is counted in ``truncated`` (``more``) or marked (``cut``,
``query_cut``), and a node no tool can find is an error, not "nothing".

Defects an agent-host tester found, each against a real data directory:

- ``read`` stopped at its 2,000-line cap and said ``truncated: false``;
- hybrid ``search`` and ``context`` stopped at 50 hits, whatever
  ``max_results`` (and ``context``, whatever its budget, did not say that
  more hits exist);
- a hit's line cut at 200 characters carried no ``cut``;
- a long ``target``/``source``/``subject``/``start`` failed the call instead
  of being echoed cut, as a long query is;
- ``path#sym=Name`` worked for ``read`` and ``callers`` only;
- an unknown start node or name answered an empty success;
- ``#L2`` (one line) was refused.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cleveragents.application.services.agent_session import (
    ECHO_CHARS,
    MAX_RESULTS,
    AgentSession,
    render,
)
from cleveragents.bootstrap import bootstrap
from cleveragents.domain.models.acms.errors import ScopeError
from cleveragents.domain.models.acms.uko import file_uri

LONG_NAME = "long_" + "n" * 245  # a 250-character function name
CORE = (
    "class Loader:\n"
    "    def run(self):\n"
    "        return helper()\n"
    "\n"
    "\n"
    "def helper():\n"
    "    return 'quokka'\n"
    "\n"
    "\n"
    "def lonely():\n"
    "    return 1\n"
    "\n"
    "\n"
    f"def {LONG_NAME}():\n"
    "    return lonely\n"
    "\n"
    "\n"
    "def use_long():\n"
    f"    return {LONG_NAME}()\n"
)
BIG_LINES = 3_401
WIDE = "zebra " + "w" * 494  # a 500-character line
PANGOLINS = 120


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[AgentSession, AgentSession, str, str]]:
    tmp_path = tmp_path_factory.mktemp("world")
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "core.py").write_text(CORE)
    (root / "pkg" / "a#b.py").write_text(
        "def café():\n    return tapir()\n\n\ndef tapir():\n    return 1\n"
    )
    (root / "big.txt").write_text("".join(f"row {n}\n" for n in range(1, BIG_LINES + 1)))
    (root / "wide.txt").write_text(f"before\n{WIDE}\nafter\n")
    (root / "animals").mkdir()
    for i in range(PANGOLINS):
        (root / "animals" / f"a{i:03}.txt").write_text(f"pangolin number {i}\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "only.py").write_text(
        "def elsewhere_only():\n    return 2\n\n\ndef x():\n    elsewhere_only()\n"
    )
    ops = bootstrap(tmp_path / "data", embedding_dimension=16)
    ops.add_project("local/r")
    ops.add_project("local/o")
    rid = ops.add_resource(str(root), "local/r").resource_id
    oid = ops.add_resource(str(other), "local/o").resource_id
    ops.reindex()
    yield (
        ops.agent_session(projects=["local/r", "local/o"]),
        ops.agent_session(projects=["local/r"]),
        rid,
        oid,
    )
    ops._store().close()


# ---------------------------------------------------------------- 1. read


@pytest.mark.parametrize("budget", [200_000, 50_000, 8_000])
def test_read_counts_the_lines_its_line_cap_left_out(world, budget: int) -> None:  # type: ignore[no-untyped-def]
    session = world[0]
    whole = session.read("big.txt", budget=budget)
    kept = len(whole["results"])
    assert whole["total_lines"] == BIG_LINES
    assert whole["truncated"] == {"more": BIG_LINES - kept}
    ranged = session.read("big.txt#L100-L2500", budget=budget)
    kept = len(ranged["results"])
    assert ranged["results"][-1]["line"] == 99 + kept
    assert ranged["truncated"] == {"more": 2_401 - kept}
    assert len(render(ranged)) <= budget


def test_read_continues_where_it_stopped(world) -> None:  # type: ignore[no-untyped-def]
    session = world[0]
    first = session.read("big.txt", budget=200_000)
    last = first["results"][-1]["line"]
    rest = session.read(f"big.txt#L{last + 1}-L{BIG_LINES}", budget=200_000)
    assert rest["truncated"] is False
    assert [r["line"] for r in first["results"] + rest["results"]] == list(range(1, BIG_LINES + 1))


# ---------------------------------------------------------------- 2. hits


def test_hybrid_search_honours_max_results_past_fifty(world) -> None:  # type: ignore[no-untyped-def]
    session = world[1]
    wide = session.search("pangolin", mode="hybrid", max_results=MAX_RESULTS, budget=200_000)
    assert len(wide["results"]) == MAX_RESULTS
    # What the budget dropped is counted; hits past max_results were not asked for.
    narrow = session.search("pangolin", mode="hybrid", max_results=10, budget=200_000)
    assert len(narrow["results"]) == 10 and narrow["truncated"] is False
    tight = session.search("pangolin", mode="hybrid", max_results=10, budget=1_000)
    assert tight["truncated"]["more"] == 10 - len(tight["results"]) > 0


def test_context_gives_what_the_budget_holds_and_counts_the_rest(world) -> None:  # type: ignore[no-untyped-def]
    session = world[1]
    answer = session.context("pangolin", budget=200_000)
    assert len(answer["results"]) > 50  # it stopped at 50
    small = session.context("pangolin", budget=8_000)
    kept = len(small["results"])
    assert 0 < kept < len(answer["results"])
    assert small["truncated"]["more"] == len(answer["results"]) - kept


def test_a_hit_line_cut_to_its_width_says_how_much_was_cut(world) -> None:  # type: ignore[no-untyped-def]
    session = world[1]
    for mode in ("text", "hybrid"):
        hit = next(
            h
            for h in session.search("zebra", mode=mode, budget=50_000)["results"]
            if h["path"] == "wide.txt"
        )
        wide = next(line for line in hit["lines"] if line["text"].startswith("zebra"))
        assert wide["cut"] == len(WIDE) - len(wide["text"]) > 0
        assert all("cut" not in line for line in hit["lines"] if line is not wide)


# ---------------------------------------------------------------- 4. echo


def test_a_long_node_argument_is_echoed_cut(world) -> None:  # type: ignore[no-untyped-def]
    session = world[1]
    iri = "https://example.org/" + "a" * 7_880
    for answer, key in (
        (session.triples(iri, budget=8_000), "subject"),
        (session.traverse(iri, budget=8_000), "start"),
    ):
        assert len(render(answer)) <= 8_000
        assert answer[key] == iri[:ECHO_CHARS]
        assert answer["query_cut"] == len(iri) - ECHO_CHARS


def test_a_long_name_fits_the_smallest_budget(world) -> None:  # type: ignore[no-untyped-def]
    session, rid = world[1], world[2]
    symbol = file_uri(rid, "pkg/core.py") + "#sym=" + LONG_NAME
    for answer, key, given in (
        (session.callers(LONG_NAME, budget=256), "target", LONG_NAME),
        (session.callers(symbol, budget=256), "target", symbol),
        (session.callees(symbol, budget=256), "source", symbol),
        (session.triples(symbol, budget=256), "subject", symbol),
    ):
        assert len(render(answer)) <= 256
        echoed = answer[key]
        assert given.startswith(echoed)
        assert len(echoed) + answer["query_cut"] == len(given)
    full = session.callers(LONG_NAME, budget=8_000)
    assert full["target"] == LONG_NAME[:ECHO_CHARS]
    assert full["query_cut"] == len(LONG_NAME) - ECHO_CHARS
    assert [r["caller"] for r in full["results"]] == ["use_long"]


# ---------------------------------------------------------------- 5. forms


def test_every_node_tool_takes_a_path_and_symbol(world) -> None:  # type: ignore[no-untyped-def]
    session, rid = world[1], world[2]
    given = "pkg/core.py#sym=Loader.run"
    node = file_uri(rid, "pkg/core.py") + "#sym=Loader.run"
    assert [r["name"] for r in session.callees(given)["results"]] == ["helper"]
    assert session.callees(given)["results"] == session.callees(node)["results"]
    assert session.triples(given)["results"] == session.triples(node)["results"]
    assert session.triples(given)["nodes"] == [node]
    assert session.traverse(given, depth=1)["results"] == session.traverse(node, depth=1)["results"]
    assert [r["caller"] for r in session.callers("pkg/core.py#sym=helper")["results"]] == [
        "Loader.run"
    ]


def test_a_path_holding_a_hash_and_a_symbol_not_ascii_are_nodes(world) -> None:  # type: ignore[no-untyped-def]
    """Found by review: ``a#b.py`` was split at its ``#`` (it answered before
    the path#sym form came in), and ``#sym=café`` was joined unquoted to
    the file's URI, which the index holds as ``#sym=caf%C3%A9``."""
    session, rid = world[1], world[2]
    hashed = file_uri(rid, "pkg/a#b.py")
    assert session.triples("pkg/a#b.py")["nodes"] == [hashed]
    assert session.triples("pkg/a#b.py")["results"]
    symbol = hashed + "#sym=caf%C3%A9"
    for given in ("pkg/a#b.py#sym=café", "pkg/a#b.py#sym=caf%C3%A9"):
        assert session.triples(given)["nodes"] == [symbol]
        assert [r["name"] for r in session.callees(given)["results"]] == ["tapir"]


# ---------------------------------------------------------------- 6. unknown


def test_an_unknown_start_is_an_error_and_a_symbol_without_callers_is_not(world) -> None:  # type: ignore[no-untyped-def]
    session, rid = world[1], world[2]
    nope = file_uri(rid, "pkg/core.py") + "#sym=Nope"
    for call in (
        lambda: session.callers(nope),
        lambda: session.callees(nope),
        lambda: session.callers("pkg/core.py#sym=Nope"),
        lambda: session.triples(nope),
        lambda: session.traverse(nope),
        lambda: session.triples(file_uri(rid, "no/such.py")),
        lambda: session.traverse(file_uri(rid, "no/such.py"), direction="in"),
    ):
        with pytest.raises(
            ValueError, match=r"'.*(Nope|no/such\.py)' is no node of this scope's graph"
        ):
            call()
    # Existing, merely uncalled: an empty success.
    assert session.callers("use_long")["results"] == []
    assert session.callers(file_uri(rid, "pkg/core.py") + "#sym=use_long")["results"] == []
    assert session.triples(file_uri(rid, "pkg/core.py"))["results"]


def test_callers_and_callees_count_the_definitions_so_a_typo_is_not_an_uncalled_name(world) -> None:  # type: ignore[no-untyped-def]
    wide, narrow, rid = world[0], world[1], world[2]
    # Empty either way; only ``defined`` tells a typo from a name never called.
    assert (narrow.callers("Nope")["results"], narrow.callers("Nope")["defined"]) == ([], 0)
    assert (narrow.callers("use_long")["results"], narrow.callers("use_long")["defined"]) == ([], 1)
    assert narrow.callees("Nope") | {"results": []} == narrow.callees("Nope")
    assert narrow.callees("Nope")["defined"] == 0
    assert narrow.callees("Loader.run")["defined"] == 1
    assert narrow.callers(file_uri(rid, "pkg/core.py") + "#sym=helper")["defined"] == 1
    # A file's node defines no name itself (it was counted as one).
    assert narrow.callers(file_uri(rid, "pkg/core.py"))["defined"] == 0
    # A definition outside the scope is not counted: the narrow session sees
    # neither it nor its caller, the wide one both.
    assert (
        narrow.callers("elsewhere_only")["defined"],
        narrow.callers("elsewhere_only")["results"],
    ) == (0, [])
    assert wide.callers("elsewhere_only")["defined"] == 1
    assert [r["caller"] for r in wide.callers("elsewhere_only")["results"]] == ["x"]


def test_a_node_of_a_resource_outside_the_scope_is_refused_whether_it_exists_or_not(world) -> None:  # type: ignore[no-untyped-def]
    narrow, oid = world[1], world[3]
    for name in ("elsewhere_only", "Nope"):
        with pytest.raises(ScopeError, match="outside this session's scope"):
            narrow.callers(file_uri(oid, "only.py") + "#sym=" + name)


# ---------------------------------------------------------------- 7. #L2


def test_a_single_line_range_reads_that_line(world) -> None:  # type: ignore[no-untyped-def]
    session = world[1]
    assert [(r["line"], r["text"]) for r in session.read("pkg/core.py#L2")["results"]] == [
        (2, "    def run(self):")
    ]
