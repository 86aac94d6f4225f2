"""``symbols`` reads a file's definitions in one walk, not one graph call per
symbol: against a SPARQL endpoint each call is a round trip (a file of 197
symbols took 41 s at 0.2 s a request).  The rows are the ones the per-symbol
reads give."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from cleveragents.application.services.agent_session import _SYMBOL_PREDICATES, AgentSession
from cleveragents.bootstrap import bootstrap
from cleveragents.domain.models.acms.errors import WalkLimitError
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.domain.models.acms.uko import PREDICATES, UKO, file_uri, path_of

FUNCTIONS = 60


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AgentSession, str]]:
    tmp = tmp_path_factory.mktemp("symbols")
    (tmp / "repo").mkdir()
    body = "".join(f"def f{i}(x, y={i}):\n    return g(x) + y\n\n\n" for i in range(FUNCTIONS))
    body += (
        "class Box:\n    def put(self, v):\n        return v\n\n"
        "    def take(self):\n        return 1\n"
    )
    (tmp / "repo" / "many.py").write_text(body)
    ops = bootstrap(tmp / "data", embedding_dimension=16)
    ops.add_project("local/s")
    rid = ops.add_resource(str(tmp / "repo"), "local/s").resource_id
    ops.reindex()
    yield ops.agent_session(projects=["local/s"]), rid
    ops._store().close()


def _oracle(view: ScopedView, node: str) -> list[dict[str, Any]]:
    """The rows as read one symbol at a time (the code before)."""
    rows = []
    for _, p, sym in view.get_triples(node).triples:
        if p != PREDICATES["defines"]:
            continue
        row: dict[str, Any] = {"uri": sym, "path": path_of(sym)}
        for _, q, o in view.get_triples(sym).triples:
            key = q[len(UKO) :]
            if key in ("name", "kind", "signature"):
                row[key] = o
            elif key in ("line", "endLine"):
                row["line" if key == "line" else "end_line"] = int(o)
        rows.append(row)
    return sorted(rows, key=lambda r: (r["path"], r.get("line", 0), r["uri"]))


def test_symbols_reads_a_file_in_one_walk_with_the_rows_of_per_symbol_reads(
    session: tuple[AgentSession, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, rid = session
    calls: Counter[str] = Counter()
    for name in ("get_triples", "traverse"):
        original = getattr(ScopedView, name)

        def counted(self: ScopedView, *a: Any, _o: Any = original, _n: str = name, **k: Any) -> Any:
            calls[_n] += 1
            return _o(self, *a, **k)

        monkeypatch.setattr(ScopedView, name, counted)
    answer = agent.symbols("many.py", budget=200_000)
    assert calls["traverse"] == 1 and calls["get_triples"] == 0, calls
    monkeypatch.undo()
    view = agent._view(None, None)
    expected = _oracle(view, file_uri(rid, "many.py"))
    assert len(expected) >= FUNCTIONS + 1
    assert answer["results"] == expected
    assert answer["truncated"] is False


def test_a_file_past_the_walk_limit_is_read_symbol_by_symbol(tmp_path: Any) -> None:
    (tmp_path / "repo").mkdir()
    many = 2_100  # ~5 triples each: the walk passes its 10,000-triple limit
    (tmp_path / "repo" / "huge.py").write_text(
        "".join(f"def h{i}():\n    return {i}\n\n\n" for i in range(many))
    )
    ops = bootstrap(tmp_path / "data", embedding_dimension=16)
    try:
        ops.add_project("local/h")
        rid = ops.add_resource(str(tmp_path / "repo"), "local/h").resource_id
        ops.reindex()
        agent = ops.agent_session(projects=["local/h"])
        with pytest.raises(WalkLimitError):  # so the fallback is what runs below
            agent._view(None, None).traverse(
                file_uri(rid, "huge.py"), depth=2, predicates=_SYMBOL_PREDICATES
            )
        answer = agent.symbols("huge.py", budget=200_000)
        expected = _oracle(agent._view(None, None), file_uri(rid, "huge.py"))
        assert len(expected) == many
        kept = answer["results"]
        assert kept == expected[: len(kept)]
        assert len(kept) + answer["truncated"]["more"] == many
    finally:
        ops._store().close()
