"""`Warehouse`: the I/O handles of one warehouse, built once by `connect()` and handed down.

Everything below the `Table` facade (the table log, writes, maintenance, scans) receives these
handles instead of reaching up through a catalog or a table (STYLE: I/O is handed down, never
fetched): the storage where files live, the metastore holding the logs, the fragment format, the
key-space cache, and the options of writes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conch.budget import MEMORY_BUDGET, budget_split
from conch.fragments import VortexFormat
from conch.metastore.base import Metastore
from conch.policy import Policy
from conch.scan.context import ScanOptions
from conch.scan.keyspace import KeyCache
from conch.storage.base import Storage
from conch.write import WriteOptions

FLUSH_EVERY = 64  # WAL entries between automatic snapshot flushes


class Warehouse:
    """Storage, metastore, fragment format, caches and options of one warehouse.

    `evolve`: whether writes may add columns by default (a write's own `evolve=` overrides).
    `flush_every`: a snapshot is flushed after every that many log entries.
    `maintenance`: the compaction policy of the warehouse's tables; `after_commit`, when set (by
    `connect()`), runs its automatic part after every write or delete, with the `TableLog` that
    committed (a hook, because the compaction package sits above the table log).
    `memory_budget` (bytes): what the process may hold for this warehouse beyond one output
    batch, split among the bounded caches and buffers (`conch.budget.budget_split`); every path
    sizes itself from these, never from the table's key count.
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
        self.format = VortexFormat(storage, segment_cache_bytes=split.segment_cache)
        self.key_cache = KeyCache(self.format, max_bytes=split.key_cache)
        self.scan_options = ScanOptions(cache_bytes=split.scan_cache, batch_bytes=split.batch)
        self.write_options = write_options or WriteOptions(chunk_bytes=split.write_chunk)
        self.evolve = evolve
        self.flush_every = flush_every
        self.maintenance = maintenance or Policy()
        self.after_commit: Callable[[Any, Any], None] | None = None
        # how `connect()` reached this warehouse (uri, metastore, token, storage_options): what
        # another process needs to reopen it exactly so (Spark executors of `enrich`)
        self.connection: dict[str, Any] = {"uri": storage.uri, "reopenable": False}

    @property
    def uri(self) -> str:
        return self.storage.uri

    def close(self) -> None:
        """Release connections and cached file handles (the handles reopen on use)."""
        self.metastore.close()
        self.format.clear_cache()
