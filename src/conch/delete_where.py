"""Delete by filter: `Table.delete(where=...)` tombstones exactly the keys whose fresh records match.

The filter is evaluated like a scan's (`Table.scan(where=...)`: on fresh records, SQL
three-valued logic, so a null never matches) on the table as of one log sequence number `s`, and
the tombstones of every matching key are committed in one commit **directly after `s`**. If any
other commit lands in between — a concurrent writer may have changed a matching record so that
it no longer matches, or written a new record that does — the commit is refused and the delete is
evaluated again on the new state, up to `MAX_ATTEMPTS` times, then `CommitConflictError`
(nothing committed; retrying is safe). So the keys deleted are exactly those that match in the
state the delete commits onto: a delete by filter is serializable with every other commit, unlike
a blind `Table.delete(keys)`, which never conflicts.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import pyarrow as pa

from conch.errors import CommitConflictError, ExpressionError, InvalidArgumentError
from conch.expr import Expr, columns, mask
from conch.progress import Progress
from conch.txn import Commit
from conch.write import stage_delete

MAX_ATTEMPTS = 20


def matching_keys(table: Any, where: Expr, level: str, seq_time: int, progress: bool | None = None) -> pa.Table:
    """The key columns of every fresh record of `level` that matches `where`, as of `seq_time`."""
    schema = table.state().schema
    key_names = schema.key_names(level)
    value_cols = [c for c in dict.fromkeys(columns(where)) if c not in key_names]
    # A filter on value columns only is the scan's (pushed down, pruned by statistics); one that
    # names key columns too is evaluated here on each batch of fresh records (keys are exact).
    on_keys = len(value_cols) < len(set(columns(where)))
    scan = table.scan(*value_cols, where=None if on_keys else where, asof=seq_time or None, level=level or None)
    parts: list[pa.Table] = []
    with Progress("matching", progress=progress) as bar:
        for batch in scan:
            part = pa.Table.from_batches([batch])
            if on_keys:
                part = part.filter(pa.array(mask(where, partial(_column, part))))
            parts.append(part.select(key_names))
            bar.advance(batch.num_rows, batch.nbytes)
    fields = schema.key_fields(level)
    if not parts:
        return pa.schema(fields).empty_table()
    return pa.concat_tables(parts)


def _column(part: pa.Table, path: str) -> pa.Array:
    """A column of a scan batch by its dotted path (groups are structs)."""
    head, *rest = path.split(".")
    col = part.column(head).combine_chunks()
    for name in rest:
        col = col.field(name)
    return col


def delete_where(table: Any, keys: Any, where: Expr | None, level: str | None, progress: bool | None = None) -> Commit:
    """Tombstone the keys of `level` whose fresh records match `where`, in one commit."""
    if keys is not None and where is not None:
        raise InvalidArgumentError("delete takes keys or where=, not both: use `where=` alone, or list the keys")
    if where is None:
        raise InvalidArgumentError("delete needs the keys to delete, or `where=` (a filter on fresh records)")
    if not isinstance(where, Expr):
        raise ExpressionError(
            f"where= takes a Conch expression such as t['x'] < 1, got {type(where).__name__}; "
            "parse text with conch.filter_syntax.parse"
        )
    lvl = level or ""
    for _ in range(MAX_ATTEMPTS):
        state = table.state()
        matched = matching_keys(table, where, lvl, state.time, progress)
        with table.log.staging():
            staged = stage_delete(table.log.files, state, matched, lvl)
        summary = f"{matched.num_rows} keys at {lvl or 'root'} where {where!r}"
        txn = replace(staged.transaction("delete", summary), serial=True)
        try:
            return table.log.commit(txn)
        except CommitConflictError:
            continue  # another commit landed after the state the filter saw: evaluate again
    raise CommitConflictError(
        f"table {table.name!r}: delete where {where!r} lost {MAX_ATTEMPTS} races with concurrent commits; "
        "nothing was deleted, try again when writers are quieter"
    )
