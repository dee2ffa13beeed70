"""A Structured Streaming change source survives schema changes while it runs, and the streaming
sink's commit cannot reference files a vacuum removed after its tasks wrote (issue 32, item 2)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType

import conch
import conch.engines.spark
import conch.log.tablelog as tablelog
from conch.engines.spark.streaming import stream_writer
from conftest_spark import spark_session

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


def test_a_running_stream_keeps_its_columns_through_add_rename_and_drop(spark: Any, tmp_path: Path) -> None:
    cat = conch.connect(str(tmp_path / "wh"), maintenance=conch.Policy(settle_after=None))
    t = cat.create_table("src", [("k", pa.int64())])
    t.write({"k": [1], "a": [1], "b": [10], "g": [{"x": 1, "y": 2}]})
    query = (
        spark.readStream.format("conch")
        .option("changesSince", "0")
        .load(str(tmp_path / "wh" / "src"))
        .writeStream.format("memory")
        .queryName("stream_schema")
        .start()
    )
    try:
        query.processAllAvailable()
        t.write({"k": [2], "a": [2], "e": [7]})  # a new column: before, the query died here
        query.processAllAvailable()
        t.rename_column("a", "a2")
        t.rename_column("g.y", "z")
        t.write({"k": [3], "a2": [3], "b": [30], "g": [{"x": 3, "z": 4}]})
        query.processAllAvailable()
        t.drop_columns("b")
        t.write({"k": [4], "a2": [4]})
        query.processAllAvailable()
        assert query.isActive and query.exception() is None
        rows = spark.sql("select * from stream_schema").toArrow()
    finally:
        query.stop()
    assert rows.column_names == ["k", "_change", "_version", "_time", "a", "b", "g"]  # the starting columns
    got = sorted(((r["k"], r["a"], r["b"], r["g"]) for r in rows.to_pylist()), key=lambda r: r[0])
    assert got == [
        (1, 1, 10, {"x": 1, "y": 2}),
        (2, 2, None, {"x": None, "y": None}),
        (3, 3, 30, {"x": 3, "y": 4}),  # renamed columns keep their starting names and their values
        (4, 4, None, {"x": None, "y": None}),  # a dropped column reads null
    ]


def test_stream_sink_commit_conflicts_with_a_vacuum_after_its_tasks_wrote(
    spark: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    """Spark builds the sink's writer anew for the commit, after the tasks wrote. A vacuum logged
    between the commit's file check and its append (forced here) must make it conflict: before,
    the commit's start was its own, later than the files, and it referenced deleted files."""
    cat = conch.connect(str(tmp_path / "wh"), maintenance=conch.Policy(settle_after=None))
    t = cat.create_table("sink", [("id", pa.int64())])
    t.write({"id": [0], "x": [0]})
    schema = StructType([StructField("id", LongType()), StructField("x", LongType())])
    options = {"path": str(tmp_path / "wh" / "sink"), "checkpointLocation": str(tmp_path / "cp")}
    task_side = stream_writer(dict(options), schema, False)
    msg = task_side.write(iter([pa.record_batch({"id": pa.array([1], pa.int64()), "x": pa.array([1], pa.int64())})]))
    time.sleep(0.5)  # the tasks wrote well before the commit starts
    commit_side = stream_writer(dict(options), schema, False)  # what Spark's commit worker does

    real = tablelog.groupcommit.commit
    vacuumed: list[Any] = []

    def vacuum_first(group: Any, log: Any, txn: Any) -> Any:
        if txn.extra.get("stream") and not vacuumed:  # after the file check, before the append
            vacuumed.append(conch.connect(str(tmp_path / "wh")).table("sink").vacuum(older_than_seconds=0.25))
        return real(group, log, txn)

    monkeypatch.setattr(tablelog.groupcommit, "commit", vacuum_first)
    with pytest.raises(conch.CommitConflictError):
        commit_side.commit([msg], 0)
    assert vacuumed and vacuumed[0].files_removed > 0
    assert conch.connect(str(tmp_path / "wh")).table("sink").scan().to_pylist() == [{"id": 0, "x": 0}]
    assert conch.connect(str(tmp_path / "wh")).table("sink").check().ok
