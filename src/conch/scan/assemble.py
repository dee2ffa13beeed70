"""Step 5: assemble output batches: key columns, then projected columns nested by group."""

from __future__ import annotations

import pyarrow as pa

from conch.model.schema import Column, Schema, nest, struct_of


def output_schema(schema: Schema, level: str, cols: list[Column]) -> pa.Schema:
    """Key columns, then the projected columns nested as in the schema tree (groups → structs)."""
    return pa.schema([*schema.key_fields(level), *struct_of(nest(cols))])


def assemble(out: pa.Schema, keys: pa.Table, cols: list[Column], arrays: dict[int, pa.Array]) -> pa.RecordBatch:
    """One output batch from its keys and the values of `cols` (by column id), row-aligned."""
    by_path = {c.path: arrays[c.id] for c in cols}
    data: list[pa.Array] = [keys.column(i).combine_chunks() for i in range(keys.num_columns)]
    n = keys.num_rows
    for f in out:
        if f.name in keys.column_names:
            continue
        data.append(_build(f, f.name, by_path, n))
    return pa.RecordBatch.from_arrays(data, schema=out)


def _build(f: pa.Field, path: str, by_path: dict[str, pa.Array], n: int) -> pa.Array:
    if path in by_path:
        return by_path[path]
    children = [_build(sub, f"{path}.{sub.name}", by_path, n) for sub in f.type]
    return pa.StructArray.from_arrays(children, fields=list(f.type)) if children else pa.nulls(n, f.type)
