"""Update by predicate: `Table.update(where=..., set={...})` writes only the named cells of the
records that match, in one commit.

The filter is evaluated like a scan's (on fresh records, SQL three-valued logic: a null never
matches) on the table as of one version `s`; the new values are computed from the same records
(a value: a literal; a Conch expression such as `t["b"]` or `t["a"] > 0`, evaluated on the
record; or a callable taking the matched records as an Arrow table and returning one array), cast
to the column's type, and written as cells of exactly those columns of exactly the matched keys.
Like `Table.delete(where=...)` (`conch.api.delete_where`) the commit goes directly after `s`: if
another commit landed in between, the update is evaluated again on the new state (a serial
transaction), so what it wrote matches the state it commits onto.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from conch.api.delete_where import _column
from conch.api.handle import TableLike
from conch.errors import ExpressionError, InvalidArgumentError
from conch.expr.tree import Expr, columns, evaluate
from conch.files.manifest import TableState
from conch.log.txn import Commit
from conch.log.wal import Transaction
from conch.model.schema import Column
from conch.write.stage import stage_write

MAX_ATTEMPTS = 20


def update_where(table: TableLike, where: Expr | None, values: Mapping[str, Any], level: str | None = None) -> Commit:
    """Set `values` (column path → value, expression or callable) on the records of `level`
    matching `where` (None: every record), in one serial commit (module doc)."""

    def compute(state: TableState) -> pa.Table:
        scan = matching_scan(table, where, values, level, state.time)
        parts = [new_cells(b, state.schema, level, values) for b in scan if b.num_rows]
        return pa.concat_tables(parts) if parts else new_cells(scan.schema.empty_table(), state.schema, level, values)

    return commit_update(table, where, values, level, compute)


def check_update(where: Any, values: Mapping[str, Any]) -> None:
    if not values:
        raise InvalidArgumentError("update needs set={column: value or expression}")
    if where is not None and not isinstance(where, Expr):
        raise ExpressionError(f"where= takes a Conch expression such as t['x'] < 1, got {type(where).__name__}")


def matching_scan(table: TableLike, where: Expr | None, values: Mapping[str, Any], level: str | None, time: int) -> Any:
    """The scan of the matching records, with the columns the new values need, as of `time`."""
    schema = table.state().schema
    keys = schema.key_names(level or "")
    reads = list(values)
    for v in values.values():
        if isinstance(v, Expr):
            reads += columns(v)
    if where is not None:
        reads += columns(where)
    reads = [p for p in dict.fromkeys(reads) if p not in keys]
    if any(callable(v) and not isinstance(v, Expr) for v in values.values()):
        reads = []  # a callable may read any column of the record: all of the level's
    return table.snapshot(time or None).scan(*reads, where=where, level=level)


def commit_update(
    table: TableLike,
    where: Expr | None,
    values: Mapping[str, Any],
    level: str | None,
    compute: Callable[[TableState], pa.Table],
) -> Commit:
    """Commit the cells `compute(state)` returns directly after `state`, computing them again on
    the new state when another commit landed first (module doc)."""
    check_update(where, values)
    lvl = level or ""

    def stage() -> Transaction:
        state = table.state()
        for p in values:
            target(state.schema, lvl, p)  # typed errors before any work
        data = compute(state)
        staged = stage_write(table.log.files, state, data, lvl, table.log.warehouse.write_options, False, False)
        what = ", ".join(values)
        return staged.transaction("update", f"set {what} on {data.num_rows} keys at {lvl or 'root'} where {where!r}")

    return table.log.transact(stage, serial=True, attempts=MAX_ATTEMPTS, what=f"update where {where!r}")


def target(schema: Any, level: str, path: str) -> Column:
    full = f"{level}.{path}" if level and not schema.has_column(path) else path
    col: Column = schema.column(full)  # raises ColumnNotFoundError naming the known columns
    if col.level != level:
        raise InvalidArgumentError(f"update of level {level or 'root'!r} cannot set {path!r} of level {col.level!r}")
    return col


def new_cells(batch: pa.RecordBatch | pa.Table, schema: Any, level: str | None, values: Mapping[str, Any]) -> pa.Table:
    """Key columns plus the new value of every target, nested by group as a write takes them."""
    part = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    keys = schema.key_names(level or "")
    targets = {p: target(schema, level or "", p) for p in values}
    n = part.num_rows
    flat: dict[str, pa.Array] = {}
    for p, col in targets.items():
        v = values[p]
        if isinstance(v, Expr):
            arr = evaluate(v, lambda c: _column(part, c))
        elif callable(v):
            arr = v(part)
        else:
            arr = pa.scalar(v)
        if isinstance(arr, pa.Scalar):
            arr = pa.array([arr.as_py()] * n, col.type) if arr.is_valid else pa.nulls(n, col.type)
        arr = pa.array(arr) if not isinstance(arr, pa.Array | pa.ChunkedArray) else arr
        if len(arr) != n:
            raise InvalidArgumentError(f"update: the value of {p!r} has {len(arr)} rows for {n} matched records")
        flat[col.path] = _combine(arr.cast(col.type))
    out: dict[str, Any] = {k: part.column(k) for k in keys}
    out.update(_nest(flat, n))
    return pa.table(out)


def _nest(flat: dict[str, Any], n: int) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path, arr in flat.items():
        *groups, leaf = path.split(".")
        d = tree
        for g in groups:
            d = d.setdefault(g, {})
        d[leaf] = arr

    def build(d: dict[str, Any]) -> dict[str, Any]:
        return {
            k: pa.StructArray.from_arrays(list(build(v).values()), names=list(v)) if isinstance(v, dict) else v
            for k, v in d.items()
        }

    return {k: _combine(v) for k, v in build(tree).items()}


def _combine(v: Any) -> Any:
    return v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v
