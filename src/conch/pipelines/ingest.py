"""Ingest: Parquet / JSON-lines / CSV files → a Conch table, keyed, partitioned by Spark.

The files are read by Spark, range-partitioned by the key (so every task writes a disjoint key
range: the commit needs no duplicate check across tasks, and later scans zip runs instead of
merging them) and written through the `conch` data source in one commit.

>>> spark = conch.spark.session()  # doctest: +SKIP
>>> ingest(spark, "raw/*.parquet", "warehouse", "audio", key=["id"])  # doctest: +SKIP
IngestResult(rows=20000, ...)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from conch.errors import ConchError

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "json", ".ndjson": "json", ".csv": "csv"}


@dataclass(frozen=True)
class IngestResult:
    rows: int
    partitions: int
    seq: int  # the commit's log sequence number
    time: int  # the commit's time (µs)


def detect_format(source: str) -> str:
    """The Spark reader for a path by its extension (a directory: the first file's)."""
    path = source.rstrip("/")
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.startswith((".", "_")))
        path = names[0] if names else path
    for ext, fmt in FORMATS.items():
        if path.endswith(ext):
            return fmt
    raise ConchError(f"cannot tell the format of {source!r}: pass format='parquet' | 'json' | 'csv'")


def read_source(spark: Any, source: str | Sequence[str], fmt: str | None = None) -> Any:
    """A DataFrame of the input files. CSV files need a header row; their types are inferred."""
    paths = [source] if isinstance(source, str) else list(source)
    fmt = fmt or detect_format(paths[0])
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    return reader.load(paths)


def ingest(
    spark: Any,
    source: str | Sequence[str] | Any,
    warehouse: str,
    table: str,
    key: Sequence[str],
    fmt: str | None = None,
    mode: str = "append",
    partitions: int | None = None,
    merge_schema: bool = False,
    options: Mapping[str, str] | None = None,
) -> IngestResult:
    """Write `source` (paths, or a DataFrame) into `warehouse`/`table` as one commit.

    The table is created from the data's schema when it does not exist. `mode="overwrite"`
    replaces its contents (older versions stay readable by time travel). `options` are more
    data source options, e.g. `metastore`, `token`, `storageOptions` (`conch.spark.common.Location`).
    """
    from conch.spark.common import Location
    from conch.spark.writer import committed_rows

    df: Any = source if hasattr(source, "write") else read_source(spark, source, fmt)
    n = partitions or max(2, spark.sparkContext.defaultParallelism)
    df = df.repartitionByRange(n, *key)
    where = {**(options or {}), "warehouse": warehouse, "table": table}
    (
        df.write.format("conch")
        .mode(mode)
        .options(**where)
        .option("key", ",".join(key))
        .option("mergeSchema", str(merge_schema).lower())
        .save()
    )
    t = Location.from_options(where).connect().table(table)
    last = t.history()[-1]
    rows = sum(committed_rows(t, last.seq).values())
    return IngestResult(rows=rows, partitions=n, seq=last.seq, time=last.time)
