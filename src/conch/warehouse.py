"""`Warehouse`: the I/O handles of one warehouse, built once by `connect()` and handed down.

Everything below the `Table` facade (the table log, writes, maintenance, scans) receives these
handles instead of reaching up through a catalog or a table (STYLE: I/O is handed down, never
fetched): the storage where files live, the metastore holding the logs, the fragment format, the
key-space cache, and the options of writes.
"""

from __future__ import annotations

from conch.fragments import VortexFormat
from conch.metastore.base import Metastore
from conch.scan.keyspace import KeyCache
from conch.storage.base import Storage
from conch.write import WriteOptions

FLUSH_EVERY = 64  # WAL entries between automatic snapshot flushes


class Warehouse:
    """Storage, metastore, fragment format, caches and options of one warehouse.

    `evolve`: whether writes may add columns by default (a write's own `evolve=` overrides).
    `flush_every`: a snapshot is flushed after every that many log entries.
    """

    def __init__(
        self,
        storage: Storage,
        metastore: Metastore,
        write_options: WriteOptions | None = None,
        evolve: bool = True,
        flush_every: int = FLUSH_EVERY,
    ) -> None:
        self.storage = storage
        self.metastore = metastore
        self.format = VortexFormat(storage)
        self.key_cache = KeyCache(self.format)
        self.write_options = write_options or WriteOptions()
        self.evolve = evolve
        self.flush_every = flush_every

    @property
    def uri(self) -> str:
        return self.storage.uri

    def close(self) -> None:
        """Release connections and cached file handles (the handles reopen on use)."""
        self.metastore.close()
        self.format.clear_cache()
