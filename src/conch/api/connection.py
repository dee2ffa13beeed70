"""How a warehouse is reached (`Connection`), and the one way to open it: `open_connection` for
`connect()`, `reopen` for every other process (and thread) that reads or writes on its behalf.

`connect()` records its options as a `Connection` (plain, picklable data: the warehouse URI,
the metastore URI, the bearer token, the storage options, and the warehouse's write, memory and
maintenance options). A `conch.api.snapshot.Snapshot` carries it, so a split, a data-loader worker,
a Spark task or an enrichment worker opens the warehouse **exactly as `connect()` did**
(`reopen`), never from a bare URI. `reopen` keeps one `Warehouse` per process and connection
(forked children connect afresh), so a worker that opens many splits connects once.

A warehouse opened by `reopen` never starts the background settle
(`conch.maintain.compaction.background`; `Policy.settle_after` is turned off there): workers are pooled
and reused (Spark's Python workers, DataLoader workers), and a settle thread must not outlive
the task that wrote. The process that called `connect()` settles, or the next writer does.
"""

from __future__ import annotations

import dataclasses
import os
import threading

from conch.log.metastore.base import Metastore
from conch.log.metastore.registry import open_warehouse
from conch.log.warehouse import Connection, Warehouse
from conch.maintain.compaction import background
from conch.model.policy import Policy

__all__ = ["Connection", "forget", "local_uri", "open_connection", "reopen"]


def local_uri(uri: str | os.PathLike[str]) -> str:
    """A warehouse URI as another process must see it: a local path made absolute (a worker may
    run in another directory); URIs with a scheme unchanged."""
    text = os.fspath(uri)
    return text if "://" in text else os.path.abspath(text)


def open_connection(conn: Connection, create: bool | None = None, metastore: Metastore | None = None) -> Warehouse:
    """A new `Warehouse` opened with `conn`'s options (`connect()`; `metastore`: the object
    `connect()` was given instead of a URI)."""
    storage, ms = open_warehouse(
        conn.uri,
        create=create,
        metastore=metastore if metastore is not None else conn.metastore,
        token=conn.token,
        storage_options=dict(conn.storage_options) or None,
    )
    wh = Warehouse(
        storage,
        ms,
        conn.write_options,
        evolve=conn.evolve,
        maintenance=conn.maintenance,
        memory_budget=conn.memory_budget,
    )
    wh.after_commit = background.after_commit
    wh.connection = conn
    return wh


_lock = threading.Lock()
_opened: dict[tuple[int, str], Warehouse] = {}


def reopen(conn: Connection, create: bool | None = False) -> Warehouse:
    """The warehouse of `conn` in this process: opened once per process and connection, exactly
    with `connect()`'s options, without a background settle (module doc). `create` as in
    `connect()` when it is first opened here (default False: `WarehouseNotFoundError` if the
    warehouse is gone; a Spark write passes None, and its first `create_table` makes it)."""
    conn.require_reopenable("reading or writing in another process")
    key = (os.getpid(), conn.key)
    with _lock:
        wh = _opened.get(key)
        if wh is None:
            policy = dataclasses.replace(conn.maintenance or Policy(), settle_after=None)
            wh = open_connection(dataclasses.replace(conn, maintenance=policy), create=create)
            wh.connection = conn  # what a snapshot taken here carries on: the caller's options
            _opened[key] = wh
        return wh


def forget(conn: Connection) -> None:
    """Drop this process's cached warehouse of `conn` (the next `reopen` connects afresh: the
    warehouse was removed and created again)."""
    with _lock:
        wh = _opened.pop((os.getpid(), conn.key), None)
    if wh is not None:
        wh.close()
