"""Key-space joins (spec/001 "Join Needed Key Spaces"; DESIGN §5 step b).

The considered key spaces (sorted runs of unique keys) are merged into one row per distinct key,
newest run first within a key. Reading keys only, never values. Three cases, cheapest first:

- **zip**: one key space, or several holding identical key sets (a table written group by group,
  or a full rewrite of the same keys): no comparison sort; rows are interleaved by key position.
- **numeric run merge**: one integer/float/timestamp key column: the runs are concatenated newest
  first and stably arg-sorted with numpy, whose timsort merges the pre-sorted runs in
  O(n log runs); stability keeps newer rows first among equal keys.
- **general**: an Arrow multi-column sort with the run's time as the last sort key.

Key predicates select rows of each run by binary search (runs are sorted), not by a scan.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from conch.files.format import FileRef
from conch.files.keycache import INDEX_STEP, KeyIndex
from conch.model.keys import (
    EncodedRange,
    KeyPredicate,
    KeySet,
    SortedBytes,
    decode_key,
    equal_adjacent,
    predicate_bounds,
    predicate_mask,
    sort_indices,
)
from conch.model.lru import Lru
from conch.model.sets import distinct


class IndexLookup(Protocol):
    """What `find_keys` needs of a key cache (`KeyCache`, or a scan's counted view of it)."""

    def index(self, ks: FileRef, fields: list[pa.Field]) -> KeyIndex: ...

    def numeric_at(self, ks: FileRef, fields: list[pa.Field], rows: np.ndarray) -> np.ndarray: ...


def find_keys(cache: IndexLookup, ks: FileRef, fields: list[pa.Field], pred: KeySet) -> tuple[np.ndarray, np.ndarray]:
    """(rows, keys) of a numeric key space holding keys of the key set `pred`, through the key
    space's sparse index: only the blocks some wanted key falls in are read, never the whole
    key table (a take of 50 keys from 100M keys reads at most 50 blocks per key space)."""
    idx = cache.index(ks, fields)
    want = _decoded_set(pred, fields).astype(idx.firsts.dtype)
    blocks = np.searchsorted(idx.firsts, want, "right") - 1
    blocks = distinct(blocks[blocks >= 0])
    if not len(blocks):
        z = np.zeros(0, dtype=np.int64)
        return z, z.astype(idx.firsts.dtype)
    starts = blocks * INDEX_STEP
    ends = np.minimum(starts + INDEX_STEP, idx.rows)
    rows = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in zip(starts, ends, strict=True)])
    vals = cache.numeric_at(ks, fields, rows)
    hit = distinct(_exact(vals, want))
    return rows[hit], vals[hit]


def numeric_key(fields: Sequence[pa.Field]) -> bool:
    """One key column whose numpy order is key order (ints, timestamps; floats: -0.0 == 0.0 is
    the key encoding's rule too, and NaN keys are refused at write)."""
    if len(fields) != 1:
        return False
    t = fields[0].type
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_timestamp(t)


@dataclass
class MergedKeys:
    """The considered key-space rows, sorted by key then newest first.

    `gid` numbers the distinct keys (row → key); `keys` holds one row per distinct key; `alive[g]`
    says key g exists after tombstones; `row_ok[r]` says row r is newer than its key's tombstone.
    """

    keys: pa.Table
    ks: np.ndarray  # row → index of its key space in the plan
    row: np.ndarray  # row → row within its key space
    gid: np.ndarray
    alive: np.ndarray
    row_ok: np.ndarray
    strategy: str = "zip"


class KeyLookup(Protocol):
    """What `predicate_rows` needs of a key cache (`KeyCache`, or a scan's counted view of it)."""

    def encoded(self, ks: FileRef, fields: list[pa.Field]) -> pa.BinaryArray: ...

    def numeric(self, ks: FileRef, fields: list[pa.Field]) -> np.ndarray: ...


class ScanKeys(KeyLookup, Protocol):
    """What `selected_rows` needs: a scan's view of the key cache (`context.CountedKeys`), which
    finds a key space's rows of the scan's key predicate once (`predicate_rows`, remembered)."""

    def rows(self, ks: FileRef, fields: list[pa.Field], pred: KeyPredicate) -> np.ndarray: ...


def predicate_rows(cache: KeyLookup, ks: FileRef, fields: list[pa.Field], pred: KeyPredicate) -> np.ndarray:
    """Rows of a sorted key space that the key predicate admits, by binary search."""
    if isinstance(pred, KeySet):
        if numeric_key(fields):
            keys = cache.numeric(ks, fields)
            want = _decoded_set(pred, fields).astype(keys.dtype, copy=False)
            pos = _exact(keys, want).astype(np.int64, copy=False)
            # a key set is sorted and unique, and so is a key space: the rows are ascending
            return pos if (pos[1:] > pos[:-1]).all() else distinct(pos)
        m = predicate_mask(pred, cache.encoded(ks, fields), fields)
        return np.nonzero(np.asarray(m.to_numpy(zero_copy_only=False), dtype=bool))[0]
    r = predicate_bounds(pred, fields)
    enc = cache.encoded(ks, fields)
    lo = 0 if r.lo is None else bisect.bisect_left(SortedBytes(enc), r.lo)
    hi = len(enc) if r.hi is None else bisect.bisect_left(SortedBytes(enc), r.hi)
    return np.arange(lo, max(lo, hi), dtype=np.int64)


def selected_rows(
    cache: ScanKeys, ks: FileRef, fields: list[pa.Field], pred: KeyPredicate | None, within: EncodedRange | None
) -> np.ndarray | None:
    """Rows of a sorted key space admitted by the key predicate and inside a split's range
    `within` (full-key encodings), by binary search; None when every row is."""
    rows = cache.rows(ks, fields, pred) if pred is not None else None
    if within is None:
        return rows
    if numeric_key(fields):
        keys = cache.numeric(ks, fields)
        lo = 0 if within.lo is None else int(np.searchsorted(keys, numeric_bound(within.lo, fields), "left"))
        hi = len(keys) if within.hi is None else int(np.searchsorted(keys, numeric_bound(within.hi, fields), "left"))
    else:
        enc = cache.encoded(ks, fields)
        lo = 0 if within.lo is None else bisect.bisect_left(SortedBytes(enc), within.lo)
        hi = len(enc) if within.hi is None else bisect.bisect_left(SortedBytes(enc), within.hi)
    if rows is None:
        return np.arange(lo, max(lo, hi), dtype=np.int64)
    return rows[(rows >= lo) & (rows < hi)]


def within_numeric(vals: np.ndarray, within: EncodedRange, fields: list[pa.Field]) -> np.ndarray:
    """Which numeric keys `vals` fall inside a split's range `within` (full-key encodings)."""
    ok = np.ones(len(vals), dtype=bool)
    if within.lo is not None:
        ok &= vals >= numeric_bound(within.lo, fields)
    if within.hi is not None:
        ok &= vals < numeric_bound(within.hi, fields)
    return ok


_DECODED: Lru[int, tuple[KeySet, np.ndarray]] = Lru(max_entries=16)


def _decoded_set(pred: KeySet, fields: list[pa.Field]) -> np.ndarray:
    """A numeric key set's keys as numpy (timestamps: int64), decoded once per key set, not once
    per key space it is looked up in (a take over 1,000 runs decoded every key 1,000 times)."""
    if pred.numeric is not None:  # built from numbers (`to_key_predicate`): nothing to decode
        return pred.numeric
    hit = _DECODED.get(id(pred))
    if hit is not None and hit[0] is pred:
        return hit[1]
    want = decode_numeric(pred.encoded, fields[0].type)
    _DECODED.put(id(pred), (pred, want))  # the entry keeps `pred` alive, so its id stays its own
    return want


def decode_numeric(encoded: pa.BinaryArray, t: pa.DataType) -> np.ndarray:
    """Invert `encode_column` for a one-column numeric key, vectorised (no Python per key): the
    keys as numpy (timestamps: their int64 value; floats: float64), from the fixed-width
    big-endian encodings (integers with the sign bit flipped, floats with the sign-dependent
    bit flip)."""
    n = len(encoded)
    width = 8 if pa.types.is_timestamp(t) or pa.types.is_floating(t) else t.bit_width // 8
    offsets = np.frombuffer(encoded.buffers()[1], dtype=np.int32, count=n + 1, offset=encoded.offset * 4)
    if n == 0:
        signed = pa.types.is_timestamp(t) or pa.types.is_signed_integer(t)
        return np.zeros(0, dtype=np.float64 if pa.types.is_floating(t) else f"<{'i' if signed else 'u'}{width}")
    if offsets[-1] - offsets[0] != n * width or not (np.diff(offsets) == width).all():
        raise ValueError(f"encoded keys of {t} must be {width} bytes each")
    raw = np.frombuffer(encoded.buffers()[2], dtype=np.uint8, count=n * width, offset=int(offsets[0]))
    u = raw.view(f">u{width}").astype(f"<u{width}")
    if pa.types.is_floating(t):
        top = np.uint64(1 << 63)
        return np.where(u & top, u ^ top, ~u).view(np.float64)
    if pa.types.is_timestamp(t) or pa.types.is_signed_integer(t):
        return (u ^ np.array(1 << (8 * width - 1), dtype=f"<u{width}")).view(f"<i{width}")
    return u


def numeric_bound(encoded: bytes, fields: list[pa.Field]) -> Any:
    """A full one-column numeric key's encoding as the value numpy compares (timestamps: int64)."""
    return _bound(encoded, tuple(fields))


@functools.lru_cache(maxsize=4096)
def _bound(encoded: bytes, fields: tuple[pa.Field, ...]) -> Any:
    # memoised: a scan cuts its segments at every base run's first key (20+ runs of an LSM tree
    # being written), and decoding one key costs ~0.1 ms
    arr = pa.array([decode_key(encoded, list(fields))[0]], fields[0].type)
    if pa.types.is_timestamp(arr.type):
        arr = arr.cast(pa.int64())
    return arr.to_numpy(zero_copy_only=False)[0]


def _exact(keys: np.ndarray, want: np.ndarray) -> np.ndarray:
    pos = np.searchsorted(keys, want)
    ok = pos < len(keys)
    pos = pos[ok]
    return pos[keys[pos] == want[ok]]


def merge_key_spaces(
    parts: list[pa.Table], rows: list[np.ndarray], times: np.ndarray, fields: list[pa.Field], numeric: list[Any]
) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """Merge sorted runs `parts` (key space i's selected keys, at rows `rows[i]`, committed at
    `times[i]`; runs are in ascending time order) into (distinct keys, ks, row, gid, first, strategy):
    rows sorted by key, newest first within a key, `first[g]` = row index of key g's newest row.
    `numeric[i]` is run i's key column as numpy when `numeric_key`, else None.
    """
    m = len(parts)
    names = [f.name for f in fields]
    n0 = parts[0].num_rows
    if m == 1:
        gid = np.arange(n0, dtype=np.int64)
        return parts[0], np.zeros(n0, dtype=np.int32), rows[0], gid, gid, "zip"
    if all(p.num_rows == n0 for p in parts) and _identical(parts, numeric):
        # zip: identical key sets; row j of every run holds key j. Newest run first per key.
        newest_first = np.arange(m - 1, -1, -1, dtype=np.int32)
        ks = np.tile(newest_first, n0)
        row = np.stack([rows[i] for i in newest_first], axis=1).reshape(-1)
        gid = np.repeat(np.arange(n0, dtype=np.int64), m)
        return parts[0], ks, row, gid, np.arange(n0, dtype=np.int64) * m, "zip"
    # Concatenate newest run first, so a stable sort leaves newer rows first among equal keys.
    order_runs = list(range(m - 1, -1, -1))
    ks_all = np.concatenate([np.full(parts[i].num_rows, i, dtype=np.int32) for i in order_runs])
    row_all = np.concatenate([rows[i] for i in order_runs])
    if numeric[0] is not None:
        vals = np.concatenate([numeric[i] for i in order_runs])
        order = np.argsort(vals, kind="stable")
        sorted_vals = vals[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = sorted_vals[1:] != sorted_vals[:-1]
        strategy = "numeric run merge"
        combined = pa.concat_tables([parts[i] for i in order_runs])
    else:
        combined = pa.concat_tables([parts[i] for i in order_runs])
        seq = pa.array(np.arange(len(ks_all), dtype=np.int64))
        order = np.asarray(sort_indices(combined.append_column("__seq", seq)))
        sorted_t = combined.take(pa.array(order))
        new = np.ones(len(order), dtype=bool)
        if len(order) > 1:
            same = np.ones(len(order) - 1, dtype=bool)
            for n in names:
                same &= equal_adjacent(sorted_t.column(n))
            new[1:] = ~same
        strategy = "sort merge"
    gid = np.cumsum(new) - 1
    first = np.nonzero(new)[0]
    keys = combined.take(pa.array(order[first]))
    return keys, ks_all[order], row_all[order], gid, first, strategy


def _identical(parts: list[pa.Table], numeric: list[Any]) -> bool:
    if numeric[0] is not None:
        a = numeric[0]
        return all(np.array_equal(a, b) for b in numeric[1:])
    return all(p.equals(parts[0]) for p in parts[1:])
