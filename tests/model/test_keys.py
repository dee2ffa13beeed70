"""The key encoding: order-preserving, prefix-preserving, invertible."""

from __future__ import annotations

import datetime as dt
import itertools

import hypothesis.strategies as st
import pyarrow as pa
from hypothesis import given, settings

from conch.model.keys import decode_key, encode_key, encode_keys, strictly_increasing

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


# Small domains, so that sorted lists tie on leading columns and repeat whole keys often.
SMALL_KEY = st.tuples(
    st.integers(-2, 2),
    st.sampled_from(["", "a", "a\x00", "ab", "b"]),
    st.sampled_from([-1.5, -0.0, 0.0, 2.0]),
    st.integers(0, 2),
)


@settings(deadline=None, max_examples=300)
@given(
    st.lists(SMALL_KEY, max_size=30),
    st.integers(1, 4),
    st.sampled_from(["as is", "sorted", "sorted unique"]),
    st.integers(1, 7),
)
def test_strictly_increasing_matches_the_encoded_order(keys: list[tuple], ncols: int, order: str, cut: int) -> None:
    """The write's presorted fast path (`strictly_increasing`: skip the sort, the take and the
    duplicate check) says True exactly when the encoded keys strictly increase, for any number of
    key columns of any type, ties on leading columns, -0.0 vs 0.0 and chunked columns."""
    fields = FIELDS[:ncols]
    keys = [k[:ncols] for k in keys]
    if order != "as is":
        keys = sorted(keys, key=lambda k: encode_key(k, fields))
    if order == "sorted unique":
        keys = list({encode_key(k, fields): k for k in keys}.values())
    cols = [
        pa.chunked_array(
            [pa.array([k[i] for k in keys[j : j + cut]], f.type) for j in range(0, len(keys), cut)], f.type
        )
        for i, f in enumerate(fields)
    ]
    table = pa.table(cols, names=[f.name for f in fields])
    enc = [encode_key(k, fields) for k in keys]
    assert strictly_increasing(table) == all(a < b for a, b in itertools.pairwise(enc))
