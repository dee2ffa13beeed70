"""Keys: validation, the order-preserving byte encoding, and key predicates (DESIGN §1, §3).

One byte encoding of composite keys defines key order, key spans in manifests, key ranges and
prefixes: `a < b` (tuple order) iff `encode(a) < encode(b)` (byte order), and the encoding of a
key prefix is a byte prefix of the encoding of every key that extends it.

- integers: big-endian with the sign bit flipped;
- floats: IEEE bits, all flipped when negative, else the sign bit flipped (-0.0 is 0.0; NaN is
  rejected as a key);
- timestamps: their int64 value;
- utf8 / binary: bytes with 0x00 escaped as 0x00 0xFF, terminated by 0x00 0x00.

Hot paths (merging runs) compare typed Arrow columns directly; the encoding is used where keys
of any schema must be compared as one value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.errors import DuplicateKeyError, InexactKeyError, InvalidKeyError, KeyTypeError, SchemaError
from conch.model.sets import distinct

MAX_KEY_BYTES = 1024


# ----- validation ---------------------------------------------------------------------------
def validate_key_columns(table: pa.Table, key_fields: Sequence[pa.Field], what: str = "write") -> pa.Table:
    """Cast the key columns of `table` to the key schema and check every value is a valid key."""
    for f in key_fields:
        if f.name not in table.column_names:
            raise SchemaError(
                f"{what} is missing key column {f.name!r}; key columns are {[k.name for k in key_fields]}"
            )
    for f in key_fields:
        idx = table.column_names.index(f.name)
        col = table.column(idx)
        if col.type != f.type:
            col = _cast_key(col, f)
            table = table.set_column(idx, pa.field(f.name, f.type, nullable=False), col)
        if col.null_count:
            row = pc.index(pc.is_null(col), True).as_py()
            raise InvalidKeyError(f"key column {f.name!r} is null at row {row}; keys are never null")
        if pa.types.is_floating(f.type) and pc.any(pc.is_nan(col)).as_py():
            row = pc.index(pc.is_nan(col), True).as_py()
            raise InvalidKeyError(f"key column {f.name!r} is NaN at row {row}; NaN is not a key")
        if pa.types.is_string(f.type) or pa.types.is_binary(f.type):
            lengths = pc.binary_length(col)
            longest = pc.max(lengths).as_py() or 0
            if longest > MAX_KEY_BYTES:
                row = pc.index(pc.greater(lengths, MAX_KEY_BYTES), True).as_py()
                raise InvalidKeyError(
                    f"key column {f.name!r} at row {row} is {longest} bytes; keys hold at most {MAX_KEY_BYTES} bytes"
                )
    return table


def _cast_key(col: pa.ChunkedArray, f: pa.Field) -> pa.ChunkedArray:
    src = col.type
    same_family = (
        (pa.types.is_integer(src) and (pa.types.is_integer(f.type) or pa.types.is_floating(f.type)))
        or (pa.types.is_floating(src) and pa.types.is_floating(f.type))
        or (pa.types.is_timestamp(src) and pa.types.is_timestamp(f.type))
        or (_is_stringy(src) and pa.types.is_string(f.type))
        or (_is_binaryish(src) and pa.types.is_binary(f.type))
        or pa.types.is_null(src)
    )
    if not same_family:
        raise KeyTypeError(f"key column {f.name!r} must be {f.type}, got {src}")
    try:
        return col.cast(f.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        bad = _first_inexact(col.to_pylist(), f.type)
        raise InexactKeyError(
            f"key column {f.name!r}: cannot cast {src} to {f.type} exactly"
            f"{'' if bad is _NONE else f' (value {bad!r} is not a {f.type})'} ({e}); keys are never rounded or wrapped"
        ) from e


_NONE = object()
_CASTABLE = (pa.types.is_integer, pa.types.is_floating, pa.types.is_timestamp)


def _castable(t: pa.DataType) -> bool:
    return any(p(t) for p in _CASTABLE)


def _first_inexact(values: Sequence[Any], t: pa.DataType) -> Any:
    """The first value that is not exactly a value of type `t` (or `_NONE`)."""
    for v in values:
        if v is None:
            continue
        if isinstance(v, int | np.integer) and pa.types.is_integer(t):
            # by range, not through Arrow: an int above 2**63 has no inferred type of its own,
            # and a uint64 key 2**63 was refused as "not exactly a value" of uint64
            lo, hi = _int_range(t)
            if not lo <= int(v) <= hi:
                return v
            continue
        try:
            pa.array([v]).cast(t, safe=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            return v
    return _NONE


def key_array(values: Sequence[Any], f: pa.Field) -> pa.Array:
    """Python key values of column `f` as an array of its type, converted only exactly.

    The rule for every key argument (`scan(keys=)`, `delete(keys)`, `KeyRange` / `KeyPrefix`
    bounds, nested `level[key]`): a number or time is accepted when it *is* a value of the key
    type (`5.0` on a `uint64` key is key 5); `5.5`, `-1` or `2**64` on a `uint64` key raise
    `InexactKeyError` (never rounded, truncated or wrapped); a value of another kind (`"5"`, `True`
    on an integer key) raises `KeyTypeError`.
    """
    values = list(values)
    try:
        inferred: pa.Array | None = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        inferred = None
    if inferred is not None and inferred.type == f.type:
        return inferred
    if inferred is not None and _castable(inferred.type) and _castable(f.type):
        try:
            return inferred.cast(f.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # an inexact value (named below), or a cast Arrow lacks (tried directly below)
    numbers = _castable(f.type) and all(
        isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool | np.bool_)
        for v in values
        if v is not None
    )
    bad = _first_inexact(values, f.type) if numbers else _NONE
    if bad is not _NONE:
        raise InexactKeyError(
            f"key column {f.name!r} is {f.type}: {bad!r} is not exactly a value of it; "
            "keys are never rounded or wrapped (pass a whole number in the type's range)"
        )
    try:
        return pa.array(values, f.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as e:
        shown = next((v for v in values if v is not None), None)
        raise KeyTypeError(f"key column {f.name!r} must be {f.type}, got {shown!r} ({e})") from e


def _is_stringy(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_binaryish(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t) or _is_stringy(t)


def check_unique_sorted(keys: pa.Table) -> None:
    """Raise `DuplicateKeyError` naming the first key that appears twice in sorted `keys`."""
    n = keys.num_rows
    if n < 2:
        return
    same = np.ones(n - 1, dtype=bool)
    for col in keys.columns:
        same &= equal_adjacent(col)
    if same.any():
        i = int(np.argmax(same))
        raise duplicate_key_error({name: keys.column(name)[i].as_py() for name in keys.column_names})


def duplicate_key_error(key: dict[str, Any]) -> DuplicateKeyError:
    """The error for a key a write holds twice (`key`: column name -> value)."""
    return DuplicateKeyError(
        f"key {key} appears more than once in one write; a write must hold each key once "
        "(combine the rows, or write them in separate commits)"
    )


def numeric_key_type(t: pa.DataType) -> bool:
    """Whether a key column of type `t` compares as numpy numbers (timestamps as int64)."""
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_timestamp(t)


def key_space_schema(fields: Sequence[pa.Field]) -> pa.Schema:
    """The columns of a key-space file holding keys `fields`: named by position (`k0`, `k1`, ...),
    so renaming a key column leaves the files as they are."""
    return pa.schema([pa.field(f"k{i}", f.type) for i, f in enumerate(fields)])


def sort_indices(keys: pa.Table) -> pa.Array:
    """Row order that sorts `keys` by all its columns, ascending (stable).

    float16 columns are sorted as float32 (exact and order-preserving): Arrow cannot sort float16.
    """
    widened = [c.cast(pa.float32()) if pa.types.is_float16(c.type) else c for c in keys.columns]
    table = pa.table(widened, names=[f"k{i}" for i in range(len(widened))])
    return pc.sort_indices(table, [(n, "ascending") for n in table.column_names])


def sorted_unique(keys: pa.Table) -> pa.Table:
    """The distinct rows of `keys`, sorted."""
    keys = keys.take(sort_indices(keys))
    if keys.num_rows < 2:
        return keys
    same = np.ones(keys.num_rows - 1, dtype=bool)
    for col in keys.columns:
        same &= equal_adjacent(col)
    return keys.filter(pa.array(np.concatenate([[True], ~same])))


def strictly_increasing(keys: pa.Table) -> bool:
    """True when rows are already sorted by key (all columns, lexicographically) with no repeats.

    Lets a write of pre-sorted data (the common case for generated and range-partitioned data,
    e.g. TPC-H's `lineitem` by `(l_orderkey, l_linenumber)`) skip the sort, the take and the
    duplicate check: strictly increasing implies unique. One vectorised pass per column (adjacent
    rows compared; a later column decides only pairs the earlier ones tie); `-0.0` equals `0.0`,
    as in the key encoding.
    """
    n = keys.num_rows
    if n < 2:
        return True
    tied: np.ndarray | None = None  # pairs (i, i+1) equal in every earlier column (None: all)
    for chunked in keys.columns:
        col = chunked.combine_chunks()
        if numeric_key_type(col.type):
            v = col.to_numpy(zero_copy_only=False)
            less, eq = v[1:] < v[:-1], v[1:] == v[:-1]
        else:
            nxt, prev = col.slice(1), col.slice(0, n - 1)
            less = pc.less(nxt, prev).to_numpy(zero_copy_only=False)
            eq = pc.equal(nxt, prev).to_numpy(zero_copy_only=False)
        if (less if tied is None else less & tied).any():
            return False
        tied = eq if tied is None else tied & eq
        if not tied.any():
            return True
    return False  # adjacent rows equal in every column: a duplicate


def equal_adjacent(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Boolean array of length n-1: element i+1 equals element i."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if numeric_key_type(arr.type):
        v = arr.to_numpy(zero_copy_only=False)
        return np.asarray(v[1:] == v[:-1])
    eq = pc.equal(arr.slice(1), arr.slice(0, len(arr) - 1))
    return np.asarray(eq.to_numpy(zero_copy_only=False), dtype=bool)


# ----- encoding -----------------------------------------------------------------------------
def encode_column(arr: pa.Array | pa.ChunkedArray) -> np.ndarray | pa.Array:
    """Encode one key column: an (n, width) uint8 array for fixed-width types, else a binary array.

    (Not numpy `S<w>` strings: those drop trailing NUL bytes, which breaks self-delimitation.)
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if pa.types.is_timestamp(t):
        arr = arr.cast(pa.int64())
        t = arr.type
    if pa.types.is_integer(t):
        v = arr.to_numpy(zero_copy_only=False)
        width = v.dtype.itemsize
        if pa.types.is_signed_integer(t):
            u = v.astype(f"<i{width}").view(f"<u{width}") ^ np.array(1 << (8 * width - 1), dtype=f"<u{width}")
        else:
            u = v.astype(f"<u{width}")
        return np.ascontiguousarray(u.astype(f">u{width}")).view(np.uint8).reshape(len(v), width)
    if pa.types.is_floating(t):
        v = arr.cast(pa.float64()).to_numpy(zero_copy_only=False) + 0.0  # -0.0 -> 0.0
        bits = v.view("<u8")
        sign = bits >> np.uint64(63)
        flipped = np.where(sign == 1, ~bits, bits | np.uint64(1 << 63))
        return np.ascontiguousarray(flipped.astype(">u8")).view(np.uint8).reshape(len(v), 8)
    if _is_binaryish(t):
        raw = arr.cast(pa.binary()) if not pa.types.is_binary(t) else arr
        escaped = pc.replace_substring(raw, pattern=b"\x00", replacement=b"\x00\xff")
        return pc.binary_join_element_wise(escaped, pa.scalar(b"\x00\x00", pa.binary()), _empty())
    raise KeyTypeError(f"cannot encode keys of type {t}")


def _empty() -> pa.Scalar:
    # Made on use: a module-level pa.scalar() makes pyarrow import pandas at `import conch`.
    return pa.scalar(b"", pa.binary())


def _as_binary(part: np.ndarray | pa.Array) -> pa.Array:
    if isinstance(part, np.ndarray):  # fixed-width rows: the offsets are a multiple of the width
        n, width = part.shape
        if n * width >= 1 << 31:  # beyond 32-bit offsets: Arrow's cast names the limit
            return pa.Array.from_buffers(pa.binary(width), n, [None, pa.py_buffer(part.tobytes())]).cast(pa.binary())
        offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
        return pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(part))]
        )
    return part


def encode_keys(columns: Sequence[pa.Array | pa.ChunkedArray]) -> pa.BinaryArray:
    """Encode rows of key columns as order-preserving byte strings."""
    if not columns:
        return pa.array([], pa.binary())
    parts = [encode_column(c) for c in columns]
    blocks = [p for p in parts if isinstance(p, np.ndarray)]
    if len(blocks) == len(parts):  # all fixed-width: one block, no per-row work
        return _as_binary(np.ascontiguousarray(np.hstack(blocks)) if len(blocks) > 1 else blocks[0])
    if len(parts) == 1:
        return _as_binary(parts[0])
    return pc.binary_join_element_wise(*[_as_binary(p) for p in parts], _empty())


class SortedBytes(Sequence[bytes]):
    """A sorted BinaryArray (encoded keys) seen as a sequence of bytes, for `bisect`: O(log n)
    element reads instead of converting the whole array to Python."""

    def __init__(self, arr: pa.BinaryArray) -> None:
        self.arr = arr

    def __len__(self) -> int:
        return len(self.arr)

    def __getitem__(self, i: Any) -> Any:
        return self.arr[i].as_py()


def encode_key(values: Sequence[Any], fields: Sequence[pa.Field]) -> bytes:
    """Encode one key, or a key prefix when `values` is shorter than `fields`."""
    if len(values) > len(fields):
        raise InvalidKeyError(f"key {tuple(values)} has more parts than the key {[f.name for f in fields]}")
    out = b""
    for v, f in zip(values, fields, strict=False):
        if v is None:
            raise InvalidKeyError(f"key column {f.name!r} is null; keys are never null")
        arr = key_array([v], f)
        if pa.types.is_floating(f.type) and v != v:
            raise InvalidKeyError(f"key column {f.name!r} is NaN; NaN is not a key")
        out += _as_binary(encode_column(arr))[0].as_py()
    return out


# ----- key predicates (key filtration) -------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KeyRange:
    """Keys `k` with `start <= k < end` in key order; either bound may be a key prefix or None.
    A one-column key's bounds may be scalars: `KeyRange(10, 12)` is `KeyRange((10,), (12,))`."""

    start: tuple[Any, ...] | None = None
    end: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, tuple):
                object.__setattr__(self, name, tuple(v) if isinstance(v, list) else (v,))


@dataclass(frozen=True, slots=True)
class KeyPrefix:
    """Keys whose leading columns equal `values`."""

    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class KeySet:
    """Exactly these keys (encoded, sorted, unique); `numeric`: the same keys as numpy where a
    one-column integer key's set was built from numbers (`to_key_predicate`), so a take looks
    them up without decoding them back."""

    encoded: pa.BinaryArray
    numeric: np.ndarray | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class EncodedRange:
    """A key predicate reduced to bytes: `lo <= enc(k) < hi` (None = unbounded)."""

    lo: bytes | None
    hi: bytes | None

    @property
    def empty(self) -> bool:
        """Whether no key is in the range."""
        return self.lo is not None and self.hi is not None and self.lo >= self.hi

    def intersect(self, other: EncodedRange) -> EncodedRange:
        """The keys in both ranges (possibly empty: `lo >= hi`)."""
        lo = other.lo if self.lo is None else self.lo if other.lo is None else max(self.lo, other.lo)
        hi = other.hi if self.hi is None else self.hi if other.hi is None else min(self.hi, other.hi)
        return EncodedRange(lo, hi)


KeyPredicate = KeyRange | KeyPrefix | KeySet


def _prefix_successor(b: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with `b`."""
    stripped = b.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def to_key_predicate(keys: Any, fields: Sequence[pa.Field]) -> KeyPredicate:
    """Normalize the `keys=` argument of a scan or delete."""
    if isinstance(keys, KeyRange | KeyPrefix | KeySet):
        return keys
    fast = _integer_key_set(keys, fields)
    if fast is not None:
        return fast
    table = key_table(keys, fields)
    enc = encode_keys(table.columns)
    return KeySet(pc.unique(pc.take(enc, pc.sort_indices(enc))))


def _integer_key_set(keys: Any, fields: Sequence[pa.Field]) -> KeySet | None:
    """The key set of a list (or numpy array) of Python / numpy integers on a one-column integer
    key, all in the key type's range, built without an Arrow key table: sorted and made unique
    as numbers (the encoding keeps integer order). None for anything else (`key_table` then
    validates it and names what is wrong). A 20-key take spent a third of its time there."""
    if len(fields) != 1 or not pa.types.is_integer(fields[0].type):
        return None
    t = fields[0].type
    dtype = np.dtype(t.to_pandas_dtype())
    lo, hi = _int_range(t)
    if isinstance(keys, np.ndarray):
        if keys.ndim != 1 or keys.dtype.kind not in "iu" or not len(keys):
            return None
        num = distinct(keys)
        if int(num[0]) < lo or int(num[-1]) > hi:
            return None
        num = num.astype(dtype)
    elif isinstance(keys, list) and keys and all(type(k) is int for k in keys):
        ordered = sorted(set(keys))
        if ordered[0] < lo or ordered[-1] > hi:
            return None  # out of the type's range: `key_array` raises `InexactKeyError`
        num = np.array(ordered, dtype=dtype)
    else:
        return None
    enc = encode_column(pa.array(num, t))
    assert isinstance(enc, np.ndarray)
    return KeySet(_as_binary(enc), num)


def _int_range(t: pa.DataType) -> tuple[int, int]:
    """The smallest and largest value of integer type `t`."""
    w = t.bit_width
    return (-(1 << (w - 1)), (1 << (w - 1)) - 1) if pa.types.is_signed_integer(t) else (0, (1 << w) - 1)


def key_table(keys: Any, fields: Sequence[pa.Field]) -> pa.Table:
    """Exact keys (list of values or tuples, dicts, or an Arrow table) as a validated key table."""
    names = [f.name for f in fields]
    if isinstance(keys, pa.RecordBatch):
        keys = pa.Table.from_batches([keys])
    if isinstance(keys, pa.Table):
        table = keys
    else:
        if hasattr(keys, "to_dict") and hasattr(keys, "columns"):  # pandas
            table = pa.Table.from_pandas(keys, preserve_index=False)
        else:
            rows = list(keys) if not isinstance(keys, str | bytes | int | float) else [keys]
            if rows and isinstance(rows[0], dict):
                table = pa.Table.from_pylist(rows)
            else:
                tuples = [r if isinstance(r, tuple) else (r,) for r in rows]
                for r in tuples:
                    if len(r) != len(fields):
                        raise InvalidKeyError(f"key {r} does not match key columns {names}")
                cols: list[Any] = list(zip(*tuples, strict=True)) if tuples else [() for _ in names]
                table = pa.table({n: key_array(c, f) for n, c, f in zip(names, cols, fields, strict=True)})
    missing = [n for n in names if n not in table.column_names]
    if missing:
        raise SchemaError(f"key table is missing key columns {missing}")
    return validate_key_columns(table.select(names), fields, "key table")


def predicate_bounds(pred: KeyPredicate, fields: Sequence[pa.Field]) -> EncodedRange:
    """The tightest encoded range containing every key the predicate admits."""
    if isinstance(pred, KeyRange):
        lo = encode_key(pred.start, fields) if pred.start is not None else None
        hi = encode_key(pred.end, fields) if pred.end is not None else None
        return EncodedRange(lo, hi)
    if isinstance(pred, KeyPrefix):
        p = encode_key(pred.values, fields)
        return EncodedRange(p, _prefix_successor(p))
    if len(pred.encoded) == 0:
        return EncodedRange(b"", b"")
    last = pred.encoded[-1].as_py()
    return EncodedRange(pred.encoded[0].as_py(), last + b"\x00")


def predicate_mask(pred: KeyPredicate, encoded: pa.BinaryArray, fields: Sequence[pa.Field]) -> pa.BooleanArray:
    """Which of the encoded keys the predicate admits."""
    if isinstance(pred, KeySet):
        return pc.is_in(encoded, value_set=pred.encoded)
    return range_mask(predicate_bounds(pred, fields), encoded)


def range_mask(r: EncodedRange, encoded: pa.BinaryArray) -> pa.BooleanArray:
    mask = pa.array(np.ones(len(encoded), dtype=bool))
    if r.lo is not None:
        mask = pc.and_(mask, pc.greater_equal(encoded, pa.scalar(r.lo, pa.binary())))
    if r.hi is not None:
        mask = pc.and_(mask, pc.less(encoded, pa.scalar(r.hi, pa.binary())))
    return mask


def span_overlaps(r: EncodedRange, lo: bytes, hi: bytes) -> bool:
    """Does the inclusive key span [lo, hi] meet the predicate's range?"""
    if r.lo is not None and hi < r.lo:
        return False
    return not (r.hi is not None and lo >= r.hi)


def decode_key(data: bytes, fields: Sequence[pa.Field]) -> tuple[Any, ...]:
    """Invert `encode_key` (used to show key spans); decodes as many columns as `data` holds."""
    out: list[Any] = []
    pos = 0
    for f in fields:
        if pos >= len(data):
            break
        t = f.type
        if pa.types.is_integer(t) or pa.types.is_timestamp(t):
            width = 8 if pa.types.is_timestamp(t) else t.bit_width // 8
            u = int.from_bytes(data[pos : pos + width], "big")
            signed = pa.types.is_timestamp(t) or pa.types.is_signed_integer(t)
            v = u - (1 << (8 * width - 1)) if signed else u
            out.append(pa.scalar(v, pa.int64()).cast(t).as_py() if pa.types.is_timestamp(t) else v)
            pos += width
        elif pa.types.is_floating(t):
            u = int.from_bytes(data[pos : pos + 8], "big")
            bits = u ^ (1 << 63) if u >> 63 else ~u & ((1 << 64) - 1)
            out.append(float(np.array([bits], dtype=np.uint64).view(np.float64)[0]))
            pos += 8
        else:
            raw = bytearray()
            while pos < len(data):
                b = data[pos]
                if b == 0:
                    if pos + 1 < len(data) and data[pos + 1] == 0xFF:
                        raw.append(0)
                        pos += 2
                        continue
                    pos += 2
                    break
                raw.append(b)
                pos += 1
            out.append(raw.decode("utf-8", "replace") if pa.types.is_string(t) else bytes(raw))
    return tuple(out)
