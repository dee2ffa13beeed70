"""Which merged keys a tombstone set hides (`conch.scan.merge.tombstone_times`): for an integer
key by binary search over the merged keys, checked against a hash membership test."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from conch.scan.merge import _sorted_members

values = st.lists(st.integers(-50, 50), max_size=60)


@settings(deadline=None, max_examples=300)
@given(column=values, members=values, chunks=st.integers(1, 3))
def test_sorted_members_equals_membership(column: list[int], members: list[int], chunks: int) -> None:
    col = sorted(column)  # ascending, repeats allowed: a parent level's key among a child's keys
    step = max(1, len(col) // chunks)
    chunked = pa.chunked_array([col[i : i + step] for i in range(0, len(col), step)] or [[]], pa.int64())
    got = _sorted_members(chunked, pa.array(members, pa.int64()))
    assert got.dtype == bool and len(got) == len(col)
    assert np.array_equal(got, np.isin(np.array(col, dtype=np.int64), np.array(members, dtype=np.int64)))
