"""How a warehouse is reached (`Connection`), and the one way to open it: `open_connection` for
`connect()`, `reopen` for every other process (and thread) that reads or writes on its behalf.

`connect()` records its options as a `Connection` (plain, picklable data: the warehouse URI,
the metastore URI, the bearer token, the storage options, and the warehouse's write, memory and
maintenance options). A `conch.api.snapshot.Snapshot` carries it, so a split, a data-loader worker,
a Spark task or an enrichment worker opens the warehouse **exactly as `connect()` did**
(`reopen`), never from a bare URI. `reopen` keeps one `Warehouse` per process and connection
(forked children connect afresh), so a worker that opens many splits connects once; and
`table_log` keeps one table log per process, warehouse and table (the one reopen cache of
snapshots, Spark tasks and engine sources), so its replayed state and key-space cache stay warm.

A warehouse opened by `reopen` never starts the background maintenance thread
(`conch.maintain.compaction.background`; `Policy.settle_after` and `Policy.background` are turned
off there, so its commit-time trigger runs in the writing thread): workers are pooled and reused
(Spark's Python workers, DataLoader workers), and a maintenance thread must not outlive the task
that wrote. The process that called `connect()` settles, or the next writer does.
"""

from __future__ import annotations

import dataclasses
import os
import threading

from conch.errors import TableNotFoundError
from conch.log.branching import metastore_name
from conch.log.metastore.base import Metastore
from conch.log.metastore.registry import open_warehouse
from conch.log.tablelog import TableLog
from conch.log.warehouse import Connection, Warehouse
from conch.maintain.compaction import background
from conch.model.policy import Policy

__all__ = ["Connection", "forget", "forget_logs", "local_uri", "open_connection", "reopen", "table_log"]


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
            policy = dataclasses.replace(conn.maintenance or Policy(), settle_after=None, background=False)
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


_logs: dict[tuple[int, str, str], TableLog] = {}


def table_log(wh: Warehouse, name: str, table_id: str | None = None) -> TableLog:
    """The log of table `name` (`t@x`: branch x of t) of a `reopen`ed warehouse, opened once
    per process, connection and table. With `table_id` (a snapshot's table), a cached log is
    returned without a metastore read, and a table of that name with another id (dropped and
    created again) is a `TableNotFoundError`; without it, the name is looked up on every call
    (one metastore read), so a dropped table is never read through a stale log."""
    conn = wh.connection.key
    if table_id is not None:
        with _lock:
            log = _logs.get((os.getpid(), conn, table_id))
        if log is not None:
            return log
    record = wh.metastore.get_table(metastore_name(name))
    if table_id is not None and record.id != table_id:
        raise TableNotFoundError(
            f"table {name!r} of the snapshot (id {table_id}) was dropped; {name!r} is now another table "
            f"(id {record.id}): take a new snapshot"
        )
    key = (os.getpid(), conn, record.id)
    with _lock:
        log = _logs.get(key)
        if log is None:
            log = _logs[key] = TableLog(wh, record)
        return log


def forget_logs(conn: Connection, name: str | None = None) -> None:
    """Drop this process's cached logs of `conn`'s warehouse (only table `name`'s, if given): the
    next `table_log` replays the log afresh."""
    with _lock:
        for key in [k for k, log in _logs.items() if k[1] == conn.key and (name is None or log.name == name)]:
            del _logs[key]
