"""The `conch` Spark data source: `spark.read.format("conch")` and `df.write.format("conch")`.

Built on the PySpark Python Data Source API (DESIGN §8). Every method runs in a Python worker
the JVM starts, never in the user's driver process, so nothing is shared through memory: the
data source and reader carry their options and pinned snapshot to the executors by pickling,
and a write job talks to `commit()` only through its tasks' commit messages.

Reading (`ConchReader`):
- options: `path` = `<warehouse>/<table>` (what `.load(path)` sets) or `warehouse` + `table`;
  `columns` (comma-separated column paths or groups, key columns allowed: Spark has no column
  pruning for Python sources, so this is how a job avoids reading, say, audio blobs), `where`
  (a Conch filter, see `conch.engines.spark.filters`), `level` (a child level such as `scenes.clips`;
  its full key columns come first), `asof` / `since` (commit time in µs or an ISO datetime),
  `partitions` (number of read tasks), `metricsDir` (each task writes its `ScanMetrics` there);
- **a DataFrame is one snapshot** (`conch.api.snapshot.Snapshot`), pinned when it is created
  (`load()`, when Spark asks for its schema): every query of it, and every task of each query
  (the snapshot travels to the executors pickled as plain data), reads that table state, the one its
  schema describes. PySpark caches the planned reader on the DataFrame across queries (see
  `conch.engines.spark.filters`), so no later pin could hold for every query; `load()` again to see
  newer commits;
- Spark's own filters are not pushed (they stay in Spark's plan, see `conch.engines.spark.filters`):
  use `where` to prune;
- partitions are the core's key-range splits (`Scan.splits`, `conch.scan.splits`): disjoint, of similar
  size, only over key spans where `where` may hold by fragment statistics (`conch.scan.candidates`).

Writing is in `conch.engines.spark.writer`. Change feeds (`changesSince`: batch reads of
`Table.changes`, `readStream`) and the streaming sink (`writeStream`) are in
`conch.engines.spark.streaming`.

>>> spark = conch.engines.spark.session()  # doctest: +SKIP
>>> df = spark.read.format("conch").option("columns", "audio.meta").load("wh/audio")  # doctest: +SKIP
>>> df.filter("silence_ratio < 0.1").count()  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from conch.api.snapshot import Snapshot
from conch.engines.spark.common import Location, open_table, option, parse_time, split_list
from conch.engines.spark.streaming import (
    ChangesReader,
    changes_pin,
    changes_schema,
    stream_reader,
    stream_writer,
    wants_changes,
)
from conch.engines.spark.types import arrow_schema, cast_batch, spark_schema
from conch.engines.spark.writer import prepare_writer
from conch.expr.syntax import parse


class ConchDataSource(DataSource):
    """`format("conch")`. Registered by `conch.engines.spark.register(spark)`.

    Spark pickles this object once, after `schema()`, and hands that copy to every planning of
    every query of the DataFrame: `snapshot` set here is the DataFrame's pinned table version (a
    `conch.api.snapshot.Snapshot`, pickled as plain data: it reopens the warehouse with the
    options' metastore, token and storage options)."""

    snapshot: Snapshot | None = None
    changes_at: tuple[int, int] | None = None

    @classmethod
    def name(cls) -> str:
        return "conch"

    def pin(self) -> Snapshot:
        """The DataFrame's snapshot: as of the `asof` option, else the newest version now (version
        0 for a table never written: the DataFrame reads it as empty)."""
        if self.snapshot is None:
            asof = parse_time(option(self.options, "asof"), "asof")
            self.snapshot = open_table(Location.from_options(self.options)).snapshot(asof)
        return self.snapshot

    def changes_pin(self) -> tuple[int, int]:
        """A read of changes (`changesSince`): its (since, until) versions, fixed at `load()`."""
        if self.changes_at is None:
            self.changes_at = changes_pin(self.options)
        return self.changes_at

    def schema(self) -> StructType:
        if wants_changes(self.options):  # a change feed (`conch.engines.spark.streaming`)
            return changes_schema(self.options, self.changes_pin())
        snap = self.pin()
        level = option(self.options, "level") or ""
        keys = {f.name for f in snap.state.schema.key_fields(level)}
        # Key columns always come first; naming them in `columns` is allowed and changes nothing.
        cols = [c for c in split_list(option(self.options, "columns")) if c not in keys]
        scan = snap.scan(*cols, level=level or None)
        return spark_schema(scan.schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        # `pin()` again for a user-given schema (`spark.read.schema(...)`): Spark then never
        # calls `schema()`, and this runs at the DataFrame's first planning.
        if wants_changes(self.options):
            return ChangesReader(dict(self.options), schema, self.changes_pin())
        return ConchReader(dict(self.options), schema, self.pin())

    def streamReader(self, schema: StructType) -> Any:
        return stream_reader(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        return stream_writer(dict(self.options), schema, overwrite)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        return prepare_writer(dict(self.options), schema, overwrite)


def leaf_paths(schema: StructType, keys: set[str]) -> list[str]:
    """Column paths (relative to the level) of a Spark schema read from Conch: structs are groups."""
    out: list[str] = []

    def walk(prefix: str, st: StructType) -> None:
        for f in st.fields:
            path = f"{prefix}{f.name}"
            if not prefix and f.name in keys:
                continue
            if isinstance(f.dataType, StructType):
                walk(path + ".", f.dataType)
            else:
                out.append(path)

    walk("", schema)
    return out


class ConchReader(DataSourceReader):
    """Plans a Conch scan per key range and streams its Arrow batches to Spark.

    Holds only what the DataFrame fixes (options, schema, pinned snapshot): PySpark reuses one
    planned reader for many queries, so nothing here may depend on a query."""

    def __init__(self, options: dict[str, str], schema: StructType, snapshot: Snapshot) -> None:
        self.level = option(options, "level") or ""
        self.snapshot = snapshot
        self.since = parse_time(option(options, "since"), "since")
        parts = option(options, "partitions")
        self.n_partitions = int(parts) if parts else None
        self.metrics_dir = option(options, "metricsDir")
        self.target = arrow_schema(schema)
        key_fields = snapshot.state.schema.key_fields(self.level)
        key_names = {f.name for f in key_fields}
        self.columns = leaf_paths(schema, key_names)
        where = option(options, "where")
        # the core scan takes the whole filter: its analysis (`conch.scan.filter`) cuts it into key
        # terms (a key range, exact keys, or a filter on keys) and value terms, mixed ones too;
        # unknown columns in `columns` or `where` fail here, at planning, on the driver
        self.scan = snapshot.scan(
            *self.columns, where=parse(where) if where else None, since=self.since, level=self.level or None
        )

    def partitions(self) -> list[InputPartition]:
        # the core's key-range splits (`Scan.splits`) of the pinned snapshot: disjoint, of similar
        # size; a table never written (version 0) is one split that reads nothing
        return [InputPartition(s) for s in self.scan.splits(self.n_partitions)]

    def read(self, partition: InputPartition) -> Any:
        # the split's snapshot reopens the warehouse on this executor with the driver's
        # connection (metastore, token, storage options); its key range of the pinned commit
        scan = partition.value.open()
        for batch in scan:
            if batch.num_rows:
                yield cast_batch(batch, self.target)
        if self.metrics_dir:
            _dump_metrics(self.metrics_dir, partition.value, scan)


def _dump_metrics(directory: str, keys: Any, scan: Any) -> None:
    os.makedirs(directory, exist_ok=True)
    doc = {"keys": repr(keys), **asdict(scan.metrics())}
    name = uuid.uuid4().hex
    tmp = os.path.join(directory, f".{name}.tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, os.path.join(directory, f"{name}.json"))  # readers never see a partial file
