"""What a user passes to `Table.write`, made into typed Arrow split per level (DESIGN §3).

Accepted input, and what it means:
- Arrow tables, record batches and readers (streamed), anything with `__arrow_c_stream__`;
- a list of dicts, one per record (`[]` is an empty write: it commits no rows). The rows'
  fields are the **union** of every row's fields, in first-seen order, at every depth (structs
  and child records too), so a field has one type across rows; a field a row lacks names no
  cell of that row (its older value stays), an explicit `None` names a null cell
  (`presence.py`: rows naming different cells are written as separate runs of one commit);
- a dict of columns (lists of equal length); a dict whose values are all single values is one
  record (`{"id": 9, "x": 1.0}`); a dict mixing both is refused, since it is ambiguous;
- pandas and Polars data frames (a pandas index is not written: `reset_index()` first).

Fields that carry no type (an all-null column, `[]` lists) write nothing unless the schema knows
their type: an empty or null child list means "no children written", not a new column.
Every refusal is a `SchemaError` naming the column and the fix, raised before any file is written.

This is the one input path: the nested API's writes and the Spark writer build Arrow and come
through `read_input` too, so every form of the same rows writes the same table; only a list of
dicts can leave a cell out of one row (an Arrow, pandas or Polars table can only say null there;
see docs/inputs-and-filters.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.errors import SchemaError
from conch.model.schema import CHILD_KEY, Schema, is_child_level_type, join_path, normalize_type
from conch.write.presence import PRESENT, split_presence, with_presence


def read_input(data: Any, schema: Schema, level: str) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """`data` as record batches of one validated input schema, untyped fields dropped.

    Raises `SchemaError` for input that cannot be a write at `level`: a column given twice, key
    columns missing (with a hint when a pandas index holds them), values that are not one type.
    """
    input_schema, batches = to_record_batches(data)
    schema.level(level)  # raises SchemaError naming the known levels
    keys = schema.key_names(level)
    if not input_schema.names:  # `[]`, `{}`: an empty write
        return pa.schema(schema.key_fields(level)), iter(())
    twice = sorted(n for n, k in Counter(input_schema.names).items() if k > 1)
    if twice:
        raise SchemaError(f"column(s) {twice} appear more than once in the input; give each column once")
    missing = [k for k in keys if k not in input_schema.names]
    if missing:
        raise SchemaError(
            f"write is missing key column(s) {missing}; key columns are {keys}{_index_hint(data, missing)}"
        )
    pruned = pa.schema(_prune(list(input_schema), schema, level, "", set(keys)))
    if pruned != input_schema:
        batches = (_conform(b, pruned) for b in batches)
    if isinstance(data, list):  # the one form where a row can leave a field out
        table = with_presence(data, pa.Table.from_batches(list(batches), pruned), keys)
        return pruned, iter(table.to_batches())
    return pruned, batches


def _index_hint(data: Any, missing: list[str]) -> str:
    names = getattr(getattr(data, "index", None), "names", None) or []
    if type(data).__module__.split(".")[0] == "pandas" and set(missing) & set(names):
        return " (they are the DataFrame's index, which is not written: call df.reset_index() first)"
    return ""


# ----- conversion ---------------------------------------------------------------------------
def to_record_batches(data: Any) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """Accept Arrow tables/batches/readers, lists of dicts, dicts, pandas and Polars."""
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, iter(data)
    if isinstance(data, pa.RecordBatch):
        return data.schema, iter([data])
    if isinstance(data, pa.Table):
        return data.schema, iter(data.to_batches())
    if isinstance(data, list):
        t = _from_rows(data)
        return t.schema, iter(t.to_batches())
    if isinstance(data, dict):
        t = _from_columns(data)
        return t.schema, iter(t.to_batches())
    mod = type(data).__module__.split(".")[0]
    if mod == "pandas":
        t = _from_pandas(data)
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


def _from_rows(rows: list[Any]) -> pa.Table:
    """Rows as columns over the union of their fields (`pa.Table.from_pylist` would keep only the
    first row's fields and drop the others' values silently)."""
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise SchemaError(
            f"a list written to a table must hold dicts (one per row); row {bad} is {type(rows[bad]).__name__}"
        )
    names = list(dict.fromkeys(k for r in rows for k in r))
    odd = [n for n in names if not isinstance(n, str)]
    if odd:
        raise SchemaError(f"field names must be str; got {odd[:3]!r}")
    # pa.array infers nested dicts (structs, lists of child records) over the union of their keys
    return pa.table({name: _column(name, [r.get(name) for r in rows]) for name in names})


def _from_pandas(df: Any) -> pa.Table:
    twice = sorted({str(n) for n, k in Counter(list(df.columns)).items() if k > 1})
    if twice:
        raise SchemaError(f"column(s) {twice} appear more than once in the input; give each column once")
    try:
        return pa.Table.from_pandas(df, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as e:
        for name in df.columns:  # name the column that does not convert
            try:
                pa.Array.from_pandas(df[name])
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as inner:
                seen = sorted({type(v).__name__ for v in df[name] if v is not None})
                raise SchemaError(
                    f"column {name!r} of the DataFrame holds values of types {seen}, which do not convert to one "
                    f"Arrow type ({inner}); give the column one type"
                ) from e
        raise SchemaError(f"cannot convert the DataFrame to Arrow: {e}; give each column one type") from e


def _is_column(v: Any) -> bool:
    if isinstance(v, list | tuple | range | np.ndarray | pa.Array | pa.ChunkedArray):
        return True
    return type(v).__module__.split(".")[0] in ("pandas", "polars") and hasattr(v, "__len__")


def _from_columns(data: dict[str, Any]) -> pa.Table:
    kinds = {name: _is_column(v) for name, v in data.items()}
    if data and not any(kinds.values()):
        return _from_rows([data])  # a dict of single values: one record
    singles = [n for n, is_col in kinds.items() if not is_col]
    if singles:
        raise SchemaError(
            f"a dict is written as columns (lists of values), but {singles} hold single values; to write "
            "one record pass a list with one dict ([{...}]), else make every value a list"
        )
    lengths = {name: len(v) for name, v in data.items()}
    if len(set(lengths.values())) > 1:
        raise SchemaError(f"columns have different lengths {lengths}; every column of a dict needs one value per row")
    return pa.table({name: _column(name, v) for name, v in data.items()})


def _column(name: str, values: Any) -> pa.Array | pa.ChunkedArray:
    if isinstance(values, pa.Array | pa.ChunkedArray):
        return values
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as e:
        huge = next(
            (i for i, v in enumerate(values) if isinstance(v, int) and not -(2**63) <= v < 2**64),
            None,
        )
        if huge is not None:
            raise SchemaError(
                f"column {name!r}, row {huge}: {values[huge]} is out of range for int64 (and uint64); store it as a "
                "float or a string, or as bytes"
            ) from e
        seen = sorted({type(v).__name__ for v in values if v is not None})
        raise SchemaError(
            f"column {name!r} holds values of types {seen}, which do not convert to one Arrow type ({e}); "
            "give the column one type (e.g. all floats), or convert it before writing"
        ) from e


# ----- untyped fields -------------------------------------------------------------------------
def _untyped(t: pa.DataType) -> bool:
    """No type to store: null, lists of untyped values, structs without fields (`[]`, `None`)."""
    if pa.types.is_null(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _untyped(t.value_type)
    return pa.types.is_struct(t) and t.num_fields == 0


def _prune(fields: list[pa.Field], schema: Schema, level: str, group: str, keys: set[str]) -> list[pa.Field]:
    """The fields without the untyped ones the schema has no column for (recursively)."""
    out = []
    for f in fields:
        t = f.type
        if f.name in keys:
            out.append(f)
            continue
        path = join_path(group, f.name)
        if not group and is_child_level_type(t):
            child = join_path(level, f.name)
            sub = _prune(list(t.value_type), schema, child, "", {CHILD_KEY})
            out.append(
                f.with_type(pa.large_list(pa.struct(sub)) if pa.types.is_large_list(t) else pa.list_(pa.struct(sub)))
            )
        elif _untyped(t):
            if schema.has_column(join_path(level, path)):
                out.append(f)
        elif pa.types.is_struct(t) and not isinstance(t, pa.ExtensionType):
            sub = _prune(list(t), schema, level, path, set())
            if sub:
                out.append(f.with_type(pa.struct(sub)))
        else:
            out.append(f)
    return out


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """`batch` with only the (nested) fields of `target`."""
    arrays = [_conform_array(batch.column(f.name), f.type) for f in target]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _conform_array(arr: pa.Array, t: pa.DataType) -> pa.Array:
    if arr.type == t:
        return arr
    validity = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(t):
        children = [_conform_array(arr.field(f.name), f.type) for f in t]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=validity)
    cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
    return cls.from_arrays(arr.offsets, _conform_array(arr.values, t.value_type), type=t, mask=validity)


# ----- splitting a nested chunk into flat per-level tables -------------------------------------
def value_fields(input_schema: pa.Schema, key_names: list[str]) -> list[pa.Field]:
    """The non-key fields of an input schema: the subtree a write adds to the schema."""
    fields = []
    for f in input_schema:
        if f.name in key_names:
            continue
        fields.append(f.with_type(normalize_type(f.type)))
    return fields


def split_levels(table: pa.Table, schema: Schema, level: str) -> dict[str, pa.Table]:
    """A chunk at `level` → {level: flat table of key columns + leaf columns by path}; a chunk
    with presence columns (`presence.py`) gets them split alike, as `PRESENT + path` columns
    of each level's flat table."""
    keys = schema.key_names(level)
    table, present = split_presence(table, keys)
    out: dict[str, pa.Table] = {}
    _split(table, schema, level, keys, out)
    if present is not None:
        flags: dict[str, pa.Table] = {}
        _split(present, schema, level, keys, flags)
        for lvl, flat in flags.items():
            own = set(schema.key_names(lvl))
            for name in flat.column_names:
                if name not in own:
                    out[lvl] = out[lvl].append_column(PRESENT + name, flat.column(name))
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
