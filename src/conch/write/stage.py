"""The write path: Arrow in, immutable key spaces and fragments out, plus the WAL operations that
commit them (DESIGN §3, §4).

A write is an upsert of cells. Its rows are split per level (a `list<struct<$: K>>` field is a
child level whose rows get the parent's key plus `$`), sorted by key, and written as one *sorted
run* per level: a key space file holding the keys, and per column group byte-bounded fragments
holding only the columns the write included. Input is consumed in bounded chunks; each chunk is
its own run, so a streamed write of any size holds one chunk in memory.

Rules a user can rely on:
- key columns are required and never null, NaN or over 1 KiB; values are cast to the key schema
  when the cast is exact, else `KeyTypeError`;
- a write holds each key at most once (`DuplicateKeyError`): rows of one write have no order, so
  there is no honest winner;
- columns not in the schema extend it (schema evolution); a column whose type cannot be cast to
  the schema's raises `SchemaError`; a written null is a cell, an absent column is not (nor a
  field a row of a list of dicts leaves out: `presence.py`);
- child rows are upserted by their full key: existing children missing from the list stay;
- writing a child row creates its ancestors' keys (with no other cells).
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.errors import SchemaError
from conch.files.blobs import BLOB_SUFFIX, blob_storable
from conch.files.blobsource import has_sources, source_bytes
from conch.files.format import FileJob, FileQueue, WrittenFile, column_name, encode_stats
from conch.files.layout import TableFiles
from conch.files.manifest import Fragment, KeySpace, TableState
from conch.files.storage import new_id
from conch.log.wal import AddFragment, AddKeySpace, Op, Transaction
from conch.model.budget import WriteOptions
from conch.model.keys import (
    check_unique_sorted,
    encode_keys,
    key_table,
    sort_indices,
    sorted_unique,
    strictly_increasing,
    validate_key_columns,
)
from conch.model.progress import track
from conch.model.schema import Column, Schema, join_path, normalize_type
from conch.write.dedup import RunCheck
from conch.write.inputs import read_input, split_levels, value_fields
from conch.write.presence import by_presence


@dataclass
class StagedWrite:
    """Files written for one commit and the typed WAL operations that will commit them."""

    schema: Schema
    base_schema: Schema
    added_columns: list[Column]
    ops: list[Op] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)  # rows written per level
    base_seq: int = -1  # the log sequence the write was staged against (-1: unknown)
    started: float = field(default_factory=time.time)  # before any file was written

    def transaction(self, kind: str, summary: str = "", **extra: Any) -> Transaction:
        """The transaction that commits these files (`TableLog.commit` rebases and appends it)."""
        return Transaction(
            kind,
            tuple(self.ops),
            summary,
            base_seq=self.base_seq,
            base_schema=self.base_schema,
            schema=self.schema,
            files=tuple(self.files),
            started_us=int(self.started * 1_000_000),
            extra=extra,
        )


def chunks(batches: Iterator[pa.RecordBatch], opts: WriteOptions) -> Iterator[pa.Table]:
    """Group record batches into tables of bounded rows and bytes."""
    pending: list[pa.RecordBatch] = []
    rows = nbytes = 0
    for b in batches:
        if b.num_rows == 0:
            continue
        pending.append(b)
        rows += b.num_rows
        nbytes += b.nbytes
        if rows >= opts.chunk_rows or nbytes >= opts.chunk_bytes:
            yield pa.Table.from_batches(pending)
            pending, rows, nbytes = [], 0, 0
    if pending:
        yield pa.Table.from_batches(pending)


# ----- writing runs ---------------------------------------------------------------------------
def stage_write(
    files: TableFiles,
    state: TableState,
    data: Any,
    level: str = "",
    opts: WriteOptions | None = None,
    evolve: bool = True,
    progress: bool | None = None,
) -> StagedWrite:
    """Write the files of an upsert of `data` at `level` and return the operations to commit.

    Streamed input (an iterator or `RecordBatchReader`) shows a progress bar (`conch.model.progress`)."""
    opts = opts or WriteOptions()
    base = state.schema
    input_schema, batches = read_input(data, base, level)
    level_keys = base.key_names(level)
    new_fields = value_fields(input_schema, level_keys)
    schema, added = base.extend(new_fields, level)
    if added and not evolve:
        raise SchemaError(
            f"columns {[c.full_path for c in added]} are not in the table's schema and schema evolution is off: "
            "fix the names, or add them with write(..., evolve=True) (or connect(..., evolve=True))"
        )
    staged = StagedWrite(schema, base, added, base_seq=state.seq)
    runs: dict[str, RunCheck] = {}  # duplicates across chunks, checked in bounded memory (dedup.py)
    streamed = isinstance(data, pa.RecordBatchReader | Iterator)
    batches = track(batches, "writing", progress if streamed else False)
    # One queue for the whole write: a chunk's files encode while the next chunk is read, sorted
    # and checked (at most `write_threads` files in flight, so memory stays bounded).
    with files.format.queue(opts.write_threads) as queue:
        for chunk in chunks(batches, opts):
            per_level = split_levels(chunk, schema, level)
            for lvl, flat in per_level.items():
                if flat.num_rows == 0:
                    continue
                if lvl not in runs:
                    runs[lvl] = RunCheck(files.format, schema.key_fields(lvl))
                for part in by_presence(flat, schema.key_names(lvl)):  # rows naming the same cells
                    write_run(files, schema, lvl, part, staged, opts, queue, runs[lvl].add)
            for anc in schema.ancestry(level)[:-1]:
                if not schema.key_names(anc.path):
                    continue
                prefix = _distinct_sorted(chunk.select(schema.key_names(anc.path)), schema, anc.path)
                for lo, hi in partitions(prefix, min(files.partition_keys, prefix.num_columns)):
                    _stage_key_space(files, anc.path, prefix.slice(lo, hi - lo), staged, "data", queue)
    for check in runs.values():
        check.check()
    return staged


def _distinct_sorted(keys: pa.Table, schema: Schema, level: str) -> pa.Table:
    keys = validate_key_columns(keys, schema.key_fields(level))
    return sorted_unique(keys)


def write_run(
    files: TableFiles,
    schema: Schema,
    level: str,
    flat: pa.Table,
    staged: StagedWrite,
    opts: WriteOptions,
    queue: FileQueue,
    written: Callable[[KeySpace], None],
) -> None:
    """Sort one level's flat rows by key (unless they already are: one vectorised pass), write a
    key space and its fragments per partition through `queue`; `written` gets each key space
    once its file is published (the write's duplicate check reads them back)."""
    key_fields = schema.key_fields(level)
    key_names = [f.name for f in key_fields]
    flat = validate_key_columns(flat, key_fields)
    if not strictly_increasing(flat.select(key_names)):
        flat = flat.take(sort_indices(flat.select(key_names)))
        check_unique_sorted(flat.select(key_names))
    for lo, hi in partitions(flat.select(key_names), files.partition_keys):
        _write_sorted_run(files, schema, level, flat.slice(lo, hi - lo), staged, opts, queue, written)


def partitions(keys: pa.Table, n: int) -> list[tuple[int, int]]:
    """Row slices of sorted `keys` with one value of the first `n` key columns each (n = 0 or no
    rows: one slice)."""
    rows = keys.num_rows
    if n == 0 or rows == 0:
        return [(0, rows)]
    prefix = encode_keys(keys.columns[:n])
    cuts = [0, *(np.nonzero(~np.asarray(pc.equal(prefix.slice(1), prefix.slice(0, rows - 1))))[0] + 1), rows]
    return [(int(a), int(b)) for a, b in itertools.pairwise(cuts)]


def _write_sorted_run(
    files: TableFiles,
    schema: Schema,
    level: str,
    flat: pa.Table,
    staged: StagedWrite,
    opts: WriteOptions,
    queue: FileQueue,
    written: Callable[[KeySpace], None],
) -> None:
    key_names = schema.key_names(level)
    columns_by_group: dict[str, list[tuple[Column, pa.ChunkedArray]]] = {}
    for name in flat.column_names:
        if name in key_names:
            continue
        col = schema.column(join_path(level, name))
        data = flat.column(name)
        if normalize_type(data.type) != col.type:
            try:
                data = data.cast(col.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise SchemaError(f"column {col.full_path!r}: cannot write {data.type} as {col.type} ({e})") from e
        elif data.type != col.type:
            data = data.cast(col.type)
        columns_by_group.setdefault(col.group, []).append((col, data))
    # The key space goes first (its op before its fragments'), encoded beside them.
    ks_id = _stage_key_space(files, level, flat.select(key_names), staged, "data", queue, written)
    write_groups(files, level, ks_id, columns_by_group, staged, opts, queue)
    staged.rows[level] = staged.rows.get(level, 0) + flat.num_rows


def write_key_space(files: TableFiles, level: str, keys: pa.Table, staged: StagedWrite, kind: str = "data") -> str:
    """Write the key-space file of the sorted, unique `keys` of `level` and stage its
    `AddKeySpace`; returns the key space's id."""
    return _stage_key_space(files, level, keys, staged, kind)


def _stage_key_space(
    files: TableFiles,
    level: str,
    keys: pa.Table,
    staged: StagedWrite,
    kind: str,
    queue: FileQueue | None = None,
    written: Callable[[KeySpace], None] | None = None,
) -> str:
    """Write the key-space file of sorted, unique `keys` (through `queue`, else now) and stage
    its `AddKeySpace` once published (then `written(ks)`); returns the key space's id."""
    job = _key_space_job(files, keys)
    ks_id = _id_of(files, job.path)
    staged.files.append(job.path)

    def done(w: WrittenFile, _: Any) -> None:
        ks = _key_space(ks_id, level, job.path, keys, kind, w)
        staged.ops.append(AddKeySpace(ks))
        if written is not None:
            written(ks)

    if queue is None:
        done(files.format.write(job.table, job.path), None)
    else:
        queue.submit(job, done)
    return ks_id


def _key_space_job(files: TableFiles, keys: pa.Table) -> FileJob:
    """The key space file of sorted, unique `keys` (positional column names), at a new id."""
    positional = keys.rename_columns([f"k{i}" for i in range(keys.num_columns)])
    return FileJob(positional, files.key_space_path(new_id()))


def _id_of(files: TableFiles, key_space_path: str) -> str:
    return key_space_path.rsplit("/", 1)[-1].removesuffix(files.format.suffix)


def _key_space(ks_id: str, level: str, rel: str, keys: pa.Table, kind: str, written: WrittenFile) -> KeySpace:
    first = encode_keys([c.slice(0, 1) for c in keys.columns])[0].as_py() if keys.num_columns else b""
    last = encode_keys([c.slice(keys.num_rows - 1, 1) for c in keys.columns])[0].as_py() if keys.num_columns else b""
    return KeySpace(
        id=ks_id,
        level=level,
        path=rel,
        rows=keys.num_rows,
        min_key=first.hex(),
        max_key=last.hex(),
        kind=kind,
        bytes=written.bytes,
        checksum=written.checksum,
    )


def write_fragments(
    files: TableFiles,
    level: str,
    group: str,
    ks_id: str,
    cols: list[tuple[Column, pa.ChunkedArray]],
    staged: StagedWrite,
    opts: WriteOptions,
) -> None:
    """Write one column group's byte-bounded fragments of a run and stage their `AddFragment`s."""
    write_groups(files, level, ks_id, {group: cols}, staged, opts)


@dataclass(frozen=True, slots=True)
class _Piece:
    """A fragment about to be written: its group, id, first row and columns."""

    group: str
    frag_id: str
    start: int
    cols: list[tuple[Column, pa.ChunkedArray]]
    blob_ids: tuple[int, ...]


def write_groups(
    files: TableFiles,
    level: str,
    ks_id: str,
    groups: dict[str, list[tuple[Column, pa.ChunkedArray]]],
    staged: StagedWrite,
    opts: WriteOptions,
    queue: FileQueue | None = None,
) -> None:
    """Write the fragments of every column group of one run (groups x byte-bounded row slices)
    through `queue` (else a queue of their own, waited for: `opts.write_threads` encoded at once)
    and stage their `AddFragment`s in a fixed order (group, then row), whatever the threads'
    timing: the queue hands files back in submission order."""
    if queue is None:
        with files.format.queue(opts.write_threads) as own:
            write_groups(files, level, ks_id, groups, staged, opts, own)
        return
    for group, cols in groups.items():
        table = pa.table({column_name(c.id): data for c, data in cols})
        n = table.num_rows
        streamed = {c.id: source_bytes(data) for c, data in cols}  # values given as files (conch.Blob)
        bytes_per_row = max(1, (table.nbytes + sum(streamed.values())) // max(n, 1))
        # as many fragments as the byte bound needs, of equal rows: they encode in parallel, and
        # 128 + 32 MB would wait on the larger (issue 33: a 160 MB image chunk)
        pieces = -(-n // max(1, opts.fragment_bytes // bytes_per_row))
        rows_per_fragment = max(1, -(-n // max(1, pieces)))
        # Large values go out of line so a take reads only the bytes of the rows it takes.
        blob_ids = tuple(
            c.id
            for c, data in cols
            if blob_storable(c.type)
            and ((data.nbytes + streamed[c.id]) / max(n, 1) >= opts.large_value_bytes or has_sources(data))
        )
        for start in range(0, n, rows_per_fragment):
            piece = _Piece(group, new_id(), start, cols, blob_ids)
            rel = files.fragment_path(level, group, piece.frag_id)
            blobs = tuple(column_name(i) for i in blob_ids)
            job = FileJob(table.slice(start, rows_per_fragment), rel, blobs, ordinal=True, stats=True)
            staged.files.append(job.path)
            if job.blob_columns:
                staged.files.append(job.path + BLOB_SUFFIX)
            queue.submit(job, functools.partial(_add_fragment, staged, level, ks_id, piece, job.table.num_rows, rel))


def _add_fragment(
    staged: StagedWrite, level: str, ks_id: str, piece: _Piece, rows: int, path: str, written: WrittenFile, stats: Any
) -> None:
    types = {c.id: c.type for c, _ in piece.cols}
    staged.ops.append(
        AddFragment(
            Fragment(
                id=piece.frag_id,
                level=level,
                group=piece.group,
                key_space=ks_id,
                start=piece.start,
                rows=rows,
                path=path,
                column_ids=tuple(c.id for c, _ in piece.cols),
                stats=encode_stats(stats, types),
                bytes=written.bytes,
                checksum=written.checksum,
                blob_columns=piece.blob_ids,
            )
        )
    )


def stage_delete(files: TableFiles, state: TableState, keys: Any, level: str = "") -> StagedWrite:
    """Write a tombstone key space: it hides the keys' cells (and subtrees) up to its time."""
    schema = state.schema
    fields = schema.key_fields(level)
    table = key_table(keys, fields)
    table = _distinct_sorted(table, schema, level)
    staged = StagedWrite(schema, schema, [], base_seq=state.seq)
    if table.num_rows:
        for lo, hi in partitions(table, min(files.partition_keys, table.num_columns)):
            write_key_space(files, level, table.slice(lo, hi - lo), staged, kind="tombstone")
        staged.rows[level] = table.num_rows
    return staged
