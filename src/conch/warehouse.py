"""`Warehouse`: the I/O handles of one warehouse, built once by `connect()` and handed down.

Everything below the `Table` facade (the table log, writes, maintenance, scans) receives these
handles instead of reaching up through a catalog or a table (STYLE: I/O is handed down, never
fetched): the storage where files live, the metastore holding the logs, the fragment format, the
key-space cache, and the options of writes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conch.errors import InvalidArgumentError
from conch.fragments import VortexFormat
from conch.metastore.base import Metastore
from conch.policy import Policy
from conch.scan.context import ScanOptions
from conch.scan.keyspace import KeyCache
from conch.storage.base import Storage
from conch.write import WriteOptions

FLUSH_EVERY = 64  # WAL entries between automatic snapshot flushes
MEMORY_BUDGET = 1 << 30  # default `connect(memory_budget=)`: the caches' and buffers' sizes before it existed
MIN_MEMORY_BUDGET = 16 << 20


class Warehouse:
    """Storage, metastore, fragment format, caches and options of one warehouse.

    `evolve`: whether writes may add columns by default (a write's own `evolve=` overrides).
    `flush_every`: a snapshot is flushed after every that many log entries.
    `maintenance`: the compaction policy of the warehouse's tables; `after_commit`, when set (by
    `connect()`), runs its automatic part after every write or delete, with the `TableLog` that
    committed (a hook, because the compaction package sits above the table log).
    `memory_budget` (bytes): what the process may hold for this warehouse beyond one output
    batch, split among the bounded caches and buffers (`budget_split`); every path sizes itself
    from these, never from the table's key count.
    """

    def __init__(
        self,
        storage: Storage,
        metastore: Metastore,
        write_options: WriteOptions | None = None,
        evolve: bool = True,
        flush_every: int = FLUSH_EVERY,
        maintenance: Policy | None = None,
        memory_budget: int = MEMORY_BUDGET,
    ) -> None:
        split = budget_split(memory_budget)
        self.storage = storage
        self.metastore = metastore
        self.memory_budget = memory_budget
        self.format = VortexFormat(storage, segment_cache_bytes=split["segment_cache"])
        self.key_cache = KeyCache(self.format, max_bytes=split["key_cache"])
        self.scan_options = ScanOptions(cache_bytes=split["scan_cache"], batch_bytes=split["batch"])
        self.write_options = write_options or WriteOptions(chunk_bytes=split["write_chunk"])
        self.evolve = evolve
        self.flush_every = flush_every
        self.maintenance = maintenance or Policy()
        self.after_commit: Callable[[Any], None] | None = None
        # how `connect()` reached this warehouse (uri, metastore, token, storage_options): what
        # another process needs to reopen it exactly so (Spark executors of `enrich`)
        self.connection: dict[str, Any] = {"uri": storage.uri}

    @property
    def uri(self) -> str:
        return self.storage.uri

    def close(self) -> None:
        """Release connections and cached file handles (the handles reopen on use)."""
        self.metastore.close()
        self.format.clear_cache()


def budget_split(memory_budget: int) -> dict[str, int]:
    """How a warehouse's memory budget is shared (bytes): the Vortex segment cache (1/8), the
    key-space cache (1/8), each scan's decoded-fragment cache (1/4; the streamed overlay decodes
    small runs within a quarter of it), a scan's output batch (1/16) and a write's input chunk
    (1/4). The default 1 GiB gives the sizes these had before the budget existed, except the
    segment cache (256 → 128 MB: a full scan of a large table filled it, measured in
    `bench/memory.py`; the OS page cache still holds local files) and the key cache (512 MB per
    form → 128 MB in all)."""
    if isinstance(memory_budget, bool) or not isinstance(memory_budget, int) or memory_budget < MIN_MEMORY_BUDGET:
        raise InvalidArgumentError(
            f"memory_budget must be a number of bytes >= {MIN_MEMORY_BUDGET >> 20} MiB, got {memory_budget!r}"
        )
    return {
        "segment_cache": memory_budget // 8,
        "key_cache": memory_budget // 8,
        "scan_cache": memory_budget // 4,
        "batch": memory_budget // 16,
        "write_chunk": memory_budget // 4,
    }
