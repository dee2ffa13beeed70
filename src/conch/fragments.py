"""Fragment files: the `FragmentFormat` interface and its Vortex implementation (DESIGN §3, §9).

A fragment holds the rows of one column group for a contiguous run of one key space's rows,
sorted by key. Its columns are named by column id (`c<id>`) so renames are metadata-only; key
values are not stored here but in the key space. Files are opened lazily and cached by path:
they are immutable, so a cached footer never goes stale.
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import vortex as vx

from conch.errors import CorruptFileError


def column_name(column_id: int) -> str:
    return f"c{column_id}"


class VortexFormat:
    """Fragments and key spaces as Vortex files."""

    name = "vortex"
    suffix = ".vortex"

    def __init__(self, cache_size: int = 512) -> None:
        self._open: OrderedDict[str, Any] = OrderedDict()
        self._cache_size = cache_size

    def write(self, table: pa.Table, path: str) -> None:
        vx.io.write(table, path)

    def _file(self, path: str) -> Any:
        f = self._open.get(path)
        if f is None:
            try:
                f = vx.open(path)
            except Exception as e:  # vortex raises plain exceptions for missing/corrupt files
                raise CorruptFileError(f"cannot open fragment {path}: {e}") from e
            self._open[path] = f
            if len(self._open) > self._cache_size:
                self._open.popitem(last=False)
        else:
            self._open.move_to_end(path)
        return f

    def read(
        self,
        path: str,
        columns: Sequence[str],
        schema: pa.Schema,
        indices: np.ndarray | None = None,
    ) -> pa.Table:
        """Read `columns` (all rows, or the sorted row `indices`) cast to `schema`."""
        f = self._file(path)
        if indices is not None and len(indices) == 0:
            return schema.empty_table()
        try:
            idx = vx.array(pa.array(indices, pa.uint64())) if indices is not None else None
            reader = f.to_arrow(list(columns), indices=idx, schema=schema)
            return reader.read_all()
        except Exception as e:
            raise CorruptFileError(f"cannot read {list(columns)} from fragment {path}: {e}") from e


def column_stats(col: pa.ChunkedArray | pa.Array) -> tuple[Any, Any, int]:
    """(min, max, null_count) of a column; min/max are None where the type has no order."""
    t = col.type
    nulls = col.null_count
    orderable = (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date(t)
    )
    if not orderable or len(col) == nulls:
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
        st = t if _stat_type_ok(t) else pa.null()
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


def _stat_type_ok(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date(t)
    )
