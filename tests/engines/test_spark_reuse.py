"""One DataFrame, many queries: every query sees exactly its own filters and the DataFrame's
snapshot (issue 8, item 1).

PySpark 4.3 caches a Python source's planned reader on the DataFrame and reuses it for later
queries and for other scans of the same DataFrame in one query (`conch.engines.spark.filters` says
why that rules out pushing Spark's filters). Each check here compares Spark with the Python
scan (`Table.scan(where=...)`) of the same snapshot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch
from conch.errors import TableNotFoundError
from conch.model.keys import KeyRange
from conftest_spark import spark_session

pytestmark = pytest.mark.spark

N = 1797


@pytest.fixture(scope="session")
def spark() -> Any:
    return spark_session()


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[conch.Table, str]:
    wh = tmp_path_factory.mktemp("reuse") / "wh"
    t = conch.connect(wh).create_table("digits", [("id", pa.int64())])
    ids = np.arange(N)
    for part in np.array_split(ids, 3):  # three runs, so reads have several partitions
        t.write(pa.table({"id": part, "label": part % 10, "x": part * 0.5}))
    return t, str(wh / "digits")


def python_count(t: conch.Table, label_min: int | None = None, label_max: int | None = None) -> int:
    """Rows with label_min <= label < label_max, by the Python scan."""
    where = None
    if label_min is not None:
        where = t["label"] >= label_min
    if label_max is not None:
        upper = t["label"] < label_max
        where = upper if where is None else where & upper
    return t.scan("label", where=where).to_arrow().num_rows


def test_count_filter_count_again(spark: Any, table: tuple[conch.Table, str]) -> None:
    t, path = table
    df = spark.read.format("conch").load(path)
    assert df.count() == N
    assert df.filter("label >= 8").count() == python_count(t, 8) == 358
    assert df.count() == N  # was 358: the filtered query's reader stuck to the DataFrame
    assert df.filter("label < 2").count() == python_count(t, None, 2)
    assert df.filter("id < 10").count() == t.scan(keys=KeyRange(None, (10,))).to_arrow().num_rows == 10
    assert df.count() == N


def test_explain_then_count(spark: Any, table: tuple[conch.Table, str]) -> None:
    t, path = table
    df = spark.read.format("conch").load(path)
    df.filter("label >= 8").explain()
    assert df.count() == N
    assert df.filter("label >= 5").count() == python_count(t, 5)


def test_one_temp_view_many_queries(spark: Any, table: tuple[conch.Table, str]) -> None:
    t, path = table
    spark.read.format("conch").load(path).createOrReplaceTempView("digits_reuse")
    one = spark.sql("select count(*) from digits_reuse where label < 2").collect()[0][0]
    assert one == python_count(t, None, 2)
    assert spark.sql("select count(*) from digits_reuse").collect()[0][0] == N
    assert spark.sql("select count(*) from digits_reuse where label >= 3 and label < 6").collect()[0][0] == (
        python_count(t, 3, 6)
    )
    rows = spark.sql("select label, count(*) as n from digits_reuse group by label order by label").collect()
    assert [r.n for r in rows] == [python_count(t, k, k + 1) for k in range(10)]


def test_self_join_of_two_filtered_uses(spark: Any, table: tuple[conch.Table, str]) -> None:
    t, path = table
    df = spark.read.format("conch").load(path)
    high = df.filter("label >= 8").select("id")
    low = df.filter("label < 2").select("id")
    assert high.union(low).count() == python_count(t, 8) + python_count(t, None, 2)
    pairs = df.filter("label >= 8").alias("a").join(df.filter("label >= 5").alias("b"), "id")
    assert pairs.count() == python_count(t, 8)
    assert high.join(low, "id").count() == 0
    assert df.alias("a").join(df.filter("label = 3").alias("b"), "id").count() == python_count(t, 3, 4)


@settings(deadline=None, max_examples=6, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.none() | st.integers(0, 10), st.none() | st.integers(0, 10)), min_size=2, max_size=4))
def test_any_sequence_of_filters_on_one_dataframe(
    spark: Any, table: tuple[conch.Table, str], bounds: list[tuple[int | None, int | None]]
) -> None:
    t, path = table
    df = spark.read.format("conch").load(path)
    for lo, hi in bounds:
        q = df
        if lo is not None:
            q = q.filter(q.label >= lo)
        if hi is not None:
            q = q.filter(q.label < hi)
        assert q.count() == python_count(t, lo, hi), (lo, hi)


def test_a_dataframe_is_the_snapshot_of_its_load(spark: Any, tmp_path: Path) -> None:
    t = conch.connect(tmp_path / "wh").create_table("t", [("id", pa.int64())])
    first = t.write({"id": [1, 2, 3], "x": [1.0, 2.0, 3.0]})
    path = str(tmp_path / "wh" / "t")
    df = spark.read.format("conch").load(path)  # created before the next commits, never queried
    t.write({"id": [4, 5], "x": [4.0, 5.0]})
    t.delete([1])
    old = t.scan(asof=first.time).to_arrow()
    assert df.count() == old.num_rows == 3
    assert df.filter("x >= 2").count() == t.scan(where=t["x"] >= 2, asof=first.time).to_arrow().num_rows == 2
    assert df.count() == 3  # and stays so, in every later query
    t.write({"id": [6], "x": [6.0]})
    assert df.filter("x > 0").count() == 3
    assert spark.read.format("conch").load(path).count() == t.scan().to_arrow().num_rows == 5


def test_load_of_a_mistyped_path_creates_nothing(spark: Any, tmp_path: Path) -> None:
    typo = tmp_path / "no-such-warehouse"
    with pytest.raises(Exception, match=r"no Conch table at .*no-such-warehouse/t.*not a Conch warehouse"):
        spark.read.format("conch").load(str(typo / "t")).count()
    assert not typo.exists()

    cat = conch.connect(tmp_path / "wh")
    cat.create_table("audio", [("id", pa.int64())])
    before = sorted(p.name for p in (tmp_path / "wh").iterdir())
    with pytest.raises(Exception, match=r"no Conch table 'audoi' .*\['audio'\]"):
        spark.read.format("conch").load(str(tmp_path / "wh" / "audoi")).count()
    assert sorted(p.name for p in (tmp_path / "wh").iterdir()) == before
    with pytest.raises(TableNotFoundError):  # what Spark wraps: the typed error, raised by the source
        from conch.engines.spark.common import Location, open_table

        open_table(Location.from_options({"path": str(typo / "t")}))
    assert not typo.exists()
