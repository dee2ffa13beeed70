"""Fragment files: the `FragmentFormat` interface and its Vortex implementation (DESIGN §3, §9).

A fragment holds the rows of one column group for a contiguous run of one key space's rows,
sorted by key. Its columns are named by column id (`c<id>`) so renames are metadata-only; key
values are not stored here but in the key space. Files are opened lazily and cached by path:
they are immutable, so a cached footer never goes stale.

The format is bound to a `Storage` and reads through its ranged readers: it never sees a local
path, so fragments read the same from a directory or an object store. Readers are given a file
reference (a `Fragment` or `KeySpace`: path + recorded checksum), never a bare path.

Integrity (`conch.integrity`): every Vortex file ends with a block table whose digest is the
file's recorded checksum, and reads go through a `VerifiedReader` that checks each 64 KiB block
they touch; blob values are checked one by one against hashes kept in the blob index. Damage is a
`CorruptFileError` naming the file. Files with checksum "" (written before checksums were
recorded) have neither and are read unverified.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import errno
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch._deps import LazyModule
from conch.budget import DEFAULT_SPLIT
from conch.errors import CorruptFileError
from conch.integrity import VerifiedReader, check_values, seal_file, value_hashes
from conch.storage import RangeReader, Storage

vx: Any = LazyModule("vortex")

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


_pools: dict[int, tuple[int, ThreadPoolExecutor]] = {}  # threads -> (pid that made it, pool)
_pools_lock = threading.Lock()


def _encode_pool(threads: int) -> ThreadPoolExecutor:
    """A process-wide pool of `threads` encoder threads (made again in a forked child)."""
    with _pools_lock:
        made = _pools.get(threads)
        if made is None or made[0] != os.getpid():
            made = (os.getpid(), ThreadPoolExecutor(threads, thread_name_prefix="conch-encode"))
            _pools[threads] = made
        return made[1]


class VortexFormat:
    """Fragments and key spaces as Vortex files, with large values stored out of line.

    Vortex 0.90's writer cuts every column into chunks of >= 8192 rows and a take reads whole
    chunks, so a take of 100 rows of 20 KB blobs read a whole 400 MB file (measured: see
    `docs/architecture.md`). Large-value columns (binary, utf8, fixed-size tensors) are therefore
    written to a `<fragment>.blobs` file of concatenated values, and the Vortex file holds
    `c<id>.off` / `c<id>.len` / `c<id>.sum` (the value's hash) in their place. A take reads the
    small index rows, then exactly the taken values' bytes (adjacent ranges coalesced) and checks
    each against its hash; filters never touch the blob file.
    """

    name = "vortex"
    suffix = ".vortex"

    def __init__(
        self, storage: Storage, cache_size: int = 1024, segment_cache_bytes: int = DEFAULT_SPLIT.segment_cache
    ) -> None:
        self.storage = storage
        # Open files hold no descriptor (see LocalRangeReader): the bound is for footer memory.
        self._open: OrderedDict[str, tuple[Any, VerifiedReader | None]] = OrderedDict()
        self._cache_size = cache_size
        # One byte-bounded cache of raw segments shared by every open file: repeated takes from
        # the same fragment (one per output batch) do not re-read storage, and memory stays
        # bounded however many files a scan touches.
        self._segment_bytes = segment_cache_bytes
        self.segment_cache = vx.SegmentCache(segment_cache_bytes)
        # Byte counters of the reads in flight, by file path (see `counted`).
        self._counters: dict[str, list[Callable[[int], None]]] = {}
        self._lock = threading.Lock()
        # Blob index (offsets, lengths, validity: 17 B/row) of fragments taken from more than
        # once, so repeated random takes cost only the value preads; and open blob descriptors.
        self._blob_idx: OrderedDict[tuple[str, str], _BlobIndex] = OrderedDict()
        self._blob_idx_bytes = 0
        self._blob_idx_max = segment_cache_bytes
        self._takes: dict[str, int] = {}
        self._blob_readers: OrderedDict[str, RangeReader] = OrderedDict()
        self._local_store: Any = None

    def clear_cache(self) -> None:
        """Forget open files and cached segments (benchmarks use it to measure cold reads)."""
        self._open.clear()
        self._blob_idx.clear()
        self._blob_idx_bytes = 0
        self._takes.clear()
        with self._lock:
            for r in self._blob_readers.values():
                r.close()
            self._blob_readers.clear()
        self.segment_cache = vx.SegmentCache(self._segment_bytes)

    @contextmanager
    def counted(self, ref: FileRef, on_bytes: Callable[[int], None]) -> Iterator[None]:
        """Report every byte read from storage for `ref` (its Vortex file and blob file) to
        `on_bytes` while the block runs: a scan's own byte count, not a process-wide one.

        Vortex reads on its own threads, so the reader cannot be known from the thread: bytes
        are attributed by file. Two scans reading the same file at the same moment are each
        charged the bytes of both (the shared segment cache makes that rare and small)."""
        path = ref.path
        with self._lock:
            self._counters.setdefault(path, []).append(on_bytes)
        try:
            yield
        finally:
            with self._lock:
                listeners = self._counters[path]
                listeners.remove(on_bytes)
                if not listeners:
                    del self._counters[path]

    def _count(self, path: str, n: int) -> None:
        with self._lock:
            for on_bytes in self._counters.get(path, ()):
                on_bytes(n)

    def write(self, table: pa.Table, path: str, blob_columns: Sequence[str] = (), ordinal: bool = False) -> WrittenFile:
        """Write a fragment (or key space) at storage path `path`, durably; returns its size and
        checksum (to record in the WAL op: reads verify the file against it).

        `ordinal` adds a `_ord` column (0..n-1, ~3 KB per million rows with sequence encoding):
        Vortex 0.90 has no row-number expression, so a filter pushed into the file returns
        `_ord` to say which rows matched.
        """
        ((written, _),) = self.write_many([FileJob(table, path, tuple(blob_columns), ordinal)])
        return written

    def write_many(
        self, jobs: Sequence[FileJob], threads: int = 1, after: Callable[[FileJob], Any] | None = None
    ) -> list[tuple[WrittenFile, Any]]:
        """Write files as `write` does, encoding up to `threads` of them at once (Vortex's writer
        releases the GIL: docs/performance.md), and return `(written, extra)` in job order:
        `extra` is the columns' statistics for a job with `stats`, else `after(job)`, both
        computed in the worker beside the encoding. Storage is only touched
        from the calling thread (scratch paths handed out, then published in job order, inside
        the caller's `Storage.batch`), and at most `threads` encodings are in flight, so memory
        is bounded by `threads` files. On an error every scratch file is discarded and nothing
        appears at the jobs' paths that was not published before it."""
        out: list[tuple[WrittenFile, Any]] = []
        if threads <= 1 or len(jobs) <= 1:
            for job in jobs:
                with contextlib.ExitStack() as stack:
                    blob_local = (
                        stack.enter_context(self.storage.staged(job.path + BLOB_SUFFIX)) if job.blob_columns else ""
                    )
                    local = stack.enter_context(self.storage.staged(job.path))
                    res = self._encode(job, local, blob_local, after)
                out.append((WrittenFile(res[0] + self.storage.size(job.path), res[1]), res[2]))
            return out
        pool = _encode_pool(threads)
        inflight: collections.deque[tuple[FileJob, contextlib.ExitStack, Any]] = collections.deque()

        def finish() -> None:
            job, stack, fut = inflight.popleft()
            try:
                total, checksum, extra = fut.result()
            except BaseException as e:
                stack.__exit__(type(e), e, e.__traceback__)
                raise
            stack.close()  # publishes the files (in the batch, from this thread)
            out.append((WrittenFile(total + self.storage.size(job.path), checksum), extra))

        try:
            for job in jobs:
                stack = contextlib.ExitStack()
                blob_local = (
                    stack.enter_context(self.storage.staged(job.path + BLOB_SUFFIX)) if job.blob_columns else ""
                )
                local = stack.enter_context(self.storage.staged(job.path))
                inflight.append((job, stack, pool.submit(self._encode, job, local, blob_local, after)))
                if len(inflight) >= threads:
                    finish()
            while inflight:
                finish()
        except BaseException as e:
            while inflight:  # wait for the others, then discard their scratch files
                _, stack, fut = inflight.popleft()
                with contextlib.suppress(BaseException):
                    fut.result()
                stack.__exit__(type(e), e, e.__traceback__)
            raise
        return out

    def _encode(
        self, job: FileJob, local: str, blob_local: str, after: Callable[[FileJob], Any] | None
    ) -> tuple[int, str, Any]:
        """Encode one file into its scratch path(s); returns (blob bytes, checksum, after(job))."""
        table, total = job.table, 0
        if job.blob_columns:
            table, total = _write_blobs(table, blob_local, job.blob_columns)
        if job.ordinal:
            table = table.append_column(ORDINAL, pa.array(np.arange(table.num_rows, dtype=np.uint32)))
        # Through Vortex's object-store writer, not its local-file one: that one issues ~50
        # small writes per file through its async runtime (futex storms), 2.5-4 ms for a
        # one-row file against ~1 ms here; large files write at the same speed either way
        # (docs/performance.md, "Commit latency").
        try:
            vx.io.write(table, local, store=self._scratch_store())
        except RuntimeError as e:
            if "os error 2" not in str(e):
                raise
            # its scratch file vanished (a vacuum with grace 0 ran meanwhile): the same
            # error as any other staged file that vanished (`TableLog.staging`)
            raise FileNotFoundError(errno.ENOENT, f"the scratch file vanished while written ({e})", local) from e
        checksum = seal_file(local, total)
        if job.stats:
            stats = {int(name[1:]): column_stats(job.table.column(name)) for name in job.table.column_names}
            return total, checksum, stats
        return total, checksum, after(job) if after is not None else None

    def _scratch_store(self) -> Any:
        """The Vortex object store that writes `Storage.staged` scratch files (absolute paths)."""
        if self._local_store is None:
            self._local_store = vx.store.LocalStore()
        return self._local_store

    def _file(self, ref: FileRef) -> Any:
        path = ref.path
        entry = self._open.get(path)
        if entry is None:
            verified = None
            try:
                # Opened through a Python reader so every byte read from storage is counted
                # (`counted`, Scan.metrics()) and verified; measured as fast as vx.open here.
                # Files are immutable, so the path is a valid cache key.
                reader: Any = _CountingReader(self.storage.open(path), path, self._count)
                if ref.checksum:
                    reader = verified = VerifiedReader(reader, path, ref.checksum)
                f = vx.open_readable(reader, segment_cache=self.segment_cache, cache_key=path)
            except FileNotFoundError as e:
                raise CorruptFileError(f"{path} is missing: the table references it; restore it from a backup") from e
            except CorruptFileError:
                raise
            except Exception as e:  # vortex raises plain exceptions for corrupt files
                raise _damage(verified, f"cannot open {path}", e) from e
            entry = (f, verified)
            self._open[path] = entry
            if len(self._open) > self._cache_size:
                self._open.popitem(last=False)
        else:
            self._open.move_to_end(path)
        return entry[0]

    def has_column(self, ref: FileRef, name: str) -> bool:
        """Whether the file has a column called `name`."""
        return name in self._file(ref).dtype.names()

    def filter_rows(self, ref: FileRef, expr: Any, indices: np.ndarray | None = None) -> np.ndarray:
        """Row positions (sorted) where the Vortex expression `expr` is true, among `indices`
        if given: the filter runs inside the Vortex scan and only `_ord` is decoded."""
        if indices is not None and len(indices) == 0:
            return np.zeros(0, dtype=np.int64)
        f = self._file(ref)
        try:
            idx = vx.array(pa.array(indices, pa.uint64())) if indices is not None else None
            t = f.to_arrow([ORDINAL], expr=expr, indices=idx).read_all()
        except Exception as e:
            raise self._damage(ref, f"cannot filter {ref.path}", e) from e
        col = t.column(0)
        return np.asarray(col.to_numpy() if col.num_chunks else np.zeros(0), dtype=np.int64)

    def read(
        self,
        ref: FileRef,
        columns: Sequence[str],
        schema: pa.Schema,
        indices: np.ndarray | None = None,
        blob_columns: Sequence[str] = (),
    ) -> pa.Table:
        """Read `columns` (all rows, or the sorted row `indices`) cast to `schema`."""
        return self.read_many([(ref, indices)], columns, schema, blob_columns)

    def read_many(
        self,
        parts: Sequence[tuple[FileRef, np.ndarray | None]],
        columns: Sequence[str],
        schema: pa.Schema,
        blob_columns: Sequence[str] = (),
    ) -> pa.Table:
        """Read `columns` cast to `schema` from several files with the same blob columns (all
        rows, or the sorted row indices, of each), concatenated in order. A take over many
        fragments costs one Arrow array per column, not one per fragment: the blob values of
        every file are read straight into one buffer and checked in one pass."""
        parts = [(ref, idx) for ref, idx in parts if idx is None or len(idx)]
        if not parts:
            return schema.empty_table()
        inline = [c for c in columns if c not in blob_columns]
        blobs = [c for c in columns if c in blob_columns]
        tables, indexes = [], []
        for ref, indices in parts:
            t, idx = self._locate(ref, inline, blobs, schema, indices)
            tables.append(t)
            indexes.append(idx)
        got: dict[str, Any] = {}
        if inline:
            t = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
            got = {c: t.column(c) for c in inline}
        for c in blobs:
            got[c] = self._read_values(
                [(ref, idx[c]) for (ref, _), idx in zip(parts, indexes, strict=True)], schema.field(c).type
            )
        return pa.Table.from_arrays([got[c] for c in columns], schema=schema)

    def _locate(
        self, ref: FileRef, inline: list[str], blobs: list[str], schema: pa.Schema, indices: np.ndarray | None
    ) -> tuple[pa.Table, dict[str, _BlobIndex]]:
        """The inline columns of one file and where its blob values are (rows `indices` or all).
        A file taken from more than once keeps its blob index in memory (17 B/row), so a repeated
        random take reads only the values; the first take reads only the index rows it needs."""
        path = ref.path
        cached = False
        if blobs and indices is not None:
            if len(self._takes) > 65536:
                self._takes.clear()
            self._takes[path] = self._takes.get(path, 0) + 1
            cached = self._takes[path] > 1 or all((path, c) in self._blob_idx for c in blobs)
        fields = [schema.field(c) for c in inline]
        if not cached:
            for c in blobs:
                fields += _index_fields(c, ref)
        table = self._vortex_read(ref, pa.schema(fields), indices, inline + blobs)
        if cached:
            assert indices is not None
            return table, {c: self._index(ref, c).take(indices) for c in blobs}
        return table.select(inline), {c: _blob_index(table, c) for c in blobs}

    def _vortex_read(
        self, ref: FileRef, file_schema: pa.Schema, indices: np.ndarray | None, what: list[str]
    ) -> pa.Table:
        if not file_schema.names:
            return file_schema.empty_table()
        f = self._file(ref)
        try:
            idx = vx.array(pa.array(indices, pa.uint64())) if indices is not None else None
            return f.to_arrow(file_schema.names, indices=idx, schema=file_schema).read_all()
        except Exception as e:
            raise self._damage(ref, f"cannot read {what} from {ref.path}", e) from e

    def _read_values(self, parts: list[tuple[FileRef, _BlobIndex]], t: pa.DataType) -> pa.Array:
        """The blob values `parts` point at, file after file, as one Arrow array of type `t`:
        each file's (coalesced) ranges are read straight into one shared buffer and verified."""
        sizes = [int(idx.lengths.sum()) for _, idx in parts]
        data = np.empty(sum(sizes), dtype=np.uint8)
        pos = 0
        for (ref, idx), size in zip(parts, sizes, strict=True):
            if size:
                name = ref.path + BLOB_SUFFIX
                view = data.data[pos : pos + size]
                starts, lengths = coalesce(idx.offsets, idx.lengths)
                got = self._blob_reader(ref.path).read_into(starts.tolist(), lengths.tolist(), view)
                self._count(ref.path, got)
                if got != size:
                    raise CorruptFileError(
                        f"{name} is damaged: shorter than its index says ({got} of {size} bytes read)"
                    )
                if idx.hashes is not None:
                    check_values(view, idx.lengths, idx.valid, idx.hashes, name)
            pos += size
        if len(parts) == 1:
            return _blob_array(data, parts[0][1].lengths, parts[0][1].valid, t)
        lengths = np.concatenate([idx.lengths for _, idx in parts])
        return _blob_array(data, lengths, np.concatenate([idx.valid for _, idx in parts]), t)

    def stream(
        self,
        ref: FileRef,
        columns: Sequence[str],
        schema: pa.Schema,
        indices: np.ndarray | None = None,
        blob_columns: Sequence[str] = (),
        expr: Any = None,
        ordinal: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        """Stream `columns` (all rows, or the sorted row `indices`, rows where the Vortex `expr`
        holds) as record batches cast to `schema`, one Vortex chunk at a time. With `ordinal`,
        each batch ends with the `_ord` column (row positions within the fragment)."""
        if indices is not None and len(indices) == 0:
            return
        inline = [c for c in columns if c not in blob_columns]
        blobs = [c for c in columns if c in blob_columns]
        file_fields = [schema.field(c) for c in inline]
        for c in blobs:
            file_fields += _index_fields(c, ref)
        if ordinal:
            file_fields.append(pa.field(ORDINAL, pa.uint32()))
        file_schema = pa.schema(file_fields)
        out_schema = schema.append(pa.field(ORDINAL, pa.uint32())) if ordinal else schema
        f = self._file(ref)
        try:
            idx = vx.array(pa.array(indices, pa.uint64())) if indices is not None else None
            reader = f.to_arrow(file_schema.names, expr=expr, indices=idx, schema=file_schema)
        except Exception as e:
            raise self._damage(ref, f"cannot read {list(columns)} from {ref.path}", e) from e
        while True:
            try:
                batch = next(reader, None)
            except Exception as e:  # a damaged chunk surfaces while streaming
                raise self._damage(ref, f"cannot read {list(columns)} from {ref.path}", e) from e
            if batch is None:
                return
            if batch.num_rows == 0:
                continue
            if not blobs:
                yield batch
                continue
            arrays = []
            for c in out_schema.names:
                if c in blobs:
                    arrays.append(self._read_values([(ref, _blob_index(batch, c))], schema.field(c).type))
                else:
                    arrays.append(batch.column(c))
            yield pa.RecordBatch.from_arrays(arrays, schema=out_schema)

    def _index(self, ref: FileRef, c: str) -> _BlobIndex:
        key = (ref.path, c)
        e = self._blob_idx.get(key)
        if e is None:
            fs = pa.schema(_index_fields(c, ref))
            try:
                t = self._file(ref).to_arrow(fs.names, schema=fs).read_all()
            except Exception as ex:
                raise self._damage(ref, f"cannot read the blob index of {c} in {ref.path}", ex) from ex
            e = _blob_index(t, c)
            self._blob_idx[key] = e
            self._blob_idx_bytes += e.nbytes
            while self._blob_idx_bytes > self._blob_idx_max and len(self._blob_idx) > 1:
                _, old = self._blob_idx.popitem(last=False)
                self._blob_idx_bytes -= old.nbytes
        else:
            self._blob_idx.move_to_end(key)
        return e

    def verify_file(self, ref: FileRef, blob_columns: Sequence[str] = ()) -> int:
        """Read and verify every byte of a file and every value of its blob file (for
        `Table.check()`); returns the bytes checked, raises `CorruptFileError` naming the file.

        A file written before integrity (checksum "") can only be decoded in full, which finds
        damage that breaks decoding and misses the rest.
        """
        try:
            reader = self.storage.open(ref.path)
        except FileNotFoundError as e:
            raise CorruptFileError(f"{ref.path} is missing: the table references it") from e
        try:
            if not ref.checksum:
                try:
                    f = vx.open_readable(reader)
                    for _ in f.to_arrow(f.dtype.names()):
                        pass
                except Exception as e:
                    raise CorruptFileError(f"cannot decode {ref.path}: {e}") from e
                return reader.size()
            verified = VerifiedReader(reader, ref.path, ref.checksum)
            step = 64 * verified.block  # bounded memory: 4 MiB at a time
            for pos in range(0, verified.payload, step):
                verified.read_at(pos, step)
            return reader.size() + (self._verify_blobs(ref, verified, blob_columns) if blob_columns else 0)
        finally:
            reader.close()

    def _verify_blobs(self, ref: FileRef, verified: VerifiedReader, blob_columns: Sequence[str]) -> int:
        name = ref.path + BLOB_SUFFIX
        try:
            size = self.storage.size(name)
        except FileNotFoundError as e:
            raise CorruptFileError(f"{name} is missing: the table references it") from e
        if size != verified.blob_bytes:
            raise CorruptFileError(f"{name} is damaged: it is {size} bytes, its fragment says {verified.blob_bytes}")
        for c in blob_columns:
            idx = self._index(ref, c)
            ends = np.cumsum(idx.lengths)
            start = 0
            while start < len(ends):  # values in runs of ~8 MiB: bounded memory
                base = ends[start - 1] if start else 0
                stop = max(start + 1, int(np.searchsorted(ends, base + (8 << 20), side="right")))
                rows = np.arange(start, stop)
                self._read_values([(ref, idx.take(rows))], pa.binary())
                start = stop
        return size

    def _damage(self, ref: FileRef, what: str, e: Exception) -> CorruptFileError:
        """The error for a failed Vortex read: the verifier's own finding when it made the read
        fail, else Vortex's message (an unsealed file that does not decode)."""
        entry = self._open.get(ref.path)
        return _damage(entry[1] if entry else None, what, e)

    def _blob_reader(self, path: str) -> RangeReader:
        """The (cached) ranged reader of a fragment's blob file."""
        with self._lock:
            r = self._blob_readers.get(path)
            if r is None:
                try:
                    r = self._blob_readers[path] = self.storage.open(path + BLOB_SUFFIX)
                except FileNotFoundError as e:
                    raise CorruptFileError(f"{path}{BLOB_SUFFIX} is missing: the table references it") from e
                if len(self._blob_readers) > 64:
                    self._blob_readers.popitem(last=False)[1].close()
            else:
                self._blob_readers.move_to_end(path)
            return r


def _damage(verified: VerifiedReader | None, what: str, e: Exception) -> CorruptFileError:
    if verified is not None and verified.failure is not None:
        return verified.failure
    return CorruptFileError(f"{what}: {e}")


class _CountingReader:
    """A `RangeReader` over a storage reader that reports every byte read from storage."""

    def __init__(self, reader: RangeReader, path: str, count: Callable[[str, int], None]) -> None:
        self._reader = reader
        self._path = path
        self._count = count

    def size(self) -> int:
        return self._reader.size()

    def read_at(self, offset: int, length: int) -> bytes:
        self._count(self._path, length)
        return self._reader.read_at(offset, length)

    def read_into(self, offsets: Sequence[int], lengths: Sequence[int], out: memoryview) -> int:
        self._count(self._path, sum(lengths))
        return self._reader.read_into(offsets, lengths, out)

    def close(self) -> None:
        self._reader.close()


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


def _write_blobs(table: pa.Table, local_path: str, blob_columns: Sequence[str]) -> tuple[pa.Table, int]:
    """Write the blob columns' values to the local scratch file `local_path` (made durable by the
    storage's `staged`); returns the table with `.off`/`.len` index columns in their place."""
    written = 0
    with open(local_path, "wb") as bf:
        for name in blob_columns:
            arr = table.column(name).combine_chunks()
            starts, lengths, data = _value_bytes(arr)
            valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            lo = int(starts[0]) if len(starts) else 0
            hi = int(starts[-1] + lengths[-1]) if len(starts) else 0
            bf.write(data[lo:hi])
            offsets = (starts - lo + written).astype(np.uint64)
            sums = value_hashes(data, starts, lengths)
            written += hi - lo
            idx = table.column_names.index(name)
            table = table.remove_column(idx)
            table = table.append_column(f"{name}.off", pa.array(offsets, pa.uint64(), mask=~valid))
            table = table.append_column(f"{name}.len", pa.array(lengths.astype(np.uint32), pa.uint32(), mask=~valid))
            table = table.append_column(f"{name}.sum", pa.array(sums, pa.uint32(), mask=~valid))
    return table, written


def _index_fields(c: str, ref: FileRef) -> list[pa.Field]:
    """The blob index columns of blob column `c` (no hashes in files written before integrity)."""
    fields = [pa.field(f"{c}.off", pa.uint64()), pa.field(f"{c}.len", pa.uint32())]
    return [*fields, pa.field(f"{c}.sum", pa.uint32())] if ref.checksum else fields


@dataclass(frozen=True, slots=True)
class _BlobIndex:
    """Where a blob column's values are: offsets, lengths (0 for nulls), validity, and each
    value's recorded hash (None in files written before integrity)."""

    offsets: np.ndarray
    lengths: np.ndarray
    valid: np.ndarray
    hashes: np.ndarray | None

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.offsets, self.lengths, self.valid, self.hashes) if a is not None)

    def take(self, rows: np.ndarray) -> _BlobIndex:
        h = self.hashes[rows] if self.hashes is not None else None
        return _BlobIndex(self.offsets[rows], self.lengths[rows], self.valid[rows], h)


def _blob_index(t: pa.Table | pa.RecordBatch, c: str) -> _BlobIndex:
    """The blob index of column `c` from its `.off` / `.len` (/ `.sum`) columns in `t`."""
    off = t.column(f"{c}.off")
    valid = np.asarray(off.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    o = off.fill_null(0).to_numpy().astype(np.int64)
    n = t.column(f"{c}.len").fill_null(0).to_numpy().astype(np.int64)
    n[~valid] = 0
    names = t.schema.names
    h = t.column(f"{c}.sum").fill_null(0).to_numpy() if f"{c}.sum" in names else None
    return _BlobIndex(o, n, valid, h)


def coalesce(o: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, lengths) of the reads covering the values at offsets `o` with lengths `n`, in
    order, adjacent values merged into one read (vectorised: a take of thousands of values costs
    no Python per value); empty values need no read."""
    keep = n > 0
    o, n = o[keep], n[keep]
    if len(o) == 0:
        return o, n
    end = o + n
    starts = np.ones(len(o), dtype=bool)
    np.not_equal(o[1:], end[:-1], out=starts[1:])
    first = np.flatnonzero(starts)
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = len(o) - 1
    return o[first], end[last] - o[first]


def _blob_array(data: np.ndarray, n: np.ndarray, valid: np.ndarray, t: pa.DataType) -> pa.Array:
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
