"""What the Milvus adapters store of text too long for a field (no server)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.infrastructure.acms.milvus_common import (
    MAX_VARCHAR_BYTES,
    fit_meta,
    fit_terms,
    fit_unit,
    fit_varchar,
)

URI = "uko://01JD5TD11B000000000000000A/a.py#L1-L1"


@given(st.text(min_size=0, max_size=40), st.integers(min_value=0, max_value=60))
@settings(max_examples=500, deadline=None, derandomize=True)
def test_fit_varchar_keeps_whole_characters_of_the_start(text: str, limit: int) -> None:
    fitted, cut = fit_varchar(text, limit)
    data = fitted.encode("utf-8")
    assert len(data) <= limit
    clean = text.encode("utf-8", "replace").decode("utf-8")
    assert clean.startswith(fitted)
    assert cut == (fitted != clean)


@given(
    st.lists(st.text("ab\u00e9\u4e2d1", min_size=1, max_size=5), max_size=20), st.integers(0, 40)
)
@settings(max_examples=500, deadline=None, derandomize=True)
def test_fit_terms_never_keeps_half_a_term(terms: list[str], limit: int) -> None:
    fitted, cut = fit_terms(" ".join(terms), limit)
    assert len(fitted.encode("utf-8")) <= limit
    kept = fitted.split()
    assert kept == terms[: len(kept)]
    assert cut == (kept != terms)


def test_a_unit_over_64_kib_fits_every_field() -> None:
    content = 'X = "' + "a1" * 40_000 + '"'
    terms = " ".join(["a", "1"] * 40_000)
    meta = {"path": "a.py", "start_line": "1", "symbols": "\u00e9" * 40_000, "calls": "c" * 70_000}
    row = fit_unit(URI, content, meta, terms)
    assert row["uko_uri"] == URI
    assert len(row["content"].encode()) == MAX_VARCHAR_BYTES
    assert content.startswith(row["content"])
    assert len(row["terms"].encode()) <= MAX_VARCHAR_BYTES
    assert len(json.dumps(row["meta"])) < 65_536
    assert row["meta"]["truncated"] == "content terms meta"
    assert row["meta"]["path"] == "a.py" and row["meta"]["start_line"] == "1"


def test_a_unit_that_fits_is_stored_as_given() -> None:
    meta = {"path": "a.py", "start_line": "1"}
    assert fit_unit(URI, "x", meta, "x a py") == {
        "uko_uri": URI,
        "content": "x",
        "terms": "x a py",
        "meta": meta,
    }
    assert fit_meta(meta) == (meta, False)


def test_a_uri_longer_than_a_varchar_is_refused() -> None:
    with pytest.raises(ValueError, match="uko_uri"):
        fit_unit(URI + "x" * 70_000, "x", {})


def test_metadata_cuts_what_describes_content_before_what_locates_the_unit() -> None:
    """Oversize is judged as encoded JSON: 3,000 emoji weigh 6 bytes each
    there, more than a 4,005-character path, which must stay whole."""
    meta = {
        "path": "d/" * 2000 + "x.py",
        "start_line": "1",
        "end_line": "9",
        "language": "python",
        "resource_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "symbols": "\U0001f600" * 3000,
        "calls": "\U0001f600" * 3000,
    }
    out, cut = fit_meta(meta)
    assert cut and len(json.dumps(out)) <= 65_536
    assert {k: out[k] for k in ("path", "start_line", "end_line", "language")} == {
        k: meta[k] for k in ("path", "start_line", "end_line", "language")
    }
