"""The fragment format's interface (`FragmentFormat`) and the records every format shares: file
references, written-file receipts, write jobs, column names, per-column statistics (DESIGN §3)."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.files.hotcache import ColumnCache
from conch.files.storage import Storage

ORDINAL = "_ord"  # u32 row position within the fragment; lets a pushed-down filter return row numbers


def column_name(column_id: int) -> str:
    return f"c{column_id}"


class FileRef(Protocol):
    """What a reader needs to know of a committed file: where it is and what it must hash to
    ("" where the table was written before checksums were recorded)."""

    @property
    def path(self) -> str: ...

    @property
    def checksum(self) -> str: ...


@dataclass(frozen=True, slots=True)
class StoredFile:
    """A file reference from a path and checksum alone (a file not yet in a table's state)."""

    path: str
    checksum: str = ""


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """A file just written: its size (Vortex file + blob file) and checksum (the digest of its
    block table, which also holds the blob values' hashes), for the WAL op."""

    bytes: int
    checksum: str = ""


@dataclass(frozen=True, slots=True)
class FileJob:
    """One file for `VortexFormat.write_many`: the table, its storage path, the columns stored
    out of line, whether to add the ordinal column."""

    table: pa.Table
    path: str
    blob_columns: tuple[str, ...] = ()
    ordinal: bool = False
    stats: bool = False  # compute `column_stats` of every column (a fragment's `c<id>` columns)


def column_stats(col: pa.ChunkedArray | pa.Array) -> tuple[Any, Any, int]:
    """(min, max, null_count) of a column; min/max are None where the type has no order."""
    t = col.type
    nulls = col.null_count
    if pa.types.is_float16(t):  # no Arrow kernels for float16; float32 holds it exactly
        col = col.cast(pa.float32())
    if not has_order(t) or len(col) == nulls:
        return None, None, nulls
    if (pa.types.is_string(t) or pa.types.is_binary(t)) and len(col) > 0:
        # Long values make useless bounds and bloat manifests: keep a truncated, still-valid lower
        # bound and drop the upper bound if it is long.
        mm = pc.min_max(col)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo is not None and len(lo) > 64:
            lo = lo[:64]
        if hi is not None and len(hi) > 64:
            hi = None
        return lo, hi, nulls
    mm = pc.min_max(col)
    return mm["min"].as_py(), mm["max"].as_py(), nulls


def encode_stats(stats: dict[int, tuple[Any, Any, int]], types: dict[int, pa.DataType]) -> str:
    """Per-column stats as a one-row Arrow batch (typed), base64 of its IPC stream."""
    arrays, names = [], []
    for cid, (lo, hi, nulls) in stats.items():
        t = types[cid]
        st = t if has_order(t) else pa.null()
        arrays += [
            pa.array([lo if st != pa.null() else None], st),
            pa.array([hi if st != pa.null() else None], st),
            pa.array([nulls], pa.int64()),
        ]
        names += [f"min.{cid}", f"max.{cid}", f"nulls.{cid}"]
    batch = pa.RecordBatch.from_arrays(arrays, names=names) if arrays else pa.RecordBatch.from_pydict({})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode()


def decode_stats(s: str) -> pa.RecordBatch:
    reader = pa.ipc.open_stream(pa.py_buffer(base64.b64decode(s)))
    batches = list(reader)
    return batches[0] if batches else reader.schema.empty_table().to_batches()[0]


def has_order(t: pa.DataType) -> bool:
    """Types whose min/max statistics are kept (and can prune)."""
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date(t)
    )


class FileQueue(Protocol):
    """Files written `threads` at a time while the caller goes on, each handed to its callback
    `(written, extra)` in submission order (`conch.files.fragments.WriteQueue`); a context
    manager that waits for every file on exit and discards the unpublished ones on an error."""

    def __enter__(self) -> FileQueue: ...

    def __exit__(self, et: Any, e: Any, tb: Any) -> None: ...

    def submit(
        self, job: FileJob, done: Callable[[WrittenFile, Any], None], after: Callable[[FileJob], Any] | None = None
    ) -> None: ...

    def drain(self) -> None: ...


class FragmentFormat(Protocol):
    """A fragment file format (DESIGN §3, §9): columns named by id, read by file reference (path
    + recorded checksum) through the storage it is bound to, taken by row indices, streamed in
    batches, filtered in-file. `VortexFormat` (`conch.files.fragments`) is the one implementation;
    everything above `files/` names this protocol."""

    name: str
    suffix: str
    storage: Storage  # where its files are read and written
    hot: ColumnCache  # decoded columns of small fragments filtered again and again (`hotcache`)

    def clear_cache(self) -> None: ...

    def read_once(self) -> contextlib.AbstractContextManager[None]: ...

    def counted(
        self, ref: FileRef, on_bytes: Callable[[int], None], *more: FileRef
    ) -> contextlib.AbstractContextManager[None]: ...

    def write(
        self, table: pa.Table, path: str, blob_columns: Sequence[str] = (), ordinal: bool = False
    ) -> WrittenFile: ...

    def write_many(
        self, jobs: Sequence[FileJob], threads: int = 1, after: Callable[[FileJob], Any] | None = None
    ) -> list[tuple[WrittenFile, Any]]: ...

    def queue(self, threads: int = 1) -> FileQueue: ...

    def has_column(self, ref: FileRef, name: str) -> bool: ...

    def filter_rows(self, ref: FileRef, expr: Any, indices: np.ndarray | None = None) -> np.ndarray: ...

    def read(
        self,
        ref: FileRef,
        columns: Sequence[str],
        schema: pa.Schema,
        indices: np.ndarray | None = None,
        blob_columns: Sequence[str] = (),
        refs: Sequence[str] = (),
        ref_min_bytes: int = 0,
    ) -> pa.Table: ...

    def read_many(
        self,
        parts: Sequence[tuple[FileRef, np.ndarray | None]],
        columns: Sequence[str],
        schema: pa.Schema,
        blob_columns: Sequence[str] = (),
        refs: Sequence[str] = (),
        ref_min_bytes: int = 0,
    ) -> pa.Table: ...

    def stream(
        self,
        ref: FileRef,
        columns: Sequence[str],
        schema: pa.Schema,
        indices: np.ndarray | None = None,
        blob_columns: Sequence[str] = (),
        expr: Any = None,
        ordinal: bool = False,
        refs: Sequence[str] = (),
        ref_min_bytes: int = 0,
    ) -> Iterator[pa.RecordBatch]: ...

    def dictionary_columns(self, ref: FileRef, columns: Sequence[str]) -> frozenset[str]:
        """Which of the string `columns` the file stores dictionary-encoded (its first chunk), so
        `stream` hands them back as dictionary arrays cheaply; a format without dictionaries: none."""
        ...

    def verify_file(self, ref: FileRef, blob_columns: Sequence[str] = ()) -> int: ...
