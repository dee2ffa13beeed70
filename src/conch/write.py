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
  the schema's raises `SchemaError`; a written null is a cell, an absent column is not;
- child rows are upserted by their full key: existing children missing from the list stay;
- writing a child row creates its ancestors' keys (with no other cells).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from conch.errors import SchemaError
from conch.fragments import BLOB_SUFFIX, VortexFormat, blob_storable, column_name, column_stats, encode_stats
from conch.keys import check_unique_sorted, encode_keys, key_table, strictly_increasing, validate_key_columns
from conch.manifest import TableState
from conch.schema import CHILD_KEY, Column, Schema, is_child_level_type, join_path, normalize_type
from conch.storage import LocalStorage, new_id


@dataclass(frozen=True)
class WriteOptions:
    """Sizing knobs. Defaults suit object storage; tests shrink them to exercise many files."""

    chunk_rows: int = 1 << 20  # rows of input sorted and written as one run
    chunk_bytes: int = 256 << 20
    fragment_bytes: int = 128 << 20  # upper bound of one fragment file
    # avg bytes per value from which a column is stored out of line. Vortex chunks hold >= 8192
    # rows, so an inline take costs 8192 x value size per touched chunk: 4 MB at 512 B (measured
    # in docs/performance.md); out of line a take reads exactly the taken values.
    large_value_bytes: int = 512


@dataclass
class StagedWrite:
    """Files written for one commit and the operations that will commit them."""

    schema: Schema
    base_schema: Schema
    added_columns: list[Column]
    ops: list[dict[str, Any]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)  # rows written per level
    base_seq: int = -1  # the log sequence the write was staged against (-1: unknown)
    started: float = field(default_factory=time.time)  # before any file was written

    def all_ops(self) -> list[dict[str, Any]]:
        schema_ops = (
            [{"op": "add_columns", "schema": self.schema.to_json()}] if self.schema is not self.base_schema else []
        )
        return schema_ops + self.ops


class TableFiles:
    """Where one table's files go, and how they are written."""

    def __init__(self, storage: LocalStorage, table_id: str, fmt: VortexFormat) -> None:
        self.storage = storage
        self.table_id = table_id
        self.format = fmt

    def key_space_path(self, ks_id: str) -> str:
        return f"{self.table_id}/keys/{ks_id}{self.format.suffix}"

    def fragment_path(self, level: str, group: str, frag_id: str) -> str:
        gdir = join_path(level, group) or "_root"
        return f"{self.table_id}/cg/{gdir}/{frag_id}{self.format.suffix}"


# ----- input normalisation --------------------------------------------------------------------
def to_record_batches(data: Any) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """Accept Arrow tables/batches/readers, lists of dicts, dicts of lists, pandas and Polars."""
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, iter(data)
    if isinstance(data, pa.RecordBatch):
        return data.schema, iter([data])
    if isinstance(data, pa.Table):
        return data.schema, iter(data.to_batches())
    if isinstance(data, list):
        if data and not all(isinstance(r, dict) for r in data):
            raise SchemaError("a list written to a table must hold dicts (one per row)")
        t = pa.Table.from_pylist(data)
        return t.schema, iter(t.to_batches())
    if isinstance(data, dict):
        t = pa.table(data)
        return t.schema, iter(t.to_batches())
    mod = type(data).__module__.split(".")[0]
    if mod == "pandas":
        t = pa.Table.from_pandas(data, preserve_index=False)
        return t.schema, iter(t.to_batches())
    if mod == "polars":
        t = data.to_arrow()
        return t.schema, iter(t.to_batches())
    if hasattr(data, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(data)
        return reader.schema, iter(reader)
    raise SchemaError(
        f"cannot write {type(data).__name__}: pass a pyarrow Table/RecordBatch/RecordBatchReader, "
        "a list of dicts, a dict of lists, or a pandas/Polars DataFrame"
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


# ----- splitting a nested chunk into flat per-level tables -------------------------------------
def value_fields(input_schema: pa.Schema, key_names: list[str]) -> list[pa.Field]:
    """The non-key fields of an input schema: the subtree a write adds to the schema."""
    fields = []
    for f in input_schema:
        if f.name in key_names:
            continue
        if pa.types.is_null(f.type):
            continue  # all-null column of unknown type: only written if the schema knows it
        fields.append(f.with_type(normalize_type(f.type)))
    return fields


def split_levels(table: pa.Table, schema: Schema, level: str) -> dict[str, pa.Table]:
    """A chunk at `level` → {level: flat table of key columns + leaf columns by path}."""
    keys = schema.key_names(level)
    out: dict[str, pa.Table] = {}
    _split(table, schema, level, keys, out)
    return out


def _split(table: pa.Table, schema: Schema, level: str, keys: list[str], out: dict[str, pa.Table]) -> None:
    cols: dict[str, pa.ChunkedArray] = {k: table.column(k) for k in keys}
    for f in table.schema:
        if f.name in keys:
            continue
        col = table.column(f.name)
        if is_child_level_type(f.type):
            child = join_path(level, f.name)
            child_keys = [*keys, child]
            arr = col.combine_chunks()
            parents = pc.list_parent_indices(arr)
            values = pc.list_flatten(arr)
            present = pc.is_valid(values)
            parents = pc.filter(parents, present)
            values = pc.filter(values, present)
            child_cols = {k: pc.take(table.column(k), parents) for k in keys}
            for sub in values.type:
                name = child if sub.name == CHILD_KEY else sub.name
                child_cols[name] = values.field(sub.name)
            _split(pa.table(child_cols), schema, child, child_keys, out)
        elif pa.types.is_struct(f.type) and not isinstance(f.type, pa.ExtensionType):
            for path, leaf in _flatten_struct(f.name, col):
                cols[path] = leaf
        else:
            cols[f.name] = col
    out[level] = pa.table(cols)


def _flatten_struct(prefix: str, col: pa.ChunkedArray) -> Iterator[tuple[str, pa.ChunkedArray]]:
    # StructArray.flatten() folds the struct's validity into its children: a null struct writes
    # null cells for all of its leaves.
    for i, sub in enumerate(col.type):
        child = pa.chunked_array([c.flatten()[i] for c in col.chunks], type=sub.type)
        path = f"{prefix}.{sub.name}"
        if pa.types.is_struct(sub.type) and not isinstance(sub.type, pa.ExtensionType):
            yield from _flatten_struct(path, child)
        else:
            yield path, child


# ----- writing runs ---------------------------------------------------------------------------
def stage_write(
    files: TableFiles,
    state: TableState,
    data: Any,
    level: str = "",
    opts: WriteOptions | None = None,
    evolve: bool = True,
) -> StagedWrite:
    """Write the files of an upsert of `data` at `level` and return the operations to commit."""
    opts = opts or WriteOptions()
    base = state.schema
    input_schema, batches = to_record_batches(data)
    base.level(level)  # raises SchemaError naming the known levels
    level_keys = base.key_names(level)
    missing = [k for k in level_keys if k not in input_schema.names]
    if missing:
        raise SchemaError(f"write is missing key column(s) {missing}; key columns are {level_keys}")
    new_fields = value_fields(input_schema, level_keys)
    schema, added = base.extend(new_fields, level)
    if added and not evolve:
        raise SchemaError(
            f"columns {[c.full_path for c in added]} are not in the table's schema (schema evolution is off)"
        )
    staged = StagedWrite(schema, base, added, base_seq=state.seq)
    runs: dict[str, list[pa.Table]] = {}
    for chunk in chunks(batches, opts):
        chunk = _drop_unknown_nulls(chunk, schema, level, level_keys)
        per_level = split_levels(chunk, schema, level)
        for lvl, flat in per_level.items():
            if flat.num_rows == 0:
                continue
            keys = write_run(files, schema, lvl, flat, staged, opts)
            runs.setdefault(lvl, []).append(keys)
        for anc in schema.ancestry(level)[:-1]:
            if not schema.key_names(anc.path):
                continue
            prefix = chunk.select(schema.key_names(anc.path))
            write_key_space(files, schema, anc.path, _distinct_sorted(prefix, schema, anc.path), staged)
    for key_tables in runs.values():
        if len(key_tables) > 1:  # duplicates across chunks of one write
            all_keys = pa.concat_tables(key_tables)
            check_unique_sorted(
                all_keys.take(pc.sort_indices(all_keys, [(n, "ascending") for n in all_keys.column_names]))
            )
    return staged


def _drop_unknown_nulls(chunk: pa.Table, schema: Schema, level: str, keys: list[str]) -> pa.Table:
    """Drop all-null columns of null type that the schema does not know (their type is unknown).

    Key columns stay: a null key is an error that key validation reports.
    """
    keep = [
        f.name
        for f in chunk.schema
        if not pa.types.is_null(f.type) or f.name in keys or schema.has_column(join_path(level, f.name))
    ]
    return chunk.select(keep) if len(keep) != chunk.num_columns else chunk


def _distinct_sorted(keys: pa.Table, schema: Schema, level: str) -> pa.Table:
    keys = validate_key_columns(keys, schema.key_fields(level))
    return keys.group_by(keys.column_names).aggregate([]).sort_by([(n, "ascending") for n in keys.column_names])


def write_run(
    files: TableFiles, schema: Schema, level: str, flat: pa.Table, staged: StagedWrite, opts: WriteOptions
) -> pa.Table:
    """Sort one level's flat rows by key, write a key space and its fragments; returns the keys."""
    key_fields = schema.key_fields(level)
    key_names = [f.name for f in key_fields]
    flat = validate_key_columns(flat, key_fields)
    if not strictly_increasing(flat.select(key_names)):
        order = pc.sort_indices(flat, [(n, "ascending") for n in key_names])
        flat = flat.take(order)
        check_unique_sorted(flat.select(key_names))
    keys = flat.select(key_names)
    ks_id = write_key_space(files, schema, level, keys, staged)
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
    for group, cols in columns_by_group.items():
        write_fragments(files, level, group, ks_id, cols, staged, opts)
    staged.rows[level] = staged.rows.get(level, 0) + flat.num_rows
    return keys


def write_key_space(
    files: TableFiles, schema: Schema, level: str, keys: pa.Table, staged: StagedWrite, kind: str = "data"
) -> str:
    ks_id = new_id()
    rel = files.key_space_path(ks_id)
    positional = keys.rename_columns([f"k{i}" for i in range(keys.num_columns)])
    written = files.format.write(positional, rel)
    staged.files.append(rel)
    first = encode_keys([c.slice(0, 1) for c in keys.columns])[0].as_py() if keys.num_columns else b""
    last = encode_keys([c.slice(keys.num_rows - 1, 1) for c in keys.columns])[0].as_py() if keys.num_columns else b""
    staged.ops.append(
        {
            "op": "add_key_space",
            "id": ks_id,
            "level": level,
            "path": rel,
            "rows": keys.num_rows,
            "min_key": first.hex(),
            "max_key": last.hex(),
            "kind": kind,
            "bytes": written.bytes,
            "checksum": written.checksum,
        }
    )
    return ks_id


def write_fragments(
    files: TableFiles,
    level: str,
    group: str,
    ks_id: str,
    cols: list[tuple[Column, pa.ChunkedArray]],
    staged: StagedWrite,
    opts: WriteOptions,
) -> None:
    table = pa.table({column_name(c.id): data for c, data in cols})
    n = table.num_rows
    bytes_per_row = max(1, table.nbytes // max(n, 1))
    rows_per_fragment = max(1, opts.fragment_bytes // bytes_per_row)
    # Large values go out of line so a take reads only the bytes of the rows it takes.
    blob_ids = [c.id for c, data in cols if blob_storable(c.type) and data.nbytes / max(n, 1) >= opts.large_value_bytes]
    types = {c.id: c.type for c, _ in cols}
    for start in range(0, n, rows_per_fragment):
        part = table.slice(start, rows_per_fragment)
        frag_id = new_id()
        rel = files.fragment_path(level, group, frag_id)
        written = files.format.write(part, rel, [column_name(i) for i in blob_ids], ordinal=True)
        staged.files.append(rel)
        if blob_ids:
            staged.files.append(rel + BLOB_SUFFIX)
        stats = {c.id: column_stats(part.column(column_name(c.id))) for c, _ in cols}
        staged.ops.append(
            {
                "op": "add_fragment",
                "id": frag_id,
                "level": level,
                "group": group,
                "key_space": ks_id,
                "start": start,
                "rows": part.num_rows,
                "path": rel,
                "column_ids": [c.id for c, _ in cols],
                "stats": encode_stats(stats, types),
                "bytes": written.bytes,
                "checksum": written.checksum,
                "blob_columns": blob_ids,
            }
        )


def stage_delete(files: TableFiles, state: TableState, keys: Any, level: str = "") -> StagedWrite:
    """Write a tombstone key space: it hides the keys' cells (and subtrees) up to its time."""
    schema = state.schema
    fields = schema.key_fields(level)
    table = key_table(keys, fields)
    table = _distinct_sorted(table, schema, level)
    staged = StagedWrite(schema, schema, [], base_seq=state.seq)
    if table.num_rows:
        write_key_space(files, schema, level, table, staged, kind="tombstone")
    return staged
