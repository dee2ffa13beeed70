"""What the Spark reader (`conch.engines.spark.source`) and writer (`conch.engines.spark.writer`) share: where a
table is (`Location`, opened through `conch.api.connection.reopen`, the one way any process reopens
a warehouse), a per-worker check that the warehouse at a path is still the one opened (tables are cached once per process by `conch.api.connection.table_log`), and the parsing of option values.

Both modules import this one and never each other, so the Spark package has no import cycle.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import Any

import conch
from conch.api.connection import forget, forget_logs, reopen, table_log
from conch.errors import ConchError, TableNotFoundError
from conch.log.warehouse import Connection
from conch.model.time import to_time

METASTORE_FILE = "_catalog.sqlite"  # the embedded metastore: a warehouse exists iff it does

_lock = threading.Lock()
_CatalogKey = tuple[str, str | None, str | None, tuple[tuple[str, Any], ...]]
_identities: dict[_CatalogKey, tuple[int, int]] = {}  # of the metastore file each warehouse was opened on


@dataclass(frozen=True)
class Location:
    """A table's warehouse (an absolute path, or an object-store / server URI), its name, and how
    to reach its metastore, from a data source's options: `metastore` (a URI, e.g.
    `postgresql://...` or `http://host:port`), `token` (a bearer token for a server; Spark redacts
    options named like it) and `storageOptions` (JSON: object-store endpoint and credentials; the
    usual environment variables work too). Executors connect with exactly these, so nothing they
    open is a file of the driver's machine unless the warehouse itself is a local path."""

    warehouse: str
    table: str
    metastore: str | None = None
    token: str | None = None
    storage_options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def from_options(cls, options: Any) -> Location:
        wh, name, path = options.get("warehouse"), options.get("table"), options.get("path")
        if wh and name:
            where = _absolute(wh)
        elif path:
            where, _, name = path.rstrip("/").rpartition("/")
            where = _absolute(where or ".")
        else:
            raise ConchError("say which table: .load('<warehouse>/<table>') or options warehouse=... and table=...")
        raw = option(options, "storageOptions")
        try:
            extra = tuple(sorted(json.loads(raw).items())) if raw else ()
        except (ValueError, AttributeError):
            raise ConchError(f"option storageOptions must be a JSON object, got {raw!r}") from None
        return cls(where, name, option(options, "metastore"), option(options, "token"), extra)

    @property
    def path(self) -> str:
        return f"{self.warehouse.rstrip('/')}/{self.table}"

    @property
    def embedded(self) -> bool:
        """A local directory with its SQLite metastore (the default)."""
        return self.metastore is None and "://" not in self.warehouse

    @property
    def connection(self) -> Connection:
        """These options as a `connect()` connection."""
        return Connection(self.warehouse, self.metastore, self.token, dict(self.storage_options))

    def connect(self) -> conch.Catalog:
        """The warehouse, for executors and for the Python worker that commits a job, opened once
        per process (`conch.api.connection.reopen`): with no background settle
        (`conch.maintain.compaction.background`), which would outlive the task in a reused worker; the
        driver's `Table.wait_for_maintenance()` or the next write settles. A new local
        warehouse's directory is made on its first `create_table` (a Spark write)."""
        return conch.Catalog(reopen(self.connection, create=None))


def _absolute(warehouse: str) -> str:
    """A local warehouse as an absolute path (executors may run elsewhere); URIs unchanged."""
    if "://" in warehouse and not warehouse.startswith("file://"):
        return warehouse
    return os.path.abspath(warehouse.removeprefix("file://"))


def _identity(loc: Location) -> tuple[int, int] | None:
    """Which metastore file is at an embedded warehouse now (a warehouse deleted and re-created
    between jobs must not be served from a connection to the old, unlinked file); None if there
    is none. Other metastores are asked for the table on every `open_table` instead."""
    if not loc.embedded:
        return (0, 0)
    try:
        st = os.stat(os.path.join(loc.warehouse, METASTORE_FILE))
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def open_table(loc: Location) -> conch.Table:
    """A cached `Table` per worker process: Python workers are reused across tasks, and a cached
    table keeps its replayed state and key-space cache warm. Validated on every call (one
    metastore lookup) so a dropped and re-created table is never read through a stale object.

    Never creates anything: a missing warehouse or table raises `TableNotFoundError` naming the
    path (a mistyped `load()` path must not leave an empty warehouse behind)."""
    key = (loc.warehouse, loc.metastore, loc.token, loc.storage_options)
    with _lock:
        ident = _identity(loc)
        if ident is None:
            if _identities.pop(key, None) is not None:
                forget(loc.connection)
            raise TableNotFoundError(
                f"no Conch table at {loc.path!r}: {loc.warehouse!r} is not a Conch warehouse "
                f"(no {METASTORE_FILE}); check the path, or create the table first"
            )
        if _identities.get(key, ident) != ident:  # another warehouse at the path now: connect afresh
            forget(loc.connection)
            forget_logs(loc.connection)
        _identities[key] = ident
    cat = loc.connect()
    try:
        return conch.Table(table_log(cat.warehouse, loc.table))  # `t@b`: branch b of t
    except TableNotFoundError:
        raise TableNotFoundError(
            f"no Conch table {loc.table!r} at {loc.path!r}; tables in {loc.warehouse!r}: {cat.list_tables()}"
        ) from None


def forget_table(loc: Location) -> None:
    """Drop cached state so the next `open_table` replays the log afresh."""
    forget_logs(loc.connection, loc.table)


def parse_time(text: str | None, what: str) -> int | None:
    """A commit time option: µs since the epoch or an ISO time (`conch.model.time`, the one parser)."""
    return to_time(text or None, what)


def split_list(text: str | None) -> tuple[str, ...]:
    """A comma-separated option value as a tuple of its non-empty, stripped items."""
    return tuple(p.strip() for p in (text or "").split(",") if p.strip())


def option(options: Any, name: str) -> str | None:
    """An option by its camelCase name: Spark lower-cases option keys, Python callers may not."""
    return options.get(name.lower()) or options.get(name) or None


def flag_option(options: Any, name: str, default: bool) -> bool:
    """A boolean option (`true`/`false`, any case); anything else is a `ConchError` naming the
    option, raised before a task runs (a misspelt `"ture"` must not silently mean false)."""
    raw = option(options, name)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise ConchError(f"option {name} must be true or false, got {raw!r}")
    return raw.lower() == "true"
