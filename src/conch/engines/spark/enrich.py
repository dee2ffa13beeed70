"""The Spark engine of `Table.enrich` (`engine="spark"`), registered when `conch.engines.spark`
is imported (which any session reading the `conch` source has done).

`Table.enrich(fn, inputs, into, engine="spark", spark=session)` plans its run in the driver
(`conch.api.enrich`: pinned version, the keys to compute) and hands the key ranges here. One Spark job
reads the inputs through the `conch` source (`columns` = the inputs only, `asof` = the run's pin,
a semi-join with the run's keys when it is incremental), runs `fn` with `mapInArrow` over Arrow
record batches, and writes the key columns plus the new group with `mergeSchema`. Conch writes
only the columns a write includes, so the existing groups' files are not touched: the
enrichment costs the bytes of the new group, not a table rewrite.

>>> t.enrich(audio_features, inputs=["audio.bytes", "audio_length"], into="features", engine="spark", spark=spark)  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from conch.api.enrich import RangeJob, apply_fn, register_engine, require_reopenable
from conch.engines.spark.types import arrow_schema, spark_schema
from conch.engines.spark.writer import committed_rows
from conch.errors import EnrichError
from conch.log.warehouse import Connection
from conch.scan import Scan


def run_spark(table: Any, jobs: list[RangeJob], spark: Any = None, **_: Any) -> tuple[list[int], int]:
    """Compute the run's key ranges in one Spark job and one commit; (commit seqs, rows written)."""
    if not jobs:
        return [], 0
    if spark is None:
        raise EnrichError("engine='spark' needs spark=<a SparkSession> (conch.engines.spark.session() makes one)")

    job = jobs[0]
    where = _location(table.connection, job.table)
    reader = spark.read.format("conch").options(**where)
    reader = reader.option("columns", ",".join(job.inputs)).option("asof", str(job.pin))
    if job.level:
        reader = reader.option("level", job.level)
    df = reader.load()
    if not job.complete:  # an incremental run: only its keys (a keys-only scan of each range)
        names = job.key_names
        keys = pa.concat_tables(Scan(j.snapshot, j.request.replace(columns=())).to_arrow() for j in jobs)
        wanted = spark.createDataFrame(keys.cast(arrow_schema(df.select(*names).schema)))
        df = df.join(wanted, on=names, how="left_semi")
    # fn's output schema from one row read here, not through Spark: `df.limit(1)` stops the
    # Python reader mid-stream, and its worker prints a BrokenPipeError traceback per task
    first = Scan(job.snapshot, job.request.replace(keys=None, key_terms=(), value_terms=(), limit=1)).to_arrow()
    sample = first.select(df.columns).cast(arrow_schema(df.schema))
    out_schema = apply_fn(
        job, sample.to_batches()[0] if sample.num_rows else pa.RecordBatch.from_pylist([], sample.schema)
    ).schema

    def compute(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            yield from apply_fn(job, b).cast(out_schema).to_batches()

    out = df.mapInArrow(compute, spark_schema(out_schema))
    writer = out.write.format("conch").mode("append").options(**where)
    writer.option("mergeSchema", "true").save()
    # the Spark commit: the newest that is not an automatic compaction that followed it
    last = next(c for c in reversed(table.history()) if c.kind != "compact")
    return [last.seq], sum(committed_rows(table, last.seq).values())


def _location(connection: Connection, table: str) -> dict[str, str]:
    """The `conch` data source options that reach the table as the driver's `connect()` did:
    executors get the same metastore, token and storage options (a server, PostgreSQL or object
    store table is enriched on Spark as a local one is)."""
    require_reopenable(connection, "engine='spark'")
    out = {"warehouse": connection.uri, "table": table}
    if connection.metastore:
        out["metastore"] = connection.metastore
    if connection.token:
        out["token"] = connection.token
    if connection.storage_options:
        out["storageOptions"] = json.dumps(dict(connection.storage_options))
    return out


register_engine("spark", run_spark)
