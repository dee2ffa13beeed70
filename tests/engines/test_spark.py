"""The `conch` Spark data source: round trips, the `where` option, distributed commits, time travel.

One local Spark session for the whole run (`conftest_spark.spark_session`); small data.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import conch
from conch.apps.pipelines.demo import has_filter_node
from conch.engines.spark.types import arrow_schema, spark_schema
from conch.errors import ConchError
from conftest_spark import spark_session

pytestmark = pytest.mark.spark


@pytest.fixture(scope="session")
def spark() -> Any:
    return spark_session()


def plan_of(df: Any) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def files_of(cat: conch.Catalog, t: conch.Table) -> set[str]:
    """Data files (not snapshots, not abort markers)."""
    return {
        f.path for f in cat.warehouse.storage.list(t.id) if "/meta/" not in f.path and "/_spark_jobs/" not in f.path
    }


def as_spark(table: pa.Table) -> pa.Table:
    """A Conch scan result cast to what Spark returns for it (e.g. uint64 → int64)."""
    return table.cast(arrow_schema(spark_schema(table.schema)))


def spark_arrow(df: Any) -> pa.Table:
    return df.toArrow().sort_by([(df.columns[0], "ascending")])


ALL_TYPES = pa.schema(
    [
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("i64", pa.int64()),
        ("u8", pa.uint8()),
        ("u16", pa.uint16()),
        ("u32", pa.uint32()),
        ("u64", pa.uint64()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("flag", pa.bool_()),
        ("name", pa.string()),
        ("blob", pa.binary()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("local_ts", pa.timestamp("us")),
        ("day", pa.date32()),
        ("price", pa.decimal128(10, 2)),
        ("tags", pa.list_(pa.string())),
        ("doc", pa.struct([("title", pa.string()), ("meta", pa.struct([("size", pa.uint32()), ("ok", pa.bool_())]))])),
    ]
)


def all_types_rows(n: int, start: int = 0) -> pa.Table:
    rows = []
    for i in range(start, start + n):
        null = i % 7 == 3
        rows.append(
            {
                "id": i,
                "i8": None if null else i % 100 - 50,
                "i16": -i,
                "i32": i * 1000,
                "i64": i * 10**12,
                "u8": i % 250,
                "u16": i,
                "u32": i * 7,
                "u64": i * 10**9,
                "f32": i / 4,
                "f64": None if null else i / 3,
                "flag": i % 2 == 0,
                "name": f"name-{i}é",
                "blob": bytes([i % 256]) * (i % 5),
                "ts": dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i),
                "local_ts": dt.datetime(2024, 1, 1) + dt.timedelta(minutes=i),
                "day": dt.date(2024, 1, 1) + dt.timedelta(days=i),
                "price": decimal.Decimal(i) / 4,
                "tags": [f"t{i}", "x"] if not null else None,
                "doc": {"title": f"doc {i}", "meta": {"size": i * 3, "ok": i % 3 == 0}},
            }
        )
    return pa.Table.from_pylist(rows, schema=pa.schema([("id", pa.uint64()), *ALL_TYPES]))


# ----- round trips ------------------------------------------------------------------------------
def test_round_trip_every_type(spark: Any, tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh")
    src = cat.create_table("src", [("id", pa.uint64())], ALL_TYPES)
    src.write(all_types_rows(40))
    expected = src.scan().to_arrow()

    df = spark.read.format("conch").option("partitions", "3").load(str(tmp_path / "wh" / "src"))
    assert df.rdd.getNumPartitions() == 3
    assert spark_arrow(df).equals(as_spark(expected))

    dst = cat.create_table("dst", [("id", pa.uint64())], ALL_TYPES)
    df.write.format("conch").mode("append").save(str(tmp_path / "wh" / "dst"))
    assert dst.scan().to_arrow().equals(expected)
    writes = [c for c in dst.history() if c.kind != "compact"]  # automatic compaction may follow
    assert writes[-1].summary.startswith("Spark write: 40 rows")


def test_child_level_read_and_write(spark: Any, tmp_path: Path) -> None:
    clip = pa.struct([("$", pa.string()), ("score", pa.float64()), ("label", pa.struct([("name", pa.string())]))])
    schema = pa.schema([("title", pa.string()), ("clips", pa.list_(clip))])
    cat = conch.connect(tmp_path / "wh")
    t = cat.create_table("scenes", [("id", pa.int64())], schema)
    t.write(
        [
            {
                "id": i,
                "title": f"s{i}",
                "clips": [{"$": f"c{j}", "score": i + j / 10, "label": {"name": "x"}} for j in range(3)],
            }
            for i in range(5)
        ]
    )
    path = str(tmp_path / "wh" / "scenes")
    clips = spark.read.format("conch").option("level", "clips").load(path)
    assert clips.columns == ["id", "clips", "score", "label"]
    assert spark_arrow(clips.orderBy("id", "clips")).equals(t.scan(level="clips").to_arrow())

    # Write child rows from Spark with their full keys: update one score, add a clip.
    rows = spark.createDataFrame([(1, "c0", 9.5), (4, "c9", 1.0)], "id long, clips string, score double")
    rows.write.format("conch").mode("append").option("level", "clips").save(path)
    got = {(r["id"], r["clips"]): r["score"] for r in t.scan("score", level="clips").to_pylist()}
    assert got[(1, "c0")] == 9.5 and got[(4, "c9")] == 1.0 and got[(1, "c1")] == 1.1
    assert len(got) == 16


# ----- the `where` option ----------------------------------------------------------------------
def metrics(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in directory.glob("*.json")]


def test_where_option_prunes_by_stats_and_key_range(spark: Any, tmp_path: Path) -> None:
    # Four separate runs to prune: no automatic compaction merging them.
    cat = conch.connect(tmp_path / "wh", maintenance=conch.Policy(auto=False))
    t = cat.create_table("t", [("id", pa.int64())])
    for run in range(4):  # four sorted runs with disjoint ids and score ranges: stats can prune
        ids = list(range(run * 100, run * 100 + 100))
        t.write({"id": ids, "score": [float(i) for i in ids], "name": [f"n{i % 10}" for i in ids]})
    path = str(tmp_path / "wh" / "t")

    def read(where: str, mdir: Path) -> Any:
        return spark.read.format("conch").option("where", where).option("metricsDir", str(mdir)).load(path)

    df = read("score >= 120 and score < 150 and name is not None", tmp_path / "m1")
    assert not has_filter_node(plan_of(df))
    assert sorted(r.id for r in df.collect()) == list(range(120, 150))
    m = metrics(tmp_path / "m1")
    assert sum(x["fragments_pruned_by_stats"] for x in m) >= 1 or sum(x["key_spaces"] for x in m) < 4

    df = read("id >= 250 and id < 260", tmp_path / "m2")  # a key range: runs outside it are skipped
    assert sorted(r.id for r in df.collect()) == list(range(250, 260))
    m = metrics(tmp_path / "m2")
    assert sum(x["key_spaces"] for x in m) == 1
    assert sum(x["pruned"].get("key_spaces_span", 0) for x in m) >= 3

    # Key and value terms together, a Spark filter on top (LIKE: evaluated by Spark).
    df = read("id in [1, 11, 12, 300] and score < 100", tmp_path / "m3")
    assert sorted(r.id for r in df.filter(df.name.startswith("n1")).collect()) == [1, 11]
    want = [i for i in t.scan(where=t["score"] < 100).to_arrow().column("id").to_pylist() if i in {1, 11, 12, 300}]
    assert sorted(r.id for r in df.collect()) == want == [1, 11, 12]


def test_where_option_errors_name_the_problem(spark: Any, tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh")
    cat.create_table("t", [("id", pa.int64())]).write({"id": [1, 2], "x": [1.0, 2.0]})
    path = str(tmp_path / "wh" / "t")
    for where, words in [("nope > 1", "nope"), ("x >", "cannot parse")]:
        with pytest.raises(Exception, match=words):
            spark.read.format("conch").option("where", where).load(path).count()
    # a term mixing key and value columns is the scan's, as in Python (it was refused before)
    mixed = spark.read.format("conch").option("where", "id < 2 or x > 1.5").load(path)
    assert sorted(r.id for r in mixed.collect()) == [1, 2]
    assert spark.read.format("conch").option("where", "id < 2 and x > 0").load(path).count() == 1


def test_spark_and_python_writers_commit_concurrently(spark: Any, tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh")
    t = cat.create_table("t", [("id", pa.int64())], pa.schema([("v", pa.int64()), ("who", pa.string())]))
    stop = threading.Event()
    written: list[int] = []
    errors: list[BaseException] = []

    def python_writer() -> None:
        # Its own catalog, as another process would have: commits race through the metastore's CAS.
        py = conch.connect(tmp_path / "wh").table("t")
        try:
            while not stop.is_set() or len(written) < 5:
                ids = list(range(100_000 + len(written) * 10, 100_000 + len(written) * 10 + 10))
                py.write({"id": ids, "v": ids, "who": ["python"] * 10})
                written.append(len(ids))
        except BaseException as e:
            errors.append(e)

    # PySpark runs the job from this (main) thread: its data source registry is per JVM thread.
    writer = threading.Thread(target=python_writer)
    writer.start()
    try:
        df = spark.range(0, 20_000, numPartitions=4).selectExpr("id", "id * 2 as v", "'spark' as who")
        df.write.format("conch").mode("append").save(str(tmp_path / "wh" / "t"))
    finally:
        stop.set()
        writer.join()
    assert not errors, errors
    out = t.scan().to_arrow()
    assert out.num_rows == 20_000 + sum(written)
    assert pc.sum(pc.equal(out.column("who"), "spark")).as_py() == 20_000
    kinds = [c.summary.startswith("Spark") for c in t.history() if c.kind not in ("flush", "compact")]
    assert len(kinds) == 1 + len(written) and sum(kinds) == 1


def test_overwrite_replaces_and_time_travel_still_sees_old(spark: Any, tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh")
    t = cat.create_table("t", [("id", pa.int64())], pa.schema([("v", pa.int64())]))
    first = t.write({"id": [1, 2, 3], "v": [1, 2, 3]})
    spark.range(10, 12).selectExpr("id", "id as v").write.format("conch").mode("overwrite").save(
        str(tmp_path / "wh" / "t")
    )
    assert t.scan().to_arrow().to_pydict()["id"] == [10, 11]
    assert t.history()[-1].kind == "overwrite"
    assert t.scan(asof=first.time).to_arrow().to_pydict()["id"] == [1, 2, 3]


def test_failed_task_commits_nothing_and_leaves_no_files(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    cat = conch.connect(tmp_path / "wh")
    t = cat.create_table("t", [("id", pa.int64())], pa.schema([("v", pa.int64())]))
    t.write({"id": [0], "v": [0]})
    before_files, before_log = files_of(cat, t), len(t.history())

    @F.udf("long")
    def boom(i: int) -> int:
        if i == 1_900:  # deep into partition 1, after it wrote several runs
            raise RuntimeError("task failed on purpose")
        return i

    df = spark.range(0, 2_000, numPartitions=2).select("id", boom("id").alias("v"))
    with pytest.raises(Exception, match="task failed on purpose"):
        df.write.format("conch").mode("append").option("chunkRows", "200").save(str(tmp_path / "wh" / "t"))
    assert len(t.history()) == before_log
    # Spark aborts while cancelled tasks may still be finishing: give them a moment to clean up.
    deadline = time.monotonic() + 10
    while files_of(cat, t) - before_files and time.monotonic() < deadline:
        time.sleep(0.2)
    assert files_of(cat, t) == before_files


def test_same_key_in_two_tasks_is_rejected(spark: Any, tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh")
    t = cat.create_table("t", [("id", pa.int64())], pa.schema([("v", pa.int64())]))
    before = files_of(cat, t)
    df = spark.range(0, 100, numPartitions=2).selectExpr("id % 60 as id", "id as v")
    with pytest.raises(Exception, match="appears more than once"):
        df.write.format("conch").mode("append").save(str(tmp_path / "wh" / "t"))
    assert t.history() == [] and files_of(cat, t) == before


def test_schema_is_validated_before_any_file(spark: Any, tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh")
    t = cat.create_table("t", [("id", pa.int64())], pa.schema([("v", pa.float64())]))
    path = str(tmp_path / "wh" / "t")
    with pytest.raises(Exception, match="mergeSchema"):
        spark.range(3).selectExpr("id", "1.0d as v", "'x' as extra").write.format("conch").mode("append").save(path)
    with pytest.raises(Exception, match="cannot be written"):
        spark.range(3).selectExpr("id", "'text' as v").write.format("conch").mode("append").save(path)
    with pytest.raises(Exception, match="key columns"):
        spark.range(3).selectExpr("id as other", "1.0d as v").write.format("conch").mode("append").save(path)
    assert t.history() == [] and files_of(cat, t) == set()

    # A decimal (Spark's type for `id * 0.5`) casts to the double column; mergeSchema adds `extra`.
    df = spark.range(3).selectExpr("id", "id * 0.5 as v", "'x' as extra")
    df.write.format("conch").mode("append").option("mergeSchema", "true").save(path)
    assert [c.kind for c in t.history() if c.kind != "compact"] == ["schema", "write"]
    assert t.scan().to_arrow().to_pydict() == {"id": [0, 1, 2], "v": [0.0, 0.5, 1.0], "extra": ["x"] * 3}


def test_write_creates_a_missing_table_with_the_key_option(spark: Any, tmp_path: Path) -> None:
    df = spark.range(5).selectExpr("id", "concat('k', id) as name")
    df.write.format("conch").mode("append").option("key", "name").save(str(tmp_path / "wh" / "new"))
    t = conch.connect(tmp_path / "wh").table("new")
    assert t.key_schema.names == ["name"]
    assert t.scan().to_arrow().to_pydict()["name"] == [f"k{i}" for i in range(5)]


# ----- time travel -----------------------------------------------------------------------------
def test_asof_and_since_equal_table_scan(spark: Any, tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh")
    t = cat.create_table("t", [("id", pa.int64())])
    c1 = t.write({"id": [1, 2, 3], "x": [1.0, 2.0, 3.0]})
    c2 = t.write({"id": [2, 4], "x": [20.0, 40.0]})
    t.delete([1])
    path = str(tmp_path / "wh" / "t")
    for asof in (c1.time, c2.time):
        df = spark.read.format("conch").option("asof", str(asof)).load(path)
        assert spark_arrow(df).equals(t.scan(asof=asof).to_arrow())
    iso = c1.datetime.isoformat()
    assert spark.read.format("conch").option("asof", iso).load(path).count() == 3
    since = spark.read.format("conch").option("since", str(c2.time)).load(path)
    assert spark_arrow(since).equals(t.scan(since=c2.time).to_arrow())
    latest = spark.read.format("conch").load(path)
    assert spark_arrow(latest).equals(t.scan().to_arrow())


def test_a_table_never_written_reads_as_empty(spark: Any, tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh")
    t = cat.create_table("t", [("id", pa.int64())], pa.schema([("x", pa.float64())]))
    path = str(tmp_path / "wh" / "t")
    df = spark.read.format("conch").option("partitions", "3").load(path)
    assert df.columns == ["id", "x"] and df.count() == 0
    assert df.filter("x > 1").collect() == []
    t.write({"id": [1, 2], "x": [1.0, 2.0]})
    assert df.count() == 0  # the DataFrame is pinned before the first commit
    assert spark_arrow(spark.read.format("conch").load(path)).equals(t.scan().to_arrow())


def test_columns_option_projects_groups(spark: Any, tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh")
    t = cat.create_table("t", [("id", pa.int64())])
    t.write([{"id": i, "x": float(i), "audio": {"bytes": b"abc", "meta": {"size": 3}}} for i in range(4)])
    df = spark.read.format("conch").option("columns", "audio.meta,x").load(str(tmp_path / "wh" / "t"))
    assert df.columns == ["id", "audio", "x"]
    assert df.filter(df.audio.meta.size == 3).count() == 4
    # Key columns may be named (they always come first) and filtered by `where`.
    keyed = (
        spark.read.format("conch")
        .option("columns", "id,x")
        .option("where", "id >= 2 and x < 3")
        .load(str(tmp_path / "wh" / "t"))
    )
    assert keyed.columns == ["id", "x"]
    assert [(r.id, r.x) for r in keyed.collect()] == [(2, 2.0)]
    assert os.path.isdir(tmp_path / "wh")


def test_register_works_on_every_session(spark: Any, tmp_path: Path) -> None:
    """`spark.newSession()` has its own source registry: `register` on it used to fail with
    DATA_SOURCE_ALREADY_EXISTS (PySpark checks the *active* session), leaving it unable to read."""
    import conch.engines.spark

    t = conch.connect(tmp_path / "wh").create_table("t", [("id", pa.int64())])
    t.write({"id": [1, 2, 3], "x": [1.0, 2.0, 3.0]})
    other = spark.newSession()
    assert conch.engines.spark.register(other) is other
    assert conch.engines.spark.register(other) is other  # again: a no-op
    assert other.read.format("conch").load(str(tmp_path / "wh" / "t")).count() == 3
    assert spark.read.format("conch").load(str(tmp_path / "wh" / "t")).count() == 3  # the first still reads
    assert conch.engines.spark.register(spark) is spark  # already registered: a no-op, no error


def test_sql_reads_only_the_columns_a_query_uses(spark: Any, tmp_path: Path) -> None:
    """`conch.engines.spark.sql`: the same rows as Spark SQL over whole-table views, with each view
    reading only the columns the query (subqueries and self-joins included) references."""
    import conch.engines.spark

    cat = conch.connect(tmp_path / "wh")
    t = cat.create_table("t", [("id", pa.int64())])
    t.write({"id": list(range(20)), "x": [float(i) for i in range(20)], "y": [f"y{i % 3}" for i in range(20)],
             "blob": [b"z" * 100] * 20, "z": list(range(20))})  # fmt: skip
    u = cat.create_table("u", [("k", pa.int64())])
    u.write({"k": list(range(0, 20, 2)), "v": list(range(10)), "w": ["w"] * 10})
    paths = {"t": str(tmp_path / "wh" / "t"), "u": str(tmp_path / "wh" / "u")}
    query = (
        "select t.y, sum(u.v) as s, count(*) as n from t join u on t.id = u.k "
        "where t.x > (select avg(z) from t as t2 where t2.y = 'y1') group by t.y order by t.y"
    )
    got = conch.engines.spark.sql(spark, query, paths).collect()
    assert spark.table("t").columns == ["id", "x", "y", "z"]  # no `blob`: never referenced
    assert spark.table("u").columns == ["k", "v"]
    for name, path in paths.items():
        spark.read.format("conch").load(path).createOrReplaceTempView(name)
    assert got == spark.sql(query).collect()
    assert conch.engines.spark.sql(spark, "select count(*) as n from u", paths).collect()[0].n == 10
    assert spark.table("u").columns == ["k", "v"]  # keys only: plus the narrowest value column


def test_branch_read_and_write(spark: Any, tmp_path: Path) -> None:
    """A branch is a table named `t@b` to Spark too: writes land on the branch only."""
    cat = conch.connect(tmp_path / "wh")
    t = cat.create_table("t", [("id", pa.int64())])
    t.write({"id": [1, 2], "x": [1.0, 2.0]})
    dev = t.branch("dev")
    path = str(tmp_path / "wh" / "t@dev")
    spark.createDataFrame([(3, 3.0)], "id long, x double").write.format("conch").mode("append").save(path)
    assert spark.read.format("conch").load(path).count() == 3
    assert dev.to_arrow().column("id").to_pylist() == [1, 2, 3]
    assert t.to_arrow().column("id").to_pylist() == [1, 2]


def test_auto_compact_option_decides_whether_the_job_commit_compacts(spark: Any, tmp_path: Path) -> None:
    """A job's commit runs the policy's automatic compaction unless `autoCompact=false`; either
    way the rows read are the same, and a value other than true/false is refused up front."""

    def history_after_job(name: str, **options: str) -> tuple[list[str], pa.Table]:
        local = conch.connect(tmp_path / "wh", maintenance=conch.Policy(auto=False))
        t = local.create_table(name, [("id", pa.int64())], pa.schema([("v", pa.int64())]))
        for i in range(4):  # four overlapping runs: the default policy's trigger (l0_trigger=4)
            keys = range(i, 400, 4 + i)
            t.write({"id": list(keys), "v": [i] * len(keys)})
        df = spark.range(0, 400, 2, numPartitions=2).selectExpr("id", "id * 10 as v")
        df.write.format("conch").mode("append").options(**options).save(str(tmp_path / "wh" / name))
        t = conch.connect(tmp_path / "wh", maintenance=conch.Policy(auto=False)).table(name)
        return [c.kind for c in t.history()], t.scan().to_arrow().sort_by("id")

    kinds_on, rows_on = history_after_job("on")
    kinds_off, rows_off = history_after_job("off", autoCompact="false")
    assert kinds_off == ["write"] * 5
    assert kinds_on[:5] == ["write"] * 5 and "compact" in kinds_on[5:]
    model = {k: i for i in range(4) for k in range(i, 400, 4 + i)} | {k: k * 10 for k in range(0, 400, 2)}
    assert rows_on.equals(rows_off)
    assert dict(zip(rows_on["id"].to_pylist(), rows_on["v"].to_pylist())) == model
    with pytest.raises(Exception, match="autoCompact must be true or false"):
        spark.range(3).selectExpr("id", "id as v").write.format("conch").mode("append").option(
            "autoCompact", "sometimes"
        ).save(str(tmp_path / "wh" / "off"))


@pytest.mark.parametrize("name", ["autoCompact", "mergeSchema", "perCommit", "applyChanges"])
def test_every_boolean_option_is_parsed_by_one_strict_rule(name: str) -> None:
    """The Spark source's boolean options share one rule: true/false in any case, absent is the
    default, anything else a ConchError naming the option (before: mergeSchema, perCommit and
    applyChanges read a misspelt value as false)."""
    from conch.engines.spark.common import flag_option

    assert flag_option({name.lower(): "TRUE"}, name, default=False) is True
    assert flag_option({name: "false"}, name, default=True) is False
    assert flag_option({}, name, default=True) is True
    with pytest.raises(ConchError, match=f"{name} must be true or false, got 'ture'"):
        flag_option({name.lower(): "ture"}, name, default=False)
