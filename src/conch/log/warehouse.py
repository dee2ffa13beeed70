"""`Warehouse`: the I/O handles of one warehouse, built once by `connect()` and handed down.

Everything below the `Table` facade (the table log, writes, maintenance, scans) receives these
handles instead of reaching up through a catalog or a table (STYLE: I/O is handed down, never
fetched): the storage where files live, the metastore holding the logs, the fragment format, the
key-space cache, and the options of writes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from conch.errors import WarehouseError
from conch.files.fragments import VortexFormat
from conch.files.keycache import KeyCache
from conch.files.storage.base import Storage
from conch.log.metastore.base import Metastore
from conch.model.budget import MEMORY_BUDGET, ScanOptions, WriteOptions, budget_split
from conch.model.policy import Policy

FLUSH_EVERY = 64  # WAL entries between automatic snapshot flushes


@dataclass(frozen=True)
class Connection:
    """How `connect()` reached a warehouse, as plain picklable data: the warehouse URI (a local
    path made absolute), the metastore URI, the bearer token, the storage options and the
    warehouse's options. `conch.api.connection.reopen` opens it exactly so in any process.
    `reopenable` is False when `connect()` was given a `Metastore` object, which cannot be
    named to another process."""

    uri: str
    metastore: str | None = None
    token: str | None = None
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    write_options: WriteOptions | None = None
    evolve: bool = True
    maintenance: Policy | None = None
    memory_budget: int = MEMORY_BUDGET
    reopenable: bool = True

    def __repr__(self) -> str:  # never print the token
        token = ", token=***" if self.token else ""
        return f"Connection({self.uri!r}, metastore={self.metastore!r}{token})"

    @property
    def key(self) -> str:
        """What identifies the connection within a process (the `reopen` cache key)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return json.dumps(d, sort_keys=True, default=repr)

    def require_reopenable(self, what: str) -> None:
        """`WarehouseError` unless other processes can reopen the warehouse (`reopenable`)."""
        if not self.reopenable:
            raise WarehouseError(
                f"{what} needs a warehouse other processes can reopen: connect() with the metastore's URI "
                "(metastore='sqlite:///...', 'postgresql://...', 'http://...'), not a Metastore object"
            )


class Warehouse:
    """Storage, metastore, fragment format, caches and options of one warehouse.

    `evolve`: whether writes may add columns by default (a write's own `evolve=` overrides).
    `flush_every`: a snapshot is flushed after every that many log entries.
    `maintenance`: the compaction policy of the warehouse's tables; `after_commit`, when set (by
    `connect()`), runs its automatic part after every write or delete, with the `TableLog` that
    committed (a hook, because the compaction package sits above the table log).
    `memory_budget` (bytes): what the process may hold for this warehouse beyond one output
    batch, split among the bounded caches and buffers (`conch.model.budget.budget_split`); every path
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
        self.memory_budget = memory_budget  # a hard limit on an automatic compaction's memory too
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
        self.closed = False  # `Catalog.close()` was called: no background settle touches it again
        # how `connect()` reached this warehouse: what another process needs to reopen it exactly
        # so (`conch.api.connection.reopen`: splits, loaders, Spark tasks, enrichment workers)
        self.connection = Connection(storage.uri, reopenable=False)

    @property
    def uri(self) -> str:
        return self.storage.uri

    def close(self) -> None:
        """Release connections and cached file handles (the handles reopen on use)."""
        self.metastore.close()
        self.format.clear_cache()
