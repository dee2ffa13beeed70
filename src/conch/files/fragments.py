"""Fragment files: the `FragmentFormat` interface and its Vortex implementation (DESIGN §3, §9).

The interface and the records formats share are in `conch.files.format`; values stored out of
line in `conch.files.blobs`.

A fragment holds the rows of one column group for a contiguous run of one key space's rows,
sorted by key. Its columns are named by column id (`c<id>`) so renames are metadata-only; key
values are not stored here but in the key space. Files are opened lazily and cached by path:
they are immutable, so a cached footer never goes stale.

The format is bound to a `Storage` and reads through its ranged readers: it never sees a local
path, so fragments read the same from a directory or an object store. Readers are given a file
reference (a `Fragment` or `KeySpace`: path + recorded checksum), never a bare path.

Integrity (`conch.files.integrity`): every Vortex file ends with a block table whose digest is the
file's recorded checksum, and reads go through a `VerifiedReader` that checks each 64 KiB block
they touch; blob values are checked one by one against hashes kept in the blob index. Damage is a
`CorruptFileError` naming the file. Files with checksum "" (written before checksums were
recorded) have neither and are read unverified.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.errors import CorruptFileError
from conch.files.blobfile import ref_array, tag_inline
from conch.files.blobs import (
    BLOB_SUFFIX,
    BlobIndex,
    blob_array,
    blob_index,
    coalesce,
    index_fields,
    value_stats,
    write_blobs,
)
from conch.files.dictprobe import dictionary_columns
from conch.files.format import ORDINAL, FileJob, FileRef, WrittenFile
from conch.files.hotcache import ColumnCache
from conch.files.integrity import VerifiedReader, check_values, seal_file
from conch.files.storage import RangeReader, Storage
from conch.files.writequeue import WriteQueue
from conch.model.budget import DEFAULT_SPLIT
from conch.model.deps import LazyModule
from conch.model.lru import Lru

vx: Any = LazyModule("vortex")

_WRITTEN = ("written",)  # the hot-cache entry of a file's table as this process wrote it


def _keepable(t: pa.DataType) -> bool:
    """A column type read back exactly by a cast of the table as written (no nesting, no extension)."""
    return not (pa.types.is_nested(t) or isinstance(t, pa.ExtensionType) or pa.types.is_dictionary(t))


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
        self._open: Lru[str, tuple[Any, VerifiedReader | None]] = Lru(max_entries=cache_size)
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
        self._blob_idx: Lru[tuple[str, str], BlobIndex] = Lru(
            max_weight=segment_cache_bytes, weight=lambda e: e.nbytes, keep=1
        )
        self._takes: dict[str, int] = {}
        self._blob_readers: Lru[str, RangeReader] = Lru(max_entries=64, on_evict=lambda r: r.close())
        self._local_store: Any = None
        self.hot = ColumnCache(segment_cache_bytes // 4)
        self._dict_cols: dict[tuple[str, str], bool] = {}  # (path, column): stored as a Vortex dict
        self._once = threading.local()  # `read_once`: this thread's files opened for the block

    def clear_cache(self) -> None:
        """Forget open files and cached segments (benchmarks use it to measure cold reads)."""
        self._open.clear()
        self._blob_idx.clear()
        self._takes.clear()
        self._blob_readers.clear()
        self.segment_cache = vx.SegmentCache(self._segment_bytes)
        self.hot.clear()

    def counted(self, ref: FileRef, on_bytes: Callable[[int], None], *more: FileRef) -> _Counting:
        """Report every byte read from storage for `ref` and `more` (their Vortex files and blob
        files) to `on_bytes` while the block runs: a scan's own byte count, not a process-wide one.

        Vortex reads on its own threads, so the reader cannot be known from the thread: bytes
        are attributed by file. Two scans reading the same file at the same moment are each
        charged the bytes of both (the shared segment cache makes that rare and small)."""
        return _Counting(self, (ref.path, *(r.path for r in more)) if more else (ref.path,), on_bytes)

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
        with self.queue(threads) as q:
            for job in jobs:
                q.submit(job, lambda written, extra: out.append((written, extra)), after)
        return out

    def queue(self, threads: int = 1) -> WriteQueue:
        """A `WriteQueue` of this format: files submitted one by one, `threads` encoded at once
        while the caller prepares the next ones (a streamed write's next chunk)."""
        return WriteQueue(self, threads)

    def _encode(
        self, job: FileJob, local: str, blob_local: str, after: Callable[[FileJob], Any] | None
    ) -> tuple[int, str, Any]:
        """Encode one file into its scratch path(s); returns (blob bytes, checksum, after(job))."""
        table, total, blob_checksum = job.table, 0, ""
        if job.blob_columns:
            # sealed as written: ranged reads verify its blocks (conch.files.blobfile)
            # a storage whose scratch files are its files (local) starts their writeback early
            writeback = getattr(self.storage, "writeback", None)
            table, total, blob_checksum = write_blobs(table, blob_local, job.blob_columns, writeback)
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
        checksum = seal_file(local, total, blob_checksum)
        if not job.blob_columns:
            self._keep_written(job.path, table)
        if job.stats:
            stats = {int(name[1:]): value_stats(job.table.column(name)) for name in job.table.column_names}
            return total, checksum, stats
        return total, checksum, after(job) if after is not None else None

    def _keep_written(self, path: str, table: pa.Table) -> None:
        """Keep a small file's table, as written, in the hot cache: the next reads of a run just
        written (a scan right after the commit, the merge that folds 32 small runs) then cost no
        Vortex open and read (~0.3 ms a file: a merge of 31 two-file runs spent a third of its
        time there). Only its flat, inline columns (every read casts them to the file's schema;
        a read of another column opens the file), and only if their buffers fit one entry: a
        slice of a large input would keep its whole parent alive."""
        flat = table.select([f.name for f in table.schema if _keepable(f.type)])
        if flat.num_columns and flat.get_total_buffer_size() <= self.hot.entry_bytes:
            self.hot.put((path, _WRITTEN), flat)

    def _kept(self, ref: FileRef, file_schema: pa.Schema, indices: np.ndarray | None) -> pa.Table | None:
        """Columns `file_schema` (rows `indices`, or all) of a file this process wrote and kept
        (`_keep_written`), or None: the one check every inline read and unfiltered stream makes."""
        kept = self.hot.get((ref.path, _WRITTEN))
        if kept is None or not set(file_schema.names) <= set(kept.column_names):
            return None
        t = kept.select(file_schema.names)
        t = t if indices is None else t.take(pa.array(indices))
        return t if t.schema == file_schema else t.cast(file_schema)

    def _scratch_store(self) -> Any:
        """The Vortex object store that writes `Storage.staged` scratch files (absolute paths)."""
        if self._local_store is None:
            self._local_store = vx.store.LocalStore()
        return self._local_store

    def _file(self, ref: FileRef) -> Any:
        return self._opened(ref)[0]

    @contextlib.contextmanager
    def read_once(self) -> Iterator[None]:
        """Files this thread opens in the block skip the shared segment cache and close after it (open ones
        stay): a compaction's inputs, replaced when it commits (cached, 50M-key ingest peak RSS 768 -> 579 MB)."""
        outer = getattr(self._once, "files", None)
        self._once.files = {} if outer is None else outer
        try:
            yield
        finally:
            self._once.files = outer

    def _opened(self, ref: FileRef) -> tuple[Any, VerifiedReader | None]:
        """The open Vortex file and its verifying reader (None: the file has no checksum)."""
        path = ref.path
        once: dict[str, tuple[Any, VerifiedReader | None]] | None = getattr(self._once, "files", None)
        entry = self._open.get(path) or (once or {}).get(path)
        if entry is None:
            verified = None
            try:
                # Opened through a Python reader so every byte read from storage is counted (`counted`,
                # Scan.metrics()) and verified; as fast as vx.open here. Files are immutable: the path is a key.
                reader: Any = _CountingReader(self.storage.open(path), path, self._count)
                if ref.checksum:
                    reader = verified = VerifiedReader(reader, path, ref.checksum)
                shared = {"segment_cache": self.segment_cache, "cache_key": path}
                f = vx.open_readable(reader, **(shared if once is None else {"without_segment_cache": True}))
            except FileNotFoundError as e:
                raise CorruptFileError(f"{path} is missing: the table references it; restore it from a backup") from e
            except CorruptFileError:
                raise
            except Exception as e:  # vortex raises plain exceptions for corrupt files
                raise _damage(verified, f"cannot open {path}", e) from e
            entry = (f, verified)
            if once is None:
                self._open.put(path, entry)
            else:
                once[path] = entry
        return entry

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
        refs: Sequence[str] = (),
        ref_min_bytes: int = 0,
    ) -> pa.Table:
        """Read `columns` (all rows, or the sorted row `indices`) cast to `schema`."""
        return self.read_many([(ref, indices)], columns, schema, blob_columns, refs, ref_min_bytes)

    def read_many(
        self,
        parts: Sequence[tuple[FileRef, np.ndarray | None]],
        columns: Sequence[str],
        schema: pa.Schema,
        blob_columns: Sequence[str] = (),
        refs: Sequence[str] = (),
        ref_min_bytes: int = 0,
    ) -> pa.Table:
        """Read `columns` cast to `schema` from several files with the same blob columns (all
        rows, or the sorted row indices, of each), concatenated in order. A take over many
        fragments costs one Arrow array per column, not one per fragment: the blob values of
        every file are read straight into one buffer and checked in one pass. Binary columns
        named in `refs` come back as tagged references instead (`conch.files.blobfile`), those of
        values shorter than `ref_min_bytes` as tagged bytes."""
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
            got = {c: tag_inline(t.column(c)) if c in refs else t.column(c) for c in inline}
        for c in blobs:
            where = [(ref, idx[c]) for (ref, _), idx in zip(parts, indexes, strict=True)]
            t = schema.field(c).type
            got[c] = self._refs(where, t, ref_min_bytes) if c in refs else self._read_values(where, t)
        return pa.Table.from_arrays([got[c] for c in columns], schema=schema)

    def _locate(
        self, ref: FileRef, inline: list[str], blobs: list[str], schema: pa.Schema, indices: np.ndarray | None
    ) -> tuple[pa.Table, dict[str, BlobIndex]]:
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
        if cached and not inline:  # a repeated take of blobs only: no Vortex read at all
            assert indices is not None
            return _NO_COLUMNS, {c: self._index(ref, c).take(indices) for c in blobs}
        fields = [schema.field(c) for c in inline]
        if not cached:
            for c in blobs:
                fields += index_fields(c, ref)
        table = self._vortex_read(ref, pa.schema(fields), indices, inline + blobs)
        if cached:
            assert indices is not None
            return table, {c: self._index(ref, c).take(indices) for c in blobs}
        return table.select(inline), {c: blob_index(table, c) for c in blobs}

    def _vortex_read(
        self, ref: FileRef, file_schema: pa.Schema, indices: np.ndarray | None, what: list[str]
    ) -> pa.Table:
        if not file_schema.names:
            return file_schema.empty_table()
        kept = self._kept(ref, file_schema, indices)
        if kept is not None:
            return kept
        f = self._file(ref)
        try:
            idx = vx.array(pa.array(indices, pa.uint64())) if indices is not None else None
            return f.to_arrow(file_schema.names, indices=idx, schema=file_schema).read_all()
        except Exception as e:
            raise self._damage(ref, f"cannot read {what} from {ref.path}", e) from e

    def _read_values(self, parts: list[tuple[FileRef, BlobIndex]], t: pa.DataType) -> pa.Array:
        """The blob values `parts` point at, file after file, as one Arrow array of type `t`:
        the ranges of every file are coalesced in one pass, each file's are read straight into
        one shared buffer, and every value is verified in one pass (a take of 50 keys touches
        ~8 files: per-file work is what it costs)."""
        one = len(parts) == 1
        lengths = parts[0][1].lengths if one else np.concatenate([idx.lengths for _, idx in parts])
        valid = parts[0][1].valid if one else np.concatenate([idx.valid for _, idx in parts])
        counts = [len(idx.lengths) for _, idx in parts]
        # each part's first byte in the shared buffer (values laid end to end, part after part)
        csum = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=csum[1:])
        at = csum[np.cumsum([0, *counts])].tolist()
        data = np.empty(at[-1], dtype=np.uint8)
        offsets = parts[0][1].offsets if one else np.concatenate([idx.offsets for _, idx in parts])
        files = None if one else np.repeat(np.arange(len(parts)), counts)
        starts, sizes, of = coalesce(offsets, lengths, files)
        cuts = np.searchsorted(of, np.arange(len(parts) + 1)).tolist()
        starts_l, sizes_l = starts.tolist(), sizes.tolist()
        for j, (ref, _) in enumerate(parts):
            size = at[j + 1] - at[j]
            if size:
                got = self._blob_reader(ref.path).read_into(
                    starts_l[cuts[j] : cuts[j + 1]], sizes_l[cuts[j] : cuts[j + 1]], data.data[at[j] : at[j + 1]]
                )
                self._count(ref.path, got)
                if got != size:
                    raise CorruptFileError(
                        f"{ref.path}{BLOB_SUFFIX} is damaged: shorter than its index says ({got} of {size} bytes read)"
                    )
        hashes = [idx.hashes for _, idx in parts if idx.hashes is not None]
        if len(hashes) == len(parts):
            try:
                check_values(
                    data.data,
                    lengths,
                    valid,
                    hashes[0] if one else np.concatenate(hashes),
                    parts[0][0].path + BLOB_SUFFIX,
                )
            except CorruptFileError:
                if one:
                    raise
                self._check_each(parts, data, at)  # names the damaged file and its value
                raise
        else:
            self._check_each(parts, data, at)
        return blob_array(data, lengths, valid, t)

    @staticmethod
    def _check_each(parts: list[tuple[FileRef, BlobIndex]], data: np.ndarray, at: list[int]) -> None:
        """Verify each part's values (those with recorded hashes), naming its file on damage."""
        for j, (ref, idx) in enumerate(parts):
            if idx.hashes is not None and at[j + 1] > at[j]:
                check_values(data.data[at[j] : at[j + 1]], idx.lengths, idx.valid, idx.hashes, ref.path + BLOB_SUFFIX)

    def dictionary_columns(self, ref: FileRef, columns: Sequence[str]) -> frozenset[str]:
        """The string `columns` the file stores dictionary-encoded (`conch.files.dictprobe`)."""
        return dictionary_columns(self._dict_cols, self._file, ref, columns, self._damage)

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
            file_fields += index_fields(c, ref)
        if ordinal:
            file_fields.append(pa.field(ORDINAL, pa.uint32()))
        file_schema = pa.schema(file_fields)
        out_schema = schema.append(pa.field(ORDINAL, pa.uint32())) if ordinal else schema
        kept = self._kept(ref, file_schema, indices) if expr is None and not blobs else None
        if kept is not None:
            reader: Iterator[pa.RecordBatch] = iter(kept.to_batches())
        else:
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
            if not blobs and not refs:
                yield batch
                continue
            arrays = []
            for c in out_schema.names:
                if c in blobs:
                    where = [(ref, blob_index(batch, c))]
                    t = schema.field(c).type
                    arrays.append(self._refs(where, t, ref_min_bytes) if c in refs else self._read_values(where, t))
                else:
                    arrays.append(tag_inline(batch.column(c)) if c in refs else batch.column(c))
            yield pa.RecordBatch.from_arrays(arrays, schema=out_schema)

    def _refs(self, parts: list[tuple[FileRef, BlobIndex]], t: pa.DataType, min_bytes: int) -> pa.Array:
        """Tagged references to the values `parts` point at (`conch.files.blobfile`); values
        shorter than `min_bytes` are read, in one coalesced pass, and come back tagged inline."""
        if not min_bytes:
            return ref_array(parts, self.blob_checksum)
        big = [idx.valid & (idx.lengths >= min_bytes) for _, idx in parts]
        refs = ref_array(
            [(r, dataclasses.replace(i, valid=b)) for (r, i), b in zip(parts, big, strict=True)], self.blob_checksum
        )
        small = [
            (r, dataclasses.replace(i, valid=i.valid & ~b, lengths=np.where(b, 0, i.lengths)))
            for (r, i), b in zip(parts, big, strict=True)
        ]
        values = tag_inline(self._read_values(small, t))
        return pc.if_else(pa.array(np.concatenate(big)), refs.cast(values.type), values)

    def _index(self, ref: FileRef, c: str) -> BlobIndex:
        key = (ref.path, c)
        e = self._blob_idx.get(key)
        if e is None:
            fs = pa.schema(index_fields(c, ref))
            try:
                t = self._file(ref).to_arrow(fs.names, schema=fs).read_all()
            except Exception as ex:
                raise self._damage(ref, f"cannot read the blob index of {c} in {ref.path}", ex) from ex
            e = blob_index(t, c)
            self._blob_idx.put(key, e)
        return e

    def blob_checksum(self, ref: FileRef) -> str:
        """The checksum of `ref`'s blob file's block table its footer records ("": none)."""
        verified = self._opened(ref)[1]
        return verified.blob_checksum if verified is not None else ""

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
        if verified.blob_checksum:  # sealed: the block table, then every block (below) is checked
            blocks = VerifiedReader(self.storage.open(name), name, verified.blob_checksum)
            try:
                size = blocks.size()
                for pos in range(0, size, 64 * blocks.block):
                    blocks.read_at(pos, 64 * blocks.block)
            finally:
                blocks.close()
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
        """A failed Vortex read's error: the verifier's finding if it failed the read, else Vortex's message."""
        entry = self._open.get(ref.path) or (getattr(self._once, "files", None) or {}).get(ref.path)
        return _damage(entry[1] if entry else None, what, e)

    def _blob_reader(self, path: str) -> RangeReader:
        """The (cached) ranged reader of a fragment's blob file."""

        def open_blobs() -> RangeReader:
            try:
                return self.storage.open(path + BLOB_SUFFIX)
            except FileNotFoundError as e:
                raise CorruptFileError(f"{path}{BLOB_SUFFIX} is missing: the table references it") from e

        return self._blob_readers.get_or_make(path, open_blobs)


_NO_COLUMNS = pa.table({})


class _Counting(contextlib.AbstractContextManager[None]):
    """`VortexFormat.counted`'s block: a listener of some files' reads while it runs (a class,
    not a generator: a take enters ~30 of these, and a generator's set-up was a visible share;
    one block for all the files of a take, not one each)."""

    __slots__ = ("_fmt", "_on_bytes", "_paths")

    def __init__(self, fmt: VortexFormat, paths: tuple[str, ...], on_bytes: Callable[[int], None]) -> None:
        self._fmt, self._paths, self._on_bytes = fmt, paths, on_bytes

    def __enter__(self) -> None:
        with self._fmt._lock:
            for path in self._paths:
                self._fmt._counters.setdefault(path, []).append(self._on_bytes)

    def __exit__(self, *exc: object) -> None:
        with self._fmt._lock:
            for path in self._paths:
                listeners = self._fmt._counters[path]
                listeners.remove(self._on_bytes)
                if not listeners:
                    del self._fmt._counters[path]


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
