"""Delete by filter: `Table.delete(where=...)` tombstones exactly the keys whose fresh records match.

The filter is evaluated like a scan's (`Table.scan(where=...)`: on fresh records, SQL
three-valued logic, so a null never matches) on one snapshot of the table (`Table.snapshot`,
version `s`), and
the tombstones of every matching key are committed in one commit **directly after `s`**. If any
other commit lands in between — a concurrent writer may have changed a matching record so that
it no longer matches, or written a new record that does — the commit is refused and the delete is
evaluated again on the new state, up to `MAX_ATTEMPTS` times, then `CommitConflictError`
(nothing committed; retrying is safe). So the keys deleted are exactly those that match in the
state the delete commits onto: a delete by filter is serializable with every other commit, unlike
a blind `Table.delete(keys)`, which never conflicts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from conch.api.handle import TableLike
from conch.api.snapshot import Snapshot
from conch.errors import ExpressionError, InvalidArgumentError
from conch.expr.tree import Expr
from conch.log.txn import Commit
from conch.log.wal import Transaction
from conch.model.progress import Progress
from conch.scan import Scan
from conch.write.stage import stage_delete

MAX_ATTEMPTS = 20


def matching_scan(snapshot: Snapshot, where: Expr, level: str) -> Scan:
    """The scan of the keys of `level` in `snapshot` matching `where`: keys only, the filter the
    scan's (its analysis evaluates key terms on keys, value terms on fresh records, pushed down
    and pruned by statistics, mixed terms on both). The Spark delete
    (`conch.engines.spark.delete`) runs its key-range splits as tasks."""
    key_names = snapshot.state.schema.key_names(level)
    return snapshot.scan(*key_names, where=where, level=level or None)


def no_keys(snapshot: Snapshot, level: str) -> pa.Table:
    """An empty table of `level`'s key columns."""
    return pa.schema(snapshot.state.schema.key_fields(level)).empty_table()


def matching_keys(snapshot: Snapshot, where: Expr, level: str, progress: bool | None = None) -> pa.Table:
    """The key columns of every fresh record of `level` in `snapshot` that matches `where`."""
    scan = matching_scan(snapshot, where, level)
    parts: list[pa.Table] = []
    with Progress("matching", progress=progress) as bar:
        for batch in scan:
            parts.append(pa.Table.from_batches([batch]))
            bar.advance(batch.num_rows, batch.nbytes)
    return pa.concat_tables(parts) if parts else no_keys(snapshot, level)


def _column(part: pa.Table, path: str) -> pa.Array:
    """A column of a scan batch by its dotted path (groups are structs)."""
    head, *rest = path.split(".")
    col = part.column(head).combine_chunks()
    for name in rest:
        col = col.field(name)
    return col


def check_where(keys: Any, where: Any) -> Expr:
    """`where` as a filter expression, or a typed error saying what to pass instead."""
    if keys is not None and where is not None:
        raise InvalidArgumentError("delete takes keys or where=, not both: use `where=` alone, or list the keys")
    if where is None:
        raise InvalidArgumentError("delete needs the keys to delete, or `where=` (a filter on fresh records)")
    if not isinstance(where, Expr):
        raise ExpressionError(
            f"where= takes a Conch expression such as t['x'] < 1, got {type(where).__name__}; "
            "parse text with conch.expr.syntax.parse"
        )
    return where


def delete_where(
    table: TableLike, keys: Any, where: Expr | None, level: str | None, progress: bool | None = None
) -> Commit:
    """Tombstone the keys of `level` whose fresh records match `where`, in one commit."""
    expr, lvl = check_where(keys, where), level or ""
    return commit_matching(table, expr, lvl, lambda snap: matching_keys(snap, expr, lvl, progress))


def commit_matching(table: TableLike, where: Expr, level: str, match: Callable[[Snapshot], pa.Table]) -> Commit:
    """Commit the tombstones of `match(snapshot)` (the keys matching `where` in a snapshot of
    the table) directly after its version, re-matching on a new snapshot when another commit
    landed first (module doc)."""

    def stage() -> Transaction:
        snap = table.snapshot()
        matched = match(snap)
        staged = stage_delete(table.log.files, snap.state, matched, level)
        return staged.transaction("delete", f"{matched.num_rows} keys at {level or 'root'} where {where!r}")

    return table.log.transact(stage, serial=True, attempts=MAX_ATTEMPTS, what=f"delete where {where!r}")
