"""Large values out of line (docs/architecture.md, "Large values out of line"): binary, utf8 and
tensor columns whose values average >= `WriteOptions.large_value_bytes` are written to
`<fragment>.blobs`, the Vortex file keeping offsets, lengths and hashes, so a take reads exactly
the bytes of the rows it takes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

from conch.errors import InvalidArgumentError
from conch.files.blobsource import MAX_VALUE_BYTES, has_sources, source, token_rows
from conch.files.format import FileRef, column_stats
from conch.files.integrity import SealingWriter, value_hashes

BLOB_SUFFIX = ".blobs"


def blob_storable(t: pa.DataType) -> bool:
    """Types whose values can live in a blob file: binary, utf8, fixed-size lists of numbers."""
    if isinstance(t, pa.ExtensionType):
        return blob_storable(t.storage_type)
    if pa.types.is_binary(t) or pa.types.is_string(t):
        return True
    return pa.types.is_fixed_size_list(t) and (pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type))


def _value_bytes(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, Any]:
    """(starts, lengths, data buffer) of each value of a blob-storable array."""
    storage = arr.storage if isinstance(arr, pa.ExtensionArray) else arr
    t = storage.type
    if pa.types.is_fixed_size_list(t):
        width = t.value_type.bit_width // 8 * t.list_size
        flat = (
            storage.flatten()
            if storage.null_count == 0
            else storage.fill_null(pa.scalar([0] * t.list_size, t)).flatten()
        )
        starts = np.arange(len(storage), dtype=np.int64) * width
        lengths = np.full(len(storage), width, dtype=np.int64)
        buf = flat.buffers()[1]
        return starts, lengths, memoryview(buf)[flat.offset * (width // t.list_size) :]
    big = storage.cast(pa.large_binary()) if pa.types.is_binary(t) else storage.cast(pa.large_string())
    offs = np.frombuffer(big.buffers()[1], dtype=np.int64, count=len(big) + 1 + big.offset)[big.offset :]
    data = big.buffers()[2]
    return offs[:-1].copy(), np.diff(offs), memoryview(data) if data is not None else memoryview(b"")


def write_blobs(
    table: pa.Table,
    local_path: str,
    blob_columns: Sequence[str],
    writeback: Callable[[int, int, int], None] | None = None,
) -> tuple[pa.Table, int, str]:
    """Write the blob columns' values to the local scratch file `local_path` (made durable by the
    storage's `staged`; `writeback` starts the disk's writes as it grows: `SealingWriter`),
    sealed with its block table (`integrity.SealingWriter`); returns the table with
    `.off`/`.len`/`.sum` index columns in their place, the values' bytes and the file's
    checksum. Values given as streams (`conch.files.blobsource`) are copied in parts, never held
    whole."""
    written = 0
    with open(local_path, "wb") as raw:
        bf = SealingWriter(raw, writeback)
        for name in blob_columns:
            col = table.column(name)
            # chunk by chunk: a write's chunk is many input batches, and combining them would
            # copy every value once more (30 MB of images: ~10 ms)
            parts = []
            for arr in col.chunks or [pa.array([], col.type)]:
                offsets, lengths, sums, n = _write_chunk(bf, arr, written)
                parts.append((offsets, lengths, sums, np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)))
                written += n
            offsets, lengths, sums, valid = (np.concatenate(p) for p in zip(*parts, strict=True))
            idx = table.column_names.index(name)
            table = table.remove_column(idx)
            table = table.append_column(f"{name}.off", pa.array(offsets, pa.uint64(), mask=~valid))
            table = table.append_column(f"{name}.len", pa.array(lengths.astype(np.uint32), pa.uint32(), mask=~valid))
            table = table.append_column(f"{name}.sum", pa.array(sums, pa.uint32(), mask=~valid))
        checksum = bf.seal()
    return table, written, checksum


def _write_chunk(bf: Any, arr: pa.Array, base: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Write one chunk's values at file offset `base`; (offsets, lengths, hashes, bytes written)."""
    starts, lengths, data = _value_bytes(arr)
    streamed = token_rows(arr)
    if len(streamed):
        return _write_streamed(bf, arr, starts, lengths, data, streamed, base)
    lo = int(starts[0]) if len(starts) else 0
    hi = int(starts[-1] + lengths[-1]) if len(starts) else 0
    bf.write(data[lo:hi])
    return (starts - lo + base).astype(np.uint64), lengths, value_hashes(data, starts, lengths), hi - lo


def _write_streamed(
    bf: Any, arr: pa.Array, starts: np.ndarray, lengths: np.ndarray, data: Any, streamed: np.ndarray, base: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Write a column's values, the rows `streamed` copied from their sources part by part;
    returns (offsets, lengths, hashes, bytes written) of every row."""
    n = len(arr)
    offsets = np.zeros(n, dtype=np.uint64)
    lengths = lengths.astype(np.int64)
    sums = value_hashes(data, starts, lengths)
    pos, prev = base, 0
    for r in [*streamed.tolist(), n]:
        if r > prev:  # the run of in-memory values before row r, in one write
            lo, hi = int(starts[prev]), int(starts[r - 1] + lengths[r - 1])
            bf.write(data[lo:hi])
            offsets[prev:r] = starts[prev:r] - lo + pos
            pos += hi - lo
        if r == n:
            break
        blob = source(arr[r].as_py())
        assert blob is not None  # token_rows found it live
        h, size = xxhash.xxh3_64(), 0
        for part in blob.parts():
            bf.write(part)
            h.update(part)
            size += len(part)
            if size > MAX_VALUE_BYTES:
                raise InvalidArgumentError(f"{blob!r}: a value holds at most {MAX_VALUE_BYTES} bytes (4 GiB - 1)")
        offsets[r], lengths[r], sums[r] = pos, size, h.intdigest() & 0xFFFFFFFF
        pos += size
        prev = r + 1
    return offsets, lengths, sums, pos - base


def value_stats(col: pa.ChunkedArray | pa.Array) -> tuple[Any, Any, int]:
    """A written column's (min, max, null count): a column of values given as streams has only
    its null count (its Arrow values are tokens, `conch.files.blobsource`)."""
    return (None, None, col.null_count) if has_sources(col) else column_stats(col)


def index_fields(c: str, ref: FileRef) -> list[pa.Field]:
    """The blob index columns of blob column `c` (no hashes in files written before integrity)."""
    fields = [pa.field(f"{c}.off", pa.uint64()), pa.field(f"{c}.len", pa.uint32())]
    return [*fields, pa.field(f"{c}.sum", pa.uint32())] if ref.checksum else fields


@dataclass(frozen=True, slots=True)
class BlobIndex:
    """Where a blob column's values are: offsets, lengths (0 for nulls), validity, and each
    value's recorded hash (None in files written before integrity)."""

    offsets: np.ndarray
    lengths: np.ndarray
    valid: np.ndarray
    hashes: np.ndarray | None

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.offsets, self.lengths, self.valid, self.hashes) if a is not None)

    def take(self, rows: np.ndarray) -> BlobIndex:
        h = self.hashes[rows] if self.hashes is not None else None
        return BlobIndex(self.offsets[rows], self.lengths[rows], self.valid[rows], h)


def blob_index(t: pa.Table | pa.RecordBatch, c: str) -> BlobIndex:
    """The blob index of column `c` from its `.off` / `.len` (/ `.sum`) columns in `t`."""
    off = t.column(f"{c}.off")
    valid = np.asarray(off.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    o = off.fill_null(0).to_numpy().astype(np.int64)
    n = t.column(f"{c}.len").fill_null(0).to_numpy().astype(np.int64)
    n[~valid] = 0
    names = t.schema.names
    h = t.column(f"{c}.sum").fill_null(0).to_numpy() if f"{c}.sum" in names else None
    return BlobIndex(o, n, valid, h)


def coalesce(
    o: np.ndarray, n: np.ndarray, files: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, lengths, file) of the reads covering the values at offsets `o` with lengths `n`,
    in order, adjacent values merged into one read (vectorised: a take of thousands of values
    costs no Python per value); empty values need no read. `files` numbers each value's file
    (ascending; None: one file): a change of file always starts a read, so the values of many
    files are coalesced in one pass."""
    keep = n > 0
    o, n = o[keep], n[keep]
    f = files[keep] if files is not None else np.zeros(len(o), dtype=np.int64)
    if len(o) == 0:
        return o, n, f
    end = o + n
    starts = np.ones(len(o), dtype=bool)
    np.not_equal(o[1:], end[:-1], out=starts[1:])
    if files is not None:
        starts[1:] |= f[1:] != f[:-1]
    first = np.flatnonzero(starts)
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = len(o) - 1
    return o[first], end[last] - o[first], f[first]


def blob_array(data: np.ndarray, n: np.ndarray, valid: np.ndarray, t: pa.DataType) -> pa.Array:
    """An Arrow array of type `t` over `data`, the values laid end to end (lengths `n`, nulls
    of length 0), without copying the values."""
    storage_t = t.storage_type if isinstance(t, pa.ExtensionType) else t
    all_valid = bool(valid.all())
    if pa.types.is_fixed_size_list(storage_t):
        vt = storage_t.value_type
        width = vt.bit_width // 8 * storage_t.list_size
        flat = data
        if not all_valid:
            flat = np.zeros((len(n), width), dtype=np.uint8)
            flat[valid] = data.reshape(-1, width)
        values = pa.Array.from_buffers(vt, len(n) * storage_t.list_size, [None, pa.py_buffer(flat)])
        mask = None if all_valid else pa.array(~valid)
        arr: pa.Array = pa.FixedSizeListArray.from_arrays(values, storage_t.list_size, mask=mask)
    else:
        validity = None if all_valid else pa.array(valid).buffers()[1]
        large = pa.types.is_large_binary(storage_t) or pa.types.is_large_string(storage_t)
        # 32-bit offsets where the type has them and the values fit: no cast (a copy) afterwards
        small = not large and len(data) < 1 << 31
        offsets = np.zeros(len(n) + 1, dtype=np.int32 if small else np.int64)
        np.cumsum(n, out=offsets[1:])
        binary = pa.types.is_binary(storage_t) or pa.types.is_large_binary(storage_t)
        arr_t = storage_t if small else pa.large_binary() if binary else pa.large_string()
        arr = pa.Array.from_buffers(arr_t, len(n), [validity, pa.py_buffer(offsets), pa.py_buffer(data)])
        if arr.type != storage_t:
            arr = arr.cast(storage_t)
    if isinstance(t, pa.ExtensionType):
        arr = pa.ExtensionArray.from_storage(t, arr)
    return arr
