"""Key ranges of the LSM tree's L1 level and where its sorted runs are cut (spec/003, DESIGN §6).

L1 holds disjoint sorted runs. Their **boundaries** are encoded root keys (or partitioning-key
prefixes): range `i` is `[B[i-1], B[i])`, with `B[-1] = b''` and an open last range, so a table
starts with the one range `b''`..`b'\\xff'`. Boundaries are never stored separately: they are the
`min_key`s of the root level's L1 runs (a range always starts at its run's first key), so they
survive every commit and replay for free.

Why root keys work for every level: the key encoding is order-preserving and prefix-free per
column (`keys.py`), and a child key's encoding starts with its root key's. For a boundary `b`
that encodes a whole root key or a key prefix, `k >= b` iff `root_prefix(k) >= b`, so a key and
its whole subtree (child levels, prefix tombstones) always fall in the same range, and one
bisection on full encoded keys places keys of any level.

A compaction's output for a range is cut again when it exceeds `max_rows` (the size bound): the
new boundary is the root-key prefix at the cut, so later compactions respect it. With a
partitioning key (a prefix of the primary key), every change of partition prefix is a boundary
too: no key space or fragment spans two partitions.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.model.keys import decode_key, encode_key, encode_keys


@dataclass(frozen=True, slots=True)
class Ranges:
    """The L1 key ranges: sorted, distinct boundaries (encoded keys or key prefixes)."""

    boundaries: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if list(self.boundaries) != sorted(set(self.boundaries)) or b"" in self.boundaries:
            raise ValueError("range boundaries must be sorted, distinct and non-empty")

    def __len__(self) -> int:
        return len(self.boundaries) + 1

    def index(self, key: bytes) -> int:
        """The range holding an encoded key of any level."""
        return bisect.bisect_right(self.boundaries, key)

    def span(self, lo: bytes, hi: bytes) -> tuple[int, int]:
        """The ranges an inclusive key span `[lo, hi]` meets, as `(first, last)`."""
        return self.index(lo), self.index(hi)

    def bounds(self, first: int, last: int | None = None) -> tuple[bytes, bytes | None]:
        """`[lo, hi)` of ranges `first..last` (hi None: unbounded)."""
        last = first if last is None else last
        lo = self.boundaries[first - 1] if first > 0 else b""
        hi = self.boundaries[last] if last < len(self.boundaries) else None
        return lo, hi

    def with_boundaries(self, extra: Iterable[bytes]) -> Ranges:
        return Ranges(tuple(sorted(set(self.boundaries) | {b for b in extra if b})))


def ranges_of(l1_root_min_keys: Iterable[bytes]) -> Ranges:
    """The ranges defined by the root level's L1 runs (each starts its range; the lowest starts
    at b'' whatever its first key is)."""
    keys = sorted(set(l1_root_min_keys))
    return Ranges(tuple(keys[1:]))


def prefix_keys(key_columns: Sequence[pa.ChunkedArray | pa.Array], n: int) -> pa.BinaryArray:
    """Encoded prefixes of the first `n` key columns (root key or partitioning key); b'' for
    every row when `n` is 0 (a root with no key: one range, never cut)."""
    if n == 0:
        rows = len(key_columns[0]) if key_columns else 0
        return pa.array([b""] * rows, pa.binary())
    return encode_keys(list(key_columns[:n]))


def prefix_key(key_columns: Sequence[pa.ChunkedArray | pa.Array], n: int, row: int) -> bytes:
    """`prefix_keys` of one row, encoding only that row (a rewrite compares a piece's first key
    or a batch's last; encoding the whole batch for it was most of the cost)."""
    return prefix_keys([c.slice(row, 1) for c in key_columns], n)[0].as_py()


def change_points(prefixes: pa.BinaryArray) -> np.ndarray:
    """Rows where a sorted array of encoded prefixes changes value (row 0 excluded)."""
    n = len(prefixes)
    if n < 2:
        return np.zeros(0, dtype=np.int64)
    same = pc.equal(prefixes.slice(1), prefixes.slice(0, n - 1))
    return np.nonzero(~np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool))[0] + 1


def split_boundaries(prefixes: pa.BinaryArray, max_rows: int) -> list[bytes]:
    """New boundaries cutting sorted rows into pieces of at most about `max_rows`, at changes of
    their (root-key) prefix only, balanced: `ceil(n / max_rows)` pieces of similar size. A single
    prefix holding more rows than the bound is not cut (a key's subtree stays in one range)."""
    n = len(prefixes)
    if n <= max_rows or max_rows <= 0:
        return []
    changes = change_points(prefixes)
    if len(changes) == 0:
        return []
    pieces = -(-n // max_rows)
    out: list[bytes] = []
    for i in range(1, pieces):
        target = i * n // pieces
        j = int(np.searchsorted(changes, target))
        if j >= len(changes):
            break
        b = prefixes[int(changes[j])].as_py()
        if not out or b > out[-1]:
            out.append(b)
    return out


def partition_boundaries(partition_prefixes: pa.BinaryArray) -> list[bytes]:
    """Every change of partition prefix in sorted rows is a boundary (spec/003: the partitioning
    key forces physical partitioning: no key space or fragment spans two partitions)."""
    return [partition_prefixes[int(i)].as_py() for i in change_points(partition_prefixes)]


def cut_rows(prefixes: pa.BinaryArray, boundaries: Sequence[bytes]) -> list[tuple[int, int]]:
    """Row slices `(start, stop)` of sorted rows between consecutive boundaries (empty slices
    dropped). `prefixes` may be full encoded keys or their root prefixes."""
    n = len(prefixes)
    cuts = [0]
    for b in boundaries:
        below = pc.sum(pc.less(prefixes, pa.scalar(b, pa.binary()))).as_py() or 0
        cuts.append(int(below))
    cuts.append(n)
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


def partitioner(root_key_fields: Sequence[pa.Field], n: int) -> Callable[[bytes], bytes] | None:
    """The partition prefix of an encoded key of any level (its first `n` root key columns,
    decoded and encoded again: a child key's encoding starts with its root key's); None when the
    table is not partitioned. The planner's view of partitions (`plan.fold_tasks`): `Ranges` holds
    no partition marks, and a run's `min_key` / `max_key` are all it knows of its keys."""
    if n == 0:
        return None
    fields = list(root_key_fields[:n])
    return lambda key: encode_key(decode_key(key, fields)[:n], fields)
