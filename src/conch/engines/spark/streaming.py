"""Change feeds on Spark: batch reads of `Table.changes`, a Structured Streaming source, and a
streaming sink (the `conch` data source, `conch.engines.spark.source`, delegates here).

**Batch** (`spark.read.format("conch").option("changesSince", v)`): the DataFrame is
`Table.changes(since=v, until=<the version at load>)`: key columns, `_change`, `_version`, `_time`
and the images. Options: `changesSince` (a version, a tag or an ISO time), `changesUntil`,
`images` (`after` | `before_and_after` | `keys`), `perCommit` (`true`: a row per key per commit),
`columns`, `level`.

**Streaming source** (`spark.readStream.format("conch").option("changesSince", v)`): offsets are
table versions (`{"version": n}`); the stream starts after version `changesSince` (`0`: the
whole table arrives first, as inserts; `latest`: only commits after the query starts), and each
micro-batch is the changes of its version interval `(start, end]`, one read task. Restarted from
its checkpoint, Spark replays the offsets it logged, so every change is read exactly once across
micro-batches: with `perCommit=true` the union of the micro-batches is exactly
`changes(start, end, per_commit=True)`; in net mode (default) a key changed in two micro-batches
appears in both, each with its net change then. `maxVersionsPerTrigger` bounds a micro-batch.
The stream keeps the columns it started with, whatever the table's schema does while it runs:
they are followed by column id, so a column renamed since keeps its starting name in the stream
(with its values), a dropped one reads null, and a column added since is not read. A query
restarted (from its checkpoint or anew) gets the columns of the table then.

**Streaming sink** (`df.writeStream.format("conch").option("checkpointLocation", c).start(path)`):
one Conch commit per micro-batch (the batch writer's tasks and commit, `conch.engines.spark.writer`). A
micro-batch Spark runs again after a failure (same batch id: the commit landed, the checkpoint
did not record it) commits nothing the second time: the commit records `{"stream": id, "batch":
n}` in its WAL entry's `extra`, the sink checks for it before committing (reading the log back only
to the stream's previous micro-batch), and a concurrent attempt with the same mark conflicts
(`conch.log.wal.conflicts`). The stream id is the `streamId` option, else
the checkpoint location. With `applyChanges=true` the sink applies a change feed: rows whose
`_change` is `delete` become tombstones, the others upserts, and the change columns are not
written (a mirror of the source table: net mode, so a key appears once per micro-batch).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from conch.api.changes import Changes
from conch.engines.spark.common import Location, flag_option, open_table, option, split_list
from conch.engines.spark.types import arrow_schema, cast_batch, spark_schema
from conch.engines.spark.writer import ConchCommitMessage, ConchWriter, job_files, prepare_writer, remove_files
from conch.errors import CommitConflictError, InvalidArgumentError
from conch.write.stage import stage_delete

CHANGE_COLUMNS = ("_change", "_version", "_time", "_before")


def wants_changes(options: Any) -> bool:
    """Whether a read is of changes (the `changesSince` option)."""
    return option(options, "changesSince") is not None


def _changes(options: Any, since: int, until: int) -> Changes:
    table = open_table(Location.from_options(options))
    return table.changes(
        since,
        until,
        columns=list(split_list(option(options, "columns"))) or None,
        images=option(options, "images") or "after",
        per_commit=flag_option(options, "perCommit", default=False),
        level=option(options, "level"),
    )


def _version(table: Any, text: str | None, what: str) -> int:
    if text is None or text == "latest":
        return int(table.state().seq)
    return table.resolve_version(int(text) if text.isdigit() else text, what)


# ----- batch ----------------------------------------------------------------------------------
def changes_pin(options: Any) -> tuple[int, int]:
    """(since, until) versions of a batch read of changes, fixed when the DataFrame is loaded."""
    table = open_table(Location.from_options(options))
    return _version(table, option(options, "changesSince"), "changesSince"), _version(
        table, option(options, "changesUntil"), "changesUntil"
    )


def changes_schema(options: Any, pin: tuple[int, int]) -> StructType:
    return spark_schema(_changes(options, *pin).schema)


class ChangesReader(DataSourceReader):
    """One task reading `Table.changes(since, until)` (its cost is the interval's, not the table's)."""

    def __init__(self, options: dict[str, str], schema: StructType, pin: tuple[int, int]) -> None:
        self.options = options
        self.pin = pin
        self.target = arrow_schema(schema)

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(self.pin)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        for batch in _changes(self.options, *partition.value).to_record_batches():
            if batch.num_rows:
                yield cast_batch(batch, self.target)


# ----- streaming source ---------------------------------------------------------------------------
def stream_reader(options: dict[str, str], schema: StructType) -> ConchStreamReader:
    if not wants_changes(options):
        raise InvalidArgumentError(
            "a Conch stream reads the table's changes: set .option('changesSince', <version | tag | 'latest'>) "
            "(0 streams the whole table first)"
        )
    return ConchStreamReader(options, schema)


class ConchStreamReader(DataSourceStreamReader):
    """Offsets are table versions; a micro-batch reads the changes of `(start, end]` (module doc)."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = options
        self.target = arrow_schema(schema)
        table = open_table(Location.from_options(options))
        self.start = _version(table, option(options, "changesSince"), "changesSince")
        # the value columns the stream starts with, by id: they survive renames and drops
        self.level = option(options, "level") or ""
        self.ids = {c.path: c.id for c in table.state().schema.columns_of(self.level)}
        limit = option(options, "maxVersionsPerTrigger")
        self.max_versions = int(limit) if limit else None

    def initialOffset(self) -> dict[str, int]:
        return {"version": self.start}

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        newest = int(open_table(Location.from_options(self.options)).state().seq)
        if self.max_versions is not None and start is not None:
            newest = min(newest, int(start["version"]) + self.max_versions)
        return {"version": newest}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        s, e = int(start["version"]), int(end["version"])
        return [InputPartition((s, e))] if e > s else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        s, e = partition.value
        table = open_table(Location.from_options(self.options))
        now = {c.id: c.path for c in table.snapshot(version=e).state.schema.columns_of(self.level)}
        current = {path: now.get(i) for path, i in self.ids.items()}  # starting path → path at e
        wanted = list(split_list(option(self.options, "columns"))) or list(self.ids)
        columns = [p for w in wanted for p, cur in current.items() if cur and (p == w or p.startswith(w + "."))]
        changes = table.changes(
            s,
            e,
            columns=[current[p] for p in columns] or None,
            images=option(self.options, "images") or "after",
            per_commit=flag_option(self.options, "perCommit", default=False),
            level=option(self.options, "level"),
        )
        for batch in changes.to_record_batches():
            if batch.num_rows:
                yield cast_batch(starting_columns(batch, self.target, current), self.target)

    def commit(self, end: dict[str, int]) -> None:
        pass  # nothing to release: versions stay readable until `expire` (tag the start to pin it)


def starting_columns(batch: pa.RecordBatch, target: pa.Schema, current: dict[str, str | None]) -> pa.RecordBatch:
    """`batch` (changes under the table's columns now) as the stream's starting columns
    `target`: `current` maps each starting value column's path to its path now (None: dropped,
    read as null); columns added since are left out. Groups keep their names (a rename keeps a
    column in its group); `_before` holds an image of the same shape."""
    root = dict(zip(batch.schema.names, batch.columns, strict=True))

    def pick(cols: dict[str, Any], path: str) -> Any:
        head, _, rest = path.partition(".")
        arr = cols.get(head)
        for name in rest.split(".") if rest else ():
            if arr is None or not pa.types.is_struct(arr.type) or arr.type.get_field_index(name) < 0:
                return None
            arr = pc.struct_field(arr, [name])
        return arr

    def conform(cols: dict[str, Any], f: pa.Field, path: str) -> Any:
        if path in current:  # a value column the stream started with
            now = current[path]
            arr = pick(cols, now) if now else None
            return arr if arr is not None else pa.nulls(batch.num_rows, f.type)
        if not (pa.types.is_struct(f.type) and not isinstance(f.type, pa.ExtensionType)):
            arr = pick(cols, path)  # a key or change column
            return arr if arr is not None else pa.nulls(batch.num_rows, f.type)
        if path == "_before":  # an image: its fields are paths from its own root
            inner = root.get("_before")
            sub = dict(zip([x.name for x in inner.type], inner.flatten(), strict=True)) if inner is not None else {}
            children = [conform(sub, x, x.name) for x in f.type]
        else:
            inner = pick(cols, path)
            children = [conform(cols, x, f"{path}.{x.name}") for x in f.type]
        mask = inner.is_null() if inner is not None and inner.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(f.type), mask=mask)

    arrays = [conform(root, f, f.name) for f in target]
    return pa.RecordBatch.from_arrays([a.cast(f.type) for a, f in zip(arrays, target, strict=True)], schema=target)


def stream_schema(options: Any) -> StructType:
    """The schema of a stream of changes: that of `changes(v, v)` at the newest version now."""
    table = open_table(Location.from_options(options))
    v = int(table.state().seq)
    return spark_schema(_changes(options, v, v).schema)


# ----- streaming sink -----------------------------------------------------------------------------
def stream_writer(options: dict[str, str], schema: StructType, overwrite: bool) -> ConchStreamWriter:
    if overwrite:
        raise InvalidArgumentError("the Conch streaming sink appends (upserts): use outputMode('append')")
    stream_id = option(options, "streamId") or option(options, "checkpointLocation")
    if not stream_id:
        raise InvalidArgumentError(
            "the Conch streaming sink needs a stable stream id to commit each micro-batch once: "
            "set .option('checkpointLocation', ...) or .option('streamId', ...)"
        )
    apply = flag_option(options, "applyChanges", default=False)
    if apply:
        kept = StructType([f for f in schema.fields if f.name not in CHANGE_COLUMNS])
        inner = prepare_writer(dict(options), kept, False)
    else:
        inner = prepare_writer(dict(options), schema, False)
    return ConchStreamWriter(inner, str(stream_id), apply, arrow_schema(schema))


def committed_batch(table: Any, stream_id: str, batch_id: int, page: int = 256) -> int | None:
    """The version of the commit that recorded micro-batch `batch_id` of `stream_id` (None: none).
    The log is read backwards, a page at a time, and only until this stream's newest earlier
    batch: a stream commits its batches in order, so what precedes that one holds no later batch.
    A check costs the commits since the stream's last micro-batch, not the table's history."""
    upto = int(table.state().seq)
    while upto > 0:
        after = max(upto - page, 0)
        for seq, _, entry in reversed(list(table.entries(after, upto))):
            mark = entry.extra.get("stream")
            if isinstance(mark, dict) and mark.get("id") == stream_id:
                if mark.get("batch") == batch_id:
                    return int(seq)
                if int(mark.get("batch", -1)) < batch_id:
                    return None
        upto = after
    return None


class ConchStreamWriter(DataSourceStreamArrowWriter):
    """Tasks stage runs as the batch writer's do; `commit` makes one Conch commit per micro-batch,
    once per batch id (module doc)."""

    def __init__(self, inner: ConchWriter, stream_id: str, apply: bool, source: pa.Schema) -> None:
        self.inner = inner
        self.stream_id = stream_id
        self.apply = apply
        self.source = source

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ConchCommitMessage:
        if not self.apply:
            return self.inner.write(iterator)
        deletes: list[pa.Table] = []
        upserts = self._upserts(iterator, deletes)
        msg = self.inner.write(upserts)
        if deletes:
            table = open_table(self.inner.loc)
            keys = pa.concat_tables(deletes)
            try:
                with table.staging():
                    staged = stage_delete(table.files, table.state(), keys, self.inner.level)
            except BaseException:
                remove_files(table, msg.files)
                raise
            msg.ops += staged.ops
            msg.files += staged.files
        return msg

    def _upserts(self, iterator: Iterator[pa.RecordBatch], deletes: list[pa.Table]) -> Iterator[pa.RecordBatch]:
        keep = [n for n in self.inner.target.names]
        table = open_table(self.inner.loc)
        key_names = table.state().schema.key_names(self.inner.level)
        for batch in iterator:
            is_delete = pc.equal(batch.column("_change"), "delete")
            gone = batch.filter(is_delete)
            if gone.num_rows:
                deletes.append(pa.Table.from_batches([gone]).select(key_names))
            rest = batch.filter(pc.invert(is_delete))
            if rest.num_rows:
                yield pa.RecordBatch.from_arrays([rest.column(n) for n in keep], names=keep)

    def commit(self, messages: list[Any], batchId: int) -> None:
        table = open_table(self.inner.loc)
        if committed_batch(table, self.stream_id, batchId) is not None:
            self._discard(table, messages)  # a retried micro-batch: it is in the table already
            return
        mark = {"stream": {"id": self.stream_id, "batch": batchId}}
        try:
            self.inner.commit(messages, extra=mark, summary=f"Spark stream batch {batchId}", from_tasks=True)
        except CommitConflictError:
            if committed_batch(table, self.stream_id, batchId) is None:
                raise
            # another attempt of the same micro-batch won: its files are in; ours are garbage

    def abort(self, messages: list[Any], batchId: int) -> None:
        self.inner.abort(messages)

    def _discard(self, table: Any, messages: list[Any]) -> None:
        files = [f for m in messages if m is not None for f in m.files]
        remove_files(table, files + job_files(table, self.inner.job))
