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
  searches and one `take` over `[base batch, overlay slice]`, however many small runs there are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa


@dataclass
class OverlayKeys:
    """The small runs' keys of one segment, placed among the base's keys (module doc)."""

    keys: pa.Table  # U as the output key columns
    ins: np.ndarray  # per key of U: first base row with a key >= it
    hit: np.ndarray  # per key of U: the base holds it (then base[ins] == key)
    pos: list[np.ndarray]  # per small run: its selected rows' positions in U
    rows: list[np.ndarray]  # per small run: its selected rows (a key predicate may exclude some)

    @property
    def inserted(self) -> int:
        return int(len(self.hit) - self.hit.sum())

    def window(self, a: int, b: int, last: bool) -> Window:
        """The output layout of base rows [a, b): which keys of U land there and where. The
        `last` window also takes the keys after the last selected base row."""
        j0 = int(np.searchsorted(self.ins, a, "left"))
        j1 = len(self.ins) if last else int(np.searchsorted(self.ins, b, "left"))
        hit = self.hit[j0:j1]
        new = ~hit
        # a key of U lands after the base rows before its insertion point and the new keys before it
        out = (self.ins[j0:j1] - a) + (np.cumsum(new) - new)
        n_out = (b - a) + int(new.sum())
        base_at = np.ones(n_out, dtype=bool)
        base_at[out[new]] = False
        return Window(j0, j1, out, new, np.nonzero(base_at)[0], n_out)


@dataclass
class Window:
    """Keys U[j0:j1] of an overlay over one batch of base rows: `out` their output positions,
    `new` which are inserted keys, `base_out` the output positions of the base rows."""

    j0: int
    j1: int
    out: np.ndarray
    new: np.ndarray
    base_out: np.ndarray
    n_out: int

    def source(self, n_base: int, replace: np.ndarray) -> np.ndarray | None:
        """Indices into `[base batch (n_base rows), U[j0:j1]]` building the output: base rows in
        order, inserted keys, and keys of U where `replace` (per U[j0:j1]) says the overlay's
        cell wins. None when the output is the base batch unchanged."""
        take = self.new | replace
        if not take.any():
            return None
        src = np.empty(self.n_out, dtype=np.int64)
        src[self.base_out] = np.arange(n_base, dtype=np.int64)
        src[self.out[take]] = n_base + np.nonzero(take)[0]
        return src


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
    ins = np.searchsorted(base, u, "left")
    hit = np.zeros(len(u), dtype=bool)
    inside = ins < len(base)
    hit[inside] = base[ins[inside]] == u[inside]
    return OverlayKeys(make_keys(u), ins.astype(np.int64), hit, pos, rows)


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
    parts = [tables(i) for i in runs]
    parts.append(pa.table({nm: pa.nulls(1, t) for nm, t in zip(schema.names, schema.types, strict=True)}))
    starts = np.cumsum([0] + [p.num_rows for p in parts[:-1]]).astype(np.int64)
    null_row = int(starts[-1])
    idx = np.where(best >= 0, starts[np.maximum(best, 0)] + row, null_row)
    idx[~wins] = null_row  # a stale small-run cell under a newer base cell: never shown
    values = pa.concat_tables(parts).combine_chunks().take(pa.array(idx))
    return values, wins
