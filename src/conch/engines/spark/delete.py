"""Delete by filter on Spark: `conch.engines.spark.delete_where(spark, "wh/audio", where="x < 0.1")`.

The same delete as `Table.delete(where=...)` (`conch.api.delete_where`), with the filter evaluated by
a Spark job: the driver pins the table's state, cuts the scan of candidate records into the
core's key-range splits (`Scan.splits`, as the `conch` data source reads), and each Spark task
reopens the split's snapshot on its executor (with the driver's connection: metastore, token,
storage options), scans its key range of the pinned commit, evaluates the filter on
fresh records, and returns the matching keys as Arrow IPC. The driver then stages one tombstone
key space and commits it in one **serial** transaction directly after the pinned state; if
another commit landed meanwhile, the whole job runs again on the new state (bounded, then
`CommitConflictError` with nothing deleted). So the keys deleted are exactly those matching in
the state the delete commits onto, as in Python.

No DataFrame: the filter is Conch's (the `where` syntax of `conch.expr.syntax`, the one the
Spark `where` read option takes, or an `Expr`), evaluated on fresh records with SQL
three-valued logic; key and value columns may be mixed. The matching keys travel to the driver
(they are what the tombstone key space holds), the records never do.

>>> conch.engines.spark.delete_where(spark, "wh/audio", where="silence_ratio > 0.9")  # doctest: +SKIP
Commit(seq=7, ...)
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from conch.api.delete_where import check_where, commit_matching, matching_scan, no_keys
from conch.api.snapshot import Snapshot
from conch.engines.spark.common import Location
from conch.errors import InvalidArgumentError
from conch.expr.syntax import parse
from conch.expr.tree import Expr
from conch.log.txn import Commit
from conch.scan import Split


def delete_where(
    spark: Any,
    path: str | None = None,
    *,
    where: str | Expr,
    level: str | None = None,
    partitions: int | None = None,
    **options: str,
) -> Commit:
    """Tombstone, in one commit, the keys of `level` whose fresh records match `where`, the
    filter evaluated as a Spark job over the table's key-range splits (module doc).

    `path` is `<warehouse>/<table>` as in `.load(path)`, or pass `warehouse=` and `table=`;
    `options` are the data source's connection options (`metastore`, `token`, `storageOptions`);
    `partitions`: the number of tasks (default: splits sized by rows and bytes)."""
    loc = Location.from_options({**options, **({"path": path} if path else {})})
    expr = check_where(None, parse(where) if isinstance(where, str) else where)
    if partitions is not None and (isinstance(partitions, bool) or partitions < 1):
        raise InvalidArgumentError(f"partitions must be a positive number of tasks, got {partitions!r}")
    table = loc.connect().table(loc.table)
    lvl = level or ""

    def match(snap: Snapshot) -> pa.Table:
        scan = matching_scan(snap, expr, lvl)  # validates columns and level here
        splits = scan.splits(partitions)
        if not splits:
            return no_keys(snap, lvl)
        blobs = spark.sparkContext.parallelize(splits, len(splits)).map(match_keys).collect()
        parts = [pa.ipc.open_stream(b).read_all() for b in blobs]
        return pa.concat_tables(parts) if parts else no_keys(snap, lvl)

    return commit_matching(table, expr, lvl, match)


def match_keys(split: Split) -> bytes:
    """One Spark task: the matching keys of a split of the matching scan (its snapshot and
    request, filter included, travel pickled as plain data), as Arrow IPC bytes."""
    scan = split.open()  # the matching keys in its key range of the pinned commit
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, scan.schema) as out:
        for batch in scan:
            if batch.num_rows:
                out.write_batch(batch)
    return bytes(sink.getvalue())
