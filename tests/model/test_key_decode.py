"""The vectorised decoding of a take's numeric key set (`keyspace.decode_numeric`) is the inverse
of the key encoding, value for value, for every numeric key type: the per-key Python decoder
(`conch.model.keys.decode_key`) is the model."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from conch.model.keys import decode_key, encode_keys
from conch.scan.keyspace import decode_numeric

INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


@st.composite
def keys(draw: st.DrawFn) -> tuple[pa.DataType, pa.Array]:
    t = draw(st.sampled_from([*INTS, pa.float32(), pa.float64(), pa.timestamp("us"), pa.timestamp("ns", "UTC")]))
    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        vals: list = draw(st.lists(st.integers(int(info.min), int(info.max)), max_size=40))
    elif pa.types.is_timestamp(t):
        vals = draw(st.lists(st.integers(-(2**50), 2**50), max_size=40))
    else:
        width = 32 if t == pa.float32() else 64
        vals = draw(st.lists(st.floats(allow_nan=False, width=width), max_size=40))
    arr = pa.array(vals, pa.int64() if pa.types.is_timestamp(t) else t)
    return t, arr.cast(t) if pa.types.is_timestamp(t) else arr


@settings(max_examples=300, deadline=None)
@given(k=keys(), skip=st.integers(0, 3))
def test_decode_numeric_inverts_the_encoding(k: tuple[pa.DataType, pa.Array], skip: int) -> None:
    t, arr = k
    enc = encode_keys([arr]).slice(min(skip, len(arr)))  # an offset into the buffers too
    got = decode_numeric(enc, t)
    want = pa.array([decode_key(b, [pa.field("k", t)])[0] for b in enc.to_pylist()], t)
    want_np = (want.cast(pa.int64()) if pa.types.is_timestamp(t) else want).to_numpy(zero_copy_only=False)
    assert np.array_equal(got.astype(want_np.dtype), want_np)
    if not pa.types.is_floating(t):
        assert got.dtype == want_np.dtype
