"""Result dataclasses and the shared argument checks."""

from __future__ import annotations

import dataclasses
import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.domain.models.acms.backends import (
    GraphResult,
    IndexUnit,
    Literal,
    TextResult,
    VectorResult,
    validate_depth,
    validate_embedding,
    validate_non_empty,
    validate_positive_int,
)
from cleveragents.domain.models.acms.errors import AcmsError, QueryError, QueryLimitError
from cleveragents.domain.models.acms.uko import unit_uri
from cleveragents.testing.backend_contracts import new_ulid


@pytest.mark.parametrize("cls", [TextResult, VectorResult])
class TestScoredResults:
    def test_fields_and_defaults(self, cls: type[TextResult]) -> None:
        r = cls("uko://x", "body", 0.5)
        assert (r.uko_uri, r.content, r.score, r.metadata) == ("uko://x", "body", 0.5, {})

    def test_default_metadata_is_not_shared(self, cls: type[TextResult]) -> None:
        assert cls("u", "", 0.1).metadata is not cls("u", "", 0.1).metadata

    def test_frozen(self, cls: type[TextResult]) -> None:
        r = cls("u", "c", 0.2)
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.score = 0.9  # type: ignore[misc]
        assert dataclasses.replace(r, score=0.9).score == 0.9

    def test_empty_uri_rejected(self, cls: type[TextResult]) -> None:
        with pytest.raises(ValueError, match="uko_uri"):
            cls("", "c", 0.5)

    @pytest.mark.parametrize("score", [-0.0001, 1.0001, math.nan, math.inf, -5.0])
    def test_score_outside_unit_interval_rejected(
        self, cls: type[TextResult], score: float
    ) -> None:
        with pytest.raises(ValueError, match="score"):
            cls("u", "c", score)

    @pytest.mark.parametrize("score", [0.0, 1.0, 0, 1])
    def test_score_bounds_accepted(self, cls: type[TextResult], score: float) -> None:
        assert cls("u", "c", score).score == score

    def test_bool_score_rejected(self, cls: type[TextResult]) -> None:
        with pytest.raises(TypeError):
            cls("u", "c", True)

    def test_metadata_must_be_str_to_str(self, cls: type[TextResult]) -> None:
        with pytest.raises(TypeError):
            cls("u", "c", 0.5, {"depth": 1})  # type: ignore[dict-item]


def test_graph_result_defaults_and_validation() -> None:
    assert GraphResult() == GraphResult([], {})
    assert GraphResult([("s", "p", "o")]).triples == [("s", "p", "o")]
    with pytest.raises(TypeError):
        GraphResult([("s", "p")])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        GraphResult((("s", "p", "o"),))  # type: ignore[arg-type]


def test_error_tree() -> None:
    assert issubclass(QueryError, ValueError)
    assert issubclass(QueryError, AcmsError)
    assert issubclass(QueryLimitError, QueryError)


def test_validate_non_empty() -> None:
    assert validate_non_empty(" a ", "query") == " a "
    with pytest.raises(ValueError, match="query"):
        validate_non_empty(" ", "query")
    with pytest.raises(TypeError, match="subject"):
        validate_non_empty(None, "subject")


@pytest.mark.parametrize("bad", [True, False, 2.0, None, "1"])
def test_ints_reject_non_ints_and_bools(bad: object) -> None:
    with pytest.raises(TypeError):
        validate_positive_int(bad, "top_k")
    with pytest.raises(TypeError):
        validate_depth(bad)


def test_int_ranges() -> None:
    assert validate_positive_int(1, "k") == 1
    assert validate_depth(0) == 0
    with pytest.raises(ValueError):
        validate_positive_int(0, "k")
    with pytest.raises(ValueError):
        validate_depth(-1)


class TestValidateEmbedding:
    def test_list_tuple_and_numpy(self) -> None:
        assert validate_embedding([1, 2.5]) == [1.0, 2.5]
        assert validate_embedding((0.5,)) == [0.5]
        assert validate_embedding(np.array([0.25, 1.0], dtype=np.float32)) == [0.25, 1.0]

    @pytest.mark.parametrize(
        "bad",
        [[], [math.nan], [1.0, math.inf], np.zeros((2, 2)), np.array([])],
    )
    def test_value_errors(self, bad: object) -> None:
        with pytest.raises(ValueError):
            validate_embedding(bad)

    @pytest.mark.parametrize("bad", ["ab", None, {1.0}, [True, 1.0], ["1.0"], [[1.0]]])
    def test_type_errors(self, bad: object) -> None:
        with pytest.raises(TypeError):
            validate_embedding(bad)

    def test_dimension(self) -> None:
        assert validate_embedding([1.0, 2.0], 2) == [1.0, 2.0]
        with pytest.raises(ValueError, match="dimension"):
            validate_embedding([1.0, 2.0], 3)

    @given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=32))
    def test_finite_lists_round_trip(self, values: list[float]) -> None:
        assert validate_embedding(values) == values


class TestIndexUnit:
    def test_resource_id_from_uri(self) -> None:
        rid = new_ulid()
        unit = IndexUnit(unit_uri(rid.lower(), "a.py", "L1-L2"), "x", {"path": "a.py"})
        assert unit.resource_id == rid

    @pytest.mark.parametrize("uri", ["", "http://x/y", "uko://notaulid/a.py", "uko:/x"])
    def test_rejects_non_uko_uris(self, uri: str) -> None:
        with pytest.raises(ValueError):
            IndexUnit(uri, "x")

    def test_rejects_non_str_metadata(self) -> None:
        with pytest.raises(TypeError):
            IndexUnit(unit_uri(new_ulid(), "a.py", "L1-L1"), "x", {"n": 1})  # type: ignore[dict-item]


# ---------------------------------------------------------------- pickling


_META_TEXT = st.text(max_size=12)


@settings(max_examples=100, deadline=None)
@given(
    path=st.text(alphabet="abcxyz/._-", min_size=1, max_size=20).filter(
        lambda p: not p.startswith("/")
    ),
    content=st.text(max_size=50),
    metadata=st.dictionaries(_META_TEXT, _META_TEXT, max_size=4),
    value=st.text(max_size=20),
    datatype=st.one_of(st.none(), st.just("http://www.w3.org/2001/XMLSchema#integer")),
)
def test_units_and_literals_survive_pickling(
    path: str, content: str, metadata: dict[str, str], value: str, datatype: str | None
) -> None:
    """What planning workers send back is equal to what they made (the
    units' fast unpickling skips the constructor's checks)."""
    unit = IndexUnit(unit_uri("01JD0000000000000000000000", path, "L1-L2"), content, metadata)
    literal = Literal(value, datatype)
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        back, lit = pickle.loads(pickle.dumps((unit, literal), protocol=protocol))
        assert back == unit
        assert type(back) is IndexUnit and back.resource_id == unit.resource_id
        assert lit == literal and type(lit) is Literal
