"""Merge-on-read overlays for the streamed path: one large run plus a few small runs.

An un-compacted LSM tree is mostly one large sorted run (the *base*: a key space, or several
with identical key sets) plus a few small runs written since (partial upserts, inserts). Merging
them all by a full sort costs O(n log runs) over every key and ~150 B/key of bookkeeping; but
the small runs hold few keys. So the streamed path keeps the base as a stream and *overlays*
the small runs (numeric keys only):

- `OverlayKeys` (once per segment): the small runs' distinct keys `U`, sorted, and per key its
  insertion point in the base (`ins`) and whether the base holds it (`hit`). Memory and time
  are proportional to the small runs, never to the base.
- `overlay_values` (once per stream unit): per key of `U`, the unit's fresh cell among the small
  runs — the newest run holding the key and the columns, and for a key the base holds, only if
  that run is newer than the base's cells — decoded into one table aligned with `U` (nulls
  where no small run holds a cell).
- `OverlayKeys.window(a, b)` (per output batch covering base rows [a, b)): the slice of `U`
  whose insertion points fall in it is contiguous (both are sorted), so a batch costs two binary
  searches over `U`, however many small runs there are.
- `splice` (per column of a batch): the base batch with the window's inserted keys' cells put
  in and its replaced rows' cells overwritten. A fixed-width column without nulls is one
  `numpy.insert` (a memcpy of the base batch in pieces) plus a scatter of the few replaced
  cells, at any width; other columns (strings, nulls, nested) one `take` over [base batch,
  overlay slice]. The cost is a copy of the batch plus work per overlay key, never per-row
  bookkeeping.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from conch.files.keycache import shares_buffer
from conch.files.manifest import KeySpace
from conch.model.sets import member, sorted_union
from conch.scan.keyspace import selected_rows


@dataclass
class OverlayKeys:
    """The small runs' keys of one segment, placed among the base's keys (module doc)."""

    keys: pa.Table  # U as the output key columns
    ins: np.ndarray  # per key of U: first base row with a key >= it
    hit: np.ndarray  # per key of U: the base holds it (then base[ins] == key)
    pos: list[np.ndarray]  # per small run: its selected rows' positions in U
    rows: list[np.ndarray]  # per small run: its selected rows (a key predicate may exclude some)
    numbers: np.ndarray  # U as numbers
    name: str = ""  # its name in the key cache, where it is kept across scans ("": not kept)
    # grown from the overlay of its oldest runs (`grown`): that one's name, its number of runs,
    # and where each of its keys of U went in this U (so a unit's cells grow too: `grown_values`)
    grown_from: str = ""
    grown_at: int = 0
    moved: np.ndarray | None = None

    @functools.cached_property
    def inserted(self) -> int:  # asked per segment per scan of an overlay kept across scans
        return int(len(self.hit) - self.hit.sum())

    @property
    def nbytes(self) -> int:
        arrays = [self.ins, self.numbers, *self.pos, *self.rows, *([self.moved] if self.moved is not None else [])]
        keys = 0 if shares_buffer(self.numbers, self.keys.column(0)) else self.keys.nbytes  # a view: counted once
        return int(keys + len(self.hit) + sum(a.nbytes for a in arrays))

    @functools.cached_property
    def key_cells(self) -> OverlayColumn:
        """The keys of U as the cells a batch's splice inserts (once per overlay kept across
        scans, not per scan)."""
        return OverlayColumn.of(self.keys.column(0))

    @functools.cached_property
    def touched(self) -> tuple[np.ndarray, np.ndarray]:
        """(the base rows the small runs hold newer keys of, ascending; their keys of U)."""
        return self.ins[self.hit], np.flatnonzero(self.hit)

    def window(self, a: int, b: int, last: bool) -> Window:
        """The output layout of base rows [a, b): which keys of U land there and where. The
        `last` window also takes the keys after the last selected base row."""
        j0 = int(np.searchsorted(self.ins, a, "left"))
        j1 = len(self.ins) if last else int(np.searchsorted(self.ins, b, "left"))
        new = np.nonzero(~self.hit[j0:j1])[0]
        return Window(j0, j1, self.ins[j0:j1] - a, new, b - a, a)


@dataclass
class Window:
    """Keys U[j0:j1] of an overlay over one batch of `n_base` base rows: `at` their insertion
    points (batch rows), `new` which of them (window-relative) the base does not hold: inserted
    before base row `at[new]`, in order."""

    j0: int
    j1: int
    at: np.ndarray
    new: np.ndarray
    n_base: int
    a: int  # the first base row of the batch

    @property
    def n_out(self) -> int:
        return self.n_base + len(self.new)

    def replaced(self, cells: OverlayCells, ins: np.ndarray) -> tuple[np.ndarray, int, int]:
        """(output positions, and the slice [k0, k1) of `cells.replaced_u`) of the base rows of
        this window whose cells a unit's small runs replace (`ins`: the overlay's insertion
        points, `OverlayKeys.ins`). Both are sorted, so the window's replacements are one
        contiguous slice: two binary searches and a gather of its rows. A base row moves down
        by the inserted keys at or before it."""
        k0, k1 = np.searchsorted(cells.replaced_u, (self.j0, self.j1), "left").tolist()
        # the rows gathered per window, not kept per overlay: 8 B a key of a cache entry that
        # fills the key cache at 1M overlay keys, for ~15 µs a 64k-row batch
        rows = ins[cells.replaced_u[k0:k1]] - self.a
        if len(self.new):
            rows = rows + np.searchsorted(self.at[self.new], rows, "right")
        return rows, k0, k1


def splice(base: pa.Array, values: OverlayColumn, win: Window, rep_out: np.ndarray, k0: int, k1: int) -> pa.Array:
    """One output column of window `win`: the base batch's cells `base`, the inserted keys'
    cells and the replaced rows' cells (`rep_out`, and their slice [k0, k1) of the unit's
    replacements, from `Window.replaced`) from `values` (the column's overlay cells)."""
    width = fixed_width(base.type)
    if width and base.null_count == 0 and (values.bad is None or values.bad[win.j1] == values.bad[win.j0]):
        assert values.cells is not None and values.replacing is not None
        cells = _spliced(primitive_view(base, width), win.at[win.new], values.cells[win.j0 + win.new])
        np.frombuffer(cells, dtype=f"<u{width}")[rep_out] = values.replacing[k0:k1]
        return pa.Array.from_buffers(base.type, win.n_out, [None, cells])
    src = np.insert(np.arange(win.n_base, dtype=np.int64), win.at[win.new], win.n_base + win.new)
    src[rep_out] = win.n_base + values.replaced_u[k0:k1] - win.j0
    extra = values.array.slice(win.j0, win.j1 - win.j0)
    return pa.concat_arrays([base, extra]).take(pa.array(src))


def _spliced(base: np.ndarray, at: np.ndarray, new: np.ndarray) -> pa.Buffer:
    """`base` with `new[k]` inserted before row `at[k]` (ascending), in a buffer of Arrow's
    memory pool: it reuses freed pages, where a fresh numpy array per batch page-faults its
    every page in (measured: ~5x the faults of the copy itself)."""
    buf = pa.allocate_buffer((len(base) + len(at)) * base.itemsize)
    out = np.frombuffer(buf, dtype=base.dtype)
    moved = at + np.arange(len(at))  # output positions of the inserted cells
    if len(at) <= 32:  # a few inserts: copy the base in pieces between them
        prev = 0
        for k, i in enumerate(at.tolist()):
            out[prev + k : i + k] = base[prev:i]
            prev = i
        out[prev + len(at) :] = base[prev:]
    else:
        keep = np.ones(len(out), dtype=bool)
        keep[moved] = False
        out[keep] = base
    out[moved] = new
    return buf


@dataclass
class OverlayColumn:
    """One column's overlay cells aligned with U (`array`), which are non-null (`valid`), for a
    fixed-width type the cells as unsigned integers of its width (`cells`, nulls as zeros); and
    what a batch's splice needs without a pass over its window: `bad`, the running count of the
    keys of U whose cell is shown but null (a window holds one iff the count differs at its
    ends: then the splice takes the general path), and `replacing`, the cells that replace base
    rows, in the order of `replaced_u` (contiguous: a window's are one slice)."""

    array: pa.Array
    valid: np.ndarray
    cells: np.ndarray | None
    bad: np.ndarray | None  # None: no shown cell is null
    replaced_u: np.ndarray
    replacing: np.ndarray | None

    @classmethod
    def of(
        cls, array: pa.Array | pa.ChunkedArray, used: np.ndarray | None = None, replaced_u: np.ndarray | None = None
    ) -> OverlayColumn:
        """`used`: which keys of U show this cell (None: all); `replaced_u`: the keys of U whose
        cells replace base rows (None: none)."""
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        valid = np.ones(len(array), dtype=bool) if array.null_count == 0 else array.is_valid().to_numpy(False)
        width = fixed_width(array.type)
        cells = primitive_view(array, width) if width else None
        shown_null = ~valid if used is None else used & ~valid
        bad = np.concatenate([[0], np.cumsum(shown_null, dtype=np.int64)]) if shown_null.any() else None
        rep = np.zeros(0, dtype=np.int64) if replaced_u is None else replaced_u
        return cls(array, valid, cells, bad, rep, None if cells is None else cells[rep])


@dataclass
class OverlayCells:
    """One stream unit's overlay cells (`overlay_values`, per column), which are shown (`wins`),
    and the keys of U whose shown cells replace a base row's (`replaced_u`, ascending; the base
    rows are `OverlayKeys.ins` of them, ascending too: U and the base are both sorted)."""

    values: pa.Table  # the cells as one table (`columns`' arrays)
    columns: list[OverlayColumn]
    wins: np.ndarray
    replaced_u: np.ndarray

    @classmethod
    def of(cls, values: pa.Table, wins: np.ndarray, ov: OverlayKeys) -> OverlayCells:
        values = values.combine_chunks()
        replaced_u = np.flatnonzero(ov.hit & wins)
        used = ~ov.hit | wins
        columns = [OverlayColumn.of(c, used, replaced_u) for c in values.columns]
        return cls(values, columns, wins, replaced_u)

    @property
    def nbytes(self) -> int:
        arrays = [self.wins, self.replaced_u]
        arrays += [a for c in self.columns for a in (c.valid, c.bad, c.replacing) if a is not None]
        return int(sum(a.nbytes for a in arrays) + sum(c.array.nbytes for c in self.columns))


def fixed_width(t: pa.DataType) -> int:
    """Bytes per cell of a type whose cells are one fixed-width value each (integers, floats,
    temporal types, decimals of 64 bits): the types `splice` copies as raw integers. 0 for the
    rest (booleans are bits; strings, nested and dictionary types have more buffers)."""
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t) or pa.types.is_decimal(t):
        w = t.bit_width // 8
        return w if w in (1, 2, 4, 8) else 0
    return 0


def primitive_view(a: pa.Array, width: int) -> np.ndarray:
    """The cells of fixed-width array `a` as unsigned integers of `width` bytes, zero-copy (a
    null cell reads whatever its slot holds)."""
    data = a.buffers()[1]
    if data is None:  # an empty array may have no data buffer
        return np.zeros(0, dtype=f"<u{width}")
    return np.frombuffer(data, dtype=f"<u{width}", count=len(a), offset=a.offset * width)


def overlay_keys(
    base: np.ndarray, runs: list[np.ndarray], rows: list[np.ndarray], make_keys: Callable[[np.ndarray], pa.Table]
) -> OverlayKeys:
    """Place the small runs' selected keys `runs` (each sorted, unique numeric keys, at rows
    `rows` of their run) among the sorted base keys `base`; `make_keys` turns numeric keys into
    the output key table."""
    # one stable sort of every small-run key (not a search per run: there may be 1,000 runs)
    allv = np.concatenate(runs) if runs else np.zeros(0, dtype=base.dtype)
    order = np.argsort(allv, kind="stable")
    srt = allv[order]
    first = np.ones(len(srt), dtype=bool)
    first[1:] = srt[1:] != srt[:-1]
    u = srt[first]
    at = np.empty(len(allv), dtype=np.int64)
    at[order] = np.cumsum(first) - 1
    pos = np.split(at, np.cumsum([len(r) for r in runs])[:-1]) if runs else []
    ins, hit = _placed_in(base, u)
    return OverlayKeys(make_keys(u), ins, hit, pos, rows, u)


def _placed_in(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per key of `keys`: its insertion point in `sorted_keys` (first position holding a key >= it)
    and whether `sorted_keys` holds it there."""
    at = np.searchsorted(sorted_keys, keys, "left").astype(np.int64)
    held = np.zeros(len(keys), dtype=bool)
    inside = at < len(sorted_keys)
    held[inside] = sorted_keys[at[inside]] == keys[inside]
    return at, held


# How many versions back a new version's overlay looks for one to grow from (`placed`).
GROW_LOOKBACK = 16


def grown(
    prev: OverlayKeys,
    base: np.ndarray,
    runs: list[np.ndarray],
    rows: list[np.ndarray],
    make_keys: Callable[[np.ndarray], pa.Table],
    gone: np.ndarray | None = None,
) -> OverlayKeys:
    """`overlay_keys` of `prev`'s runs and newer ones (their selected keys `runs`, each sorted and
    unique, at rows `rows`), from `prev`: the keys they add go in at their insertion points and the
    rest of `prev` is copied, where placing every key again sorts and searches them all. A table
    being written gets one more small run per commit, and the first scan of each version placed
    every small-run key again (1M keys under 7 L0 runs holding 192k: ~25 ms of a 55 ms scan); a
    reader slower than the commits grows the last version it read by the runs since, at once.

    `gone`: sorted keys deleted since `prev` (by a newer tombstone, and held again by no newer
    run), taken out of `prev`'s keys and runs first (their `moved` is -1)."""
    u = prev.numbers
    kept = ~member(u, gone) if gone is not None and len(gone) and len(u) else None
    if kept is not None and kept.all():
        kept = None  # nothing gone: no array is filtered (each filter copied the whole overlay)
    u_kept = u if kept is None else u[kept]
    v = sorted_union(*runs) if runs else u[:0]
    j, known = _placed_in(u_kept, v)
    added, at = v[~known], j[~known]
    u2 = np.insert(u_kept, at, added)
    # an old key moves down by the added keys inserted at or before it, up by the gone ones
    shift = np.cumsum(np.bincount(at, minlength=len(u_kept) + 1))[: len(u_kept)]
    ins_added, hit_added = _placed_in(base, added)
    if kept is None:  # every run keeps its rows (shared, not copied)
        moved = np.arange(len(u), dtype=np.int64) + shift
        ins = np.insert(prev.ins, at, ins_added)
        hit = np.insert(prev.hit, at, hit_added)
        pos, rows_all = [moved[p] for p in prev.pos], list(prev.rows)
    else:
        moved = np.full(len(u), -1, dtype=np.int64)
        moved[kept] = np.arange(len(u_kept), dtype=np.int64) + shift
        ins = np.insert(prev.ins[kept], at, ins_added)
        hit = np.insert(prev.hit[kept], at, hit_added)
        stills = [kept[p] for p in prev.pos]
        pos = [moved[p[still]] for p, still in zip(prev.pos, stills, strict=True)]
        rows_all = [r[still] for r, still in zip(prev.rows, stills, strict=True)]
    pos += [np.searchsorted(u2, r).astype(np.int64) for r in runs]
    rows_all += rows
    return OverlayKeys(
        make_keys(u2), ins, hit, pos, rows_all, u2, grown_from=prev.name, grown_at=len(prev.pos), moved=moved
    )


def placed(
    keys_of: Any,
    plan: Any,
    base: KeySpace,
    small: list[int],
    ranges: dict[int, tuple[int, int]],
    dead: np.ndarray | None = None,
) -> OverlayKeys:
    """The overlay of one segment: the plan's small runs `small` (indices into its key spaces,
    each at its rows `ranges[i]`, all if absent; the key predicate's rows among them, less those
    holding a key of `dead`, the sorted keys the plan's tombstones delete) placed among
    the keys of `base`. Where no key predicate selects, every scan of the same table version
    places the same runs: the result is kept across scans in the key cache (`keys_of`, the
    scan's `CountedKeys`), named by the immutable key spaces it is built from."""
    fields = plan.key_fields

    def selected(i: int) -> tuple[np.ndarray, np.ndarray]:
        """(numeric keys, rows) of small run `i` that the overlay holds."""
        num = keys_of.numeric(plan.key_spaces[i], fields)
        r = selected_rows(keys_of, plan.key_spaces[i], fields, plan.key_predicate, plan.within)
        r0, r1 = ranges.get(i, (0, len(num)))
        r = np.arange(r0, r1, dtype=np.int64) if r is None else r[(r >= r0) & (r < r1)]
        if dead is not None and len(dead) and len(r):
            r = r[~member(num[r], dead)]
        return num[r], r

    make = lambda u: pa.table({fields[0].name: pa.array(u).cast(fields[0].type)})  # noqa: E731

    def build() -> OverlayKeys:
        picked = [selected(i) for i in small]
        return overlay_keys(keys_of.numeric(base, fields), [p[0] for p in picked], [p[1] for p in picked], make)

    if plan.key_predicate is not None or plan.within is not None:
        return build()

    tombstones = [ts.path for ts in plan.tombstones] if dead is not None and len(dead) else []
    listed = [f"{plan.key_spaces[i].path}{ranges.get(i, '')}" for i in small]

    @functools.cache
    def runs_of(n_runs: int) -> str:  # each prefix joined once (the lookup below tries ~150 names)
        return ",".join(listed[:n_runs])

    @functools.cache
    def less(n_tombstones: int) -> str:  # the tombstone runs decide the deleted keys
        return " less " + ",".join(tombstones[:n_tombstones]) if n_tombstones else ""

    def named(n_runs: int, n_tombstones: int) -> str:
        return f"overlay {fields[0]} {base.path} {runs_of(n_runs)}{less(n_tombstones)}"

    name = named(len(small), len(tombstones))

    def build_named() -> OverlayKeys:
        # the overlay of the nearest older version still kept (the last one a reader scanned:
        # a prefix of these runs, in commit order, and of these tombstones) grows by the runs
        # since and loses the keys the tombstones since delete. At most `GROW_LOOKBACK` versions
        # back: each name lists its runs, and a table with maintenance off may hold a thousand
        r, t = len(small), len(tombstones)
        # (runs, tombstones) of the older versions, nearest first (then the most runs)
        older = sorted(
            (
                (cut, n)
                for cut in range(max(1, r - GROW_LOOKBACK), r + 1)
                for n in range(max(0, t - GROW_LOOKBACK), t + 1)
                if 0 < r - cut + t - n <= GROW_LOOKBACK
            ),
            key=lambda c: (r - c[0] + t - c[1], -c[0], -c[1]),
        )
        prev, n_prev = None, t
        for cut, n in older:
            prev, n_prev = keys_of.peek(named(cut, n)), n
            if prev is not None:
                break
        if prev is None:
            return dataclasses.replace(build(), name=name)
        picked = [selected(i) for i in small[len(prev.pos) :]]
        gone = None
        if n_prev < t:  # keys the tombstones since delete (held again by no newer run: in `dead`)
            assert dead is not None
            since = sorted_union(*(keys_of.numeric(ts, fields) for ts in plan.tombstones[n_prev:]))
            gone = since[member(since, dead)]
        ov = grown(prev, keys_of.numeric(base, fields), [p[0] for p in picked], [p[1] for p in picked], make, gone)
        # superseded: kept beside the new one, the two filled a 128 MB key cache at 1M overlay
        # keys and evicted what the next version grows from (a reader of that older version
        # builds it again)
        keys_of.forget(prev.name)
        return dataclasses.replace(ov, name=name)

    return keys_of.derived(name, build_named)


def overlay_values(
    ov: OverlayKeys, runs: list[int], newer_than: int, tables: Callable[[int], pa.Table], schema: pa.Schema
) -> tuple[pa.Table, np.ndarray]:
    """(values aligned with U, `wins`): per key of U, one stream unit's fresh cell among the
    small runs `runs` (indices into `ov.pos`, oldest first; `tables(i)` decodes run i's columns
    `schema`, rows in key order) and whether it is shown. `runs[newer_than:]` are newer than the
    base's cells of the unit (0: the base holds none): a base key shows a small run's cell only
    from those; an inserted key shows the newest small run's cell, or null."""
    n = len(ov.hit)
    best = np.full(n, -1, dtype=np.int64)
    row = np.zeros(n, dtype=np.int64)
    for k, i in enumerate(runs):  # oldest first: newer runs overwrite
        p = ov.pos[i]
        best[p] = k
        row[p] = ov.rows[i]
    wins = (best >= 0) & (~ov.hit | (best >= newer_than))
    # each run gives only the cells shown (a take of a few keys decodes and copies no more of
    # the small runs than those; a run showing none is not read), then one take aligns them
    shown = np.flatnonzero(wins)
    # by run, ascending keys within one (a radix sort where run numbers fit 16 bits)
    order = shown[np.argsort(best[shown].astype(np.int16 if len(runs) < 1 << 15 else np.int64), kind="stable")]
    cuts = np.searchsorted(best[order], np.arange(len(runs) + 1), "left")
    pieces = []
    idx = np.empty(n, dtype=np.int64)
    for k, i in enumerate(runs):
        sel = order[cuts[k] : cuts[k + 1]]
        if len(sel):
            idx[sel] = cuts[k] + np.arange(len(sel))
            pieces.append(tables(i).take(pa.array(row[sel])))
    idx[~wins] = len(shown)  # a stale small-run cell under a newer base cell, or none: null
    pieces.append(pa.table({nm: pa.nulls(1, t) for nm, t in zip(schema.names, schema.types, strict=True)}))
    # taken from the chunks as they are: combined first, every cell was copied twice
    values = pa.concat_tables(pieces).take(pa.array(idx))
    return values, wins


def grown_values(
    ov: OverlayKeys,
    prev_values: pa.Table,
    prev_wins: np.ndarray,
    runs: list[int],
    newer_than: int,
    tables: Callable[[int], pa.Table],
    schema: pa.Schema,
) -> tuple[pa.Table, np.ndarray]:
    """`overlay_values` of a `grown` overlay, from the unit's values over the overlay it grew
    from: every old key keeps its cell and whether it is shown (`ov.moved`; a key deleted since
    is dropped), the keys added show nulls, and each run the overlay grew by that holds the
    unit's columns (`runs`: the unit's runs, oldest first), oldest to newest, lays its cells over
    its keys (the newest run holding a key is the fresh one; a key the base holds only if that
    run is newer than the base's cells, as `overlay_values` decides)."""
    assert ov.moved is not None
    n, n_prev = len(ov.hit), len(prev_wins)
    first_new = ov.grown_at
    new_runs = [(k, i) for k, i in enumerate(runs) if i >= first_new]
    cells = [tables(i).take(pa.array(ov.rows[i])) for _, i in new_runs]
    null_at = n_prev + sum(c.num_rows for c in cells)
    idx = np.full(n, null_at, dtype=np.int64)
    kept = ov.moved >= 0  # -1: deleted since (`grown`'s `gone`)
    wins = np.zeros(n, dtype=bool)
    if kept.all():  # nothing deleted: no filtered copies of the old keys' arrays
        idx[ov.moved] = np.arange(n_prev, dtype=np.int64)
        wins[ov.moved] = prev_wins
    else:
        idx[ov.moved[kept]] = np.flatnonzero(kept)
        wins[ov.moved[kept]] = prev_wins[kept]
    at = n_prev
    for (k, i), c in zip(new_runs, cells, strict=True):
        p = ov.pos[i]
        shown = ~ov.hit[p] | (k >= newer_than)
        idx[p] = np.where(shown, at + np.arange(len(p)), null_at)
        wins[p] = shown
        at += c.num_rows
    null = pa.table({nm: pa.nulls(1, t) for nm, t in zip(schema.names, schema.types, strict=True)})
    return pa.concat_tables([prev_values, *cells, null]).take(pa.array(idx)), wins  # no combine: one copy


def interleave(ov: OverlayKeys, rows: np.ndarray, js: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Base rows `rows` (ascending, none of them replaced by an overlay cell of the filtered
    unit) and keys `js` of U (ascending), both passing a filter, in key order: (`order`, the
    permutation of [rows, js] that sorts them; per output row its base row, -1 for a key the
    base does not hold; per output row its key of U, -1 for a base row no small run touches). A
    key of U goes before the base row at its insertion point (`_filtered`'s rule)."""
    order = np.argsort(np.concatenate([rows * 2 + 1, ov.ins[js] * 2]), kind="stable")
    base = np.concatenate([rows, np.where(ov.hit[js], ov.ins[js], -1)])[order]
    hit_at, hit_u = ov.touched  # ascending: U and the base are unique
    k = np.minimum(np.searchsorted(hit_at, rows), max(len(hit_at) - 1, 0))
    touched = np.full(len(rows), -1, dtype=np.int64)
    if len(hit_at):
        found = hit_at[k] == rows
        touched[found] = hit_u[k[found]]
    return order, base, np.concatenate([touched, js.astype(np.int64)])[order]


def laid_over(base: pa.Array | None, from_base: np.ndarray, values: OverlayColumn | None, js: np.ndarray) -> pa.Array:
    """One column of output rows whose cells come from three places: `base` holds the cells of
    the rows `from_base` marks (in order; None: none does), `values` (aligned with U) those of
    the other rows whose key of U `js` is >= 0, and every other row is null (a key neither holds)."""
    if base is not None and from_base.all():
        return base
    n = len(from_base)
    if base is None:
        from_base = np.zeros(n, dtype=bool)
    parts = []
    idx = np.empty(n, dtype=np.int64)
    off = 0
    if base is not None:
        parts.append(base)
        idx[from_base] = np.arange(len(base), dtype=np.int64)
        off = len(base)
    from_values = ~from_base & (js >= 0) if values is not None else np.zeros(n, dtype=bool)
    if values is not None:  # only the cells taken: U may hold every key of the absorbed runs
        picked = js[from_values]
        parts.append(values.array.take(pa.array(picked)))
        idx[from_values] = off + np.arange(len(picked))
        off += len(picked)
    rest = ~from_base & ~from_values
    if rest.any():
        typ = base.type if base is not None else values.array.type if values is not None else None
        assert typ is not None
        parts.append(pa.nulls(1, typ))
        idx[rest] = off
    return pa.concat_arrays(parts).take(pa.array(idx))
