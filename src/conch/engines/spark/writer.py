"""Writes from Spark: `df.write.format("conch").mode("append" | "overwrite").save(path)`.

A write job is one Conch transaction (DESIGN §4):

1. **`writer()`** (driver host, before any task runs) resolves the table, compares the
   DataFrame's schema with the table's and fails with `SchemaError` on an unknown column or a
   type with no checked cast. With `.option("mergeSchema", "true")` unknown columns are added
   instead, in one schema commit made here, before the data (if the job then fails, the table
   keeps the new, empty columns: harmless, and the next write needs no schema change). A
   missing table is created when `.option("key", "id[,...]")` names its key columns.
2. **`write()`** (each task) casts its Arrow batches to the table's types and calls
   `stage_write`: sorted runs (key space + fragments) under fresh file ids, nothing committed.
   On any error it deletes the files it wrote, because Spark gives `abort()` no message for a
   failed task.
3. **`commit()`** (driver host, once) checks that no key was written by two tasks, then
   appends ONE WAL entry with every task's operations (`truncate` first for overwrite).
   **`abort()`** deletes the files of the tasks that finished.

Keys across tasks: a commit's rows have no order, so a key written by two tasks has no winner:
`commit()` raises `DuplicateKeyError` and deletes the job's files, the same rule as
`Table.write`. It only reads keys where two tasks' runs overlap, so a range-partitioned
DataFrame (`df.repartitionByRange(n, "id")`, what `conch.apps.pipelines.ingest` does) costs nothing
to check, and its runs are disjoint, which also makes later reads a zip instead of a merge.

Options: `level` (write rows of a child level: the DataFrame holds the level's full key, e.g.
`id`, `scenes`), `mergeSchema`, `key`, `chunkRows` (rows per sorted run, bounds task memory),
`autoCompact` (default `true`: the commit runs the warehouse policy's automatic compaction, as
`Table.write` does; `false`: the job only commits, like `Policy(auto=False)` for this one write,
and the next maintained commit, the background settle or `compact()` catches up).

>>> df.write.format("conch").mode("append").option("mergeSchema", "true").save("wh/audio")  # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from conch.engines.spark.common import Location, flag_option, forget_table, open_table, option, split_list
from conch.engines.spark.types import arrow_schema, cast_batch, write_type
from conch.errors import CommitStateUnknownError, SchemaError, TableNotFoundError
from conch.files.blobs import BLOB_SUFFIX
from conch.files.layout import TableFiles
from conch.files.storage import new_id
from conch.log.wal import AddFragment, AddKeySpace, Op, Truncate
from conch.model.budget import WriteOptions
from conch.model.keys import check_unique_sorted
from conch.model.schema import CHILD_KEY, Schema, is_child_level_type, join_path, normalize_type
from conch.write.stage import StagedWrite, stage_write

SPARK_CHUNK_ROWS = 1 << 23


@dataclass
class ConchCommitMessage(WriterCommitMessage):
    """What one task wrote: WAL operations and files (JSON-serialisable, pickled to `commit()`)."""

    ops: list[Op] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    partition: int = -1
    attempt: int = 0
    base_seq: int = -1  # the version the task staged on, read before it wrote a file
    started: float = 0.0  # before the task wrote a file (the vacuum rule's start)


# ----- driver side: validate, evolve, create -------------------------------------------------
def prepare_writer(options: dict[str, str], schema: StructType, overwrite: bool) -> ConchWriter:
    loc = Location.from_options(options)
    level = option(options, "level") or ""
    merge = flag_option(options, "mergeSchema", default=False)
    df_schema = arrow_schema(schema)
    forget_table(loc)  # the planner worker may hold a stale table object
    try:
        table = open_table(loc)
    except TableNotFoundError:
        keys = split_list(option(options, "key"))
        if not keys:
            raise TableNotFoundError(
                f"no Conch table at {loc.path!r}: create it first, or pass .option('key', 'id') "
                "to create it from the DataFrame's schema"
            ) from None
        table = _create(loc, df_schema, keys)
    state = table.state()
    target, unknown = target_schema(df_schema, state.schema, level)
    if unknown:
        if not merge:
            raise SchemaError(
                f"table {table.name!r} has no columns {unknown}; add them with .option('mergeSchema', 'true') "
                "or drop them from the DataFrame"
            )
        new_fields = _unknown_fields(df_schema, state.schema, level)
        new_schema, added = state.schema.extend(new_fields, level)
        staged = StagedWrite(new_schema, state.schema, added, base_seq=state.seq)
        table.commit(staged.transaction("schema", f"add columns {[c.full_path for c in added]} (Spark mergeSchema)"))
        state = table.state()
        target, unknown = target_schema(df_schema, state.schema, level)
    chunk_rows = int(option(options, "chunkRows") or 0)
    maintain = flag_option(options, "autoCompact", default=True)
    opts = table.write_options
    # One sorted run per task where memory allows (runs stay bounded by `chunk_bytes`): fewer,
    # larger runs make reads zip fewer key spaces and cut read partitions at run starts.
    opts = replace(opts, chunk_rows=chunk_rows or max(opts.chunk_rows, SPARK_CHUNK_ROWS))
    return ConchWriter(loc, level, target, overwrite, opts, state.seq, maintain)


def _create(loc: Location, df_schema: pa.Schema, keys: tuple[str, ...]) -> Any:
    missing = [k for k in keys if k not in df_schema.names]
    if missing:
        raise SchemaError(f"key columns {missing} are not in the DataFrame (columns: {df_schema.names})")
    key_schema = pa.schema([_key_field(df_schema.field(k)) for k in keys])
    values = pa.schema([f for f in df_schema if f.name not in keys])
    loc.connect().create_table(loc.table, key_schema, values, exist_ok=True)
    forget_table(loc)
    return open_table(loc)


def _key_field(f: pa.Field) -> pa.Field:
    """Spark reads Parquet's unsigned 64-bit integers as decimal(20, 0); keys cannot be decimals."""
    t = f.type
    if pa.types.is_decimal(t) and t.scale == 0:
        return f.with_type(pa.uint64() if t.precision == 20 else pa.int64())
    return f


def target_schema(df: pa.Schema, schema: Schema, level: str) -> tuple[pa.Schema, list[str]]:
    """The DataFrame's schema with every leaf typed as the table's column, and the column
    paths the table does not have. Raises `SchemaError` for missing keys and impossible casts."""
    if level not in schema.levels:
        raise SchemaError(f"no level {level!r}; levels: {sorted(schema.levels)}")
    keys = schema.key_fields(level)
    names = [k.name for k in keys]
    missing = [n for n in names if n not in df.names]
    if missing:
        raise SchemaError(
            f"the DataFrame lacks key columns {missing}; writing level {level or '<root>'!r} needs {names}"
        )
    unknown: list[str] = []
    fields = []
    for f in df:
        if f.name in names:
            kt = keys[names.index(f.name)].type
            fields.append(f.with_type(write_type(f.type, kt, f.name)))
        else:
            fields.append(f.with_type(_target(f.type, schema, level, f.name, unknown)))
    return pa.schema(fields), unknown


def _target(t: pa.DataType, schema: Schema, level: str, path: str, unknown: list[str]) -> pa.DataType:
    full = join_path(level, path)
    if is_child_level_type(t):
        child = full
        if child not in schema.levels:
            unknown.append(full)
            return t
        subs = []
        for sub in t.value_type:
            if sub.name == CHILD_KEY:
                subs.append(sub.with_type(write_type(sub.type, schema.levels[child].own_key[0].type, f"{full}.$")))
            else:
                subs.append(sub.with_type(_target(sub.type, schema, child, sub.name, unknown)))
        return pa.list_(pa.struct(subs))
    if pa.types.is_struct(t) and not schema.has_column(full):
        return pa.struct([s.with_type(_target(s.type, schema, level, f"{path}.{s.name}", unknown)) for s in t])
    if not schema.has_column(full):
        unknown.append(full)
        return t
    return write_type(t, schema.column(full).type, full)


def _unknown_fields(df: pa.Schema, schema: Schema, level: str) -> list[pa.Field]:
    """The DataFrame's fields pruned to the leaves the table lacks (structure kept), for `extend`."""

    def prune(f: pa.Field, path: str) -> pa.Field | None:
        if pa.types.is_struct(f.type) and not schema.has_column(join_path(level, path)):
            subs = [s for s in (prune(c, f"{path}.{c.name}") for c in f.type) if s is not None]
            return f.with_type(pa.struct(subs)) if subs else None
        if schema.has_column(join_path(level, path)):
            return None
        return f.with_type(normalize_type(f.type))

    keys = set(schema.key_names(level))
    out = [prune(f, f.name) for f in df if f.name not in keys]
    return [f for f in out if f is not None]


# ----- tasks and commit -----------------------------------------------------------------------
class _RecordingFiles(TableFiles):
    """`TableFiles` that names every file after the job (`<job>-<id>.vortex`) and remembers the
    paths it hands out, so a failed task, `abort()` and `commit()` can find the job's files."""

    def __init__(self, files: TableFiles, job: str) -> None:
        super().__init__(files.storage, files.table_id, files.format, files.partition_keys)
        self.job = job
        self.handed_out: list[str] = []

    def _tag(self, path: str) -> str:
        head, _, name = path.rpartition("/")
        return f"{head}/{self.job}-{name}"

    def key_space_path(self, ks_id: str) -> str:
        p = self._tag(super().key_space_path(ks_id))
        self.handed_out.append(p)
        return p

    def fragment_path(self, level: str, group: str, frag_id: str) -> str:
        p = self._tag(super().fragment_path(level, group, frag_id))
        self.handed_out += [p, p + BLOB_SUFFIX]
        return p


def remove_files(table: Any, paths: list[str]) -> None:
    for p in paths:
        table.storage.delete(p)
        table.storage.delete(p + BLOB_SUFFIX)


def job_files(table: Any, job: str) -> list[str]:
    """Every file of the table written by tasks of `job` (any attempt)."""
    return [f.path for f in table.storage.list(table.id) if f.path.rpartition("/")[2].startswith(job + "-")]


def _abort_marker(table: Any, job: str) -> str:
    return f"{table.id}/_spark_jobs/{job}.aborted"


class ConchWriter(DataSourceArrowWriter):
    """Pickled to every task and to the commit worker; holds only options and the target schema."""

    def __init__(
        self,
        loc: Location,
        level: str,
        target: pa.Schema,
        overwrite: bool,
        opts: WriteOptions,
        base_seq: int = -1,
        maintain: bool = True,
    ) -> None:
        self.job = new_id()  # names this job's files: abort() finds tasks' files it has no message for
        # Before any task wrote a file: a vacuum with a later cutoff conflicts with the commit.
        self.started = time.time()
        self.base_seq = base_seq
        self.loc = loc
        self.level = level
        self.target = target
        self.overwrite = overwrite
        self.opts = opts
        self.maintain = maintain  # option autoCompact

    def write(self, iterator: Any) -> ConchCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        table = open_table(self.loc)
        files = _RecordingFiles(table.files, self.job)
        batches = (cast_batch(b, self.target) for b in iterator)
        state, started = table.state(), time.time()  # both before this task writes a file
        try:
            reader = pa.RecordBatchReader.from_batches(self.target, batches)
            staged = stage_write(files, state, reader, self.level, self.opts, evolve=False)
        except BaseException:
            remove_files(table, files.handed_out)
            raise
        # A task that outlives its job's abort (Spark aborts while cancelled tasks still run)
        # removes its own files: it wrote them all before looking, so either abort() listed
        # them or this check sees abort()'s marker.
        if table.storage.exists(_abort_marker(table, self.job)):
            remove_files(table, files.handed_out)
        return ConchCommitMessage(
            staged.ops,
            staged.files,
            staged.rows,
            ctx.partitionId() if ctx else -1,
            ctx.attemptNumber() if ctx else 0,
            state.seq,
            started,
        )

    def commit(
        self, messages: list[Any], extra: dict[str, Any] | None = None, summary: str = "Spark", from_tasks: bool = False
    ) -> None:
        """One WAL entry for the job; `extra`: more to record in it (a streaming sink's batch id).
        `from_tasks`: this writer was made after the tasks wrote (a streaming sink's commit:
        Spark builds a new writer for it), so the transaction's base version and start are the
        earliest the tasks recorded before writing, and a vacuum logged after any task began
        conflicts with the commit (`conch.log.wal.conflicts`) instead of racing its file check."""
        forget_table(self.loc)
        table = open_table(self.loc)
        done = [m for m in messages if m is not None]
        files = [f for m in done for f in m.files]
        try:
            check_disjoint(table, done)
            state = table.state()
            ops = [op for m in done for op in m.ops]
            if self.overwrite:
                ops = [Truncate(), *ops]
            rows: dict[str, int] = {}
            for m in done:
                for lvl, n in m.rows.items():
                    rows[lvl] = rows.get(lvl, 0) + n
            what = ", ".join(f"{n} rows at {lvl or 'root'}" for lvl, n in rows.items()) or "no rows"
            base_seq, started = self.base_seq, self.started
            if from_tasks and done:
                base_seq, started = min(m.base_seq for m in done), min(m.started for m in done)
            staged = StagedWrite(state.schema, state.schema, [], ops, files, rows, base_seq=base_seq, started=started)
            kind = "overwrite" if self.overwrite else "write"
            txn = staged.transaction(
                kind, f"{summary} {kind}: {what} from {len(done)} tasks", rows=rows, **(extra or {})
            )
            table.commit(txn, maintain=self.maintain)
        except CommitStateUnknownError:
            raise  # the entry may be in the log: its files must stay
        except BaseException:
            remove_files(table, files + job_files(table, self.job))
            raise
        # Files of failed or speculative task attempts that no message names are garbage now.
        committed = set(files)
        remove_files(table, [p for p in job_files(table, self.job) if p.removesuffix(BLOB_SUFFIX) not in committed])

    def abort(self, messages: list[Any]) -> None:
        table = open_table(self.loc)
        table.storage.write(_abort_marker(table, self.job), b"")
        paths = [f for m in messages if m is not None for f in m.files]
        remove_files(table, paths + job_files(table, self.job))


def check_disjoint(table: Any, messages: list[ConchCommitMessage]) -> None:
    """Raise `DuplicateKeyError` if two tasks wrote the same key (of a run holding cells).

    Only runs whose key spans overlap another task's are read; range-partitioned jobs read none.
    """
    with_cells = {op.fragment.key_space for m in messages for op in m.ops if isinstance(op, AddFragment)}
    runs = [
        (op.key_space.level, op.key_space.min_key, op.key_space.max_key, i, op.key_space)
        for i, m in enumerate(messages)
        for op in m.ops
        if isinstance(op, AddKeySpace) and op.key_space.kind == "data" and op.key_space.id in with_cells
    ]
    runs.sort()
    clusters: list[list[tuple[Any, ...]]] = []
    for r in runs:
        last = clusters[-1] if clusters else None
        if last and last[0][0] == r[0] and r[1] <= max(x[2] for x in last):
            last.append(r)
        else:
            clusters.append([r])
    state = table.state()
    for cluster in clusters:
        if len({r[3] for r in cluster}) < 2:
            continue  # one task's runs: stage_write already checked them
        fields = state.schema.key_fields(cluster[0][0])
        keys = pa.concat_tables([table.key_cache.keys(r[4], fields) for r in cluster])
        order = pc.sort_indices(keys, [(f.name, "ascending") for f in fields])
        check_unique_sorted(keys.take(order))


def committed_rows(table: Any, seq: int) -> dict[str, int]:
    """Rows per level that the Spark commit at `seq` wrote (recorded in its WAL entry)."""
    for s, _, entry in table.entries(seq - 1, seq):
        if s == seq:
            return dict(entry.extra.get("rows", {}))
    return {}
