"""Sets of numbers as sorted NumPy arrays: distinct values, unions, membership.

One sort, never NumPy's own set functions: since NumPy 2.3 `np.unique` (and `union1d`,
`setdiff1d`, `intersect1d`, which call it) hash, and on this machine's NumPy 2.4 that costs 50-60x
a sort: 1M sorted `uint64` keys, `np.unique` 744 ms against 12 ms here; a major compaction of 1M
rows spent 0.43 of its 0.9 s in it. `ruff` bans them in `src/` (`pyproject.toml`).
"""

from __future__ import annotations

import numpy as np


def distinct(x: np.ndarray) -> np.ndarray:
    """The distinct values of 1-D `x`, ascending (`np.unique(x)`, by one sort)."""
    s = np.sort(x)
    return s[np.r_[True, s[1:] != s[:-1]]] if len(s) else s


def sorted_union(*parts: np.ndarray) -> np.ndarray:
    """The distinct values of `parts`, ascending."""
    return distinct(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def member(rows: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Which of `rows` are in the sorted array `sorted_set`."""
    i = np.minimum(np.searchsorted(sorted_set, rows), len(sorted_set) - 1)
    return np.asarray(sorted_set[i] == rows)


def outside(rows: np.ndarray, *sorted_sets: np.ndarray) -> np.ndarray:
    """Which of `rows` are in none of the sorted arrays `sorted_sets`: a binary search per set,
    not a union of them (a filter's few passing rows against a table's stale and deleted rows:
    the union sorted ~100k rows on every scan)."""
    keep = np.ones(len(rows), dtype=bool)
    for sorted_set in sorted_sets:
        if len(sorted_set):
            keep &= ~member(rows, sorted_set)
    return keep


def distinct_inverse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(`distinct(x)`, per element of `x` its index there): `np.unique(x, return_inverse=True)`."""
    order = np.argsort(x, kind="stable")
    s = x[order]
    first = np.r_[True, s[1:] != s[:-1]] if len(s) else np.zeros(0, dtype=bool)
    inverse = np.empty(len(x), dtype=np.int64)
    inverse[order] = np.cumsum(first) - 1
    return s[first], inverse
