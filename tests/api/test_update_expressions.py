"""Arithmetic in `update(set=...)` (issue 32, item 7): `t.price * 2` and `t["price"] * 2` are
values of the matched records, evaluated like filters (Arrow, checked), in one commit."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conch
from conch import _


@pytest.fixture
def table(tmp_path: Any) -> conch.Table:
    t = conch.connect(tmp_path).create_table("t", [("id", pa.int64())])
    t.write({"id": [1, 2, 3], "price": [1.5, 2.0, None], "q": [1, 2, 3]})
    return t


def test_both_spellings_of_arithmetic_update_the_matched_records(table: conch.Table) -> None:
    table.update(where=table.price > 1.6, set={"price": table.price * 2})  # before: ArrowInvalid
    table.update(where=table["id"] < 2, set={"price": table["price"] * 2 + 1})  # before: TypeError
    table.update(set={"q": -table["q"] + table["q"] * 10})
    table.update(where=table["id"] == 3, set={"q": _.q * 1})  # `_` resolves on the updated level
    assert table.scan().to_pylist() == [
        {"id": 1, "price": 4.0, "q": 9},
        {"id": 2, "price": 4.0, "q": 18},
        {"id": 3, "price": None, "q": 27},
    ]
    assert [r["id"] for r in table.scan(where=table["q"] / 9 > 1.5).to_pylist()] == [2, 3]


def test_arithmetic_is_a_value_not_a_filter_and_overflow_is_an_error(table: conch.Table) -> None:
    with pytest.raises(conch.ExpressionError, match="condition"):
        table.scan(where=table["q"] * 2)
    table.write({"id": [9], "q": [2**62]})
    with pytest.raises(conch.ExpressionError, match="overflow"):
        table.update(where=table["id"] == 9, set={"q": table["q"] * 4})
    assert table.scan(keys=[9]).to_pylist()[0]["q"] == 2**62


@settings(deadline=None, max_examples=20)
@given(st.lists(st.integers(-1000, 1000), min_size=1, max_size=8), st.integers(-5, 5), st.integers(-50, 50))
def test_update_arithmetic_matches_python(values: list[int], m: int, a: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        t = conch.connect(d).create_table("t", [("id", pa.int64())])
        t.write({"id": list(range(len(values))), "x": values, "y": [0] * len(values)})
        t.update(where=t.x > 0, set={"x": t.x * m + a - t.x, "y": a - t["x"] * m})
        rows = t.scan().to_pylist()
        assert [r["x"] for r in rows] == [v * m + a - v if v > 0 else v for v in values]
        assert [r["y"] for r in rows] == [a - v * m if v > 0 else 0 for v in values]
