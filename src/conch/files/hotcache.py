"""Decoded columns of small fragments that scans filter again and again (spec/001's metadata
group): a byte-bounded LRU shared by a warehouse's scans (`FragmentFormat.hot`).

A filter over a fragment whose columns are here runs in Arrow over the cached arrays instead of
opening a Vortex scan, whose fixed cost (~1 ms: its runtime's threads, the scan set-up) is most of
a selective query over a small metadata fragment. Files are immutable, so a fragment's path and
mask name its rows for ever; an entry is admitted only if it is at most 1/8 of the cache, so one
large fragment never evicts the rest, and the whole cache is 1/4 of the format's segment cache
(`connect(memory_budget=)`'s share for raw segments)."""

from __future__ import annotations

import threading
from collections import OrderedDict

import pyarrow as pa

HotKey = tuple[str, tuple[str, ...]]  # (fragment path + mask path, file column names)


class ColumnCache:
    """Decoded columns by (fragment path + mask, column names), LRU, bounded by Arrow bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._d: OrderedDict[HotKey, pa.Table] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def entry_bytes(self) -> int:
        """The largest entry admitted."""
        return self.max_bytes // 8

    def get(self, key: HotKey) -> pa.Table | None:
        with self._lock:
            t = self._d.get(key)
            if t is not None:
                self._d.move_to_end(key)
            return t

    def put(self, key: HotKey, t: pa.Table) -> bool:
        """Keep `t` if it fits an entry; whether it was kept."""
        if t.nbytes > self.entry_bytes:
            return False
        with self._lock:
            old = self._d.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._d[key] = t
            self._bytes += t.nbytes
            while self._bytes > self.max_bytes:
                _, gone = self._d.popitem(last=False)
                self._bytes -= gone.nbytes
        return True

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self._bytes = 0
