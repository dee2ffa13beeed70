"""The key encoding: order-preserving, prefix-preserving, invertible."""

from __future__ import annotations

import datetime as dt

import hypothesis.strategies as st
import pyarrow as pa
from hypothesis import given

from conch.model.keys import decode_key, encode_key, encode_keys

FIELDS = [pa.field("i", pa.int32()), pa.field("s", pa.string()), pa.field("f", pa.float64()), pa.field("u", pa.uint8())]
KEY = st.tuples(
    st.integers(-(2**31), 2**31 - 1),
    st.text(max_size=6),
    st.floats(allow_nan=False, width=64).map(lambda x: x + 0.0),
    st.integers(0, 255),
)


@given(KEY, KEY)
def test_encoding_preserves_order(a: tuple, b: tuple) -> None:
    ea, eb = encode_key(a, FIELDS), encode_key(b, FIELDS)
    assert (a < b) == (ea < eb) and (a == b) == (ea == eb)


@given(KEY)
def test_encoding_round_trips_and_prefixes(k: tuple) -> None:
    enc = encode_key(k, FIELDS)
    assert decode_key(enc, FIELDS) == k
    for n in range(len(k)):
        assert enc.startswith(encode_key(k[:n], FIELDS))


@given(st.lists(KEY, min_size=1, max_size=20))
def test_vectorised_encoding_matches_scalar(keys: list[tuple]) -> None:
    cols = [pa.array([k[i] for k in keys], f.type) for i, f in enumerate(FIELDS)]
    assert encode_keys(cols).to_pylist() == [encode_key(k, FIELDS) for k in keys]


@given(st.lists(st.integers(0, 2**64 - 1), min_size=2, max_size=20))
def test_u64_keys_with_trailing_zero_bytes_stay_ordered(values: list[int]) -> None:
    enc = encode_keys([pa.array(values, pa.uint64())]).to_pylist()
    assert all(len(e) == 8 for e in enc)
    assert sorted(range(len(values)), key=lambda i: enc[i]) == sorted(range(len(values)), key=lambda i: values[i])


def test_timestamps_and_binary() -> None:
    fields = [pa.field("t", pa.timestamp("us")), pa.field("b", pa.binary())]
    k = (dt.datetime(2024, 5, 1, 12, 30), b"\x00\xff\x00")
    assert decode_key(encode_key(k, fields), fields) == k
    assert encode_key((dt.datetime(1969, 1, 1), b""), fields) < encode_key(k, fields)
