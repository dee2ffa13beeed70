"""What the Spark reader (`conch.spark.source`) and writer (`conch.spark.writer`) share: where a
table is (`Location`), a per-worker cache of open tables, and the parsing of option values.

Both modules import this one and never each other, so the Spark package has no import cycle.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import conch
from conch.errors import ConchError, TableNotFoundError
from conch.timeparse import to_time

METASTORE_FILE = "_catalog.sqlite"  # the embedded metastore: a warehouse exists iff it does

_lock = threading.Lock()
_catalogs: dict[str, tuple[tuple[int, int] | None, conch.Catalog]] = {}
_tables: dict[tuple[str, str], conch.Table] = {}


@dataclass(frozen=True)
class Location:
    """A table's warehouse (absolute path) and name, from a data source's options."""

    warehouse: str
    table: str

    @classmethod
    def from_options(cls, options: Any) -> Location:
        wh, name, path = options.get("warehouse"), options.get("table"), options.get("path")
        if wh and name:
            return cls(os.path.abspath(wh), name)
        if path:
            path = path.removeprefix("file://").rstrip("/")
            return cls(os.path.abspath(os.path.dirname(path)), os.path.basename(path))
        raise ConchError("say which table: .load('<warehouse>/<table>') or options warehouse=... and table=...")

    @property
    def path(self) -> str:
        return os.path.join(self.warehouse, self.table)


def _identity(warehouse: str) -> tuple[int, int] | None:
    """Which metastore file is at the warehouse now (a warehouse deleted and re-created between
    jobs must not be served from a connection to the old, unlinked file); None if there is none."""
    try:
        st = os.stat(os.path.join(warehouse, METASTORE_FILE))
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def open_table(loc: Location) -> conch.Table:
    """A cached `Table` per worker process: Python workers are reused across tasks, and a cached
    table keeps its replayed state and key-space cache warm. Validated on every call (one
    metastore lookup) so a dropped and re-created table is never read through a stale object.

    Never creates anything: a missing warehouse or table raises `TableNotFoundError` naming the
    path (a mistyped `load()` path must not leave an empty warehouse behind)."""
    with _lock:
        ident = _identity(loc.warehouse)
        if ident is None:
            _catalogs.pop(loc.warehouse, None)
            raise TableNotFoundError(
                f"no Conch table at {loc.path!r}: {loc.warehouse!r} is not a Conch warehouse "
                f"(no {METASTORE_FILE}); check the path, or create the table first"
            )
        cached = _catalogs.get(loc.warehouse)
        if cached is None or cached[0] != ident:
            cat = conch.connect(loc.warehouse)
            _catalogs[loc.warehouse] = (ident, cat)
        else:
            cat = cached[1]
        try:
            table_id = cat.warehouse.metastore.get_table(loc.table).id
        except TableNotFoundError:
            raise TableNotFoundError(
                f"no Conch table {loc.table!r} at {loc.path!r}; tables in {loc.warehouse!r}: {cat.list_tables()}"
            ) from None
        table = _tables.get((loc.warehouse, table_id))
        if table is None:
            table = _tables[(loc.warehouse, table_id)] = cat.table(loc.table)
        return table


def forget_table(loc: Location) -> None:
    """Drop cached state so the next `open_table` replays the log afresh."""
    with _lock:
        for key in [k for k, t in _tables.items() if k[0] == loc.warehouse and t.name == loc.table]:
            del _tables[key]


def parse_time(text: str | None, what: str) -> int | None:
    """A commit time option: µs since the epoch or an ISO time (`conch.timeparse`, the one parser)."""
    return to_time(text or None, what)


def split_list(text: str | None) -> tuple[str, ...]:
    """A comma-separated option value as a tuple of its non-empty, stripped items."""
    return tuple(p.strip() for p in (text or "").split(",") if p.strip())


def option(options: Any, name: str) -> str | None:
    """An option by its camelCase name: Spark lower-cases option keys, Python callers may not."""
    return options.get(name.lower()) or options.get(name) or None
