"""Decoded columns of small fragments that scans filter again and again (spec/001's metadata
group): a byte-bounded LRU shared by a warehouse's scans (`FragmentFormat.hot`).

A filter over a fragment whose columns are here runs in Arrow over the cached arrays instead of
opening a Vortex scan, whose fixed cost (~1 ms: its runtime's threads, the scan set-up) is most of
a selective query over a small metadata fragment. Files are immutable, so a fragment's path and
mask name its rows for ever; an entry is admitted only if it is at most 1/8 of the cache, so one
large fragment never evicts the rest, and the whole cache is 1/4 of the format's segment cache
(`connect(memory_budget=)`'s share for raw segments).

The files a process writes small enough go in as written (`VortexFormat._keep_written`, key
`(path, ("written",))`): the scans right after a commit and the merges of small runs read them
back from here, not from storage."""

from __future__ import annotations

import pyarrow as pa

from conch.model.lru import Lru

HotKey = tuple[str, tuple[str, ...]]  # (fragment path + mask path, file column names)


class ColumnCache:
    """Decoded columns by (fragment path + mask, column names), LRU, bounded by Arrow bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lru: Lru[HotKey, pa.Table] = Lru(max_weight=max_bytes, weight=lambda t: t.nbytes)

    @property
    def entry_bytes(self) -> int:
        """The largest entry admitted."""
        return self.max_bytes // 8

    def get(self, key: HotKey) -> pa.Table | None:
        return self._lru.get(key)

    def put(self, key: HotKey, t: pa.Table) -> bool:
        """Keep `t` if it fits an entry; whether it was kept."""
        if t.nbytes > self.entry_bytes:
            return False
        self._lru.put(key, t)
        return True

    def clear(self) -> None:
        self._lru.clear()
