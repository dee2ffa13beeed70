"""`conch.engines.spark.sql` pushes the Filter Spark plans above each Conch scan into the view's
`where` option: every literal type and operator, exact against plain Spark over the same table.

One local Spark session for the whole run (`conftest_spark.spark_session`); one small table.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import pyarrow as pa
import pytest

import conch
import conch.engines.spark
from conch.engines.spark.prune import _seq
from conch.expr.syntax import parse
from conftest_spark import spark_session

pytestmark = pytest.mark.spark

N = 40
UTC = dt.UTC


def _rows(ids: range, shift: int) -> pa.Table:
    """Rows of every literal type, nulls and float edge values included; `shift` changes the values
    a second write gives the same keys (a filter must see the fresh ones)."""
    v = [(i + shift) % N for i in ids]
    floats = [float("nan"), -0.0, 0.0, None, 1.5, 2.5, 3.0, -1.0]
    strings = ["ab", "ac", "b'c", "a_b", None, "é", "a", "b"]
    return pa.table({
        "id": pa.array(list(ids), pa.int64()),
        "i": pa.array([None if x % 9 == 4 else x % 7 - 3 for x in v], pa.int32()),
        "f": pa.array([floats[x % 8] for x in v], pa.float64()),
        "m": pa.array([None if x % 11 == 5 else decimal.Decimal(x) / 100 for x in v], pa.decimal128(15, 2)),
        "s": pa.array([strings[x % 8] for x in v], pa.string()),
        "d": pa.array([None if x % 13 == 6 else dt.date(2020, 1, 1 + x % 30) for x in v], pa.date32()),
        "ts": pa.array([dt.datetime(2020, 1, 1, x % 24, 0, 0, 500000 * (x % 2), tzinfo=UTC) for x in v], pa.timestamp("us", "UTC")),
        "n": pa.array([dt.datetime(2020, 1, 1, x % 24, 30) for x in v], pa.timestamp("us")),
        "b": pa.array([None if x % 5 == 0 else x % 3 == 0 for x in v], pa.bool_()),
    })  # fmt: skip


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> str:
    wh = tmp_path_factory.mktemp("sqlf") / "wh"
    t = conch.connect(wh).create_table("t", [("id", pa.int64())])
    t.write(_rows(range(N), 0))
    t.write(_rows(range(0, N, 3), 17))  # newer values for a third of the keys
    return str(wh / "t")


def pushed(spark: Any, view: str) -> list[str | None]:
    """The `where` option of each Conch scan behind the registered view."""
    plan = spark.table(view)._jdf.queryExecution().optimizedPlan()
    return [leaf.relation().options().get("where") for leaf in _seq(plan.collectLeaves())]


def check(spark: Any, path: str, query: str) -> str | None:
    """Run `query` through `sql()` and through plain Spark over a whole-table view; the rows must
    be the same. Returns the `where` option `sql()` registered."""
    got = sorted(map(tuple, conch.engines.spark.sql(spark, query, {"t": path}).collect()))
    (where,) = set(pushed(spark, "t"))
    spark.read.format("conch").load(path).createOrReplaceTempView("t")
    want = sorted(map(tuple, spark.sql(query).collect()))
    assert got == want, (query, where)
    if where is not None:
        parse(where)
    return where


# (condition, what the pushed `where` must contain): two conditions per literal type cover
# =, <>, <, <=, >, >=, IN, BETWEEN, NOT, OR
CASES = [
    ("i > -2 and i <= 2 or i in (3, -3)", ["(`i` > -2)", "(`i` <= 2)", "`i` in (3, -3)"]),
    ("(i < -1 or i >= 3 or i = 0) and not (i = -3)", ["(`i` < -1)", "(`i` >= 3)", "(not (`i` = -3))"]),
    ("id between 5 and 30 and id <> 7", ["(`id` >= 5)", "(`id` <= 30)", "(not (`id` = 7))"]),
    (
        "m > 0.05 and m <= 0.2 or m in (0.3, 0.31)",
        ["(`m` > decimal '0.05')", "`m` in (decimal '0.30', decimal '0.31')"],
    ),
    ("(m < 0.1 or m >= 0.35 or m = 0.2) and m <> 0.02", ["(`m` < decimal '0.10')", "(`m` >= decimal '0.35')"]),
    ("s > 'ab' and s <= 'b' or s in ('a_b', 'é')", ["(`s` > 'ab')", "(`s` <= 'b')", "`s` in ('a_b', 'é')"]),
    ("(s < 'ab' or s >= 'b\\'c' or s = 'ac') and s <> 'x'", ["(`s` >= 'b\\'c')", "(`s` = 'ac')"]),
    ("s like 'a%' and s not like 'ab%'", ["(`s` >= 'a')", "(`s` < 'b')", "(not ((`s` >= 'ab') and (`s` < 'ac')))"]),
    (
        "d > date '2020-01-05' and d <= date '2020-01-20' or d in (date '2020-01-01', date '2020-01-30')",
        ["(`d` > date '2020-01-05')", "`d` in (date '2020-01-01', date '2020-01-30')"],
    ),
    ("d not between date '2020-01-03' and date '2020-01-25' or d is null", ["(`d` < date '2020-01-03')", "is null"]),
    (
        "ts > timestamp '2020-01-01 05:00:00' and ts <= timestamp '2020-01-01 20:00:00.5' or ts = timestamp '2020-01-01 03:00:00'",
        ["(`ts` > timestamp '2020-01-01 05:00:00+00:00')", "(`ts` <= timestamp '2020-01-01 20:00:00.500000+00:00')"],
    ),
    (
        "n >= timestamp_ntz '2020-01-01 04:30:00' and n < timestamp_ntz '2020-01-01 12:00:00'",
        ["(`n` >= timestamp '2020-01-01 04:30:00')", "(`n` < timestamp '2020-01-01 12:00:00')"],
    ),
    ("f < 1.5 or f = 3.0 or f in (0.0, 2.5)", ["(`f` < 1.5)", "(`f` = 0.0)"]),  # -0.0 matches 0.0 in both
    ("b or not b and i is null", ["(`b` = true)", "(not (`b` = true))", "(`i` is null)"]),
    ("m is null or s is not null and not (d < date '2020-01-10')", ["(`m` is null)", "(`d` >= date '2020-01-10')"]),
]


@pytest.mark.parametrize(("condition", "parts"), CASES, ids=[c for c, _ in CASES])
def test_sql_pushes_every_literal_type_and_operator(spark: Any, table: str, condition: str, parts: list[str]) -> None:
    where = check(spark, table, f"select id, i, s from t where {condition}")
    assert where is not None, condition
    for part in parts:
        assert part in where, (part, where)


def test_sql_keeps_spark_filters_conch_would_answer_differently(spark: Any, table: str) -> None:
    """Spark orders NaN above every number (`f > 1.0` holds for NaN, never in Arrow): not pushed.
    A timestamp literal is read in the session's time zone."""
    where = check(spark, table, "select id from t where f > 1.0 or f >= 3.0")
    assert where is None or "`f` >" not in where
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        where = check(spark, table, "select id from t where ts > timestamp '2020-01-01 00:00:00' and ts <= timestamp '2020-01-01 09:00:00'")  # fmt: skip
        assert where is not None and "(`ts` <= timestamp '2020-01-01 14:00:00+00:00')" in where, where
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")


def test_sql_pushes_the_or_of_a_tables_uses(spark: Any, table: str) -> None:
    """A table read several times in one query (a self-join, a subquery) has one view: it gets the
    OR of its uses' filters, and none where one use has none. Every answer stays exact."""
    where = check(spark, table, "select a.id, b.id from t a join t b on a.i = b.i where a.s like 'a%' and b.d < date '2020-01-10'")  # fmt: skip
    assert where is not None and " or " in where and "`s` >= 'a'" in where and "`d` < date '2020-01-10'" in where
    where = check(
        spark, table, "select id from t where m > (select avg(m) from t where d > date '2020-01-15') and s = 'ab'"
    )
    assert where is not None and "`d` > date '2020-01-15'" in where and "`s` = 'ab'" in where
    # key terms and value terms are ORed separately (`where` refuses a term mixing both)
    where = check(spark, table, "select a.id from t a join t b on a.i = b.i where a.id < 10 and a.s = 'ab' and b.id > 30 and b.s = 'ac'")  # fmt: skip
    assert where is not None and "((`id` < 10) or (`id` > 30))" in where, where
    assert check(spark, table, "select a.id, (select count(*) from t) as n from t a where a.s = 'ab'") is None
