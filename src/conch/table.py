"""`Table`: a keyed, column-grouped table; writes, deletes, scans, history and manifests."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from conch import maintenance
from conch.check import CheckReport, check_table
from conch.expr import Col
from conch.integrity import open_json, read_snapshot
from conch.manifest import TableState
from conch.metastore.base import TableRecord
from conch.scan import Scan
from conch.scan.plan import to_time
from conch.schema import Schema, type_name
from conch.txn import Commit, commit
from conch.write import TableFiles, stage_delete, stage_write

if TYPE_CHECKING:
    from conch.catalog import Catalog

FLUSH_EVERY = 64  # WAL entries between automatic snapshot flushes


class TableColumn(Col):
    """A column reference bound to its table: `t["audio.bytes"]`, usable in `where=`."""

    __slots__ = ("table",)
    table: Table

    def __init__(self, table: Table, path: str) -> None:
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "table", table)

    def dtype(self) -> pa.DataType | None:
        """The column's type (None for a group), so comparisons are type-checked when built."""
        schema = self.table.state().schema
        return schema.column(self.path).type if schema.has_column(self.path) else None


class TableSchema:
    """A table's schema tree; prints in the style of spec/002."""

    def __init__(self, name: str, schema: Schema) -> None:
        self.name = name
        self.tree = schema

    def __str__(self) -> str:
        return self.tree.render(self.name)

    def __repr__(self) -> str:
        return str(self)

    def to_arrow(self) -> pa.Schema:
        """The schema as Arrow: key columns, then groups as structs and levels as lists."""
        return pa.schema([*self.tree.key_schema, *self.tree.arrow_schema()])

    @property
    def key_schema(self) -> pa.Schema:
        """The key columns of the root level (fixed at creation)."""
        return self.tree.key_schema

    @property
    def columns(self) -> list[str]:
        return [c.full_path for c in self.tree.columns]


class Table:
    """A Conch table. Get one from `Catalog.create_table` or `Catalog.table`.

    >>> t = conch.connect(path).create_table("audio", [("id", pa.uint64())])  # doctest: +SKIP
    >>> t.write([{"id": 1, "silence_ratio": 0.05}])  # doctest: +SKIP
    """

    def __init__(self, catalog: Catalog, record: TableRecord) -> None:
        self.catalog = catalog
        self.name = record.name
        self.id = record.id
        self._record = record
        self._lock = threading.Lock()
        self._state: TableState | None = None
        self._past: dict[int, TableState] = {}  # states at old sequence numbers, for time travel
        self.files = TableFiles(catalog.storage, self.id, catalog.format)

    def __repr__(self) -> str:
        return f"Table({self.name!r})"

    # ----- state ------------------------------------------------------------------------
    def _initial_state(self) -> TableState:
        props = open_json(self._record.props, f"the metastore record of table {self.name!r}")
        return TableState(Schema.from_json(props["schema"]))

    def _load(self, seq: int | None = None) -> TableState:
        """The state at `seq` (default: the newest): nearest snapshot, then the WAL after it."""
        ms = self.catalog.metastore
        snap = ms.latest_snapshot(self.id, seq)
        if snap is not None:
            state = TableState.from_json(read_snapshot(self.catalog.storage, snap[1]))
        else:
            state = self._initial_state()
        return state.replay(ms.read_log(self.id, state.seq, seq))

    def state(self) -> TableState:
        """The latest committed state (reads only the WAL entries new since the last call)."""
        with self._lock:
            if self._state is None:
                self._state = self._load()
            new = self.catalog.metastore.read_log(self.id, self._state.seq)
            if new:
                self._state = self._state.copy().replay(new)
            return self._state

    def state_at(self, asof: int | datetime | None) -> TableState:
        """The state as of a commit time: the files live then (cells newer than it are ignored)."""
        t = to_time(asof, "asof")
        latest = self.state()
        if t is None or t >= latest.time:
            return latest
        seq = self.catalog.metastore.seq_at_time(self.id, t)
        if seq == 0:
            # Before the first commit the table was empty; keep today's schema so columns resolve.
            return TableState(latest.schema)
        with self._lock:
            state = self._past.get(seq)
            if state is None:
                state = self._past[seq] = self._load(seq)
                if len(self._past) > 8:  # time-travel scans usually revisit a few commits
                    self._past.pop(next(iter(self._past)))
            return state

    def _after_commit(self, seq: int) -> None:
        if seq % FLUSH_EVERY == 0:
            maintenance.flush(self)

    # ----- schema -----------------------------------------------------------------------
    @property
    def schema(self) -> TableSchema:
        """The schema tree; `print(t.schema)` shows it as in spec/002."""
        return TableSchema(self.name, self.state().schema)

    @property
    def key_schema(self) -> pa.Schema:
        return self.state().schema.key_schema

    def __getattr__(self, name: str) -> Any:
        # The nested API's entry point (spec/002): `t.scenes` is a lazy reference to a level.
        if name.startswith("_"):
            raise AttributeError(name)
        from conch.nested.api import root_member

        return root_member(self, name)

    def __getitem__(self, path: str) -> TableColumn:
        schema = self.state().schema
        if path not in schema.key_names(""):  # key columns filter too (turned into key ranges)
            schema.resolve(path)  # raises ColumnNotFoundError early
        return TableColumn(self, path)

    # ----- writes -----------------------------------------------------------------------
    def write(self, data: Any = None, level: str | None = None) -> Any:
        """Upsert `data` (Arrow, list of dicts, dict of lists, pandas, Polars) in one commit.

        Key columns are required; any subset of value columns may be given; nested structs are
        column groups; `list<struct<$: K>>` fields are child levels. `level` writes rows of a
        child level directly (key columns: the level's full key, e.g. "scenes", "scenes.clips").
        Without `data`, returns a batching writer for `with t.write() as w: w.scenes["s1"].x = 1`
        (spec/002), committed once when the block exits.
        """
        if data is None:
            from conch.nested.writes import BatchWriter

            return BatchWriter(self)
        staged = stage_write(self.files, self.state(), data, level or "", self.catalog.write_options)
        rows = ", ".join(f"{n} rows at {lvl or 'root'}" for lvl, n in staged.rows.items())
        return commit(self, staged, "write", summary=rows or "no rows")

    def delete(self, keys: Any, level: str | None = None) -> Commit:
        """Delete keys (a list of values or tuples, or an Arrow table of key columns).

        Deleting a key removes its whole subtree of child levels.
        """
        staged = stage_delete(self.files, self.state(), keys, level or "")
        n = sum(op["rows"] for op in staged.ops)
        return commit(self, staged, "delete", summary=f"{n} keys at {level or 'root'}")

    # ----- reads ------------------------------------------------------------------------
    def scan(
        self,
        *columns: str | Col,
        where: Col | Any = None,
        keys: Any = None,
        asof: int | datetime | None = None,
        since: int | datetime | None = None,
        level: str | None = None,
        limit: int | None = None,
    ) -> Scan:
        """A lazy scan of fresh records (spec/000). Nothing is read until a `to_*` call.

        `columns`: column paths or groups (default: every column of the level); `where`: a value
        filter on fresh records; `keys`: exact keys, a `KeyRange` or a `KeyPrefix`; `asof` /
        `since`: inclusive commit-time bounds; `level`: a child level such as "scenes.clips".
        """
        return Scan(self, columns, where=where, keys=keys, asof=asof, since=since, level=level, limit=limit)

    def to_arrow(self) -> pa.Table:
        """Every fresh record of the root level as one Arrow table."""
        return self.scan().to_arrow()

    # ----- history and metadata ------------------------------------------------------------
    def history(self) -> list[Commit]:
        """Every commit, oldest first."""
        out = []
        for e in self.catalog.metastore.read_log(self.id):
            d = json.loads(e.entry)
            out.append(Commit(e.seq, e.time, d.get("kind", "write"), d.get("summary", "")))
        return out

    def manifests(self, asof: int | datetime | None = None) -> dict[str, pa.Table]:
        """Manifests as Arrow tables: `"key_spaces"`, then one per column group
        (`"<level>/<group>"`, root group `"/"`)."""
        state = self.state_at(asof)
        out = {"key_spaces": state.key_space_manifest()}
        for lvl in state.schema.levels:
            for g in state.schema.groups(lvl):
                out[f"{lvl}/{g}"] = state.fragment_manifest(lvl, g)
        return out

    def flush(self) -> int:
        """Fold the WAL into a snapshot file now; returns the snapshot's sequence number."""
        return maintenance.flush(self)

    def vacuum(self, older_than_seconds: float = 3600.0, dry_run: bool = False) -> maintenance.VacuumResult:
        """Remove files no commit references (leftovers of failed writers)."""
        return maintenance.vacuum(self, older_than_seconds, dry_run)

    def check(self) -> CheckReport:
        """Verify every live file and metastore row against its recorded checksum (`conch check`)."""
        cat = self.catalog
        return check_table(self.name, self.id, self._record.props, cat.metastore, cat.storage, cat.format)

    def describe(self) -> str:
        """A one-line summary: key, key spaces, fragments, log sequence."""
        state = self.state()
        keys = ", ".join(f"{f.name}: {type_name(f.type)}" for f in state.schema.key_schema)
        return f"{self.name} ({keys}) — {len(state.key_spaces)} key spaces, {len(state.fragments)} fragments, seq {state.seq}"
