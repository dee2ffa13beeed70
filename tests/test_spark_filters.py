"""The `where` read option's split into value filter, exact key filter and key range (no Spark
session needed)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conch.engines.spark.filters import split_where
from conch.errors import FilterSyntaxError
from conch.expr.syntax import parse
from conch.expr.tree import mask
from conch.model.keys import KeyRange

KEYS = [pa.field("id", pa.uint64()), pa.field("sub", pa.string())]


def test_value_and_key_terms_are_split() -> None:
    pushed = split_where(parse("x < 0.1 and id >= 10 and name in ['a', 'b'] and id <= 20"), KEYS)
    assert repr(pushed.where) == "((x < 0.1) & name.isin(['a', 'b']))"
    assert repr(pushed.key_filter) == "((id >= 10) & (id <= 20))"
    assert pushed.key_range == KeyRange((10,), (21,))
    assert split_where(None, KEYS).where is None


def test_ranges_only_from_bounds_that_fit_the_key_type() -> None:
    assert split_where(parse("id in [5, 3, 9]"), KEYS).key_range == KeyRange((3,), (10,))
    assert split_where(parse("3 < id"), KEYS).key_range == KeyRange((4,), None)  # literal on the left; 3 excluded
    pushed = split_where(parse("id > -5"), KEYS)  # outside uint64: no range, still exact
    assert pushed.key_range is None and pushed.key_filter is not None
    assert split_where(parse("sub == 'a'"), KEYS).key_range is None  # not the first key column
    assert split_where(parse("not (id == 3)"), KEYS).key_range is None


def test_terms_mixing_keys_and_values_are_refused() -> None:
    with pytest.raises(FilterSyntaxError, match=r"mixes key columns \['id'\] with value columns \['x'\]"):
        split_where(parse("id < 3 or x > 1"), KEYS)


OPS = ["<", "<=", ">", ">=", "=="]


@settings(deadline=None, max_examples=200)
@given(
    st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 40)), min_size=1, max_size=3),
    st.lists(st.integers(0, 40), max_size=4),
)
def test_key_range_holds_every_key_the_filter_accepts(terms: list[tuple[str, int]], members: list[int]) -> None:
    text = " and ".join([f"id {op} {v}" for op, v in terms] + ([f"id in {members}"] if members else []))
    pushed = split_where(parse(text), KEYS[:1])
    ids = pa.array(range(50), pa.uint64())
    accepted = [i for i, ok in zip(range(50), mask(pushed.key_filter, lambda _: ids), strict=True) if ok]
    r = pushed.key_range
    assert r is not None
    for k in accepted:
        assert (r.start is None or (k,) >= r.start) and (r.end is None or (k,) < r.end), (text, k, r)
