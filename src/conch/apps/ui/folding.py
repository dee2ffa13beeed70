"""Scan results cut down in Arrow before they become Python values: a page never carries a whole
cell.

`fold_rows(table)` gives the rows of a scan result with every string cut to `TEXT_KEEP` characters
(`utf8_slice_codeunits`) and every blob over `BLOB_PREVIEW_MAX` bytes cut to its first
`BLOB_HEAD` bytes (`binary_slice`, enough for its header), at any depth of structs and lists, and
a twin of each row that holds each string's length in characters and each blob's in bytes where
the row holds the string or blob (None elsewhere). A 300 MB string thus costs the page a prefix
and its size, and never a 300 MB Python `str`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

TEXT_KEEP = 1000  # characters of a string kept (its summary shows fewer; the rest is its size)
BLOB_PREVIEW_MAX = 8 << 20  # blobs up to this size are read whole (thumbnails, waveforms)
BLOB_HEAD = 64 << 10  # of a bigger blob only this prefix: enough to name its format


def fold_rows(table: pa.Table) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`(rows, sizes)`: the folded rows of `table` and, per row, the sizes of its strings and blobs
    (same nesting as the row)."""
    folded: dict[str, pa.ChunkedArray] = {}
    sizes: dict[str, pa.ChunkedArray] = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        parts = [fold_array(chunk) for chunk in column.chunks]
        folded[name] = pa.chunked_array([f for f, _ in parts], type=parts[0][0].type if parts else column.type)
        twins = [s if s is not None else pa.nulls(len(f)) for f, s in parts]
        sizes[name] = pa.chunked_array(twins, type=twins[0].type if twins else pa.null())
    return pa.table(folded).to_pylist(), pa.table(sizes).to_pylist()


def fold_array(arr: pa.Array) -> tuple[pa.Array, pa.Array | None]:
    """`(folded, sizes)` of one array; `sizes` is None when it holds no string or blob."""
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pc.utf8_slice_codeunits(arr, 0, TEXT_KEEP), pc.utf8_length(arr).cast(pa.int64())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        lengths = pc.binary_length(arr).cast(pa.int64())
        big = pc.fill_null(pc.greater(lengths, BLOB_PREVIEW_MAX), False)
        if not pc.any(big).as_py():
            return arr, lengths
        return pc.if_else(big, pc.binary_slice(arr, 0, BLOB_HEAD), arr), lengths
    if pa.types.is_struct(t):
        children = [fold_array(child) for child in arr.flatten()]
        if all(s is None for _, s in children):
            return arr, None
        names = [t.field(i).name for i in range(t.num_fields)]
        mask = arr.is_null()
        folded = pa.StructArray.from_arrays([f for f, _ in children], names=names, mask=mask)
        twins = [s if s is not None else pa.nulls(len(arr)) for _, s in children]
        return folded, pa.StructArray.from_arrays(twins, names=names, mask=mask)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        # Rebased offsets over just the values this (maybe sliced) array spans: Arrow rejects a
        # validity mask together with sliced offsets, and the values past them are not ours.
        start, end = arr.offsets[0].as_py(), arr.offsets[-1].as_py()
        values, value_sizes = fold_array(arr.values.slice(start, end - start))
        if value_sizes is None:
            return arr, None
        offsets = pc.subtract(arr.offsets, pa.scalar(start, arr.offsets.type))
        cls = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
        mask = arr.is_null()
        return (
            cls.from_arrays(offsets, values, mask=mask),
            cls.from_arrays(offsets, value_sizes, mask=mask),
        )
    return arr, None
