"""The streamed path's filtered scan with small runs over a filter's unit and columns of others:
the filter stays pushed into the large run, and only the keys the small runs touch are looked at
again.

An un-compacted LSM tree being written is one large run (the *base*) plus small runs of partial
upserts, often of the very column a query filters on (`a < 0.01` after upserts of `a`). Merging
every key to find each one's fresh cell before filtering (the general path) costs a key merge and
a fresh-cell location over the whole table for a 1 % filter. Instead (per segment):

1. the filter runs inside the Vortex scan of the base's unit holding its columns (`Stream._passing`,
   pushdown and statistics pruning kept);
2. base rows whose fresh cell of that unit is a small run's are dropped (the base's value is
   stale), and the keys of U (`overlay.OverlayKeys`: the small runs' keys, few) whose fresh cells
   of the unit are the small runs' are filtered on those cells: candidate keys = the base's
   passing rows minus U's ∪ U's passing keys, exactly the keys whose fresh record passes;
3. the two are merged in key order (`overlay.interleave`), and every other unit's cells are taken
   at the passing rows by fragment row (`Stream._taken`'s take), the small runs' cells laid over
   where they hold the newer one (`overlay.laid_over`).

The cost over a written-once table is work per small-run key (cached across scans with the
overlay: `KeyCache.derived`), never per base row.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from conch.expr.tree import mask as filter_mask
from conch.files.format import column_name
from conch.model.schema import Column
from conch.model.sets import outside
from conch.scan.context import ScanContext, file_schema
from conch.scan.overlay import OverlayColumn, interleave, laid_over
from conch.scan.take import one_array, take_rows


class StreamLike(Protocol):
    """What the overlaid take needs of `stream.Stream` (segments and units are
    `segments.Segment` and `segments.StreamUnit`)."""

    ctx: ScanContext
    left: int

    def _values(self, s: Any, u: Any) -> tuple[list[OverlayColumn], np.ndarray]: ...

    def _passing(self, s: Any, u: Any, own: list[Column]) -> Iterator[tuple[np.ndarray, dict[int, pa.Array]]]: ...

    def _keys(self, s: Any) -> pa.Table: ...

    def _emit(self, s: Any, key_part: pa.Table, cols: dict[int, pa.Array], n: int | None = None) -> pa.RecordBatch: ...


def overlaid_take(st: StreamLike, s: Any) -> Iterator[pa.RecordBatch]:
    """Segment `s`'s rows passing the filter of its first unit (module doc), in output batches
    of bounded bytes."""
    ctx = st.ctx
    others = s.units if ctx.plan.filter is None else s.units[1:]
    # units holding their base cells in the same fragments (a partial upsert splits one group's
    # columns into units by the small runs holding them) share one read of those fragments
    reads: dict[tuple[str, tuple[str, ...]], list[Any]] = {}
    for v in others:
        reads.setdefault((v.group, tuple(f.id for f in v.fragments)), []).append(v)
    shared = []
    per_row = 0.0
    for vs in reads.values():
        frs = vs[0].fragments
        masks = [ctx.mask(f) for f in frs]
        held_cols = [c for v in vs for c in v.columns]
        shared.append((vs, np.array([m.lo for m in masks], dtype=np.int64), masks, file_schema(held_cols)))
        per_row += sum(f.bytes for f in frs) / max(1, sum(f.rows for f in frs))
    opts = ctx.options
    step = opts.batch_rows or int(min(1 << 16, max(256, opts.batch_bytes // max(per_row, 1.0))))
    if ctx.plan.filter is None:  # a key set's rows (`s.rows`): every unit is taken at them
        passing = _selected(s)
    else:
        u = s.units[0]
        own = [c for c in u.columns if c in ctx.plan.columns]  # filter-only columns are not read
        passing = _passing(st, s, u, own, step)
    for rows, touched, own_cols in passing:
        for a in range(0, len(rows), step):
            if st.left <= 0:
                return
            r = rows[a : a + min(step, st.left)]
            js = touched[a : a + len(r)]
            cols = {k: col.slice(a, len(r)) for k, col in own_cols.items()}
            held = r >= 0
            for vs, los, masks, schema in shared:
                got = None  # no base cells (`null_base`): nulls under the overlay
                if vs[0].fragments:
                    at = r[held]
                    got = _read_at(ctx, vs[0], at, los, masks, schema) if len(at) else schema.empty_table()
                for v in vs:
                    values = st._values(s, v) if v.overlay else None
                    from_base = held
                    if values is not None:  # where the small runs hold the newer cell, not the base
                        newer = js >= 0
                        newer[newer] = values[1][js[newer]]
                        from_base = held & ~newer
                    keep = None if from_base is held else pa.array(from_base[held])
                    for j, c in enumerate(v.columns):
                        base = None
                        if got is not None:
                            base = one_array(got.column(column_name(c.id)))
                            base = base if keep is None else base.filter(keep)
                        cols[c.id] = laid_over(base, from_base, values[0][j] if values is not None else None, js)
            yield st._emit(s, _keys_at(st, s, r, js), cols)


def coalesced(
    parts: Iterator[tuple[np.ndarray, dict[int, pa.Array]]], rows: int = 1 << 16
) -> Iterator[tuple[np.ndarray, dict[int, pa.Array]]]:
    """A filter's passing (rows, columns) joined until they hold `rows` rows: a selective filter
    passes a few hundred rows of each 64k-row Vortex batch, and each part then paid the overlay
    merge's fixed cost (a dozen Arrow calls and the overlay's binary searches: ~0.4 ms a batch,
    ~60 % of a 1 % filter's scan over an overlay), and here a read of the other units' cells."""
    held: list[tuple[np.ndarray, dict[int, pa.Array]]] = []
    n = 0
    for part in parts:
        held.append(part)
        n += len(part[0])
        if n >= rows:
            yield _joined(held)
            held, n = [], 0
    if held:
        yield _joined(held)


def _joined(parts: list[tuple[np.ndarray, dict[int, pa.Array]]]) -> tuple[np.ndarray, dict[int, pa.Array]]:
    if len(parts) == 1:
        return parts[0]
    cols = {
        k: pa.chunked_array([c for p in parts for c in _chunks(p[1][k])], parts[0][1][k].type).combine_chunks()
        for k in parts[0][1]
    }
    return np.concatenate([p[0] for p in parts]), cols


def _chunks(col: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return col.chunks if isinstance(col, pa.ChunkedArray) else [col]


def _passing(
    st: StreamLike, s: Any, u: Any, own: list[Column], step: int
) -> Iterator[tuple[np.ndarray, np.ndarray, dict[int, pa.Array]]]:
    """Steps 1–3 of the module doc over the filter's unit `u`: (per output row its base row, -1
    for a key the base does not hold; its key of U, -1 for a row no small run touches; `own`
    columns), in key order, in parts of at least `step` base rows (`coalesced`)."""
    ov = s.overlay
    filt = st.ctx.plan.filter
    assert ov is not None and filt is not None
    values, wins = st._values(s, u)
    # base rows whose fresh cells of u are the small runs' (stale; sorted, as U is), or that
    # tombstones deleted
    dead = [d for d in (ov.ins[ov.hit & wins], s.dead) if d is not None and len(d)]
    by_path = {c.full_path: values[j].array for j, c in enumerate(u.columns)}
    ok = np.asarray(filter_mask(filt, by_path.__getitem__), dtype=np.bool_)
    passing = np.flatnonzero(ok & (~ov.hit | wins))  # keys of U whose fresh cells of u pass
    fresh = {c.id: values[u.columns.index(c)].array for c in own}
    done = 0  # passing keys of U emitted so far

    def merged(rows: np.ndarray, cols: dict[int, Any], js: np.ndarray) -> tuple[Any, ...]:
        order, base, touched = interleave(ov, rows, js)
        idx = pa.array(order)
        taken = pa.array(js)
        out = {k: pa.concat_arrays([one_array(col), fresh[k].take(taken)]).take(idx) for k, col in cols.items()}
        return base, touched, out

    for rows, cols in coalesced(st._passing(s, u, own), step):
        if dead:
            keep = outside(rows, *dead)
            rows, cols = rows[keep], {k: col.filter(pa.array(keep)) for k, col in cols.items()}
        if not len(rows):
            continue
        upto = done + int(np.searchsorted(ov.ins[passing[done:]], rows[-1], "right"))
        yield merged(rows, cols, passing[done:upto])
        done = upto
    if done < len(passing):
        yield merged(np.zeros(0, dtype=np.int64), {c.id: fresh[c.id].slice(0, 0) for c in own}, passing[done:])


def _selected(s: Any) -> Iterator[tuple[np.ndarray, np.ndarray, dict[int, Any]]]:
    """A take's output rows: the key set's base rows and the keys of U the base does not hold,
    in key order, as `_passing` yields them."""
    ov = s.overlay
    if ov is None:
        yield s.rows, np.full(len(s.rows), -1, dtype=np.int64), {}
        return
    _, base, touched = interleave(ov, s.rows, np.flatnonzero(~ov.hit))
    yield base, touched, {}


def _read_at(ctx: ScanContext, v: Any, r: np.ndarray, los: np.ndarray, masks: list[Any], schema: pa.Schema) -> pa.Table:
    """Unit `v`'s cells at key-space rows `r` (ascending), by fragment row."""
    which = np.searchsorted(los, r, "right") - 1  # dense fragments tile the rows
    cuts = [0, *(np.flatnonzero(which[1:] != which[:-1]) + 1).tolist(), len(r)]
    parts = [
        (v.fragments[int(which[i])], masks[int(which[i])].to_fragment_rows(r[i:j])) for i, j in itertools.pairwise(cuts)
    ]
    return ctx.read_many(v.group, parts, schema)


def _keys_at(st: StreamLike, s: Any, r: np.ndarray, js: np.ndarray) -> pa.Table:
    """Output keys of rows at base rows `r` (-1: a key only the small runs hold, U's `js`)."""
    keys = st._keys(s)
    inserted = np.flatnonzero(r < 0)
    if not len(inserted):
        return take_rows(keys, r)
    held = np.flatnonzero(r >= 0)
    both = pa.concat_tables([take_rows(keys, r[held]), s.overlay.keys.take(pa.array(js[inserted]))])
    idx = np.empty(len(r), dtype=np.int64)
    idx[held] = np.arange(len(held))
    idx[inserted] = len(held) + np.arange(len(inserted))
    return both.take(pa.array(idx))
