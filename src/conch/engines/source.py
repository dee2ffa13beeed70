"""What engines and data loaders read: a table named by object or URI, and a picklable scan.

Polars, DuckDB and PyTorch run Conch scans in places a `Table` cannot go: a Polars IO plugin
thread, a DataLoader worker started by `spawn`, another rank of a distributed job. A `ScanSpec`
is the scan as plain data: its `conch.api.snapshot.Snapshot` (the table version, and how to reach
the warehouse: URIs, token, storage options) and its arguments (column paths, filter, key
predicate, lower time bound, level: a `conch.scan.request.ScanRequest`). Every process reads the same table version even while
writers commit, and opens the warehouse exactly as `connect()` did (`conch.api.connection.reopen`,
once per process; after a `fork` the child connects afresh).

>>> spec = ScanSpec.from_scan(t.scan("x", where=t["x"] > 1))  # doctest: +SKIP
>>> pickle.loads(pickle.dumps(spec)).scan().to_arrow()  # doctest: +SKIP
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from conch.api.connection import local_uri, reopen, table_log
from conch.api.snapshot import Snapshot
from conch.api.table import Table
from conch.errors import ConchError, InvalidArgumentError
from conch.expr.tree import Expr
from conch.log.warehouse import Connection
from conch.model.keys import KeyPredicate
from conch.scan import Scan, Split
from conch.scan.filter import and_all
from conch.scan.request import ScanRequest


def open_table(warehouse: str, name: str) -> Table:
    """The table `name` of the warehouse at path or URI `warehouse` (default metastore), through
    one opened warehouse per process (`conch.api.connection.reopen`)."""
    return Table(table_log(reopen(Connection(local_uri(warehouse))), name))


def open_split(split: Split) -> Scan:
    """`split.open()`: the split's snapshot reopened once per process (a data loader opens many
    splits per epoch), scanned over its key range."""
    scan: Scan = split.open()
    return scan


def resolve_snapshot(source: Table | Snapshot | str | os.PathLike[str], asof: Any = None) -> Snapshot:
    """The table version an engine source reads: a `Snapshot` as given (then no `asof`), else
    a snapshot of the table (or `<warehouse>/<table>` URI) as of `asof` (default: the newest)."""
    if isinstance(source, Snapshot):
        if asof is not None:
            raise InvalidArgumentError("a Snapshot is one version already: give asof= to Table.snapshot() instead")
        return source
    return resolve_table(source).snapshot(asof)


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


@dataclass(frozen=True)
class ScanSpec:
    """A scan as picklable data: its table version (`snapshot`) and its resolved arguments
    (`request`, a `conch.scan.request.ScanRequest`), nothing else."""

    snapshot: Snapshot
    request: ScanRequest

    @classmethod
    def from_scan(cls, scan: Scan) -> ScanSpec:
        """The spec of a built scan (of the version it planned)."""
        snapshot = scan.source
        assert isinstance(snapshot, Snapshot)
        return cls(snapshot, scan.request)

    @property
    def table_name(self) -> str:
        return self.snapshot.name

    @property
    def warehouse(self) -> str:
        return self.snapshot.uri

    @property
    def level(self) -> str:
        return self.request.level

    @property
    def keys(self) -> KeyPredicate | None:
        """The scan's own `keys=`."""
        return self.request.keys

    @property
    def asof(self) -> int:
        """The pinned time (µs): the scan's `asof`, else its version's commit time."""
        return self.snapshot.asof if self.snapshot.asof is not None else self.snapshot.time

    def scan(self, keys: KeyPredicate | None = None, limit: int | None = None) -> Scan:
        """The scan (optionally narrowed to `keys`, which replace the spec's key predicate)."""
        return Scan(self.snapshot, self.request.replace(keys=keys if keys is not None else self.keys, limit=limit))

    def rescan(self, *columns: str, where: Expr | None = None, limit: int | None = None) -> Scan:
        """The scan of other `columns` (relative to the level) with `where` added to its filter,
        through the one door (`Snapshot.scan`): what an engine's pushdown asks for."""
        return self.snapshot.scan(
            *columns,
            where=and_all([*self.request.filter.terms, *([where] if where is not None else [])]),
            keys=self.keys,
            since=self.request.since,
            level=self.level or None,
            limit=limit,
        )

    def with_columns(self, columns: tuple[str, ...]) -> ScanSpec:
        """The spec projecting other `columns` (full paths)."""
        return replace(self, request=self.request.replace(columns=columns))

    def without_filter(self) -> ScanSpec:
        """The spec of every record of the version (no filter, no `keys=`)."""
        return replace(self, request=self.request.replace(key_terms=(), value_terms=(), keys=None))
