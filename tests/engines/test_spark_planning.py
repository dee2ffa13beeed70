"""Read planning of the `conch` Spark source: the driver plans tasks only over key spans where
the `where` option's value terms may hold by fragment statistics (and its key terms' range),
and what the tasks return is exactly `Table.scan(where=...)`.

The planning test drives the data source's own planning methods (`schema()`, `reader()`,
`partitions()`, the PySpark Python data source API) without a JVM; the result tests run Spark
(the shared session of `conftest_spark`)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch
from conch.engines.spark.source import ConchDataSource
from conch.engines.spark.types import arrow_schema, spark_schema
from conch.expr.syntax import parse
from conftest_spark import spark_session

VALUES = pa.schema([("x", pa.float64()), ("name", pa.string())])


def _catalog(path: Path) -> conch.Catalog:
    opts = conch.WriteOptions(chunk_rows=50, fragment_bytes=1024)  # many runs and fragments
    return conch.connect(path, write_options=opts, maintenance=conch.Policy(auto=False))


def _partitions(path: Path, **options: str) -> list[Any]:
    source = ConchDataSource({"path": str(path), **options})
    return source.reader(source.schema()).partitions()


def test_driver_plans_tasks_only_where_the_filter_may_hold(tmp_path: Path) -> None:
    t = _catalog(tmp_path / "wh").create_table("t", [("id", pa.int64())], VALUES)
    for run in range(10):  # ten disjoint runs, x rising with id: statistics prune by value
        ids = list(range(run * 1000, run * 1000 + 50))
        t.write({"id": ids, "x": [float(i) for i in ids], "name": [f"n{i % 7}" for i in ids]})
    path = tmp_path / "wh" / "t"
    assert len(_partitions(path, partitions="10")) == 10
    assert len(_partitions(path, where="x < 20", partitions="10")) <= 10
    assert len(_partitions(path, where="x < 20")) == 1
    # each planned task reads only the matching run; value and key terms prune together
    for where in ("x < 20", "x >= 5000 and x < 5010", "x > 3000 and id < 4000"):
        (split,) = _partitions(path, where=where)
        assert len(split.value.open().plan.key_spaces) == 1, where
    # two stretches far apart: as many tasks as asked for, none over the runs between
    both = _partitions(path, where="x < 20 or x >= 9040", partitions="2")
    assert [len(p.value.open().plan.key_spaces) for p in both] == [1, 1]
    # nothing can match: one task that reads nothing
    (none,) = _partitions(path, where="x > 1e9")
    assert none.value.open().plan.key_spaces == []


# ----- results equal Table.scan (Spark) -----------------------------------------------------------
writes = st.lists(
    st.tuples(st.integers(0, 400), st.integers(1, 80), st.sampled_from([1, 3]), st.booleans()), min_size=1, max_size=4
)
TERMS = ["x < {v}", "x >= {v}", "x is None", "name == 'n{i}'", "x < {v} or name == 'n{i}'", "id >= {k}", "id < {k}"]
terms = st.lists(
    st.tuples(st.sampled_from(TERMS), st.integers(0, 6), st.integers(0, 500), st.integers(0, 500)),
    min_size=1,
    max_size=3,
)


@pytest.mark.spark
@settings(deadline=None, max_examples=6, suppress_health_check=[HealthCheck.too_slow])
@given(writes, terms, st.sampled_from([None, "3"]))
def test_spark_read_with_where_equals_table_scan(ops: list[Any], where_terms: Any, partitions: str | None) -> None:
    spark = spark_session()
    with tempfile.TemporaryDirectory() as d:
        t = _catalog(Path(d)).create_table("t", [("id", pa.int64())], VALUES)
        for start, count, step, with_x in ops:
            ids = list(range(start, start + count * step, step))
            data: dict[str, Any] = {"id": ids, "name": [f"n{i % 7}" for i in ids]}
            if with_x:  # otherwise a partial upsert: x keeps its older cells (or none)
                data["x"] = [None if i % 11 == 0 else float(i) for i in ids]
            t.write(data)
        where = " and ".join(f"({s.format(i=i, v=v, k=k)})" for s, i, v, k in where_terms)
        want = t.scan(where=parse(where)).to_arrow()
        reader = spark.read.format("conch").option("where", where)
        if partitions:
            reader = reader.option("partitions", partitions)
        got = reader.load(str(Path(d) / "t")).toArrow().sort_by([("id", "ascending")])
        assert got.equals(want.cast(arrow_schema(spark_schema(want.schema)))), where


@pytest.mark.spark
def test_a_selective_where_runs_one_task(tmp_path: Path) -> None:
    spark = spark_session()
    t = _catalog(tmp_path / "wh").create_table("t", [("id", pa.int64())], VALUES)
    for run in range(8):
        ids = list(range(run * 1000, run * 1000 + 50))
        t.write({"id": ids, "x": [float(i) for i in ids], "name": ["a"] * 50})
    df = spark.read.format("conch").option("where", "x >= 3010 and x < 3020").load(str(tmp_path / "wh" / "t"))
    assert df.rdd.getNumPartitions() == 1
    assert sorted(r.id for r in df.collect()) == list(range(3010, 3020))
