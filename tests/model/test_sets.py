"""`conch.model.sets` (sorted-array sets by one sort) against NumPy's own set functions."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from conch.model import sets

ints = hnp.arrays(np.int64, st.integers(0, 300), elements=st.integers(-50, 50))
uints = hnp.arrays(np.uint64, st.integers(0, 300), elements=st.integers(0, 2**64 - 1))


@settings(deadline=None, max_examples=200)
@given(st.one_of(ints, uints))
def test_distinct_is_numpys_unique(x: np.ndarray) -> None:
    assert np.array_equal(sets.distinct(x), np.unique(x))
    values, inverse = sets.distinct_inverse(x)
    assert np.array_equal(values, np.unique(x))
    assert np.array_equal(values[inverse], x)


@settings(deadline=None, max_examples=200)
@given(st.lists(ints, max_size=4), ints)
def test_union_and_membership(parts: list[np.ndarray], rows: np.ndarray) -> None:
    union = sets.sorted_union(*parts)
    assert np.array_equal(union, np.unique(np.concatenate(parts)) if parts else np.zeros(0))
    if len(union):
        assert np.array_equal(sets.member(rows, union), np.isin(rows, union))
    distinct_parts = [sets.distinct(p) for p in parts]  # `outside` takes sorted, distinct sets
    assert np.array_equal(sets.outside(rows, *distinct_parts), ~np.isin(rows, union))


def test_void_rows_group_as_numpys_unique_rows() -> None:
    """`write.presence` groups rows of bits as bytes: the same groups as `np.unique(axis=0)`."""
    bits = np.random.default_rng(3).random((5000, 11)) < 0.3
    packed = np.ascontiguousarray(np.packbits(bits, axis=1, bitorder="little"))
    values, inverse = sets.distinct_inverse(packed.view(np.dtype((np.void, packed.shape[1])))[:, 0])
    assert len(values) == len(np.unique(bits, axis=0))
    rows = np.unpackbits(values.view(np.uint8).reshape(len(values), -1), axis=1, count=11, bitorder="little")
    assert np.array_equal(rows[inverse].astype(bool), bits)
