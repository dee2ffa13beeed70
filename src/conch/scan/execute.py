"""Scan execution: fresh records, streamed in key order (DESIGN §2, §5; spec/000, spec/001).

The general path, one module per step:

1. **Merge key spaces** (`merge.py`, kernels in `keyspace.py`): read the considered key spaces
   (keys only), select the key predicate's rows by binary search, and merge them: a zip when
   there is one run or the runs hold identical key sets, a run merge otherwise. Per key: its
   newest tombstone and whether it has a cell newer than that. Keys that live are the output.
2. **Locate fresh cells** (`locate.py`, `keymask.py`): per read unit (columns of a group held by
   the same key spaces), each key's fresh cell is a key-space row; the fragments' key masks map
   it to a fragment and a row within it.
3. **Row mask** (`rowmask.py`): the filter, pushed into Vortex per fragment on fresh cells only,
   pruned by statistics, evaluated on keys or assembled records where it cannot be pushed.
4. **Take** (`take.py`): in batches of bounded bytes, exactly the fresh rows of the projected
   columns from each fragment.
5. **Assemble** (`assemble.py`): keys beside the values, nested by group.

Before that, the **direct take** (`pick.py`: exact keys from one key set) and the **streamed
zip path** (`stream.py`) are tried: for the shapes they cover (no overlapping runs, no
tombstones), cells go straight to output by key-space row. Every read is counted in
the scan's own context (`context.py`).

Memory: the keys of the considered key spaces (a key set over large ones: only the blocks their
sparse indexes name), one output batch, and the caches `connect(memory_budget=)` bounds.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from conch.files.manifest import KeySpace
from conch.model.keys import KeySet
from conch.scan.assemble import assemble, drop_keys, output_schema
from conch.scan.context import ScanContext
from conch.scan.keyspace import numeric_key
from conch.scan.locate import read_units
from conch.scan.merge import merge
from conch.scan.pick import picked
from conch.scan.plan import without
from conch.scan.rowmask import row_mask
from conch.scan.stream import streamed
from conch.scan.take import batch_rows, gather, plan_sharing, prefetch, take_rows


def execute(ctx: ScanContext) -> Iterator[pa.RecordBatch]:
    """The scan's output batches, in key order (at least one, possibly empty)."""
    if ctx.options.fast_paths:
        holding_key_set(ctx)
    pick = picked(ctx) if ctx.options.fast_paths else None  # exact keys from one key set
    if pick is not None:
        if ctx.options.with_keys:  # the batches' schema already
            yield from pick
            return
        out = output_schema(ctx.plan.schema, ctx.plan.level, ctx.plan.columns, with_keys=False)
        yield from (drop_keys(b, out) for b in pick)
        return
    stream = streamed(ctx) if ctx.options.fast_paths else None
    if stream is not None:
        yield from stream
        return
    plan = ctx.plan
    schema = output_schema(plan.schema, plan.level, plan.columns)
    out_schema = output_schema(plan.schema, plan.level, plan.columns, ctx.options.with_keys)
    merged = merge(ctx)
    live = np.nonzero(merged.alive)[0]
    keys = merged.keys.take(pa.array(live)) if len(live) != merged.keys.num_rows else merged.keys
    ctx.metrics.keys_out = len(live)
    if plan.filter is not None:
        filter_units = read_units(ctx, plan.filter_columns, merged, live)
        positions = row_mask(ctx, filter_units, keys)
    else:
        positions = np.arange(len(live))
    if plan.limit is not None:
        positions = positions[: plan.limit]
    # fresh cells are located for the output keys only: a selective filter or a limit leaves
    # a few of many keys, and locating all of them cost more than the read (spec/001 at 1 %)
    units = read_units(ctx, plan.columns, merged, live[positions] if len(positions) != len(live) else live)
    out = np.arange(len(positions))  # the units' rows
    step = batch_rows(ctx, units)
    plan_sharing(ctx, units, out, step)
    emitted = False
    for start in range(0, len(positions), step):
        arrays: dict[int, pa.Array] = {}
        pre = prefetch(ctx, units, out[start : start + step]) if len(units) > 1 else None
        for u in units:
            arrays.update(gather(ctx, u, out[start : start + step], pre))
        batch = assemble(schema, take_rows(keys, positions[start : start + step]), plan.columns, arrays)
        ctx.metrics.rows_out += batch.num_rows
        ctx.metrics.bytes_out += batch.nbytes
        emitted = True
        yield drop_keys(batch, out_schema)
    ctx.finish()
    if not emitted:
        yield pa.RecordBatch.from_pylist([], schema=out_schema)


def holding_key_set(ctx: ScanContext) -> None:
    """A take (`keys=`, numeric keys) considers only the runs holding one of its keys, found by
    binary search in their cached keys: a table being written holds many small runs, and a 50-key
    take over them paid every path's fixed cost per run (locating, merging, taking) for runs that
    hold none of its keys (each commit's run of 2,000 of 1M keys holds one of 50 random keys one
    time in ten). The runs' spans were already checked at planning (`plan._holds_one`); this is
    the exact check, on keys in memory only (key tables not cached are kept: reading them to
    prune would cost what the sparse-index lookup saves). Tombstone sets of the scan's own level
    holding none of the keys are dropped too: they delete none of them."""
    plan = ctx.plan
    pred, fields = plan.key_predicate, plan.key_fields
    if not isinstance(pred, KeySet) or not numeric_key(fields):
        return
    keys_of = ctx.keys()

    def holds(ks: KeySpace) -> bool:
        return not (keys_of.keep or keys_of.cached(ks)) or len(keys_of.rows(ks, fields, pred)) > 0

    kept = [ks for ks in plan.key_spaces if holds(ks)]
    tombstones = [ts for ts in plan.tombstones if ts.level != plan.level or holds(ts)]
    ctx.plan = without(plan, kept, tombstones, "key_spaces_keys")
    ctx.metrics.pruned = dict(ctx.plan.pruned)
