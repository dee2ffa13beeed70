"""`Snapshot`: one version of a table, read from the metastore once; every read goes through one.

`Table.snapshot(asof, version)` reads the log once (`TableLog.pinned`) and returns an immutable
`Snapshot`: the table (id, name), the version (seq, commit time), its state, and how to reach
the warehouse (`conch.log.warehouse.Connection`: URIs, token, storage options). Scans
(`Snapshot.scan`; `Table.scan` is `table.snapshot(asof, version).scan(...)`), every level of one
nested query, splits, the Torch/Polars/DuckDB sources, Spark tasks, enrichment and
delete-by-filter all read through a Snapshot, never "the latest" twice (DESIGN §5a).

A Snapshot pickles as plain data (the connection, table id and name, seq, commit time and the
`asof` it was asked for) and `open_snapshot` reopens it in any process: the warehouse through
`conch.api.connection.reopen` (once per process, with exactly `connect()`'s options), the table
once per process and warehouse, and the state at the pinned seq (the table log's cache of past
states keeps it warm, so a data-loader worker that opens many splits loads it once).

>>> snap = t.snapshot()  # doctest: +SKIP
>>> t.write([{"id": 9, "x": 1.0}])  # doctest: +SKIP
>>> snap.scan("x").to_arrow()  # still the version it pinned  # doctest: +SKIP
>>> pickle.loads(pickle.dumps(snap)).seq == snap.seq  # doctest: +SKIP
True
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from conch.api.connection import reopen, table_log
from conch.errors import InvalidArgumentError, TableNotFoundError
from conch.files.blobfile import BlobFile
from conch.files.format import FragmentFormat
from conch.files.keycache import KeyCache
from conch.files.manifest import TableState
from conch.log.tablelog import TableLog
from conch.log.warehouse import Connection
from conch.model.schema import Schema
from conch.model.time import format_time
from conch.nested.api import as_filter
from conch.scan import Scan, ScanOptions
from conch.scan.blobfiles import open_one
from conch.scan.request import ScanRequest
from conch.search import SearchResult, search, search_text

__all__ = ["Snapshot", "open_snapshot"]


class Snapshot:
    """One version of a table (module doc). Get one from `Table.snapshot()`.

    >>> snap = t.snapshot()  # doctest: +SKIP
    >>> parents = snap.scan("v", level="").to_arrow()  # doctest: +SKIP
    >>> children = snap.scan("v", level="kids").to_arrow()  # the same version  # doctest: +SKIP
    """

    __slots__ = ("_asof", "_log", "_state")

    def __init__(self, log: TableLog, state: TableState, asof: int | None = None) -> None:
        self._log = log
        self._state = state
        self._asof = asof

    # ----- what it is -------------------------------------------------------------------
    @property
    def log(self) -> TableLog:
        """The table's log (commits of a run that read this snapshot go through it)."""
        return self._log

    @property
    def state(self) -> TableState:
        """The table state of this version (schema, live key spaces and fragments)."""
        return self._state

    @property
    def seq(self) -> int:
        """The version: the commit number it reads (0: the table had no commit)."""
        return self._state.seq

    @property
    def time(self) -> int:
        """The commit time of the version (µs since the epoch; 0 with seq 0)."""
        return self._state.time

    @property
    def asof(self) -> int | None:
        """The time the snapshot was taken as of (µs; None: the newest version then)."""
        return self._asof

    @property
    def name(self) -> str:
        return self._log.name

    @property
    def table_id(self) -> str:
        return self._log.id

    @property
    def connection(self) -> Connection:
        """How the warehouse is reached (what a pickled snapshot carries)."""
        return self._log.warehouse.connection

    def __repr__(self) -> str:
        when = format_time(self.time) if self.seq else "before the first commit"
        return f"Snapshot({self.name!r}, version {self.seq}, {when})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return (self.table_id, self.seq, self._asof, self.connection.key) == (
            other.table_id,
            other.seq,
            other._asof,
            other.connection.key,
        )

    def __hash__(self) -> int:
        return hash((self.table_id, self.seq, self._asof))

    # ----- pickling as plain data ---------------------------------------------------------
    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        self.connection.require_reopenable(f"pickling a snapshot of table {self.name!r}")
        return open_snapshot, (self.connection, self.table_id, self.name, self.seq, self.time, self._asof)

    # ----- what a scan reads (`conch.scan.api.ScanSource`) ----------------------------------
    @property
    def uri(self) -> str:
        return self._log.uri

    @property
    def format(self) -> FragmentFormat:
        return self._log.format

    @property
    def key_cache(self) -> KeyCache:
        return self._log.key_cache

    @property
    def scan_options(self) -> ScanOptions:
        return self._log.scan_options

    def view(self, since: int | None = None) -> TableState:
        """The state as a scan with lower time bound `since` (µs) reads it (`conch.log.sinceview`)."""
        return self._log.since_view(self._state, since)

    def scan(
        self,
        *columns: Any,
        where: Any = None,
        keys: Any = None,
        since: int | str | datetime | None = None,
        level: str | None = None,
        limit: int | None = None,
    ) -> Scan:
        """A lazy scan of this version's fresh records: the one door every scan goes through
        (`Table.scan` is `self.snapshot(asof, version).scan(...)`), taking the arguments of
        `Table.scan` without `asof`/`version` (the snapshot fixed them). `where` may be built
        with `t["x"]`, `t.x` or `_.x` (lowered here, `_` against the scanned level); `since` may
        be a tag name. The arguments are resolved once into a `conch.scan.request.ScanRequest`.
        No metastore read but one for a tag's commit time."""
        if isinstance(since, str) and since in self._log.cached_state().tags:  # a tag name
            since = self._log.time_of(self._log.cached_state().tags[since])
        where = as_filter(where, _VersionHandle(self), level)
        request = ScanRequest.resolve(self._state.schema, columns, where, keys, since, level, limit)
        return Scan(self, request)

    def search(
        self, query: Any, k: int = 10, column: str | None = None, where: Any = None, columns: list[str] | None = None
    ) -> SearchResult:
        """The `k` nearest fresh records of this version to `query` (a vector, or a matrix: `k`
        per query, with a `_query` column), with `_distance` (`conch.search.query`)."""
        return search(self, query, k, column, where, columns)

    def search_text(
        self, query: str, column: str | None = None, k: int = 10, where: Any = None, columns: list[str] | None = None
    ) -> SearchResult:
        """The `k` fresh records of this version ranked best by BM25 for `query`, with `_score`."""
        return search_text(self, query, column, k, where, columns)

    def open_blob(self, key: Any, column: str, level: str | None = None) -> BlobFile:
        """The value of binary `column` at `key` (a tuple: a nested `level`'s full key) as a
        read-only seekable file (`io.RawIOBase`) reading only the ranges asked for, each verified
        (`conch.files.blobfile`). Located by a scan of `keys=[key]`; `KeyNotFoundError` if the key
        has no record or no value there.

        >>> with snap.open_blob(7, "video") as f:  # doctest: +SKIP
        ...     f.seek(41 << 20)
        ...     head = f.read(1 << 20)
        """
        return open_one(self.scan(column, keys=[key], level=level), column, key)


@dataclass(frozen=True)
class _SchemaOf:
    tree: Schema


class _VersionHandle:
    """The table as the nested API resolves `_.x` against it (`conch.nested.nodes.TableHandle`):
    this snapshot's schema; it neither reads the latest version nor writes."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.name = snap.name

    @property
    def schema(self) -> _SchemaOf:
        return _SchemaOf(self.snap.state.schema)

    @property
    def key_schema(self) -> pa.Schema:
        return self.snap.state.schema.key_schema

    def state(self) -> TableState:
        return self.snap.state

    def snapshot(self, asof: Any = None, version: Any = None) -> Snapshot:
        return self.snap

    def write(
        self, data: Any = None, level: str | None = None, evolve: bool | None = None, progress: Any = None
    ) -> Any:
        raise InvalidArgumentError(f"a filter of a scan of {self.snap!r} cannot write")


def open_snapshot(
    connection: Connection, table_id: str, name: str, seq: int, time: int, asof: int | None = None
) -> Snapshot:
    """A snapshot in this process (what unpickling one calls): the warehouse reopened with
    exactly `connect()`'s options (`conch.api.connection.reopen`), the table opened once per
    process (`conch.api.connection.table_log`), and its state at `seq` (cached).
    `TableNotFoundError` if the table was dropped (a table created again under its name is
    another table)."""
    log = table_log(reopen(connection), name, table_id)
    state = log.known_state(seq) if seq else log.initial_state()
    if state is None:
        state, _ = log.pinned(version=seq)
    if state.time != time:
        raise TableNotFoundError(
            f"table {name!r}: version {seq} was committed at {format_time(state.time)}, the snapshot says "
            f"{format_time(time)}: the table was dropped and created again; take a new snapshot"
        )
    return Snapshot(log, state, asof)
