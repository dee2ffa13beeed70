"""Ingest: Parquet / JSON-lines / CSV files → a Conch table, keyed, partitioned by Spark.

The files are read by Spark, range-partitioned by the key (so every task writes a disjoint key
range: the commit needs no duplicate check across tasks, and later scans zip runs instead of
merging them) and written through the `conch` data source in one commit.

>>> spark = conch.engines.spark.session()  # doctest: +SKIP
>>> ingest(spark, "raw/*.parquet", "warehouse", "audio", key=["id"])  # doctest: +SKIP
IngestResult(rows=20000, ...)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

from conch.apps.pipelines.spark_csv import CsvOptions, explained, read_csv
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


def read_source(
    spark: Any,
    source: str | Sequence[str],
    fmt: str | None = None,
    csv: CsvOptions | None = None,
    key: Sequence[str] = (),
) -> Any:
    """A DataFrame of the input files. CSV files need a header row and are read by the rules of
    `conch write` (`spark_csv`); `csv` holds `--comment` and `--timestamp-format`. A local CSV whose
    first line starts with `#` is read with `comment='#'` unless a comment character is given."""
    paths = [source] if isinstance(source, str) else list(source)
    fmt = fmt or detect_format(paths[0])
    if fmt != "csv":
        return spark.read.format(fmt).load(paths)
    csv = csv or CsvOptions()
    if csv.comment is None and _starts_with_comment(paths[0]):
        csv = replace(csv, comment="#")
    return read_csv(spark, paths, csv, key)


def _starts_with_comment(path: str) -> bool:
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if n.endswith(".csv") and not n.startswith((".", "_")))
        path = os.path.join(path, names[0]) if names else path
    try:
        with open(path, "rb") as f:
            return f.read(1) == b"#"
    except OSError:  # not a local file (s3://...): Spark reads it
        return False


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
    csv: CsvOptions | None = None,
) -> IngestResult:
    """Write `source` (paths, or a DataFrame) into `warehouse`/`table` as one commit.

    The table is created from the data's schema when it does not exist. `mode="overwrite"`
    replaces its contents (older versions stay readable by time travel). `options` are more
    data source options, e.g. `metastore`, `token`, `storageOptions` (`conch.engines.spark.common.Location`);
    `csv`: `--comment` and `--timestamp-format` for CSV files.
    """
    from conch.engines.spark.common import Location
    from conch.engines.spark.writer import committed_rows

    is_files = not hasattr(source, "write")
    df: Any = read_source(spark, source, fmt, csv, key) if is_files else source
    paths = [source] if isinstance(source, str) else list(source) if is_files else []
    checked = explained(paths) if is_files and (fmt or detect_format(paths[0])) == "csv" else nullcontext()
    n = partitions or max(2, spark.sparkContext.defaultParallelism)
    df = df.repartitionByRange(n, *key)
    where = {**(options or {}), "warehouse": warehouse, "table": table}
    writer = df.write.format("conch").mode(mode).options(**where).option("key", ",".join(key))
    with checked:
        writer.option("mergeSchema", str(merge_schema).lower()).save()
    t = Location.from_options(where).connect().table(table)
    last = next(c for c in reversed(t.history()) if c.kind != "compact")  # not a compaction that followed it
    rows = sum(committed_rows(t, last.seq).values())
    return IngestResult(rows=rows, partitions=n, seq=last.seq, time=last.time)
