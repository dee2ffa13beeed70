"""Step 1 of the general path: merge the considered key spaces into distinct live keys.

Reads keys only (through the scan's counted key cache): every considered key space's keys (or
the rows the key predicate admits, by binary search; a key set over a large numeric key space
reads only the blocks its sparse index names, `keyspace.find_keys`), merged by
`keyspace.merge_key_spaces`;
then, per key, its newest tombstone (own level or an ancestor's prefix) decides whether it is
alive and which of its rows are newer than the tombstone.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.expr.tree import computable
from conch.model.keys import KeySet, encode_keys
from conch.scan.context import ScanContext
from conch.scan.keyspace import (
    MergedKeys,
    find_keys,
    merge_key_spaces,
    numeric_key,
    selected_rows,
    within_numeric,
)


def merge(ctx: ScanContext) -> MergedKeys:
    """Merge the considered key spaces into distinct keys, newest rows first per key."""
    plan = ctx.plan
    fields = plan.key_fields
    numeric = numeric_key(fields)
    keys_of = ctx.keys()
    parts: list[pa.Table] = []
    rows_l: list[np.ndarray] = []
    nums: list[np.ndarray | None] = []
    pred = plan.key_predicate
    # a key set whose considered key tables would fill more than half the key cache finds its
    # keys through each key space's sparse index instead (memory flat in the table's keys);
    # smaller tables are cached whole, so repeated takes are binary searches in memory. The
    # general path (`fast_paths=False`) always reads whole tables: the equivalence tests.
    indexed = ctx.options.fast_paths and numeric and isinstance(pred, KeySet) and not keys_of.keep
    for ks in plan.key_spaces:
        if indexed and isinstance(pred, KeySet) and not keys_of.cached(ks):
            at, found = find_keys(keys_of, ks, fields, pred)
            if plan.within is not None:
                ok = within_numeric(found, plan.within, fields)
                at, found = at[ok], found[ok]
            parts.append(pa.table({fields[0].name: pa.array(found).cast(fields[0].type)}))
            rows_l.append(at)
            nums.append(found)
            continue
        kt = keys_of.keys(ks, fields)
        num = keys_of.numeric(ks, fields) if numeric else None
        rows = selected_rows(keys_of, ks, fields, plan.key_predicate, plan.within)
        if rows is not None:
            kt = kt.take(pa.array(rows))
            num = num[rows] if num is not None else None
        else:
            rows = np.arange(kt.num_rows, dtype=np.int64)
        parts.append(kt)
        rows_l.append(rows)
        nums.append(num)
    m = ctx.metrics
    m.key_spaces = len(parts)
    m.tombstones = len(plan.tombstones)
    if not parts:
        empty = pa.schema(fields).empty_table()
        z = np.zeros(0, dtype=np.int64)
        return MergedKeys(empty, z, z, z, np.zeros(0, dtype=bool), np.zeros(0, dtype=bool))
    times = np.array([ks.time for ks in plan.key_spaces], dtype=np.int64)
    keys, kidx, krow, gid, first, strategy = merge_key_spaces(parts, rows_l, times, fields, nums)
    m.keys_merged = len(kidx)
    m.merge = strategy
    tomb = tombstone_times(ctx, keys)
    # Rows sorted newest first within a key: a key lives iff its newest row beats its tombstone.
    return MergedKeys(
        keys=keys,
        ks=kidx,
        row=krow,
        gid=gid,
        alive=times[kidx[first]] > tomb,
        row_ok=times[kidx] > tomb[gid],
        strategy=strategy,
    )


def tombstone_times(ctx: ScanContext, keys: pa.Table) -> np.ndarray:
    """Per key, the time of its newest tombstone (own key or an ancestor prefix); 0 if none."""
    plan = ctx.plan
    out = np.zeros(keys.num_rows, dtype=np.int64)
    if not plan.tombstones or keys.num_rows == 0:
        return out
    schema = plan.schema
    keys_of = ctx.keys()
    encoded_prefix: dict[str, pa.BinaryArray] = {}
    for ts in plan.tombstones:
        fields = schema.key_fields(ts.level)
        names = [f.name for f in fields]
        tk = keys_of.keys(ts, fields)
        if len(names) == 1 and pa.types.is_integer(fields[0].type):
            m = _sorted_members(keys.column(names[0]), tk.column(0))
            out[m] = np.maximum(out[m], ts.time)
            continue
        if len(names) == 1:
            hit = pc.is_in(computable(keys.column(names[0])), value_set=computable(tk.column(0)))
        else:
            if ts.level not in encoded_prefix:
                encoded_prefix[ts.level] = encode_keys([keys.column(n) for n in names])
            hit = pc.is_in(encoded_prefix[ts.level], value_set=keys_of.encoded(ts, fields))
        m = np.asarray(hit.to_numpy(zero_copy_only=False), dtype=bool)
        out[m] = np.maximum(out[m], ts.time)
    return out


def _sorted_members(column: pa.ChunkedArray | pa.Array, members: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Which rows of `column` (an integer key column in ascending order, repeats allowed: a
    parent level's key in a child's keys) hold a value of `members` (a tombstone set's keys),
    by two binary searches per member: time in the members, not a hash probe per row (1M keys,
    1,000 tombstones: 44 ms → under 5 ms per tombstone set)."""
    values = np.asarray(column.to_numpy())
    wanted = np.asarray(members.to_numpy())
    lo = np.searchsorted(values, wanted, "left")
    hi = np.searchsorted(values, wanted, "right")
    held = hi > lo
    if not held.any():
        return np.zeros(len(values), dtype=bool)
    edges = np.zeros(len(values) + 1, dtype=np.int64)
    np.add.at(edges, lo[held], 1)
    np.add.at(edges, hi[held], -1)
    return np.cumsum(edges[:-1]) > 0
