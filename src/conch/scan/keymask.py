"""Key masks: which rows of its key space a fragment holds, and where they sit in its data file
(spec/003 "key mask").

A **dense** fragment holds rows [start, start + rows) of its key space, and its row i is key-space
row start + i and file row i (`DenseMask`). Minor compaction (issue 10) realigns data files to new
key spaces without rewriting them: a **sparse** fragment holds a subset of its key space's rows
and a **masked** fragment uses only some rows of a (possibly shared) data file; both are a
`conch.files.masks.RunsMask` read from the fragment's mask file. The scan uses masks only through this
interface, never `start`/`rows` arithmetic of its own:

- `lo`, `hi`: the span of key-space rows the mask may hold (every held row is in [lo, hi));
- `contains(krows)`: which key-space rows it holds;
- `to_fragment_rows(krows)`: the fragment rows of held key-space rows (rank within the mask);
- `ranges()`: the held rows as maximal runs [a, b); `held_rows()`: all of them, `rows` many;
- `dense`: whether it holds every row of [lo, hi) (the streamed path reads such fragments whole);
- `to_file_rows(frows)` / `from_file_rows(file_rows)`: fragment rows ↔ rows of the data file
  (`ScanContext` applies them to every read, so the steps above think in fragment rows only).

`locate` maps many key-space rows to (fragment, fragment row) at once: one vectorised binary
search over the masks' spans when they do not overlap (dense fragments never do), and a
`contains` per overlapping mask otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from conch.errors import ConchError, CorruptFileError
from conch.files.manifest import Fragment
from conch.files.masks import read_mask
from conch.files.storage import Storage
from conch.model.sets import distinct


class KeyMask(Protocol):
    """The key-space rows a fragment holds, in key-space row order = fragment row order."""

    @property
    def lo(self) -> int: ...

    @property
    def hi(self) -> int: ...

    @property
    def dense(self) -> bool: ...

    @property
    def rows(self) -> int: ...

    def held_rows(self) -> np.ndarray: ...

    def contains(self, krows: np.ndarray) -> np.ndarray: ...

    def to_fragment_rows(self, krows: np.ndarray) -> np.ndarray: ...

    def ranges(self) -> list[tuple[int, int]]: ...

    def to_file_rows(self, frows: np.ndarray | None) -> np.ndarray | None: ...

    def from_file_rows(self, file_rows: np.ndarray) -> np.ndarray: ...


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

    def held_rows(self) -> np.ndarray:
        return np.arange(self.start, self.start + self.rows, dtype=np.int64)

    def to_file_rows(self, frows: np.ndarray | None) -> np.ndarray | None:
        return frows  # fragment row i is file row i (None: the whole file)

    def from_file_rows(self, file_rows: np.ndarray) -> np.ndarray:
        return file_rows


def key_mask(fr: Fragment, storage: Storage | None = None) -> KeyMask:
    """The key mask of a fragment: dense, or read from its mask file (`conch.files.masks`, cached by
    path; needs the table's `storage`). A mask that disagrees with its fragment record is damage."""
    if not fr.mask:
        return DenseMask(fr.start, fr.rows)
    if storage is None:
        raise ConchError(f"fragment {fr.id} has a mask file ({fr.mask}): reading it needs the table's storage")
    m = read_mask(storage, fr.mask, fr.mask_checksum)
    if m.rows != fr.rows or (fr.rows and m.lo != fr.start):
        raise CorruptFileError(
            f"mask file {fr.mask} holds {m.rows} rows from key-space row {m.lo}, its fragment {fr.id} "
            f"says {fr.rows} from {fr.start}; restore it from a backup"
        )
    return m


def layout(fr: Fragment, storage: Storage) -> str:
    """How a fragment holds its rows, for listings: "dense" (every row of its span, file row i =
    fragment row i), "sparse" (a subset of its span, rows of its file in order) or "masked"
    (some rows of a data file, possibly shared), with the mask's run count if it has a mask file."""
    if not fr.mask:
        return "dense"
    m = read_mask(storage, fr.mask, fr.mask_checksum)
    kind = "masked" if not m.identity else "sparse" if not m.dense else "dense"
    return f"{kind}, {len(m.length)} runs"


def covers(frs: Sequence[Fragment], rows: int, storage: Storage) -> list[Fragment] | None:
    """`frs` sorted by key-space row if their masks are dense and tile [0, rows) exactly
    (each key-space row held by exactly one fragment, in order); else None."""
    spans = []
    for f in frs:
        if not f.mask:  # dense without a mask file: its record says where (no mask object per fragment)
            spans.append((f.start, f.start + f.rows, f))
            continue
        m = key_mask(f, storage)
        if not m.dense:
            return None
        spans.append((m.lo, m.hi, f))
    spans.sort(key=lambda s: s[0])
    at = 0
    for lo, hi, _f in spans:
        if lo != at:
            return None
        at = hi
    return [f for _lo, _hi, f in spans] if at == rows else None


def locate(
    masks: Sequence[KeyMask], ks_of: Sequence[int], ks: np.ndarray, krows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each (key space `ks[i]`, key-space row `krows[i]`): the index into `masks` of the
    fragment holding it and the row within that fragment; -1 (and row 0) where no mask holds it
    (a sparse fragment's gap). `ks_of[j]` is fragment j's key-space index. No row may be held by
    two masks (fresh cells of one read unit)."""
    n = len(krows)
    which = np.full(n, -1, dtype=np.int64)
    frow = np.zeros(n, dtype=np.int64)
    if n == 0 or not masks:
        return which, frow
    los = np.array([m.lo for m in masks], dtype=np.int64)
    his = np.array([m.hi for m in masks], dtype=np.int64)
    kss = np.asarray(ks_of, dtype=np.int64)
    all_dense = all(m.dense for m in masks)  # a column's dense fragments never overlap
    if not all_dense and 4 * n >= sum(m.rows for m in masks):
        return _locate_expanded(masks, kss, his, ks, krows)
    # Sort masks by (key space, lo); a row belongs to the last mask starting at or before it.
    order = np.lexsort((los, kss))
    if all_dense or _disjoint([masks[j] for j in order], kss[order]):
        # one vectorised binary search over (key space, lo) pairs, as one sortable int code
        codes = kss[order] * (1 << 40) + los[order]
        want = ks.astype(np.int64) * (1 << 40) + krows
        at = np.searchsorted(codes, want, side="right") - 1
        cand = order[np.maximum(at, 0)]
        held = (at >= 0) & (kss[cand] == ks) & (krows < his[cand])
        if all_dense:
            which[held] = cand[held]
            frow[held] = krows[held] - los[cand[held]]
            return which, frow
        for j in distinct(cand[held]):
            sel = np.flatnonzero(held & (cand == j))
            ok = masks[j].contains(krows[sel])
            which[sel[ok]] = j
            frow[sel[ok]] = masks[j].to_fragment_rows(krows[sel[ok]])
        return which, frow
    for j, m in enumerate(masks):  # overlapping spans (sparse masks): ask each mask
        sel = (ks == kss[j]) & m.contains(krows)
        which[sel] = j
        frow[sel] = m.to_fragment_rows(krows[sel])
    return which, frow


def _locate_expanded(
    masks: Sequence[KeyMask], kss: np.ndarray, his: np.ndarray, ks: np.ndarray, krows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`locate` for many rows over sparse masks: each key space's masks expanded into one
    row → (mask, fragment row) table (O(rows held), one `np.repeat` per mask), then one lookup
    per row: when the queried rows are about as many as the held ones (a scan, not a take),
    this beats a binary search over the runs per row and mask."""
    which = np.full(len(krows), -1, dtype=np.int64)
    frow = np.zeros(len(krows), dtype=np.int64)
    for k in distinct(kss).tolist():
        js = np.flatnonzero(kss == k)
        size = int(his[js].max())
        own = np.full(size, -1, dtype=np.int64)
        at = np.zeros(size, dtype=np.int64)
        for j in js.tolist():
            held = masks[j].held_rows()
            own[held] = j
            at[held] = np.arange(len(held), dtype=np.int64)
        sel = np.flatnonzero((ks == k) & (krows < size))
        which[sel] = own[krows[sel]]
        frow[sel] = at[krows[sel]]
    return which, frow


def _disjoint(masks: Sequence[KeyMask], kss: np.ndarray) -> bool:
    """Whether masks sorted by (key space, lo) have non-overlapping spans within a key space."""
    end = 0
    for a, m in enumerate(masks):
        if a and kss[a] == kss[a - 1] and m.lo < end:
            return False
        end = m.hi if a == 0 or kss[a] != kss[a - 1] else max(end, m.hi)
    return True
