"""The streamed zip path: Vortex batches straight to output, no per-key location arrays.

It applies when no tombstone is considered and the considered key spaces form *segments* in key
order: each segment is one key space, or several holding identical key sets (a table written
group by group, or rewritten whole), and segments do not overlap in key range (one large write
cut into several key spaces). A key predicate must select a contiguous range of rows (a
`KeyRange`/`KeyPrefix`). Within a segment, every projected column's fresh cells sit in the dense
fragments of one key space (the newest holding the column: with identical key sets and no
tombstones, every key's fresh cell is there), overwritten where newer key spaces whose keys are
a subset (*patches*: partial upserts, numeric keys) hold cells: merge-on-read by one take per
batch. A filter is allowed when it pushes whole into the Vortex scan of the one unit holding
every projected column. Then Vortex batches go to output with the key column sliced beside them.

`streamed(ctx)` returns the stream, or None where the path does not apply (the general path then
runs: merge → locate → row mask → take → assemble).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from conch.fragments import ORDINAL
from conch.keys import KeySet
from conch.manifest import Fragment
from conch.scan.assemble import assemble, output_schema
from conch.scan.context import ScanContext, file_schema
from conch.scan.keymask import covers
from conch.scan.keyspace import numeric_key, selected_rows
from conch.scan.pushdown import may_match_many
from conch.scan.rowmask import vortex_expr
from conch.scan.take import take_rows
from conch.schema import Column


@dataclass
class _Patch:
    """A newer key space whose keys are a subset of the segment's: its cells overwrite."""

    pos: np.ndarray  # its rows' positions among the segment's keys (ascending)
    fragments: list[Fragment]  # dense, covering its key space in row order
    table: pa.Table | None = None  # decoded on first use


@dataclass
class _StreamUnit:
    """Columns of one group whose fresh cells sit in one key space's dense fragments (`fragments`;
    empty = no base cells, nulls), overwritten where newer subset key spaces (`patches`, oldest
    first) hold cells: a partial upsert read by merge-on-read."""

    group: str
    columns: list[Column]
    fragments: list[Fragment]  # covering the key space's rows in order
    patches: list[_Patch] = field(default_factory=list)
    null_base: bool = False  # no key space holding every key has cells: nulls under the patches


@dataclass
class _Segment:
    """Key-space rows [lo, hi) of one segment, and where their cells are."""

    keys: pa.Table
    lo: int
    hi: int
    units: list[_StreamUnit]
    missing: list[Column]  # projected columns with no cells in this segment: nulls


def streamed(ctx: ScanContext) -> Stream | None:
    """The streamed zip path over the plan, or None where it does not apply (module doc)."""
    plan = ctx.plan
    if plan.tombstones or not plan.key_spaces or isinstance(plan.key_predicate, KeySet) or plan.filter_keys:
        return None
    groups: dict[tuple[str, str, int], list[int]] = {}
    for i, ks in enumerate(plan.key_spaces):
        groups.setdefault((ks.min_key, ks.max_key, ks.rows), []).append(i)
    # segments in key order: a base group, then groups inside its key range with fewer keys
    # (candidate patches, checked to be subsets in _segment); segments must not overlap
    order = sorted(groups, key=lambda g: (g[0], -g[2]))
    segs: list[tuple[list[int], list[int]]] = []
    last: tuple[str, str, int] | None = None
    for g in order:
        if last is not None and g[0] <= last[1]:
            if g[1] <= last[1] and g[2] < last[2] and numeric_key(plan.key_fields):
                segs[-1][1].extend(groups[g])
                continue
            return None  # overlapping runs: the general merge
        segs.append((groups[g], []))
        last = g
    expr = None
    if plan.filter is not None:
        expr = vortex_expr(ctx, plan.filter, plan.fragments.get(plan.filter_columns[0].group, []))
        if expr is None:
            return None
    segments = []
    for base, patches in segs:
        seg = _segment(ctx, base, patches)
        if seg is None:
            return None
        if seg.hi > seg.lo:
            segments.append(seg)
    m = ctx.metrics
    m.key_spaces = len(plan.key_spaces)
    m.keys_merged = sum(ks.rows for ks in plan.key_spaces)
    m.keys_out = sum(s.hi - s.lo for s in segments)
    m.merge = "zip (streamed)"
    return Stream(ctx, segments, expr)


def _segment(ctx: ScanContext, members: list[int], patch_members: list[int]) -> _Segment | None:
    """One segment (key spaces `members` of the plan, with identical key sets, and
    `patch_members`, whose keys must be subsets of them), or None."""
    plan = ctx.plan
    fields = plan.key_fields
    if patch_members and plan.filter is not None:
        return None
    keys_of = ctx.keys()
    kss = [plan.key_spaces[i] for i in members]
    n = kss[0].rows
    keys = keys_of.keys(kss[-1], fields)
    if len(kss) > 1:
        if numeric_key(fields):
            a = keys_of.numeric(kss[-1], fields)
            same = all(np.array_equal(a, keys_of.numeric(p, fields)) for p in kss[:-1])
        else:
            same = all(keys_of.keys(p, fields).equals(keys) for p in kss[:-1])
        if not same:
            return None
    lo, hi = 0, n
    rows = selected_rows(keys_of, kss[-1], fields, plan.key_predicate, plan.within)
    if rows is not None:
        lo = hi = 0
        if len(rows):
            lo, hi = int(rows[0]), int(rows[-1]) + 1
            if hi - lo != len(rows):
                return None
    # patches: their keys' positions among the segment's keys (numeric keys: binary search)
    pos_of: dict[int, np.ndarray] = {}
    for i in patch_members:
        pk = keys_of.numeric(plan.key_spaces[i], fields)
        base_keys = keys_of.numeric(kss[-1], fields)
        pos = np.searchsorted(base_keys, pk)
        if len(pos) and (pos[-1] >= n or not np.array_equal(base_keys[np.minimum(pos, n - 1)], pk)):
            return None  # not a subset: the general merge
        pos_of[i] = pos.astype(np.int64)
    # units: (group, newest member key space holding the column, newer patches) → fragments
    in_seg = {plan.key_spaces[i].id: i for i in [*members, *patch_members]}
    by_key: dict[tuple[str, int, tuple[int, ...]], _StreamUnit] = {}
    missing: list[Column] = []
    filter_cols = plan.filter_columns if plan.filter is not None else []
    patch_bytes = 0
    for c in [*plan.columns, *[c for c in filter_cols if c not in plan.columns]]:
        frs = [f for f in plan.fragments.get(c.group, []) if f.key_space in in_seg and c.id in f.column_ids]
        holders = {in_seg[f.key_space] for f in frs}
        full = [i for i in members if i in holders]
        newest = max(full) if full else -1
        newer = tuple(sorted(i for i in holders if i in pos_of and i > newest))
        if newest < 0 and not newer:
            if c in filter_cols:
                return None  # a filter over cells that do not exist: the general path decides
            missing.append(c)
            continue
        key = (c.group, newest, newer)
        u = by_key.get(key)
        if u is None:
            base_frs: list[Fragment] | None = []
            if newest >= 0:
                base_frs = covers([f for f in frs if in_seg[f.key_space] == newest], n, ctx.format.storage)
            if base_frs is None:
                return None
            u = by_key[key] = _StreamUnit(c.group, [], base_frs, null_base=newest < 0)
            for i in newer:
                pf = covers([f for f in frs if in_seg[f.key_space] == i], plan.key_spaces[i].rows, ctx.format.storage)
                if pf is None or any(f.blob_columns for f in pf):
                    return None
                patch_bytes += sum(f.bytes for f in pf)
                if patch_bytes * 4 > ctx.decoded.max_bytes:  # patches are decoded whole
                    return None
                u.patches.append(_Patch(pos_of[i], pf))
        elif {f.id for f in frs if in_seg[f.key_space] in (newest, *newer)} != {
            f.id for f in [*u.fragments, *(f for p in u.patches for f in p.fragments)]
        }:
            return None
        u.columns.append(c)
    for u in by_key.values():
        ctx.consider(u.group, u.fragments)
    if plan.filter is not None:
        if missing or len(by_key) != 1:
            return None
        (u,) = by_key.values()
        blob_ids = {i for f in u.fragments for i in f.blob_columns}
        if any(c.id in blob_ids for c in filter_cols):
            return None
        if not all(ctx.has_column(u.group, f, ORDINAL) for f in u.fragments):
            return None
        # fragments whose statistics prove the filter false are not opened
        schema = plan.schema
        may = may_match_many(
            plan.filter, u.fragments, ctx.stats, lambda p: (schema.column(p).id, schema.column(p).type)
        )
        if not may.all():
            ctx.pruned(u.group, int((~may).sum()))
            u.fragments = [f for f, ok in zip(u.fragments, may, strict=True) if ok]
    return _Segment(keys, lo, hi, list(by_key.values()), missing)


class Stream:
    """The streamed batches of a list of segments (see the module doc)."""

    def __init__(self, ctx: ScanContext, segments: list[_Segment], filter_expr: Any) -> None:
        self.ctx, self.segments, self.filter_expr = ctx, segments, filter_expr
        limit = ctx.plan.limit
        self.left = limit if limit is not None else sum(s.hi - s.lo for s in segments)
        plan = ctx.plan
        self.schema = output_schema(plan.schema, plan.level, plan.columns)

    def _unit_batches(self, s: _Segment, u: _StreamUnit, ordinal: bool) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(key-space row of the fragment's first row, batch) of `u`'s columns over [lo, hi)."""
        schema = file_schema(u.columns)
        if u.null_base:  # no base cells: nulls, overwritten by the patches
            for a in range(s.lo, s.hi, 1 << 16):
                m = min(s.hi - a, 1 << 16)
                yield a, pa.RecordBatch.from_arrays([pa.nulls(m, t) for t in schema.types], schema=schema)
        for fr in u.fragments:
            mask = self.ctx.mask(fr)
            a, b = max(s.lo, mask.lo), min(s.hi, mask.hi)
            if a >= b:
                continue
            idx = None if (a, b) == (mask.lo, mask.hi) else mask.to_fragment_rows(np.arange(a, b))
            for batch in self.ctx.stream(u.group, fr, schema, idx, self.filter_expr, ordinal):
                yield mask.lo, batch

    def _emit(self, s: _Segment, key_part: pa.Table, cols: dict[int, pa.Array]) -> pa.RecordBatch:
        n = key_part.num_rows
        for c in s.missing:
            cols[c.id] = pa.nulls(n, c.type)
        batch = assemble(self.schema, key_part, self.ctx.plan.columns, cols)
        self.ctx.metrics.rows_out += n
        self.ctx.metrics.bytes_out += batch.nbytes
        self.left -= n
        return batch

    def _filtered(self, s: _Segment) -> Iterator[pa.RecordBatch]:
        (u,) = s.units
        for start, batch in self._unit_batches(s, u, ordinal=True):
            if self.left <= 0:
                return
            rows = batch.column(batch.num_columns - 1).to_numpy().astype(np.int64) + start
            if len(rows) > self.left:
                rows, batch = rows[: self.left], batch.slice(0, self.left)
            cols = {c.id: batch.column(i) for i, c in enumerate(u.columns)}
            yield self._emit(s, take_rows(s.keys, rows), cols)

    def _zipped(self, s: _Segment) -> Iterator[pa.RecordBatch]:
        its = [iter(self._unit_batches(s, u, ordinal=False)) for u in s.units]
        pending: list[pa.RecordBatch | None] = [None] * len(its)
        pos = s.lo
        while pos < s.hi and self.left > 0:
            for i, it in enumerate(its):
                p = pending[i]
                if p is None or p.num_rows == 0:
                    pending[i] = next(it)[1]
            n = min(self.left, s.hi - pos, 1 << 16, *(p.num_rows for p in pending if p is not None))
            cols: dict[int, pa.Array] = {}
            for i, u in enumerate(s.units):
                p = pending[i]
                assert p is not None
                here = self._patched(u, p.slice(0, n), pos) if u.patches else p.slice(0, n)
                for j, c in enumerate(u.columns):
                    cols[c.id] = here.column(j)
                pending[i] = p.slice(n)
            yield self._emit(s, s.keys.slice(pos, n), cols)
            pos += n

    def _patched(self, u: _StreamUnit, batch: pa.RecordBatch, pos: int) -> pa.RecordBatch:
        """`batch` (segment rows [pos, pos + n)) with the cells of `u`'s patches laid over it,
        newest last: one take over the batch and the patches' matching runs (slices)."""
        n = batch.num_rows
        src = np.arange(n, dtype=np.int64)
        pieces = [batch]
        offset = n
        for p in u.patches:
            a, b = np.searchsorted(p.pos, [pos, pos + n])
            if b <= a:
                continue
            table = self._patch_table(u, p)
            src[p.pos[a:b] - pos] = offset + np.arange(b - a)
            pieces.append(
                pa.RecordBatch.from_arrays(
                    [table.column(j).slice(int(a), int(b - a)).combine_chunks() for j in range(table.num_columns)],
                    schema=batch.schema,
                )
            )
            offset += int(b - a)
        if len(pieces) == 1:
            return batch
        cols = [
            pa.concat_arrays([pc_.column(j) for pc_ in pieces]).take(pa.array(src)) for j in range(batch.num_columns)
        ]
        return pa.RecordBatch.from_arrays(cols, schema=batch.schema)

    def _patch_table(self, u: _StreamUnit, p: _Patch) -> pa.Table:
        if p.table is None:
            schema = file_schema(u.columns)
            parts = [self.ctx.read(u.group, f, schema) for f in p.fragments]
            p.table = pa.concat_tables(parts).combine_chunks() if parts else schema.empty_table()
        return p.table

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        emitted = False
        for s in self.segments:
            if self.left <= 0:
                break
            for batch in self._filtered(s) if self.filter_expr is not None else self._zipped(s):
                emitted = True
                yield batch
        self.ctx.finish()
        if not emitted:
            yield pa.RecordBatch.from_pylist([], schema=self.schema)
