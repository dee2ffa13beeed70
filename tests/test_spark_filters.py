"""Spark filter → Conch predicate translation (no Spark session needed)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pyspark.sql import datasource as ds

from conch.keys import KeyRange
from conch.spark.filters import FilterTranslator

COLUMNS = {"x": pa.float64(), "name": pa.string(), "audio.meta.size": pa.uint64(), "ts": pa.timestamp("us", tz="UTC")}


def translator() -> FilterTranslator:
    return FilterTranslator(["id"], COLUMNS, {"id": pa.uint64()})


def test_value_filters_become_where_and_rejects_are_the_same_objects() -> None:
    like = ds.StringStartsWith(("name",), "a")
    unknown = ds.EqualTo(("nope",), 1)
    filters = [
        ds.IsNotNull(("x",)),
        ds.LessThan(("x",), 0.1),
        ds.In(("name",), ["a", "b"]),
        ds.Not(ds.EqualTo(("audio", "meta", "size"), 3)),
        ds.GreaterThan(("ts",), dt.datetime(2024, 1, 1, tzinfo=dt.UTC)),
        like,
        unknown,
    ]
    pushed, rejected = translator().push(filters)
    assert len(rejected) == 2 and rejected[0] is like and rejected[1] is unknown
    text = repr(pushed.where)
    assert "(x < 0.1)" in text and "name.isin(['a', 'b'])" in text and "~(audio.meta.size == 3)" in text
    assert pushed.key_filter is None and pushed.key_range is None


def test_key_filters_give_a_range_and_an_exact_filter() -> None:
    pushed, rejected = translator().push(
        [ds.IsNotNull(("id",)), ds.GreaterThan(("id",), 10), ds.LessThanOrEqual(("id",), 20)]
    )
    assert rejected == []
    assert pushed.key_range == KeyRange((10,), (21,))
    assert repr(pushed.key_filter) == "((~id.is_null() & (id > 10)) & (id <= 20))"
    pushed, _ = translator().push([ds.In(("id",), [5, 3, 9])])
    assert pushed.key_range == KeyRange((3,), (10,))
    pushed, _ = translator().push([ds.GreaterThan(("id",), -5)])  # outside uint64: no range, still exact
    assert pushed.key_range is None and pushed.key_filter is not None


def test_null_comparisons_follow_sql() -> None:
    pushed, rejected = translator().push([ds.EqualNullSafe(("x",), None)])
    assert repr(pushed.where) == "x.is_null()" and rejected == []
    f = ds.EqualTo(("x",), None)
    _, rejected = translator().push([f])
    assert rejected == [f]
    f = ds.EqualTo(("name",), 5)  # a literal that does not convert to the column's type
    _, rejected = translator().push([f])
    assert rejected[0] is f
