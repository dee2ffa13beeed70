"""Mask files: the rows of a sparse or masked fragment (spec/003 "key mask", issue 10).

A dense fragment holds rows [start, start + rows) of its key space, and its row i is row i of
its data file. Minor compaction realigns existing data files to new key spaces without
rewriting them, so a fragment can also be

- **sparse**: it holds a subset of its key space's rows (`positions`), and
- **masked**: it uses only some rows of its data file (`file_rows`); several fragments may share
  one data file, each with its own `column_ids` and mask.

A mask file says both at once: fragment row i is key-space row `positions[i]` and file row
`file_rows[i]`, each ascending. It is stored as **runs** (maximal stretches where both advance by
one), as a zstd-compressed Arrow IPC stream (`conch.files.ipc`) of three int64 columns (the gaps in key-space and
file rows before each run, and its length), so a contiguous realignment costs O(runs) bytes
however many rows it moves, and a regular interleaving (every other row) almost nothing. The file is immutable
and named in the fragment record (`Fragment.mask`) with the digest of its bytes
(`Fragment.mask_checksum`); reads verify it (`conch.files.integrity`), and damage is a
`CorruptFileError` naming the file. Decoded masks are cached by (storage, path).

`RunsMask` is the in-memory form: a `conch.scan.keymask.KeyMask` whose rank and file-row
lookups are binary searches over the runs, never per-row arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from conch.errors import ConchError, CorruptFileError
from conch.files.format import WrittenFile
from conch.files.integrity import digest, verify
from conch.files.ipc import read_table, table_bytes
from conch.files.storage import Storage
from conch.model.lru import Lru

MASK_SUFFIX = ".mask"
_SCHEMA = pa.schema([("pos_gap", pa.int64()), ("file_gap", pa.int64()), ("len", pa.int64())])


@dataclass(frozen=True, eq=False)
class RunsMask:
    """Fragment rows as runs: run j covers fragment rows [frag[j], frag[j] + length[j]), which are
    key-space rows pos[j] + k and file rows file[j] + k. Runs are in ascending order of all three."""

    pos: np.ndarray
    file: np.ndarray
    length: np.ndarray
    frag: np.ndarray  # first fragment row of each run (exclusive cumulative sum of `length`)

    @classmethod
    def from_runs(cls, pos: np.ndarray, file: np.ndarray, length: np.ndarray) -> RunsMask:
        """The mask of runs (key-space start, file start, length); raises `ValueError` unless
        lengths are positive and both row sequences strictly ascend."""
        pos, file, length = (np.asarray(a, dtype=np.int64) for a in (pos, file, length))
        if not (len(pos) == len(file) == len(length)):
            raise ValueError("mask runs need equally long pos, file and length arrays")
        if len(length) and (length.min() < 1 or pos[0] < 0 or file[0] < 0):
            raise ValueError("mask runs need positive lengths and non-negative rows")
        ends_p, ends_f = pos + length, file + length
        if (pos[1:] < ends_p[:-1]).any() or (file[1:] < ends_f[:-1]).any():
            raise ValueError("mask runs must be ascending and disjoint in key-space rows and in file rows")
        frag = np.concatenate([[0], np.cumsum(length)[:-1]]).astype(np.int64) if len(length) else length
        return cls(pos, file, length, frag)

    @classmethod
    def from_rows(cls, positions: np.ndarray, file_rows: np.ndarray | None = None) -> RunsMask:
        """The mask mapping fragment row i to key-space row `positions[i]` and file row
        `file_rows[i]` (default: i, a sparse fragment written for its key space)."""
        p = np.asarray(positions, dtype=np.int64)
        f = np.arange(len(p), dtype=np.int64) if file_rows is None else np.asarray(file_rows, dtype=np.int64)
        if len(p) != len(f):
            raise ValueError(f"a mask needs one file row per position, got {len(p)} positions and {len(f)} file rows")
        if not len(p):
            return cls.from_runs(p, f, p)
        if (np.diff(p) <= 0).any() or (np.diff(f) <= 0).any():
            raise ValueError("mask positions and file rows must both be strictly ascending")
        starts = np.concatenate([[0], np.flatnonzero((np.diff(p) != 1) | (np.diff(f) != 1)) + 1])
        length = np.diff(np.concatenate([starts, [len(p)]]))
        return cls.from_runs(p[starts], f[starts], length)

    # ----- KeyMask ------------------------------------------------------------------------
    @property
    def rows(self) -> int:
        return int(self.length.sum())

    @property
    def lo(self) -> int:
        return int(self.pos[0]) if len(self.pos) else 0

    @property
    def hi(self) -> int:
        return int(self.pos[-1] + self.length[-1]) if len(self.pos) else 0

    @property
    def dense(self) -> bool:
        return self.rows == self.hi - self.lo

    @property
    def identity(self) -> bool:
        """Whether fragment row i is file row i (a sparse fragment of its own file)."""
        return bool(np.array_equal(self.file, self.frag))

    def _run(self, krows: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.pos, krows, side="right") - 1

    def contains(self, krows: np.ndarray) -> np.ndarray:
        r = self._run(krows)
        ok = r >= 0
        rr = np.maximum(r, 0)
        return ok & (krows < self.pos[rr] + self.length[rr]) if len(self.pos) else np.zeros(len(krows), dtype=bool)

    def to_fragment_rows(self, krows: np.ndarray) -> np.ndarray:
        r = np.maximum(self._run(krows), 0)
        return (self.frag[r] + krows - self.pos[r]).astype(np.int64)

    def held_rows(self) -> np.ndarray:
        """Every key-space row the mask holds, ascending (fragment row i at index i)."""
        return self.ranges_to_rows(self.pos)

    def to_file_rows(self, frows: np.ndarray | None) -> np.ndarray:
        """The file rows of fragment rows `frows` (None: of every fragment row, ascending)."""
        if frows is None:
            return self.ranges_to_rows(self.file)
        r = np.searchsorted(self.frag, frows, side="right") - 1
        return (self.file[r] + frows - self.frag[r]).astype(np.int64)

    def from_file_rows(self, file_rows: np.ndarray) -> np.ndarray:
        """The fragment rows of file rows the mask holds (a pushed-down filter's ordinals)."""
        r = np.maximum(np.searchsorted(self.file, file_rows, side="right") - 1, 0)
        return (self.frag[r] + file_rows - self.file[r]).astype(np.int64)

    def ranges_to_rows(self, starts: np.ndarray) -> np.ndarray:
        """Every row of the runs starting at `starts` (`self.pos` or `self.file`), ascending."""
        if not len(starts):
            return np.zeros(0, dtype=np.int64)
        return np.repeat(starts - self.frag, self.length) + np.arange(self.rows, dtype=np.int64)

    def ranges(self) -> list[tuple[int, int]]:
        """Held key-space rows as maximal runs [a, b) (runs adjacent in key space merge)."""
        out: list[tuple[int, int]] = []
        for a, n in zip(self.pos.tolist(), self.length.tolist(), strict=True):
            if out and out[-1][1] == a:
                out[-1] = (out[-1][0], a + n)
            else:
                out.append((a, a + n))
        return out


def encode_mask(mask: RunsMask) -> bytes:
    """A mask's file bytes: its runs as an Arrow IPC stream, each run stored as the gaps since the
    previous run's end (key-space rows, file rows) and its length, zstd-compressed: a regular
    pattern (every other row) compresses to almost nothing even when it has a run per row."""
    gap_pos = np.diff(mask.pos, prepend=0) - np.concatenate([[0], mask.length[:-1]])
    gap_file = np.diff(mask.file, prepend=0) - np.concatenate([[0], mask.length[:-1]])
    table = pa.table(
        [pa.array(gap_pos[: len(mask.pos)]), pa.array(gap_file[: len(mask.file)]), pa.array(mask.length)],
        schema=_SCHEMA,
    )
    return table_bytes(table, level=9)


def write_mask(storage: Storage, path: str, positions: np.ndarray, file_rows: np.ndarray) -> WrittenFile:
    """Write the mask file of a fragment whose row i is key-space row `positions[i]` and data file
    row `file_rows[i]` (both strictly ascending) at storage path `path`, durably. Record its
    `checksum` as `Fragment.mask_checksum` and `path` as `Fragment.mask`; the fragment's `start`
    is `positions[0]` and its `rows` is `len(positions)`."""
    return write_runs(storage, path, RunsMask.from_rows(positions, file_rows))


def write_runs(storage: Storage, path: str, mask: RunsMask) -> WrittenFile:
    """Write a mask given as runs (`RunsMask.from_runs`): a realignment that never materialises
    per-row arrays. Same file and result as `write_mask`."""
    if not path.endswith(MASK_SUFFIX):
        raise ConchError(f"a mask file's path must end in {MASK_SUFFIX!r}, got {path!r}")
    data = encode_mask(mask)
    storage.write(path, data)
    return WrittenFile(len(data), digest(data))


def decode_mask(data: bytes, name: str) -> RunsMask:
    """A mask from its file bytes; damage is `CorruptFileError` naming `name`."""
    t = read_table(data, f"mask file {name}", _SCHEMA)
    try:
        gap_pos, gap_file, length = (np.asarray(t.column(i).to_numpy(), dtype=np.int64) for i in range(3))
        ends = np.concatenate([[0], np.cumsum(length)[:-1]])  # rows in the runs before each run
        return RunsMask.from_runs(np.cumsum(gap_pos) + ends, np.cumsum(gap_file) + ends, length)
    except (pa.ArrowException, ValueError) as e:
        raise CorruptFileError(f"mask file {name} is damaged ({e}); restore it from a backup") from e


_cache: Lru[tuple[str, str], RunsMask] = Lru(
    max_entries=4096
)  # masks are O(runs) small: the bound is for pathological tables


def _read_verified(storage: Storage, path: str, checksum: str, hint: str = "") -> tuple[RunsMask, int]:
    """The mask at `path` verified against `checksum`, and its size in bytes; a missing or
    damaged file is a `CorruptFileError` naming it (`hint` ends the missing-file message)."""
    try:
        data = storage.read(path)
    except FileNotFoundError as e:
        raise CorruptFileError(f"mask file {path} is missing: the table references it{hint}") from e
    verify(data, checksum, f"mask file {path}")
    return decode_mask(data, path), len(data)


def read_mask(storage: Storage, path: str, checksum: str) -> RunsMask:
    """The (cached) mask at `path`, verified against `checksum` on first read. A missing or
    damaged file is a `CorruptFileError` naming it."""
    key = (storage.uri, path)
    return _cache.get_or_make(key, lambda: _read_verified(storage, path, checksum, "; restore it from a backup")[0])


def verify_mask(storage: Storage, path: str, checksum: str, rows: int, start: int) -> int:
    """Read and verify a mask file, bypassing the cache (for `Table.check()`), and that it holds
    the `rows` rows from key-space row `start` its fragment record says; returns its size."""
    m, size = _read_verified(storage, path, checksum)
    if m.rows != rows or (rows and m.lo != start):
        raise CorruptFileError(
            f"mask file {path} holds {m.rows} rows from key-space row {m.lo}, its fragment says {rows} from {start}"
        )
    return size
