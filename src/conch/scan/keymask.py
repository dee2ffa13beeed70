"""Key masks: which rows of its key space a fragment holds cells for (spec/003 "key mask").

Every fragment today is **dense**: it holds rows [start, start + rows) of its key space, and its
row i is key-space row start + i. Minor compaction (issue 10) adds **sparse** masks (a bitmap or
positions over a range) and masked fragments; they are one more `KeyMask` implementation. The
scan uses masks only through this interface, never `start`/`rows` arithmetic of its own:

- `lo`, `hi`: the span of key-space rows the mask may hold (every held row is in [lo, hi));
- `contains(krows)`: which key-space rows it holds;
- `to_fragment_rows(krows)`: the fragment rows of held key-space rows (rank within the mask);
- `ranges()`: the held rows as maximal runs [a, b);
- `dense`: whether it holds every row of [lo, hi) (the streamed path reads such fragments whole).

`locate` maps many key-space rows to (fragment, fragment row) at once: one vectorised binary
search over the masks' spans when they do not overlap (dense fragments never do), and a
`contains` per overlapping mask otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from conch.manifest import Fragment


class KeyMask(Protocol):
    """The key-space rows a fragment holds, in key-space row order = fragment row order."""

    @property
    def lo(self) -> int: ...

    @property
    def hi(self) -> int: ...

    @property
    def dense(self) -> bool: ...

    def contains(self, krows: np.ndarray) -> np.ndarray: ...

    def to_fragment_rows(self, krows: np.ndarray) -> np.ndarray: ...

    def ranges(self) -> list[tuple[int, int]]: ...


@dataclass(frozen=True, slots=True)
class DenseMask:
    """Rows [start, start + rows) of the key space: fragment row i is key-space row start + i."""

    start: int
    rows: int

    @property
    def lo(self) -> int:
        return self.start

    @property
    def hi(self) -> int:
        return self.start + self.rows

    @property
    def dense(self) -> bool:
        return True

    def contains(self, krows: np.ndarray) -> np.ndarray:
        return (krows >= self.start) & (krows < self.start + self.rows)

    def to_fragment_rows(self, krows: np.ndarray) -> np.ndarray:
        return krows - self.start

    def ranges(self) -> list[tuple[int, int]]:
        return [(self.start, self.start + self.rows)] if self.rows else []


@dataclass(frozen=True, eq=False)
class PositionsMask:
    """Exactly the key-space rows `positions` (sorted, unique): fragment row i is key-space row
    positions[i]. The sparse mask minor compaction produces (issue 10); no fragment records one
    yet, so `key_mask` never returns it, but `locate` handles it (tests drive it directly)."""

    positions: np.ndarray

    @property
    def lo(self) -> int:
        return int(self.positions[0]) if len(self.positions) else 0

    @property
    def hi(self) -> int:
        return int(self.positions[-1]) + 1 if len(self.positions) else 0

    @property
    def dense(self) -> bool:
        return len(self.positions) == self.hi - self.lo

    def contains(self, krows: np.ndarray) -> np.ndarray:
        i = np.searchsorted(self.positions, krows)
        ok = i < len(self.positions)
        ok[ok] = self.positions[i[ok]] == krows[ok]
        return ok

    def to_fragment_rows(self, krows: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.positions, krows).astype(np.int64)

    def ranges(self) -> list[tuple[int, int]]:
        p = self.positions
        if not len(p):
            return []
        cuts = np.flatnonzero(np.diff(p) != 1) + 1
        return [(int(p[a]), int(p[b - 1]) + 1) for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(p)], strict=True)]


def key_mask(fr: Fragment) -> KeyMask:
    """The key mask of a fragment (dense until fragments record sparse masks)."""
    return DenseMask(fr.start, fr.rows)


def covers(frs: Sequence[Fragment], rows: int) -> list[Fragment] | None:
    """`frs` sorted by key-space row if their masks are dense and tile [0, rows) exactly
    (each key-space row held by exactly one fragment, in order); else None."""
    masks = sorted(((key_mask(f), f) for f in frs), key=lambda mf: mf[0].lo)
    at = 0
    for m, _f in masks:
        if not m.dense or m.lo != at:
            return None
        at = m.hi
    return [f for _m, f in masks] if at == rows else None


def locate(
    masks: Sequence[KeyMask], ks_of: Sequence[int], ks: np.ndarray, krows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each (key space `ks[i]`, key-space row `krows[i]`): the index into `masks` of the
    fragment holding it and the row within that fragment. `ks_of[j]` is fragment j's key-space
    index. Every queried row must be held by exactly one mask (fresh cells of one read unit)."""
    n = len(krows)
    which = np.zeros(n, dtype=np.int64)
    frow = np.zeros(n, dtype=np.int64)
    if n == 0 or not masks:
        return which, frow
    los = np.array([m.lo for m in masks], dtype=np.int64)
    kss = np.asarray(ks_of, dtype=np.int64)
    # Sort masks by (key space, lo); a row belongs to the last mask starting at or before it.
    order = np.lexsort((los, kss))
    all_dense = all(m.dense for m in masks)  # a column's dense fragments never overlap
    if all_dense or _disjoint([masks[j] for j in order], kss[order]):
        # one vectorised binary search over (key space, lo) pairs, as one sortable int code
        codes = kss[order] * (1 << 40) + los[order]
        want = ks.astype(np.int64) * (1 << 40) + krows
        which = order[np.searchsorted(codes, want, side="right") - 1]
        if all_dense:
            return which, krows - los[which]
        for j in np.unique(which):
            sel = which == j
            frow[sel] = masks[j].to_fragment_rows(krows[sel])
        return which, frow
    for j, m in enumerate(masks):  # overlapping spans (sparse masks): ask each mask
        sel = (ks == kss[j]) & m.contains(krows)
        which[sel] = j
        frow[sel] = m.to_fragment_rows(krows[sel])
    return which, frow


def _disjoint(masks: Sequence[KeyMask], kss: np.ndarray) -> bool:
    """Whether masks sorted by (key space, lo) have non-overlapping spans within a key space."""
    end = 0
    for a, m in enumerate(masks):
        if a and kss[a] == kss[a - 1] and m.lo < end:
            return False
        end = m.hi if a == 0 or kss[a] != kss[a - 1] else max(end, m.hi)
    return True
