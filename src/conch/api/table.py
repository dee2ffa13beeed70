"""`Table`: the user-facing facade of one table: writes, deletes, scans, schema changes, history.

A thin layer over `conch.log.tablelog.TableLog` (state, time travel, commits) and the write path
(`conch.write.stage`); it holds no state of its own.

Attribute access is the nested API's entry point (`t.scenes`, spec/002), so a column or level
named like a `Table` attribute (`name`, `id`, `log`, `schema`, `scan`, `select`, `where`, ...) is reached with
`t.col("name")` (nested API) or `t["name"]` (a column reference for `where=` and scans).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa

from conch.api.changes import Changes
from conch.api.delete_where import delete_where
from conch.api.snapshot import Snapshot
from conch.api.staging import StagingFace
from conch.api.update import update_where
from conch.errors import ColumnNotFoundError, InvalidArgumentError
from conch.expr.tree import Col, Expr
from conch.files.blobfile import BlobFile
from conch.files.manifest import IndexDef, TableState
from conch.log import branches as branch_ops
from conch.log.tablelog import TableLog
from conch.log.txn import Commit
from conch.log.wal import DropColumns, RemoveTag, RenameColumn, SetTag, Transaction
from conch.maintain import vacuum as maintenance
from conch.maintain.check import CheckReport, check_table
from conch.maintain.compaction import background
from conch.maintain.compaction.minor import MinorResult, minor_compact
from conch.maintain.compaction.plan import MaintenancePlan
from conch.maintain.compaction.run import CompactionResult, compact, maintenance_plan
from conch.maintain.expire import ExpireResult, OlderThan, expire_table
from conch.model.policy import Policy
from conch.model.schema import Schema, type_name
from conch.nested.api import as_filter, as_value, root_member, root_path
from conch.nested.writes import BatchWriter
from conch.scan import Scan
from conch.search import SearchResult, build_indexes, create_index, drop_index
from conch.search import describe as describe_indexes
from conch.write.blobinputs import swap_sources
from conch.write.stage import stage_delete, stage_write


class TableColumn(Col):
    """A column reference bound to its table: `t["audio.bytes"]`, usable in `where=`."""

    __slots__ = ("table",)
    table: Table

    def __init__(self, table: Table, path: str) -> None:
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "table", table)

    def dtype(self) -> pa.DataType | None:
        """The column's type (None for a group), so comparisons are type-checked when built
        (on the state the table handle read last: no metastore read; the scan checks again)."""
        schema = self.table.log.cached_state().schema
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


class Table(StagingFace):
    """A Conch table. Get one from `Catalog.create_table` or `Catalog.table`.

    >>> t = conch.connect(path).create_table("audio", [("id", pa.uint64())])  # doctest: +SKIP
    >>> t.write([{"id": 1, "silence_ratio": 0.05}])  # doctest: +SKIP

    A handle stays bound to the table it was opened on: after `drop_table`, its reads and writes
    raise `TableNotFoundError`, even if a table of the same name was created again.
    """

    def __init__(self, log: TableLog) -> None:
        self.log = log
        self.name = log.name
        self.id = log.id

    def __repr__(self) -> str:
        return f"Table({self.name!r})"

    # ----- state ------------------------------------------------------------------------
    def state(self) -> TableState:
        """The latest committed state (immutable: schema, live key spaces and fragments)."""
        return self.log.state()

    def state_at(self, asof: int | str | datetime | None = None, version: int | str | None = None) -> TableState:
        """The state as of a commit time or version (see `scan`)."""
        return self.log.state_at(asof, version)

    # ----- schema -----------------------------------------------------------------------
    @property
    def schema(self) -> TableSchema:
        """The schema tree; `print(t.schema)` shows it as in spec/002."""
        return TableSchema(self.name, self.state().schema)

    @property
    def key_schema(self) -> pa.Schema:
        return self.state().schema.key_schema

    @property
    def properties(self) -> dict[str, str]:
        """Text fixed with the table at creation (`Catalog.create_table(properties=...)`)."""
        return self.log.properties

    def __getattr__(self, name: str) -> Any:
        # The nested API's entry point (spec/002): `t.scenes` is a lazy reference to a level.
        if name.startswith("_"):
            raise AttributeError(name)
        return root_member(self, name)

    def select(self, *args: Any, **kwargs: Any) -> Any:
        """A nested select at the root level (spec/002): one row per root record.

        >>> t.select(cultivar=t.cultivar, n=t.scenes.count()).scan().to_arrow()  # doctest: +SKIP
        """
        return root_path(self).select(*args, **kwargs)

    def where(self, predicate: Any) -> Any:
        """The root level's rows that match `predicate` (a nested `Path`): `t.where(_.x > 1)`."""
        return root_path(self).where(predicate)

    def col(self, name: str) -> Any:
        """`t.<name>` for a name a `Table` attribute shadows: `t.col("name")`, `t.col("schema")`."""
        return root_member(self, name)

    def __getitem__(self, path: str) -> TableColumn:
        # checked on the state this handle read last (no metastore read while a query is built;
        # its scan reads the log once), and on the newest if the column is not in it
        schema = self.log.cached_state().schema
        if path not in schema.key_names("") and not schema.has_column(path):
            schema = self.state().schema
        if path not in schema.key_names(""):  # key columns filter too (turned into key ranges)
            schema.resolve(path)  # raises ColumnNotFoundError early
        return TableColumn(self, path)

    def rename_column(self, path: str, new_name: str) -> Commit:
        """Rename a column in place (metadata-only: files store column ids). `new_name` is the
        new leaf name (`"rate"`) or the full new path in the same group (`"audio.rate"`). Scans
        as of earlier times still see the old name.

        >>> t.rename_column("audio.sr", "rate")  # doctest: +SKIP
        """
        state = self.state()
        col = state.schema.column(path)
        renamed = state.schema.rename_column(path, new_name)  # validates before committing
        new_path = next(c.full_path for c in renamed.columns if c.id == col.id)
        txn = Transaction(
            "schema", (RenameColumn(col.id, new_path.rpartition(".")[2]),), f"rename {path} to {new_path}", state.seq
        )
        return self.log.commit(txn)

    def drop_columns(self, *paths: str) -> Commit:
        """Drop columns (metadata-only: their cells stay in files until compaction and are
        never read again; scans as of earlier times still see them). Key columns stay.

        >>> t.drop_columns("audio_length", "audio.meta.size")  # doctest: +SKIP
        """
        if not paths:
            raise InvalidArgumentError("drop_columns needs at least one column path")
        state = self.state()
        keys = set(state.schema.key_names(""))
        if keys & set(paths):
            raise ColumnNotFoundError(f"key columns {sorted(keys & set(paths))} cannot be dropped")
        ids = tuple(state.schema.column(p).id for p in paths)
        txn = Transaction("schema", (DropColumns(ids),), f"drop {', '.join(paths)}", state.seq)
        return self.log.commit(txn)

    # ----- writes -----------------------------------------------------------------------
    def write(
        self, data: Any = None, level: str | None = None, evolve: bool | None = None, progress: bool | None = None
    ) -> Any:
        """Upsert `data` (Arrow, list of dicts, dict of lists, pandas, Polars) in one commit.

        Key columns are required; any subset of value columns may be given; nested structs are
        column groups; `list<struct<$: K>>` fields are child levels. `level` writes rows of a
        child level directly (key columns: the level's full key, e.g. "scenes", "scenes.clips").
        `evolve`: whether columns the schema lacks are added (default: the catalog's, see
        `connect`); the commit's `added_columns` names them. Streamed input shows a progress bar
        on a terminal (`progress=False`: never). Without `data`, returns a batching
        writer for `with t.write() as w: w.scenes["s1"].x = 1` (spec/002), committed once when
        the block exits.
        """
        if data is None:
            return BatchWriter(self)
        wh = self.log.warehouse
        data, sources = swap_sources(data)  # large values given as files: streamed (conch.Blob)

        def stage() -> Transaction:
            staged = stage_write(
                self.log.files,
                self.state(),
                data,
                level or "",
                wh.write_options,
                wh.evolve if evolve is None else evolve,
                progress,
            )
            rows = ", ".join(f"{n} rows at {lvl or 'root'}" for lvl, n in staged.rows.items()) or "no rows"
            if staged.added_columns:
                rows += f"; added {', '.join(c.full_path for c in staged.added_columns)}"
            return staged.transaction("write", rows)

        with sources.active():
            done = self.log.transact(stage)
        if self.log.cached_state().indexes:  # a run large enough gets its index file now
            build_indexes(self.log)
        return done

    def delete(self, keys: Any = None, level: str | None = None, *, where: Expr | None = None) -> Commit:
        """Delete keys (a list of values or tuples, or an Arrow table of key columns), or with
        `where=` every key whose fresh record matches (`conch.api.delete_where`).

        Deleting a key removes its whole subtree of child levels.
        """
        if where is not None or keys is None:
            return delete_where(self, keys, as_filter(where, self, level), level)

        def stage() -> Transaction:
            staged = stage_delete(self.log.files, self.state(), keys, level or "")
            n = staged.rows.get(level or "", 0)
            return staged.transaction("delete", f"{n} keys at {level or 'root'}")

        return self.log.transact(stage)

    def update(
        self, where: Expr | None = None, set: Mapping[str, Any] | None = None, level: str | None = None
    ) -> Commit:
        """Set columns of the records matching `where` (None: every record), in one commit that
        writes only the named cells of the matched keys. `set`: column path → a value, a Conch
        expression over the record (`t["b"]`, `t["a"] > 0`, `t["price"] * 2`, `t.price * 2`), or a callable taking the matched
        records (Arrow) and returning an array. Evaluated on one version and committed directly
        after it, re-evaluated if another commit landed first (`conch.api.update`).

        >>> t.update(where=t["score"] < 0, set={"score": 0, "flag": t["kind"] == "x"})  # doctest: +SKIP
        """
        values = {path: as_value(v, self, level) for path, v in (set or {}).items()}
        return update_where(self, as_filter(where, self, level), values, level)

    # ----- reads ------------------------------------------------------------------------
    def open_blob(self, key: Any, column: str, level: str | None = None) -> BlobFile:
        """The value of binary `column` at `key` (a tuple for a nested `level`: its full key) as
        a read-only seekable file that reads only the ranges asked for (`Snapshot.open_blob`)."""
        return self.snapshot().open_blob(key, column, level)

    def snapshot(self, asof: int | str | datetime | None = None, version: int | str | None = None) -> Snapshot:
        """One version of the table, read from the metastore once: the newest (default), the one
        live at commit time `asof` (datetime, ISO string or µs, `conch.model.time`, or a tag name),
        or commit number `version` (or a tag name). Every scan of a snapshot reads that version, whatever is committed
        meanwhile; it pickles as plain data and reopens in any process with `connect()`'s
        options (`conch.api.snapshot`).

        >>> snap = t.snapshot()  # doctest: +SKIP
        >>> _ = t.write([{"id": 2, "x": 2.0}])  # a later commit ...  # doctest: +SKIP
        >>> snap.scan("x").to_arrow().num_rows  # ... is not in the snapshot  # doctest: +SKIP
        1
        >>> t.snapshot().scan("x").to_arrow().num_rows  # doctest: +SKIP
        2
        """
        state, at = self.log.pinned(asof, version)
        return Snapshot(self.log, state, at)

    def scan(
        self,
        *columns: str | Col,
        where: Col | Any = None,
        keys: Any = None,
        asof: int | str | datetime | None = None,
        since: int | str | datetime | None = None,
        level: str | None = None,
        limit: int | None = None,
        version: int | str | None = None,
    ) -> Scan:
        """A lazy scan of fresh records (spec/000). Nothing is read until a `to_*` call.

        `columns`: column paths or groups (default: every column of the level); `where`: a filter
        on fresh records, built from `t["x"]`, `t.x` or `_.x` (the same tree; terms on the first
        key column become a key range); `keys`: exact keys, a `KeyRange` or a `KeyPrefix`, whose
        values must convert exactly to the key types (`5.5` on an integer key raises
        `InexactKeyError`, it never matches key 5); `asof` /
        `since`: inclusive commit-time bounds (datetime, ISO string, or int µs since the epoch:
        `conch.model.time`); `version`: the table as of commit number N (`Commit.seq`) or a tag
        name (`tag`), instead of `asof` (`asof=`/`since=` also take a tag name); `level`: a child
        level such as "scenes.clips". An `asof` before the table's first commit raises
        `TimeTravelError`. The same as `self.snapshot(asof, version).scan(...)`: one metastore
        read, then the scan reads that one version.
        """
        return self.snapshot(asof, version).scan(
            *columns, where=where, keys=keys, since=since, level=level, limit=limit
        )

    def enrich(self, fn: Any, inputs: Any, into: str, **options: Any) -> Any:
        """Compute `fn(batch) -> new columns` over `inputs` and write them as group `into`,
        incrementally and resumably; see `conch.api.enrich` for the options."""
        from conch.api.enrich import enrich

        if options.get("where") is not None:  # t.x / _.x filters: the same tree as t["x"]
            options["where"] = as_filter(options["where"], self, options.get("level"))
        return enrich(self, fn, inputs, into, **options)

    def to_arrow(self, *, progress: bool | None = None) -> pa.Table:
        """Every fresh record of the root level as one Arrow table (`progress`: `Scan.to_arrow`)."""
        return self.scan().to_arrow(progress=progress)

    def changes(
        self,
        since: int | str | datetime,
        until: int | str | datetime | None = None,
        columns: Any = None,
        images: str = "after",
        per_commit: bool = False,
        level: str | None = None,
    ) -> Changes:
        """The keys whose fresh record differs between version `since` (exclusive) and `until`
        (default: the newest), with `_change` (insert/update/delete), `_version`, `_time` and the
        after image (`images="before_and_after"` adds `_before`; `"keys"`: none). `since`/`until`:
        versions, tag names or times. Net changes; `per_commit=True`: one row per key per commit.
        Cost follows the commits in the interval, not the table (`conch.api.changes`).

        >>> t.changes(since=40).to_pylist()  # doctest: +SKIP
        [{'id': 7, '_change': 'update', '_version': 42, '_time': ..., 'x': 1.5}]
        """
        return Changes(self.log, since, until, columns, images, per_commit, level)

    # ----- tags ---------------------------------------------------------------------------------
    def tag(self, name: str, version: int | str | None = None) -> Commit:
        """Name a version (default: the newest), e.g. the data a model was trained on: `version=`,
        `asof=`, `since=` and `changes()` accept the name; `expire` never makes it unreadable and
        `vacuum` keeps its files until `untag`. A tag is a commit of kind `"tag"` (`conch.log.wal.SetTag`).

        >>> t.tag("trained-2026-11")  # doctest: +SKIP
        >>> t.scan(version="trained-2026-11").to_arrow()  # doctest: +SKIP
        """
        if not isinstance(name, str) or not name or name.isdigit():
            raise InvalidArgumentError(f"tag name must be a non-empty string that is not a number, got {name!r}")
        state = self.log.state()
        if name in state.tags:
            raise InvalidArgumentError(
                f"table {self.name!r} already has tag {name!r} (version {state.tags[name]}); untag it first"
            )
        seq = state.seq if version is None else self.log.version_of(version)
        t = self.log.time_of(seq)  # validates the version
        if seq not in state.tags.values():
            self.log.check_retained(t, f"version {seq}")
        return self.log.commit(Transaction("tag", (SetTag(name, seq),), f"tag {name!r} → version {seq}", state.seq))

    def untag(self, name: str) -> Commit:
        """Remove a tag; a later `vacuum` reclaims the files only its version kept."""
        if self.log.tag_version(name) is None:
            self.log.version_of(name)  # raises TimeTravelError naming the tags there are
        return self.log.commit(Transaction("tag", (RemoveTag(name),), f"untag {name!r}", self.log.state().seq))

    def tags(self) -> dict[str, int]:
        """Tag name → version."""
        return self.log.tags()

    # ----- branches ----------------------------------------------------------------------------
    def branch(self, name: str, version: int | str | datetime | None = None) -> Table:
        """Branch `name` of this table at `version` (a version number, a tag name or a time;
        default the newest), or the existing branch of that name: a `Table` that reads and
        writes the branch (scan, write, delete, update, changes, compact, tag, expire, vacuum,
        history ...), named `"<table>@<name>"` (`catalog.table("t@x")` or
        `catalog.table("t", branch="x")` reopen it). It shares the table's files (nothing is
        copied); its commits are invisible on the table and the table's on it. Its versions
        count from 1, the base (`conch.log.branching`).

        >>> dev = t.branch("try-enrich")  # doctest: +SKIP
        >>> dev.update(set={"score": 0})  # doctest: +SKIP
        >>> t.fast_forward("try-enrich")  # doctest: +SKIP
        """
        return Table(branch_ops.create_branch(self.log, name, version))

    def branches(self) -> list[branch_ops.Branch]:
        """The table's branches, by name: name, base version, head version."""
        return branch_ops.list_branches(self.log)

    def drop_branch(self, name: str) -> None:
        """Forget a branch (`BranchNotFoundError` if there is none); handles to it then raise
        `TableNotFoundError`, and the next `vacuum` reclaims the files only it used. Like
        dropping a table, it takes an `admin` token on an HTTP metastore. Do not drop a branch
        while fast-forwarding to it: a vacuum in between may take the files the fast-forward adds."""
        branch_ops.drop_branch(self.log, name)

    def fast_forward(self, name: str) -> Commit:
        """Move this table to the head of branch `name` in one commit (the branch stays):
        afterwards the table reads exactly what the branch reads. Only while the table has
        changed no data since the branch point (or since its last fast-forward to this branch;
        maintenance commits do not count); else `CommitConflictError` naming both versions."""
        return branch_ops.fast_forward(self.log, name)

    # ----- history and metadata ------------------------------------------------------------
    def history(self, kind: str | Iterable[str] | None = None) -> list[Commit]:
        """Every commit, oldest first (with the columns each added): maintenance commits too
        (`compact`, also the automatic ones after a write; `flush`, `vacuum`, `expire`), so
        `history()[-2]` need not be the write before the last. `kind` keeps one kind or several
        (`"write"`, `("write", "delete")`), or a group: `"data"` (write, delete, enrich, schema)
        or `"maintenance"`.

        >>> t.history(kind="write")[-2]  # the write before the last  # doctest: +SKIP
        """
        return self.log.history(kind)

    def manifests(
        self, asof: int | str | datetime | None = None, version: int | str | None = None
    ) -> dict[str, pa.Table]:
        """Manifests as Arrow tables: `"key_spaces"`, then one per column group
        (`"<level>/<group>"`, root group `"/"`)."""
        state = self.log.state_at(asof, version)
        out = {"key_spaces": state.key_space_manifest()}
        for lvl in state.schema.levels:
            for g in state.schema.groups(lvl):
                out[f"{lvl}/{g}"] = state.fragment_manifest(lvl, g)
        return out

    # ----- LSM maintenance ------------------------------------------------------------------
    def compact(
        self, force: bool = True, policy: Policy | None = None, progress: bool | None = None
    ) -> CompactionResult:
        """Compact now. `force=True` (default): a major compaction of every key range with L0 runs
        or several runs (L0 + L1 → L1, tombstones applied and dropped), laid out as one write of
        its rows (one run per `Policy.max_l1_rows` piece of each partition), and folds of small
        neighbouring runs, in rounds until nothing is left: a second call rewrites nothing;
        `force=False`: only what the policy asks for (`maintenance_plan()`), without its
        automatic budget. `policy`: default the warehouse's (`connect(maintenance=...)`).
        Concurrent writes and deletes are never lost or undone (DESIGN §6).

        >>> t.compact()  # doctest: +SKIP
        """
        return compact(self.log, policy or self.log.warehouse.maintenance, force=force, progress=progress)

    def wait_for_maintenance(self, timeout: float | None = None) -> bool:
        """Settle now, and wait for, the background maintenance this process has pending for the
        table: after writes, the L0 runs left over L1 are folded in once the writer pauses for
        `Policy.settle_after` seconds (`conch.maintain.compaction.background`); this runs it without the
        pause. True when nothing is left pending; False if `timeout` seconds passed first.

        >>> for batch in batches:  # doctest: +SKIP
        ...     t.write(batch)
        >>> t.wait_for_maintenance()  # doctest: +SKIP
        """
        return background.wait(self.log, timeout)

    def compact_minor(self, level: str = "", runs: int | None = None) -> MinorResult | None:
        """Minor compaction: merge the newest `runs` key spaces of `level` (default all) into one
        and re-align every fragment to it through masks, rewriting no data file (cost: keys, not
        data bytes; `conch.maintain.compaction.minor`). None when it may not run (tombstones on the level,
        fragments already masked, fewer than two runs): `compact()` then."""
        return minor_compact(self.log, level, runs)

    def maintenance_plan(self, policy: Policy | None = None) -> MaintenancePlan:
        """What compaction would do now and why: LSM levels, runs, and tasks with their reasons
        (prints readably; `conch maintenance` on the CLI)."""
        return maintenance_plan(self.log, policy or self.log.warehouse.maintenance)

    def flush(self) -> int:
        """Fold the WAL into a snapshot file now; returns the snapshot's sequence number."""
        return self.log.flush()

    def vacuum(self, older_than_seconds: float = 3600.0, dry_run: bool = False) -> maintenance.VacuumResult:
        """Remove files no commit references (leftovers of failed writers) and, once the grace
        period (`older_than_seconds`, a number of seconds) has passed since an `expire`, the files
        only expired states referenced; the result reports what was reclaimed and what the grace
        period held back (`conch.maintain.vacuum`)."""
        return maintenance.vacuum(self.log, older_than_seconds, dry_run)

    def expire(self, older_than: OlderThan | None = None, retain_last: int | None = None) -> ExpireResult:
        """Expire time travel before a point: `older_than` (an age before now: a duration such as
        `"7d"`, `"12h"`, `"90s"` or a `timedelta`; or a point in time: an int of µs since the
        epoch as `Commit.time` shows it, a datetime, an ISO time; `conch.model.time.to_cutoff`)
        and/or `retain_last=N` (keep the newest N versions readable). The horizon moves forward only and never past the newest
        commit; `asof`/`version` before it raise `TimeTravelError`. A later `vacuum` reclaims
        the files only expired states referenced (`conch.maintain.expire`).

        >>> t.expire(older_than="7d")  # doctest: +SKIP
        >>> t.vacuum()  # doctest: +SKIP
        """
        return expire_table(self.log, older_than, retain_last)

    def check(self) -> CheckReport:
        """Verify every live file and metastore row against its recorded checksum (`conch check`)."""
        wh = self.log.warehouse
        return check_table(self.name, self.id, self.log.record.props, wh.metastore, wh.storage, wh.format)

    def describe(self) -> str:
        """A summary: key, key spaces, fragments, log sequence; then one line per index."""
        state = self.state()
        keys = ", ".join(f"{f.name}: {type_name(f.type)}" for f in state.schema.key_schema)
        line = f"{self.name} ({keys}) — {len(state.key_spaces)} key spaces, {len(state.fragments)} fragments, seq {state.seq}"
        return "\n".join([line, *(f"  index {i}" for i in describe_indexes(state))])

    # ----- search (`conch.search`, docs/search.md) ---------------------------------------------
    def create_index(
        self,
        column: str,
        kind: str = "vector",
        metric: str = "cosine",
        name: str | None = None,
        index: str = "flat",
        **options: Any,
    ) -> Commit:
        """Declare a search index on `column`: `kind="vector"` (a fixed-size list of floats;
        `metric` "cosine", "l2" or "dot"; `index` "flat" (exact), "hnsw" (`m`, `ef_construction`,
        `ef_search`) or "ivf" (`nlist`, `nprobe`)) or `kind="text"` (BM25). Committed through the
        WAL; files are built per run by `build_indexes()` and compaction.

        >>> t.create_index("emb", metric="l2", index="hnsw")  # doctest: +SKIP
        """
        return create_index(self.log, column, kind, metric, name, index, **options)

    def drop_index(self, name: str) -> Commit:
        """Forget an index (its files go with a later `vacuum`)."""
        return drop_index(self.log, name)

    def indexes(
        self, asof: int | str | datetime | None = None, version: int | str | None = None
    ) -> dict[str, IndexDef]:
        """Index name → definition, as of now or `asof`/`version`."""
        return dict(self.log.state_at(asof, version).indexes.items())

    def build_indexes(self, names: list[str] | None = None, min_rows: int | None = None) -> Commit | None:
        """Build the index files runs lack (runs of at least `min_rows` rows; smaller ones are
        searched exactly), in one commit; None if none was missing."""
        return build_indexes(self.log, None, names, min_rows)

    def search(
        self,
        query: Any,
        k: int = 10,
        column: str | None = None,
        where: Col | Any = None,
        columns: list[str] | None = None,
        asof: int | str | datetime | None = None,
        version: int | str | None = None,
    ) -> SearchResult:
        """The `k` nearest fresh records to `query` (a vector; a matrix gives `k` per query with
        `_query`), nearest first with `_distance`; `where` filters fresh records exactly.

        >>> t.search(vec, k=10, where=t["label"] == "cat", columns=["label"]).to_pandas()  # doctest: +SKIP
        """
        snap = self.snapshot(asof, version)
        level = self._index_level(snap, column, "vector")
        return snap.search(query, k, column, as_filter(where, self, level), columns)

    def search_text(
        self,
        query: str,
        column: str | None = None,
        k: int = 10,
        where: Col | Any = None,
        columns: list[str] | None = None,
        asof: int | str | datetime | None = None,
        version: int | str | None = None,
    ) -> SearchResult:
        """The `k` fresh records ranked best by BM25 for `query` (tantivy's query syntax), with `_score`.
        Scores are over the whole fresh corpus; `where` selects which records are returned.

        >>> t.search_text("red car", column="caption", k=10).to_pylist()  # doctest: +SKIP
        """
        snap = self.snapshot(asof, version)
        level = self._index_level(snap, column, "text")
        return snap.search_text(query, column, k, as_filter(where, self, level), columns)

    @staticmethod
    def _index_level(snap: Snapshot, column: str | None, kind: str) -> str | None:
        found = [i.level for i in snap.state.indexes.values() if i.kind == kind and column in (None, i.column, i.name)]
        return found[0] if found else None
