"""The duplicate-key check of one write, in bounded memory.

The rule (write.py): a write holds each key of a level at most once, else `DuplicateKeyError`
naming the key — rows of one write have no order, so there is no honest winner. A write is
consumed in bounded chunks, and each chunk is sorted and checked on its own (`write_run`) and
written as its own sorted run (one key space per chunk and partition). What is left is a key held
by two runs, which `RunCheck` finds without holding the write's keys:

- runs whose key spans do not overlap cannot share a key: sorted or range-partitioned input
  (the common case) is checked from the runs' first and last keys alone;
- runs whose spans overlap (unsorted input) are read back from their key-space files and merged
  in key windows: each run contributes one Vortex batch at a time, every key up to the smallest
  batch end is final, so memory is one batch per overlapping run, never the write's keys.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.files.format import FragmentFormat
from conch.files.manifest import KeySpace
from conch.model.keys import (
    SortedBytes,
    decode_key,
    duplicate_key_error,
    encode_keys,
    equal_adjacent,
    key_space_schema,
    numeric_key_type,
)


class RunCheck:
    """Finds a key that two sorted runs of one write (one level) both hold."""

    def __init__(self, fmt: FragmentFormat, fields: list[pa.Field]) -> None:
        self.format = fmt
        self.fields = fields
        self.schema = key_space_schema(fields)  # the columns of each run's key-space file
        self.numeric = len(fields) == 1 and numeric_key_type(fields[0].type)  # numpy batches
        self.runs: list[KeySpace] = []

    def add(self, ks: KeySpace) -> None:
        """Note one written run (its keys are sorted and unique)."""
        if ks.rows:
            self.runs.append(ks)

    def check(self) -> None:
        """Raise `DuplicateKeyError` naming a key two runs hold."""
        for cluster in overlapping(self.runs):
            if len(cluster) > 1:
                self._merge(cluster)

    def _merge(self, cluster: list[KeySpace]) -> None:
        runs = [r for r in (_Run(self._batches(ks)) for ks in cluster) if r.buf is not None]
        while len(runs) > 1:
            bound = min(r.last() for r in runs)
            parts = [p for r in runs if len(p := r.take_upto(bound, self.numeric))]
            if len(parts) > 1:
                self._check_window(parts)
            runs = [r for r in runs if r.buf is not None]

    def _check_window(self, parts: list[Any]) -> None:
        if self.numeric:
            s = np.sort(np.concatenate(parts), kind="stable")
            dup = np.flatnonzero(s[1:] == s[:-1])
            if len(dup):
                key = pa.array([s[dup[0]]]).cast(self.fields[0].type)[0].as_py()
                raise duplicate_key_error({self.fields[0].name: key})
            return
        arr = pa.concat_arrays(parts)
        s = arr.take(pc.sort_indices(arr))
        same = equal_adjacent(s)
        if same.any():
            values = decode_key(s[int(np.argmax(same))].as_py(), self.fields)
            raise duplicate_key_error(dict(zip([f.name for f in self.fields], values, strict=False)))

    def _batches(self, ks: KeySpace) -> Iterator[Any]:
        """The run's keys in sorted batches: numpy for one numeric column, else encoded bytes."""
        for b in self.format.stream(ks, self.schema.names, self.schema):
            if self.numeric:
                col = b.column(0)
                if pa.types.is_timestamp(col.type):
                    col = col.cast(pa.int64())
                yield col.to_numpy(zero_copy_only=False)
            else:
                yield encode_keys(b.columns)


def overlapping(runs: list[KeySpace]) -> list[list[KeySpace]]:
    """Runs grouped into clusters whose key spans overlap (a shared end key counts)."""
    clusters: list[list[KeySpace]] = []
    end = b""
    for ks in sorted(runs, key=lambda k: k.min_key):
        lo, hi = bytes.fromhex(ks.min_key), bytes.fromhex(ks.max_key)
        if clusters and lo <= end:
            clusters[-1].append(ks)
            end = max(end, hi)
        else:
            clusters.append([ks])
            end = hi
    return clusters


class _Run:
    """One run's current batch; `take_upto(bound)` removes and returns its keys <= bound."""

    def __init__(self, batches: Iterator[Any]) -> None:
        self.batches = batches
        self.buf: Any = None
        self._next()

    def _next(self) -> None:
        self.buf = next((b for b in self.batches if len(b)), None)

    def last(self) -> Any:
        b = self.buf
        return b[len(b) - 1] if isinstance(b, np.ndarray) else b[len(b) - 1].as_py()

    def take_upto(self, bound: Any, numeric: bool) -> Any:
        b = self.buf
        if numeric:
            n = int(np.searchsorted(b, bound, "right"))
        else:
            n = bisect.bisect_right(SortedBytes(b), bound)
        head = b[:n]
        self.buf = b[n:]
        if len(self.buf) == 0:
            self._next()
        return head
