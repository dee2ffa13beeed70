"""The direct take: exact keys (`scan(keys=[...])`) from one key set, without the general merge.

It applies when the scan has a numeric key set, no filter and no tombstone, and its key spaces
hold one key set (one key space, or several with identical keys: a table written group by
group, or rewritten whole). Then a wanted key's row is the same in every key space, and each
column's fresh cell is in the newest key space holding the column, whose dense fragments tile
its rows: the rows are found by binary search in the cached keys, and each unit's cells are
taken at them by fragment row (`ScanContext.read_many`). The general path would merge the key
spaces, then locate fresh cells per unit: the same answer, at several times the Python per query.

`picked(ctx)` returns the batches, or None where it does not apply (the streamed and general
paths then run).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from conch.files.manifest import Fragment, TableState
from conch.model.keys import KeySet
from conch.model.lru import Lru
from conch.model.schema import Column
from conch.scan.assemble import assemble, output_schema
from conch.scan.context import ScanContext, file_schema
from conch.scan.keymask import KeyMask, covers
from conch.scan.keyspace import numeric_key, selected_rows
from conch.scan.take import one_array


@dataclass(frozen=True)
class _Unit:
    """The columns of one group read from the newest key space holding them: its dense
    fragments, which tile the key space's rows (fragment `i` holds rows from `los[i]`)."""

    group: str
    columns: list[Column]
    fragments: list[Fragment]
    los: np.ndarray
    masks: list[KeyMask]
    schema: pa.Schema


@dataclass(frozen=True)
class _Layout:
    """Where a direct take of a version's columns reads, the same for every take of them."""

    units: list[_Unit]
    missing: list[Column]  # projected columns no fragment holds: nulls
    step: int  # output rows per batch
    schema: pa.Schema  # the output, with keys


_LAYOUTS: Lru[tuple[Any, ...], tuple[TableState, _Layout | None]] = Lru(max_entries=16)


def picked(ctx: ScanContext) -> Iterator[pa.RecordBatch] | None:
    """The direct take's batches, or None where it does not apply (module doc)."""
    plan = ctx.plan
    kss = plan.key_spaces
    fields = plan.key_fields
    if not isinstance(plan.key_predicate, KeySet) or plan.filter is not None or plan.tombstones or not kss:
        return None
    if not numeric_key(fields) or any(
        (k.min_key, k.max_key, k.rows) != (kss[0].min_key, kss[0].max_key, kss[0].rows) for k in kss
    ):
        return None
    keys_of = ctx.keys()
    if not keys_of.keep and not all(keys_of.cached(k) for k in kss):
        return None  # key tables too large to cache: the general path's sparse-index lookup
    layout = _layout(ctx)
    if layout is None:
        return None
    rows = selected_rows(keys_of, kss[-1], fields, plan.key_predicate, plan.within)
    assert rows is not None  # a key set always selects
    if plan.limit is not None:
        rows = rows[: plan.limit]
    m = ctx.metrics
    m.key_spaces, m.keys_merged, m.keys_out, m.merge = len(kss), len(rows), len(rows), "zip (take)"
    for u in layout.units:
        ctx.consider(u.group, u.fragments)
    return _batches(ctx, rows, layout)


def _layout(ctx: ScanContext) -> _Layout | None:
    """The direct take's layout of the plan's columns (None: it does not apply), worked out once
    per table version and columns: every take of them reads the same fragments, and working it
    out again (key-space identity, fragment tiling, masks) was a sixth of a 20-key take."""
    plan = ctx.plan
    opts = ctx.options
    key = (
        id(plan.state),
        plan.level,
        tuple(k.id for k in plan.key_spaces),
        tuple(c.id for c in plan.columns),
        opts.batch_rows,
        opts.batch_bytes,
    )
    hit = _LAYOUTS.get(key)
    if hit is not None and hit[0] is plan.state:
        return hit[1]
    layout = _work_out_layout(ctx)
    _LAYOUTS.put(key, (plan.state, layout))  # the entry keeps the state alive: its id stays its own
    return layout


def _work_out_layout(ctx: ScanContext) -> _Layout | None:
    plan = ctx.plan
    kss = plan.key_spaces
    fields = plan.key_fields
    keys_of = ctx.keys()
    if any(not keys_of.same_keys(kss[-1], k, fields) for k in kss[:-1]):
        return None
    pos = {k.id: i for i, k in enumerate(kss)}
    n = kss[0].rows
    units: dict[tuple[str, int], tuple[list[Column], list[Fragment]]] = {}
    missing: list[Column] = []
    for c in plan.columns:
        frs = [f for f in plan.fragments.get(c.group, []) if c.id in f.column_ids]
        if not frs:
            missing.append(c)
            continue
        newest = max(pos[f.key_space] for f in frs)
        u = units.get((c.group, newest))
        if u is None:
            base = covers([f for f in frs if pos[f.key_space] == newest], n, ctx.format.storage)
            if base is None:
                return None
            u = units[(c.group, newest)] = ([], base)
        elif {f.id for f in frs if pos[f.key_space] == newest} != {f.id for f in u[1]}:
            return None
        u[0].append(c)
    out: list[_Unit] = []
    per_row = 0.0
    for (group, _), (cols, frs) in units.items():
        masks = [ctx.mask(f) for f in frs]
        los = np.array([mk.lo for mk in masks], dtype=np.int64)
        out.append(_Unit(group, cols, frs, los, masks, file_schema(cols)))
        per_row += sum(f.bytes for f in frs) / max(1, sum(f.rows for f in frs))
    opts = ctx.options
    step = opts.batch_rows or int(min(1 << 16, max(256, opts.batch_bytes // max(per_row, 1.0))))
    return _Layout(out, missing, step, output_schema(plan.schema, plan.level, plan.columns))


def _batches(ctx: ScanContext, rows: np.ndarray, layout: _Layout) -> Iterator[pa.RecordBatch]:
    plan = ctx.plan
    schema = layout.schema
    field = plan.key_fields[0]  # one numeric key column: its cached numpy values, not an Arrow take
    keys = ctx.keys().numeric(plan.key_spaces[-1], [field])
    emitted = False
    for a in range(0, len(rows), layout.step):
        r = rows[a : a + layout.step]
        arrays: dict[int, pa.Array] = {c.id: pa.nulls(len(r), c.type) for c in layout.missing}
        for u in layout.units:
            which = np.searchsorted(u.los, r, "right") - 1  # dense fragments tile the rows
            cuts = [0, *(np.flatnonzero(which[1:] != which[:-1]) + 1).tolist(), len(r)]
            parts = [
                (u.fragments[int(which[i])], u.masks[int(which[i])].to_fragment_rows(r[i:j]))
                for i, j in itertools.pairwise(cuts)
            ]
            got = ctx.read_many(u.group, parts, u.schema)
            arrays.update((c.id, one_array(got.column(j))) for j, c in enumerate(u.columns))
        key_column = pa.Table.from_arrays([pa.array(keys[r], field.type)], names=[field.name])
        batch = assemble(schema, key_column, plan.columns, arrays)
        ctx.metrics.rows_out += batch.num_rows
        ctx.metrics.bytes_out += batch.nbytes
        emitted = True
        yield batch
    ctx.finish()
    if not emitted:
        yield pa.RecordBatch.from_pylist([], schema=schema)
