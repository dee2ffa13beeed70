"""The `conch` Spark data source: `spark.read.format("conch")` and `df.write.format("conch")`.

Built on the PySpark Python Data Source API (DESIGN §8). Every method runs in a Python worker
the JVM starts, never in the user's driver process, so nothing is shared through memory: a
reader carries its options, pinned commit time and pushed filters to the executors by pickling,
and a write job talks to `commit()` only through its tasks' commit messages.

Reading (`ConchReader`):
- options: `path` = `<warehouse>/<table>` (what `.load(path)` sets) or `warehouse` + `table`;
  `columns` (comma-separated column paths or groups: Spark has no column pruning for Python
  sources, so this is how a job avoids reading, say, audio blobs), `level` (a child level such
  as `scenes.clips`; its full key columns come first), `asof` / `since` (commit time in µs or an
  ISO datetime), `partitions` (number of read tasks), `metricsDir` (each task writes its
  `ScanMetrics` there as JSON);
- a query reads one snapshot: the latest commit time is pinned when the query is planned, so
  all tasks see the same table even while writers commit;
- partitions are disjoint key ranges: when the level's sorted runs do not overlap (e.g. written
  by a range-partitioned Spark job) the boundaries are the runs' own first keys, so each task
  reads whole fragments; otherwise boundaries are quantiles of sampled keys;
- filters are pushed as described in `conch.spark.filters`.

Writing is in `conch.spark.writer`.

>>> spark = conch.spark.session()  # doctest: +SKIP
>>> df = spark.read.format("conch").option("columns", "audio.meta").load("wh/audio")  # doctest: +SKIP
>>> df.filter("silence_ratio < 0.1").count()  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import json
import math
import os
import threading
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

import conch
from conch.errors import ConchError, TimeTravelError
from conch.expr import Expr
from conch.expr import mask as filter_mask
from conch.keys import KeyRange, decode_key
from conch.spark.filters import FilterTranslator, Pushed
from conch.spark.types import arrow_schema, cast_batch, spark_schema

ROWS_PER_PARTITION = 500_000  # a read task's target size when `partitions` is not given
BYTES_PER_PARTITION = 128 << 20
MAX_PARTITIONS = 4096

_lock = threading.Lock()
_catalogs: dict[str, tuple[tuple[int, int] | None, conch.Catalog]] = {}
_tables: dict[tuple[str, str], conch.Table] = {}


def _identity(warehouse: str) -> tuple[int, int] | None:
    """Which metastore file is at the warehouse now (a warehouse deleted and re-created between
    jobs must not be served from a connection to the old, unlinked file)."""
    try:
        st = os.stat(os.path.join(warehouse, "_catalog.sqlite"))
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def open_table(warehouse: str, name: str) -> conch.Table:
    """A cached `Table` per worker process: Python workers are reused across tasks, and a cached
    table keeps its replayed state and key-space cache warm. Validated on every call (one
    metastore lookup) so a dropped and re-created table is never read through a stale object."""
    with _lock:
        ident = _identity(warehouse)
        cached = _catalogs.get(warehouse)
        if cached is None or cached[0] != ident or ident is None:
            cat = conch.connect(warehouse)
            _catalogs[warehouse] = (_identity(warehouse), cat)
        else:
            cat = cached[1]
        table_id = cat.metastore.get_table(name).id
        table = _tables.get((warehouse, table_id))
        if table is None:
            table = _tables[(warehouse, table_id)] = cat.table(name)
        return table


def forget_table(warehouse: str, name: str) -> None:
    """Drop cached state so the next `open_table` replays the log afresh."""
    with _lock:
        for key in [k for k, t in _tables.items() if k[0] == warehouse and t.name == name]:
            del _tables[key]


@dataclass(frozen=True)
class Location:
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


def parse_time(text: str | None, what: str) -> int | datetime | None:
    """A commit time option: integer µs since the epoch, or an ISO datetime (naive = UTC)."""
    if text is None or text == "":
        return None
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise TimeTravelError(f"option {what}={text!r}: give a commit time in µs or an ISO datetime") from None


def split_list(text: str | None) -> tuple[str, ...]:
    return tuple(p.strip() for p in (text or "").split(",") if p.strip())


class ConchDataSource(DataSource):
    """`format("conch")`. Registered by `conch.spark.register(spark)`."""

    @classmethod
    def name(cls) -> str:
        return "conch"

    def schema(self) -> StructType:
        loc = Location.from_options(self.options)
        table = open_table(loc.warehouse, loc.table)
        scan = table.scan(
            *split_list(self.options.get("columns")),
            level=self.options.get("level") or None,
            asof=parse_time(self.options.get("asof"), "asof"),
        )
        return spark_schema(scan.schema)

    def reader(self, schema: StructType) -> ConchReader:
        return ConchReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from conch.spark.writer import prepare_writer

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
    """Plans a Conch scan per key range and streams its Arrow batches to Spark."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.loc = Location.from_options(options)
        self.level = options.get("level") or ""
        self.since = parse_time(options.get("since"), "since")
        self.n_partitions = int(options["partitions"]) if options.get("partitions") else None
        self.metrics_dir = options.get("metricsdir") or options.get("metricsDir")
        self.spark_schema = schema
        self.target = arrow_schema(schema)
        table = open_table(self.loc.warehouse, self.loc.table)
        asof = parse_time(options.get("asof"), "asof")
        # One snapshot per query: pin the newest commit time now, so every task reads the same table.
        self.asof: int | datetime = asof if asof is not None else table.state().time
        state = table.state_at(self.asof)
        self.key_fields = state.schema.key_fields(self.level)
        key_names = {f.name for f in self.key_fields}
        self.columns = leaf_paths(schema, key_names)
        out = table.scan(*self.columns, level=self.level or None, asof=self.asof).schema
        self.column_types = _leaf_types(out, key_names)
        self.pushed = Pushed()

    # ----- planning -------------------------------------------------------------------------
    def pushFilters(self, filters: list[Any]) -> Any:
        translator = FilterTranslator(
            [f.name for f in self.key_fields], self.column_types, {f.name: f.type for f in self.key_fields}
        )
        self.pushed, rejected = translator.push(list(filters))
        # Spark matches what we return by identity: hand back the very objects we rejected.
        return iter(rejected)

    def partitions(self) -> list[InputPartition]:
        table = open_table(self.loc.warehouse, self.loc.table)
        ranges = key_range_partitions(table, self, self.n_partitions)
        return [InputPartition(r) for r in ranges]

    # ----- executing ------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Any:
        table = open_table(self.loc.warehouse, self.loc.table)
        scan = table.scan(
            *self.columns,
            where=self.pushed.where,
            keys=partition.value,
            asof=self.asof,
            since=self.since,
            level=self.level or None,
        )
        key_filter = self.pushed.key_filter
        for batch in scan:
            if key_filter is not None:
                batch = _filter_keys(batch, key_filter)
            if batch.num_rows:
                yield cast_batch(batch, self.target)
        if self.metrics_dir:
            _dump_metrics(self.metrics_dir, partition.value, scan)


def _leaf_types(schema: pa.Schema, keys: set[str]) -> dict[str, pa.DataType]:
    out: dict[str, pa.DataType] = {}

    def walk(prefix: str, fields: Any) -> None:
        for f in fields:
            path = f"{prefix}{f.name}"
            if pa.types.is_struct(f.type):
                walk(path + ".", f.type)
            else:
                out[path] = f.type

    walk("", [f for f in schema if f.name not in keys])
    return out


def _filter_keys(batch: pa.RecordBatch, expr: Expr) -> pa.RecordBatch:
    m = filter_mask(expr, batch.column)
    return batch if m.all() else batch.filter(pa.array(m))


def _dump_metrics(directory: str, keys: Any, scan: Any) -> None:
    os.makedirs(directory, exist_ok=True)
    doc = {"keys": repr(keys), **asdict(scan.metrics())}
    name = uuid.uuid4().hex
    tmp = os.path.join(directory, f".{name}.tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, os.path.join(directory, f"{name}.json"))  # readers never see a partial file


# ----- partitioning ---------------------------------------------------------------------------
def key_range_partitions(table: conch.Table, reader: ConchReader, n: int | None) -> list[KeyRange | None]:
    """Disjoint key ranges covering the scan, about `n` of them (or sized by rows and bytes)."""
    state = table.state_at(reader.asof)
    fields = reader.key_fields
    level = reader.level
    if not fields:
        return [None]  # a keyless root is one record
    bound = reader.pushed.key_range
    runs = [ks for ks in state.key_spaces.values() if ks.kind == "data" and ks.level == level]
    rows = sum(ks.rows for ks in runs)
    explicit = n is not None
    if n is None:
        live = {ks.id for ks in runs}
        nbytes = sum(f.bytes for f in state.fragments.values() if f.key_space in live)
        n = max(math.ceil(rows / ROWS_PER_PARTITION), math.ceil(nbytes / BYTES_PER_PARTITION), 1)
    n = min(n, MAX_PARTITIONS, max(rows, 1))
    boundaries: list[tuple[Any, ...]] = []
    if n > 1 and runs:
        runs.sort(key=lambda k: k.min_key)
        disjoint = all(a.max_key < b.min_key for a, b in itertools.pairwise(runs))
        enough = len(runs) >= n or (not explicit and len(runs) > 1 and len(runs) >= n // 2)
        if disjoint and enough:
            # Cut at run starts: each task reads whole runs and fragments, a zip with no take.
            boundaries = _run_boundaries(runs, min(n, len(runs)), fields)
        else:
            boundaries = _sampled_boundaries(table, runs, n, fields)
    starts: list[tuple[Any, ...] | None] = [None, *boundaries]
    ends: list[tuple[Any, ...] | None] = [*boundaries, None]
    out: list[KeyRange | None] = []
    for s, e in zip(starts, ends, strict=True):
        empty, r = _intersect(s, e, bound)
        if not empty:
            out.append(r)
    return out or [bound]


def _run_boundaries(runs: list[Any], n: int, fields: list[pa.Field]) -> list[tuple[Any, ...]]:
    """Cut a list of disjoint sorted runs into n groups of about equal rows, at run starts."""
    total = sum(r.rows for r in runs)
    out: list[tuple[Any, ...]] = []
    acc, target = 0, total / n
    for r in runs:
        if acc >= target * (len(out) + 1) and len(out) < n - 1:
            out.append(decode_key(bytes.fromhex(r.min_key), fields))
        acc += r.rows
    return out


def _sampled_boundaries(table: conch.Table, runs: list[Any], n: int, fields: list[pa.Field]) -> list[tuple[Any, ...]]:
    """Quantiles of keys sampled evenly from every run (runs overlap, so their edges say little)."""
    cat = table.catalog
    per_run = max(64, (64 * n) // max(len(runs), 1))
    samples = []
    for ks in runs:
        keys = cat.key_cache.keys(ks, fields)
        step = max(1, keys.num_rows // per_run)
        samples.append(keys.take(pa.array(np.arange(0, keys.num_rows, step))))
    sample = pa.concat_tables(samples)
    order = pc.sort_indices(sample, [(f.name, "ascending") for f in fields])
    sample = sample.take(order)
    picks = [int(sample.num_rows * i / n) for i in range(1, n)]
    rows = sample.take(pa.array(picks, pa.int64())).to_pylist()
    out: list[tuple[Any, ...]] = []
    for r in rows:
        key = tuple(r[f.name] for f in fields)
        if not out or key > out[-1]:
            out.append(key)
    return out


def _intersect(
    start: tuple[Any, ...] | None, end: tuple[Any, ...] | None, bound: KeyRange | None
) -> tuple[bool, KeyRange | None]:
    """(is empty, [start, end) ∩ bound). Python tuple order is key order (a prefix sorts first).
    An unbounded range is None: no key predicate, so the scan does not encode keys at all."""
    if bound is not None:
        if bound.start is not None and (start is None or bound.start > start):
            start = bound.start
        if bound.end is not None and (end is None or bound.end < end):
            end = bound.end
    if start is not None and end is not None and not start < end:
        return True, None
    return False, (None if start is None and end is None else KeyRange(start, end))
