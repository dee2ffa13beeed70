"""Step 5: assemble output batches: key columns, then projected columns nested by group."""

from __future__ import annotations

import pyarrow as pa

from conch.model.schema import Column, Schema, nest, struct_of


def output_schema(schema: Schema, level: str, cols: list[Column], with_keys: bool = True) -> pa.Schema:
    """Key columns (unless `with_keys` is False), then the projected columns nested as in the
    schema tree (groups → structs)."""
    return pa.schema([*(schema.key_fields(level) if with_keys else []), *struct_of(nest(cols))])


def drop_keys(batch: pa.RecordBatch, out: pa.Schema) -> pa.RecordBatch:
    """`batch` (key columns first) narrowed to `out`, a key-less output schema."""
    return batch if batch.schema.equals(out) else batch.select(out.names)


def assemble(
    out: pa.Schema, keys: pa.Table, cols: list[Column], arrays: dict[int, pa.Array], rows: int | None = None
) -> pa.RecordBatch:
    """One output batch from its keys and the values of `cols` (by column id), row-aligned
    (`rows`: the row count where `out` holds no key columns and `keys` is empty)."""
    by_path = {c.path: arrays[c.id] for c in cols}
    # copied, not `take.one_array`: a batch's keys are often a slice of a run's whole key column, which
    # a batch kept by its consumer would pin (a 6M-key major held ~1 GB where 340 MB: test_compaction_memory)
    data: list[pa.Array] = [keys.column(i).combine_chunks() for i in range(keys.num_columns)]
    n = keys.num_rows if rows is None else rows
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
