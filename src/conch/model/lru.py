"""One least-recently-used map for every per-process cache (decoded columns, key spaces, masks,
blob block tables, log entries, object sizes, index files, text index parts).

Each cache keeps immutable things (files never change once written: DESIGN §2), so an entry is
never stale, only cold. The bound is a number of entries, a total weight (bytes, as the caller
measures them), or both; `keep` entries survive the weight bound, so one entry larger than the
budget still serves the reader that just made it."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Lru(Generic[K, V]):
    """Values by key, the least recently used evicted past `max_entries` or `max_weight` (the sum
    of `weight(value)`); `on_evict` is called on each value evicted or removed, outside the lock.
    Thread-safe."""

    def __init__(
        self,
        max_entries: int | None = None,
        max_weight: int | None = None,
        weight: Callable[[V], int] = lambda _: 1,
        on_evict: Callable[[V], None] | None = None,
        keep: int = 0,
    ) -> None:
        self.max_entries = max_entries
        self.max_weight = max_weight
        self._weight = weight
        self._on_evict = on_evict
        self._keep = keep
        self._items: OrderedDict[K, V] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        """Whether `key` is kept (its recency unchanged)."""
        return key in self._items

    @property
    def weight(self) -> int:
        """The total weight held."""
        return self._used

    def get(self, key: K) -> V | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: K, value: V) -> None:
        """Keep `value` as the most recently used; a value it replaces is evicted."""
        self._evicted([v for _, v in self._insert(key, value, replace=True)[1]])

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The value kept under `key`, else `make()`, kept. Made outside the lock: two threads
        missing one key at once may both make it; the first kept stays and the other is evicted
        (nobody else holds it yet). A value too heavy to keep is still returned to its maker."""
        hit = self.get(key)
        if hit is not None:
            return hit
        made = make()
        kept, gone = self._insert(key, made, replace=False)
        self._evicted([v for k, v in gone if k != key or kept is not made])
        return kept

    def _insert(self, key: K, value: V, replace: bool) -> tuple[V, list[tuple[K, V]]]:
        """The value now kept under `key` and the (key, value) pairs no longer kept."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None and not replace:
                self._items[key] = old
                return old, [(key, value)]
            if old is not None:
                self._used -= self._weight(old)
            self._items[key] = value
            self._used += self._weight(value)
            return value, ([(key, old)] if old is not None else []) + self._over()

    def remove_if(self, predicate: Callable[[K], bool]) -> None:
        """Drop every entry whose key matches (a table dropped, a storage closed)."""
        with self._lock:
            gone = [self._items.pop(k) for k in [k for k in self._items if predicate(k)]]
            self._used -= sum(self._weight(v) for v in gone)
        self._evicted(gone)

    def clear(self) -> None:
        self.remove_if(lambda _: True)

    def _over(self) -> list[tuple[K, V]]:
        gone: list[tuple[K, V]] = []
        while len(self._items) > self._keep and (
            (self.max_entries is not None and len(self._items) > self.max_entries)
            or (self.max_weight is not None and self._used > self.max_weight)
        ):
            k, old = self._items.popitem(last=False)
            self._used -= self._weight(old)
            gone.append((k, old))
        return gone

    def _evicted(self, values: list[V]) -> None:
        if self._on_evict is not None:
            for v in values:
                self._on_evict(v)
