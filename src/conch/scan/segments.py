"""The streamed path's segments: which key spaces are bases, which are small runs laid over them,
and where each segment's cells are.

`segments_of` cuts the considered key spaces into segments in key order (`stream.py`'s module
doc); `absorb` moves tiny disjoint bases among the small runs of the largest (an LSM tree being
written: one large run and many appends and folds); `segment` plans one (`Segment`: its base
rows, units of columns (`StreamUnit`), overlay and deleted rows); `deleted_keys` says which keys
the plan's tombstones delete where the stream can leave them out.
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass, field

import numpy as np

from conch.files.format import ORDINAL
from conch.files.manifest import Fragment, KeySpace
from conch.model.keys import KeySet
from conch.model.schema import Column
from conch.model.sets import member, sorted_union
from conch.scan.context import ScanContext
from conch.scan.keymask import covers
from conch.scan.keyspace import numeric_bound, numeric_key, selected_rows
from conch.scan.overlay import OverlayCells, OverlayKeys, placed


def segments_of(
    ctx: ScanContext, groups: dict[tuple[str, str, int], list[int]], one_base: bool = False
) -> list[tuple[list[int], list[int], dict[int, tuple[int, int]]]] | None:
    """(base key spaces, small runs, small-run row ranges) per segment, in key order; None when
    small runs exist but the keys are not numeric, or with `one_base` when there are several
    bases (the general merge: found before the small runs are cut among the bases).

    Bases are key sets whose spans do not overlap one another, chosen greedily, largest first,
    or L1 runs first (then largest), whichever choice holds more rows; every other key space is a
    small run. (Largest first alone chose a merged L0 upsert run of 300k keys spread over a 5M-key
    table as its one base, and the 160k-key L1 runs it overlaps, 5M rows, as small runs: too many
    to overlay, so every scan took the general merge, 40x a settled table.)

    Segment j covers the keys from its base's first key to the next base's first key (the first
    and last segments are open-ended), so a small run spanning several bases (an upsert of keys
    all over a table written in many chunks) is cut by row ranges among them: each segment
    overlays only its slice, and no segment ever holds more than its base's keys plus its slice
    of the small runs.
    """
    plan = ctx.plan
    level = {g: max(plan.key_spaces[i].lsm for i in groups[g]) for g in groups}
    by_rows = _disjoint(groups, sorted(groups, key=lambda g: (-g[2], g[0])))
    by_level = _disjoint(groups, sorted(groups, key=lambda g: (-level[g], -g[2], g[0])))
    bases, small = max(by_rows, by_level, key=lambda chosen: sum(g[2] for g in chosen[0]))
    bases = sorted(absorb(ctx, groups, bases, small))
    if one_base and len(bases) > 1:
        return None
    if not small:
        return [(groups[b], [], {}) for b in bases]
    fields = plan.key_fields
    if not numeric_key(fields):
        return None
    keys_of = ctx.keys()
    cuts = np.array([numeric_bound(bytes.fromhex(b[0]), fields) for b in bases[1:]])
    per_seg: list[tuple[list[int], dict[int, tuple[int, int]]]] = [([], {}) for _ in bases]
    for i in sorted(small):
        num = keys_of.numeric(plan.key_spaces[i], fields)
        edges = np.r_[0, np.searchsorted(num, cuts, "left"), len(num)] if len(cuts) else np.array([0, len(num)])
        for j in range(len(bases)):
            a, b = int(edges[j]), int(edges[j + 1])
            if b > a:
                per_seg[j][0].append(i)
                per_seg[j][1][i] = (a, b)
    return [(groups[b], runs, ranges) for b, (runs, ranges) in zip(bases, per_seg, strict=True)]


def _disjoint(
    groups: dict[tuple[str, str, int], list[int]], order: list[tuple[str, str, int]]
) -> tuple[list[tuple[str, str, int]], list[int]]:
    """(bases, small runs): the key sets of `order` taken in turn as bases where their span
    overlaps no base taken before; the others' key spaces are small runs."""
    mins: list[str] = []  # chosen bases' spans, sorted and disjoint
    maxes: list[str] = []
    bases: list[tuple[str, str, int]] = []
    small: list[int] = []
    for g in order:
        i = bisect.bisect_right(mins, g[1])
        if i > 0 and maxes[i - 1] >= g[0]:
            small.extend(groups[g])
            continue
        mins.insert(i, g[0])
        maxes.insert(i, g[1])
        bases.append(g)
    return bases, small


def absorb(
    ctx: ScanContext, groups: dict[tuple[str, str, int], list[int]], bases: list[tuple[str, str, int]], small: list[int]
) -> list[tuple[str, str, int]]:
    """`bases` less the tiny ones, moved to `small`: an LSM tree being written is one large run
    and many disjoint small ones (appends and their folds, 20+ at 1M keys); as bases each is a
    segment with fixed costs per scan (planning, a merge with its slice of the upserts), as
    small runs of the large one they are laid over it once (the overlay, kept across scans).
    A base is absorbed if it is 1/64 to 1/8 of the largest, in all at most the largest's rows
    and 1/16 of the scan's decoded cache in file bytes (small runs are decoded whole). Tinier
    runs (a commit's append) stay segments: the overlay is named by its runs, so one absorbed
    run per commit would rebuild it after every commit (a reader during ingest pays that)."""
    if len(bases) < 2 or not numeric_key(ctx.plan.key_fields):
        return bases
    nbytes: dict[str, int] = {}
    for frs in ctx.plan.fragments.values():
        for f in frs:
            nbytes[f.key_space] = nbytes.get(f.key_space, 0) + f.bytes
    big = max(g[2] for g in bases)
    rows, room = big, ctx.decoded.max_bytes // 16
    kept = []
    for g in sorted(bases, key=lambda g: g[2]):  # smallest first
        size = sum(nbytes.get(ctx.plan.key_spaces[i].id, 0) for i in groups[g])
        if g[2] * 8 <= big <= g[2] * 64 and g[2] <= rows and size <= room:
            small.extend(groups[g])
            rows, room = rows - g[2], room - size
        else:
            kept.append(g)
    return kept


@dataclass
class StreamUnit:
    """Columns of one group whose fresh cells sit in one key space's dense fragments (`fragments`;
    empty = no base cells, nulls), overlaid by the segment's small runs that hold them
    (`overlay`: indices into the segment's overlay runs, oldest first; `overlay[newer_than:]`
    are newer than the base cells): merge-on-read (`overlay.py`)."""

    group: str
    columns: list[Column]
    fragments: list[Fragment]  # covering the key space's rows in order
    null_base: bool = False  # no key space holding every key has cells: nulls under the overlay
    overlay: list[int] = field(default_factory=list)
    overlay_fragments: list[list[Fragment]] = field(default_factory=list)  # per overlay run
    newer_than: int = 0
    cells: OverlayCells | None = None  # per column, cells aligned with the overlay keys (on first use)


@dataclass
class Segment:
    """Key-space rows [lo, hi) of one segment, and where their cells are. Its base's keys are
    read when the segment streams (`Stream._keys`), not at planning: a scan holds one segment's
    keys at a time (and what the warehouse's bounded key cache keeps), not every segment's."""

    key_space: KeySpace
    lo: int
    hi: int
    units: list[StreamUnit]
    missing: list[Column]  # projected columns with no cells in this segment: nulls
    overlay: OverlayKeys | None = None  # the small runs' keys (None: no small runs)
    rows: np.ndarray | None = None  # a key set's rows of the base in [lo, hi) (None: all of them)
    dead: np.ndarray | None = None  # base rows in [lo, hi) deleted by tombstones, ascending (None: none)


def segment(
    ctx: ScanContext,
    members: list[int],
    small: list[int],
    ranges: dict[int, tuple[int, int]],
    by_ks: dict[tuple[str, str], list[Fragment]],
    deleted: Deleted | None = None,
) -> Segment | None:
    """One segment (key spaces `members` of the plan, with identical key sets: the base; and
    `small`, runs overlaid on it, numeric keys, each at its rows `ranges[i]`, all rows if absent),
    or None. `by_ks`: the plan's fragments by (group, key space id); `deleted`: the keys the
    plan's tombstones delete (`deleted_keys`)."""
    plan = ctx.plan
    fields = plan.key_fields
    keys_of = ctx.keys()
    kss = [plan.key_spaces[i] for i in members]
    n = kss[0].rows
    if len(kss) > 1 and not all(keys_of.same_keys(kss[-1], p, fields) for p in kss[:-1]):
        if not numeric_key(fields):
            return None
        # same span and count, different keys: the newest is the base, the others overlay it
        small = sorted([*small, *members[:-1]])
        members, kss = members[-1:], kss[-1:]
    lo, hi = 0, n
    rows = selected_rows(keys_of, kss[-1], fields, plan.key_predicate, plan.within)
    if rows is not None:
        lo = hi = 0
        if len(rows):
            lo, hi = int(rows[0]), int(rows[-1]) + 1
            if hi - lo != len(rows) and not isinstance(plan.key_predicate, KeySet):
                return None
    dead = None
    dead_keys = deleted.keys if deleted is not None else None
    if isinstance(plan.key_predicate, KeySet) and rows is not None and dead_keys is not None and len(dead_keys):
        # a take: only its rows' keys are looked up (the rows of every deleted key between its
        # first and last row cost ~4 ms of a 50-key take at 1M keys, and were kept per key set)
        rows = rows[~member(keys_of.numeric(kss[-1], fields)[rows], dead_keys)]
    elif deleted is not None and dead_keys is not None and len(dead_keys) and hi > lo:
        dead = dead_rows(ctx, kss[-1], deleted, lo, hi)
        if rows is not None:  # a key set's or a key predicate's rows: less the deleted ones
            rows = rows[~member(rows, dead)] if len(dead) else rows
        if not len(dead):
            dead = None
    ov = placed(keys_of, plan, kss[-1], small, ranges, dead_keys) if small else None
    if ov is not None and hi <= lo and ov.inserted:
        return None  # only inserted keys in the range: the general path
    # units: (group, newest base key space holding the column, small runs holding it) → fragments
    in_seg = {plan.key_spaces[i].id: i for i in [*members, *small]}
    small_set = set(small)
    by_key: dict[tuple[str, int, tuple[int, ...]], StreamUnit] = {}
    missing: list[Column] = []
    filter_cols = plan.filter_columns if plan.filter is not None else []
    overlay_bytes = 0
    for c in [*plan.columns, *[c for c in filter_cols if c not in plan.columns]]:
        frs = [f for ks_id in in_seg for f in by_ks.get((c.group, ks_id), ()) if c.id in f.column_ids]
        holders = {in_seg[f.key_space] for f in frs}
        full = [i for i in members if i in holders]
        newest = max(full) if full else -1
        runs = tuple(k for k, i in enumerate(small) if i in holders)
        if newest < 0 and not runs:
            if c in filter_cols:
                return None  # a filter over cells that do not exist: the general path decides
            missing.append(c)
            continue
        key = (c.group, newest, runs)
        u = by_key.get(key)
        if u is None:
            base_frs: list[Fragment] | None = []
            if newest >= 0:
                base_frs = covers([f for f in frs if in_seg[f.key_space] == newest], n, ctx.format.storage)
            if base_frs is None:
                return None
            older = sum(1 for k in runs if small[k] < newest)
            u = by_key[key] = StreamUnit(c.group, [], base_frs, newest < 0, list(runs), [], older)
            for k in runs:
                i = small[k]
                pf = covers([f for f in frs if in_seg[f.key_space] == i], plan.key_spaces[i].rows, ctx.format.storage)
                if pf is None:
                    return None
                overlay_bytes += sum(f.bytes for f in pf)
                if overlay_bytes * 4 > ctx.decoded.max_bytes:  # small runs are decoded whole (blobs too)
                    return None
                u.overlay_fragments.append(pf)
        elif {f.id for f in frs if in_seg[f.key_space] == newest or in_seg[f.key_space] in small_set} != {
            f.id for f in [*u.fragments, *(f for pf in u.overlay_fragments for f in pf)]
        }:
            return None
        u.columns.append(c)
    for u in by_key.values():
        ctx.consider(u.group, u.fragments)
    if plan.filter is not None:
        holding = [u for u in by_key.values() if any(c in filter_cols for c in u.columns)]
        if len(holding) != 1:
            return None
        (u,) = holding
        if u.null_base and ov is not None:
            return None  # no base cells to filter in-file: the general path
        blob_ids = {i for f in u.fragments for i in f.blob_columns}
        if any(c.id in blob_ids for c in filter_cols):
            return None
        if not all(ctx.has_column(u.group, f, ORDINAL) for f in u.fragments):
            return None
        # the filter's unit first (its fragments are pruned by statistics once over every segment,
        # `streamed`'s `prune`): `Stream._taken` filters it and takes the others' cells
        return Segment(kss[-1], lo, hi, [u, *(v for v in by_key.values() if v is not u)], missing, ov, None, dead)
    keyset = rows if isinstance(plan.key_predicate, KeySet) else None
    return Segment(kss[-1], lo, hi, list(by_key.values()), missing, ov, keyset, None if keyset is not None else dead)


@dataclass(frozen=True)
class Deleted:
    """The keys a version's tombstones delete on the streamed path (`deleted_keys`), kept in the
    key cache under `name` (None: the general path decides)."""

    keys: np.ndarray | None
    name: str

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes if self.keys is not None else 0


def deleted_keys(ctx: ScanContext) -> Deleted | None:
    """The keys the plan's tombstones delete, sorted, when the streamed path can leave them out:
    the scanned level has a single numeric key, every tombstone is of that level (not an
    ancestor's prefix), and each deleted key that a run newer than its tombstone holds again is
    held by such a run with every column the scan reads (a full row written after the delete: the
    freshest cell of every column is then newer than the delete, which the overlay shows as it
    is, and the key is not dead). None otherwise (the general path): a key written again only in
    part must show nulls, not older cells, where the newer runs hold none.

    Every scan of a version finds the same keys from the same immutable runs: the answer is kept
    in the key cache, named by them; and which deleted keys a newer run holds again is kept per
    (tombstone, run) pair, so the first scan of the next version (one run more) searches only the
    new run's pairs (a delete-heavy ingest keeps a dozen tombstone runs in L0)."""
    plan = ctx.plan
    fields = plan.key_fields
    if not numeric_key(fields) or any(ts.level != plan.level for ts in plan.tombstones):
        return None
    keys_of = ctx.keys()
    needed = sorted({c.id for c in [*plan.columns, *(plan.filter_columns if plan.filter is not None else [])]})
    held: dict[str, set[int]] = {}
    for frs in plan.fragments.values():
        for f in frs:
            held.setdefault(f.key_space, set()).update(f.column_ids)
    newest = [ks for ks in plan.key_spaces if ks.rows and any(ks.time > ts.time for ts in plan.tombstones)]
    named_by = "{} {} {} {}".format(
        fields[0],
        needed,
        ",".join(f"{ts.path}@{ts.time}" for ts in plan.tombstones),
        ",".join(f"{ks.path}@{ks.time}{sorted(held.get(ks.id, ()))}" for ks in newest),
    )
    # a digest of it: the cache weighs values, not names, and this one lists every run
    name = "deleted " + hashlib.blake2b(named_by.encode(), digest_size=16).hexdigest()

    def again(ts: KeySpace, ks: KeySpace, deleted: np.ndarray) -> np.ndarray:
        """Which of `ts`'s deleted keys run `ks` holds again (a mask over them)."""
        return keys_of.derived(
            f"held again {fields[0]} {ts.path} {ks.path}", lambda: member(deleted, keys_of.numeric(ks, fields))
        )

    def build() -> Deleted:
        parts = []
        for ts in plan.tombstones:
            deleted = keys_of.numeric(ts, fields)
            written = np.zeros(len(deleted), dtype=bool)
            for ks in newest:
                if ks.time <= ts.time or not len(deleted):
                    continue
                hit = again(ts, ks, deleted)
                if hit.any():
                    if not set(needed) <= held.get(ks.id, set()):
                        return Deleted(None, name)
                    written |= hit
            parts.append(deleted[~written])
        return Deleted(sorted_union(*parts), name)

    found = keys_of.derived(name, build)
    return found if found.keys is not None else None


def dead_rows(ctx: ScanContext, base: KeySpace, dead: Deleted, lo: int, hi: int) -> np.ndarray:
    """The rows in [lo, hi) of `base` holding a key `dead` deletes, ascending (kept with it: every
    scan of a version finds the same rows)."""
    keys_of = ctx.keys()
    fields = ctx.plan.key_fields
    deleted = dead.keys
    assert deleted is not None
    return keys_of.derived(
        f"dead rows {base.path} [{lo}, {hi}) {dead.name}",
        lambda: _rows_of(keys_of.numeric(base, fields), deleted, lo, hi),
    )


def _rows_of(keys: np.ndarray, wanted: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The rows in [lo, hi) of sorted `keys` holding a key of sorted `wanted`, ascending."""
    at = np.searchsorted(keys, wanted)
    ok = at < len(keys)
    at = at[ok]
    at = at[keys[at] == wanted[ok]]
    return at[(at >= lo) & (at < hi)].astype(np.int64)


def rows_out(s: Segment) -> int:
    """Rows the segment outputs without a filter."""
    dead = len(s.dead) if s.dead is not None else 0
    return (s.hi - s.lo - dead if s.rows is None else len(s.rows)) + inserted(s)


def inserted(s: Segment) -> int:
    """Keys the segment's small runs add to its base."""
    return s.overlay.inserted if s.overlay is not None else 0
