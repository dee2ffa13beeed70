"""The `where` read option goes whole to the scan: the one analysis (`conch.scan.filter`) cuts it
into key terms (a key range, exact keys, a filter on keys) and value terms, mixed terms included
(no Spark session needed: the reader's scan is the core's)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conch
from conch.expr.syntax import parse
from conch.expr.tree import mask
from conch.model.keys import KeyRange
from conch.scan.filter import analyse, extract

KEYS = [pa.field("id", pa.uint64()), pa.field("sub", pa.string())]


@pytest.fixture
def table(tmp_path: Path) -> conch.Table:
    t = conch.connect(tmp_path).create_table("t", [("id", pa.uint64()), ("sub", pa.string())])
    t.write([{"id": i, "sub": "ab"[i % 2], "x": i / 10, "name": "abc"[i % 3]} for i in range(30)])
    return t


def test_value_and_key_terms_are_split(table: conch.Table) -> None:
    scan = table.snapshot().scan(where=parse("x < 0.1 and id >= 10 and name in ['a', 'b'] and id <= 20"))
    req = scan.request
    assert [repr(t) for t in req.key_terms] == ["(id >= 10)", "(id <= 20)"]
    assert [repr(t) for t in req.value_terms] == ["(x < 0.1)", "name.isin(['a', 'b'])"]
    assert scan.plan.key_predicate == KeyRange((10,), (21,))
    assert analyse(None, table.state().schema, "").where is None


def test_ranges_only_from_bounds_that_fit_the_key_type(table: conch.Table) -> None:
    def key_range(text: str) -> object:
        return table.snapshot().scan(where=parse(text)).plan.key_predicate

    assert extract(parse("id in [5, 3, 9]"), KEYS).range == KeyRange((3,), (10,))
    assert key_range("3 < id") == KeyRange((4,), None)  # literal on the left; 3 excluded
    scan = table.snapshot().scan(where=parse("id > -5"))  # outside uint64: no range, still exact
    assert scan.plan.key_predicate is None and scan.plan.filter is not None
    assert scan.to_arrow().num_rows == 30
    assert key_range("sub == 'a'") is None  # not the first key column
    assert key_range("not (id == 3)") is None


def test_terms_mixing_keys_and_values_are_answered(table: conch.Table) -> None:
    """Spark refused `id < 3 or x > 1`; the core evaluates it on keys beside values."""
    scan = table.snapshot().scan("x", where=parse("id < 3 or x > 2.5"))
    assert scan.request.key_terms == () and len(scan.request.value_terms) == 1
    assert sorted(scan.to_arrow().column("id").to_pylist()) == [0, 1, 2, 26, 27, 28, 29]


OPS = ["<", "<=", ">", ">=", "=="]


@settings(deadline=None, max_examples=200)
@given(
    st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 40)), min_size=1, max_size=3),
    st.lists(st.integers(0, 40), max_size=4),
)
def test_key_range_holds_every_key_the_filter_accepts(terms: list[tuple[str, int]], members: list[int]) -> None:
    text = " and ".join([f"id {op} {v}" for op, v in terms] + ([f"id in {members}"] if members else []))
    where = parse(text)
    r = extract(where, KEYS[:1]).range
    ids = pa.array(range(50), pa.uint64())
    accepted = [i for i, ok in zip(range(50), mask(where, lambda _: ids), strict=True) if ok]
    assert r is not None
    for k in accepted:
        assert (r.start is None or (k,) >= r.start) and (r.end is None or (k,) < r.end), (text, k, r)
