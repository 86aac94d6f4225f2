"""``TantivyTextBackend.upsert_prepared``: units written with their content
analysed ahead of time (by a planning worker) index exactly as ``upsert``.

Oracle: a second backend given the same units through ``upsert``; every
query's URIs, order and scores must agree, in both query syntaxes, with
any mix of prepared and not-prepared entries.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from cleveragents.domain.models.acms.backends import IndexUnit, PreparedWrites
from cleveragents.domain.models.acms.index_store import FileDelta
from cleveragents.domain.models.acms.indexing import FileRecord
from cleveragents.domain.models.acms.uko import unit_uri
from cleveragents.infrastructure.acms.index_store import ManagedIndexStore
from cleveragents.infrastructure.acms.memory_indexes import (
    MemoryCatalog,
    MemoryGraphIndex,
    MemoryTextIndex,
    MemoryVectorIndex,
)
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend
from cleveragents.infrastructure.acms.text_analysis import prepare_content

RID = str(ULID())
SCOPE = frozenset({RID})
WORDS = st.sampled_from(
    ["alpha", "beta", "HTTPServer", "parseJsonV2", "x" * 120, "é", "naïve", "日本", "42", "_"]
)
SEPARATORS = st.sampled_from([" ", "\n", ".", "(", "_", ""])
QUERIES = ["alpha beta", "http server", "parse json", "naive", "beta alpha beta", "42"]


def _text(words: list[str], seps: list[str]) -> str:
    return "".join(w + s for w, s in zip(words, seps, strict=False))


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    docs=st.lists(
        st.tuples(
            st.lists(WORDS, min_size=1, max_size=12),
            st.lists(SEPARATORS, min_size=12, max_size=12),
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_prepared_units_index_as_upsert_does(
    tmp_path_factory: pytest.TempPathFactory, docs: list[tuple[list[str], list[str], bool]]
) -> None:
    root = tmp_path_factory.mktemp("prepared")
    prepared_backend, plain_backend = TantivyTextBackend(root / "a"), TantivyTextBackend(root / "b")
    units = [
        IndexUnit(unit_uri(RID, f"f{n}.py", "L1-L3"), _text(words, seps), {"path": f"f{n}.py"})
        for n, (words, seps, _) in enumerate(docs)
    ]
    prepared = [
        prepare_content(u.content) if ahead else None
        for u, (*_, ahead) in zip(units, docs, strict=True)
    ]
    try:
        prepared_backend.upsert_prepared(RID, units, prepared)
        plain_backend.upsert(RID, units)
        for q in QUERIES:
            for syntax in ("plain", "tantivy"):
                got = prepared_backend.search(q, scope=SCOPE, max_results=50, syntax=syntax)
                want = plain_backend.search(q, scope=SCOPE, max_results=50, syntax=syntax)
                assert [(r.uko_uri, round(r.score, 6), r.content) for r in got] == [
                    (r.uko_uri, round(r.score, 6), r.content) for r in want
                ], (q, syntax)
    finally:
        prepared_backend.close()
        plain_backend.close()


def test_the_preparer_is_a_picklable_function_of_the_engine_free_module(tmp_path: Path) -> None:
    import pickle

    b = TantivyTextBackend(tmp_path / "t")
    assert isinstance(b, PreparedWrites)
    assert not isinstance(MemoryTextIndex(), PreparedWrites)
    assert pickle.loads(pickle.dumps(b.preparer)) is prepare_content
    assert b.preparer.__module__ == "cleveragents.infrastructure.acms.text_analysis"
    b.close()


def test_prepared_entries_are_checked(tmp_path: Path) -> None:
    b = TantivyTextBackend(tmp_path / "t")
    unit = IndexUnit(unit_uri(RID, "a.py", "L1-L2"), "alpha beta", {"path": "a.py"})
    with pytest.raises(ValueError, match="one entry per unit"):
        b.upsert_prepared(RID, [unit], [])
    with pytest.raises(TypeError, match="one entry per unit"):
        b.upsert_prepared(RID, [unit], "ab")
    with pytest.raises(TypeError, match="units must be a sequence"):
        b.upsert_prepared(RID, iter([unit]), [None])  # type: ignore[arg-type]
    for bad in (("alpha beta",), ["alpha beta", "alpha|beta"], ("alpha beta", 1), "x"):
        with pytest.raises(TypeError, match="prepared entry"):
            b.upsert_prepared(RID, [unit], [bad])
    assert b.unit_uris(RID) == set()  # nothing was written
    b.upsert_prepared(RID, [unit], [prepare_content(unit.content)])
    assert [r.uko_uri for r in b.search("alpha beta", scope=SCOPE)] == [unit.uko_uri]
    b.close()


def _delta(n: int, text: str, ahead: bool) -> FileDelta:
    path = f"m{n}.py"
    unit = IndexUnit(unit_uri(RID, path, "L1-L2"), text, {"path": path})
    record = FileRecord(path, len(text), 1, "0" * 64, (unit.uko_uri,), ())
    return FileDelta(
        "index",
        path,
        record=record,
        units=(unit,),
        embeddings=np.ones((1, 4), dtype=np.float32),
        prepared=(prepare_content(text),) if ahead else None,
    )


def test_a_store_batch_mixing_prepared_and_plain_files_indexes_as_upsert(tmp_path: Path) -> None:
    texts = ["alpha beta", "HTTPServer naïve", "beta alpha beta", "parseJsonV2 42"]
    backends = []
    for name, mix in (("mixed", [True, False, True, False]), ("plain", [False] * 4)):
        text = TantivyTextBackend(tmp_path / name)
        store = ManagedIndexStore.over(
            text, MemoryVectorIndex(4), MemoryGraphIndex(), MemoryCatalog(), batch_units=100
        )
        with store.session(RID) as tx:
            for n, (t, ahead) in enumerate(zip(texts, mix, strict=True)):
                tx.apply(_delta(n, t, ahead))
        backends.append(text)
    for q in QUERIES:
        got, want = (b.search(q, scope=SCOPE, max_results=50) for b in backends)
        assert [(r.uko_uri, round(r.score, 6)) for r in got] == [
            (r.uko_uri, round(r.score, 6)) for r in want
        ], q
    for b in backends:
        b.close()


def test_a_delta_needs_one_prepared_entry_per_unit() -> None:
    with pytest.raises(ValueError, match="one entry per unit"):
        FileDelta(
            "index",
            "a.py",
            record=FileRecord("a.py", 1, 1, "0" * 64),
            units=_delta(0, "alpha", True).units,
            embeddings=np.ones((1, 4), dtype=np.float32),
            prepared=(),
        )
