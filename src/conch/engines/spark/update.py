"""Update by predicate on Spark: `conch.engines.spark.update_where(spark, "wh/audio", where="x < 0", set={"x": 0})`.

The same update as `Table.update(where=..., set=...)` (`conch.api.update`), with the records matched
and the new cells computed by a Spark job, as `conch.engines.spark.delete_where` matches keys: the driver
pins the table's state and cuts the scan of matching records into the core's key-range splits;
each task reopens the table, restricts the scan to its split and pinned commit, and returns the
keys and new values of its matches as Arrow IPC. The driver stages one write of exactly those
cells and commits it in one **serial** transaction directly after the pinned state (another
commit in between: the job runs again on the new state, bounded).

`set` maps column paths to values, Conch expressions (`conch.Col("y")`, or filter-syntax text
for a boolean), or callables over the matched records (an Arrow table → one array; pickled to
the executors).

>>> conch.engines.spark.update_where(spark, "wh/audio", where="silence_ratio > 0.9", set={"flag": True})  # doctest: +SKIP
Commit(seq=8, kind='update', ...)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from conch.api.update import commit_update, matching_scan, new_cells
from conch.engines.spark.common import Location, open_table
from conch.errors import InvalidArgumentError
from conch.expr.syntax import parse
from conch.expr.tree import Expr
from conch.files.manifest import TableState
from conch.log.txn import Commit
from conch.scan import Split


def update_where(
    spark: Any,
    path: str | None = None,
    *,
    set: Mapping[str, Any],
    where: str | Expr | None = None,
    level: str | None = None,
    partitions: int | None = None,
    **options: str,
) -> Commit:
    """Write, in one commit, `set`'s cells of the records of `level` matching `where` (None:
    all), the records matched and the cells computed as a Spark job (module doc). `path`,
    `options` and `partitions` as in `conch.engines.spark.delete_where`."""
    loc = Location.from_options({**options, **({"path": path} if path else {})})
    expr = parse(where) if isinstance(where, str) else where
    if partitions is not None and (isinstance(partitions, bool) or partitions < 1):
        raise InvalidArgumentError(f"partitions must be a positive number of tasks, got {partitions!r}")
    table = loc.connect().table(loc.table)
    values = dict(set)

    def compute(state: TableState) -> pa.Table:
        scan = matching_scan(table, expr, values, level, state.time)
        empty = new_cells(scan.schema.empty_table(), state.schema, level, values)
        splits = scan.splits(partitions)
        if not splits:
            return empty
        task = UpdateTask(loc, expr, values, level, state.time)
        blobs = spark.sparkContext.parallelize(splits, len(splits)).map(task).collect()
        parts = [pa.ipc.open_stream(b).read_all() for b in blobs]
        return pa.concat_tables([empty, *parts]) if parts else empty

    return commit_update(table, expr, values, level, compute)


@dataclass(frozen=True)
class UpdateTask:
    """One Spark task: the keys and new cells of a split's matching records, as Arrow IPC."""

    loc: Location
    where: Expr | None
    values: dict[str, Any]
    level: str | None
    time: int

    def __call__(self, split: Split) -> bytes:
        table = open_table(self.loc)
        schema = table.state_at(self.time).schema
        scan = split.restrict(matching_scan(table, self.where, self.values, self.level, self.time))
        out_schema = new_cells(scan.schema.empty_table(), schema, self.level, self.values).schema
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, out_schema) as out:
            for batch in scan:
                if batch.num_rows:
                    out.write_table(new_cells(batch, schema, self.level, self.values))
        return bytes(sink.getvalue())
