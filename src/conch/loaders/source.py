"""What engines and data loaders read: a table named by object or URI, and a picklable scan.

Polars, DuckDB and PyTorch run Conch scans in places a `Table` cannot go: a Polars IO plugin
thread, a DataLoader worker started by `spawn`, another rank of a distributed job. A `ScanSpec`
is the scan as plain data (warehouse, table, column paths, filter, key predicate, time bounds,
level) with its commit time **pinned**, so every process reads the same table version even while
writers commit. `ScanSpec.table()` opens the table once per process (after a `fork` the child
connects afresh instead of sharing its parent's metastore connection).

>>> spec = ScanSpec.from_scan(t.scan("x", where=t["x"] > 1))  # doctest: +SKIP
>>> pickle.loads(pickle.dumps(spec)).scan().to_arrow()  # doctest: +SKIP
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from typing import Any

from conch.catalog import Catalog, connect
from conch.errors import ConchError
from conch.expr import Expr
from conch.keys import KeyPredicate
from conch.scan import Scan
from conch.scan.plan import to_time
from conch.scan.splits import Split
from conch.table import Table

_lock = threading.Lock()
_catalogs: dict[tuple[int, str], Catalog] = {}


def open_table(warehouse: str, name: str) -> Table:
    """The table `name` of `warehouse`, through one catalog per process and warehouse."""
    key = (os.getpid(), warehouse)
    with _lock:
        cat = _catalogs.get(key)
        if cat is None:
            cat = _catalogs[key] = connect(warehouse)
    return cat.table(name)


def open_split(split: Split) -> Scan:
    """`split.open()`, through this process's cached table: a data loader opens many splits per
    epoch, and a fresh connection would replay the table's log for each."""
    table = open_table(split.uri, split.table)
    scan = table.scan(
        *split.columns, where=split.where, keys=split.keys, asof=split.asof, since=split.since, level=split.level
    )
    restricted: Scan = split.restrict(scan)  # raises if its commit is no longer reachable by time
    return restricted


def resolve_table(source: Table | str | os.PathLike[str]) -> Table:
    """A `Table`, or a URI `<warehouse>/<table>` (the form Spark's `.load(path)` takes)."""
    if isinstance(source, Table):
        return source
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source).removeprefix("file://").rstrip("/")
        warehouse, name = os.path.dirname(path), os.path.basename(path)
        if not warehouse or not name:
            raise ConchError(f"{source!r} is not '<warehouse>/<table>': give a Table or a path like 'wh/audio'")
        return open_table(os.path.abspath(warehouse), name)
    raise ConchError(f"expected a conch.Table or a '<warehouse>/<table>' path, got {type(source).__name__}")


def pinned_time(table: Table, asof: Any = None) -> int:
    """`asof` as µs, or the table's newest commit time now: the version a whole run reads."""
    t = to_time(asof, "asof")
    return t if t is not None else table.state().time


@dataclass(frozen=True)
class ScanSpec:
    """A scan as picklable data, pinned to one commit time (`asof`)."""

    warehouse: str
    table_name: str
    columns: tuple[str, ...]  # full column paths
    level: str
    asof: int
    where: Expr | None = None  # over full column paths
    keys: KeyPredicate | None = None
    since: int | None = None

    @classmethod
    def from_scan(cls, scan: Scan) -> ScanSpec:
        """The spec of a built scan; a scan without `asof` is pinned to the version it planned."""
        p = scan.plan
        asof = p.asof if p.asof is not None else p.state.time
        return cls(
            warehouse=scan.source.uri,
            table_name=scan.source.name,
            columns=tuple(c.full_path for c in p.columns),
            level=p.level,
            asof=asof,
            where=p.filter,
            keys=p.key_predicate,
            since=p.since,
        )

    def table(self) -> Table:
        """The table, opened once per process."""
        return open_table(self.warehouse, self.table_name)

    def scan(self, keys: KeyPredicate | None = None, limit: int | None = None) -> Scan:
        """The scan (optionally narrowed to `keys`, which replace the spec's key predicate)."""
        return self.table().scan(
            *self.columns,
            where=self.where,
            keys=keys if keys is not None else self.keys,
            asof=self.asof,
            since=self.since,
            level=self.level or None,
            limit=limit,
        )

    def with_columns(self, columns: tuple[str, ...]) -> ScanSpec:
        return replace(self, columns=columns)
