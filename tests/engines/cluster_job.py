"""Spark jobs on `local-cluster` (executor JVMs and Python workers in processes of their own, each
in its own working directory) over tables reached only through connection options: a non-default
metastore, a token, storage options, remote warehouses. Run by `helpers.run_spark_job` in a fresh,
empty working directory; prints one JSON line with what each target gave and which processes
did the work.

usage: python cluster_job.py JOB '[{"warehouse": ..., "table": ..., "metastore": ..., ...}, ...]'
with JOB `write` (`test_spark_remote.py`) or `read` (`test_snapshot_spark.py`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

import conch.engines.spark


def write_then_read(spark: object, opts: dict[str, str]) -> dict[str, int]:
    df = spark.range(0, 2000, numPartitions=4).selectExpr("id", "id % 7 AS bucket", "CAST(id AS STRING) AS name")  # type: ignore[attr-defined]
    df.repartitionByRange(4, "id").write.format("conch").options(**opts, key="id").mode("append").save()
    update = spark.range(0, 2000, 100, numPartitions=2).selectExpr("id", "-1L AS bucket")  # type: ignore[attr-defined]
    update.write.format("conch").options(**opts).mode("append").save()
    read = spark.read.format("conch").options(**opts, partitions="4").load()  # type: ignore[attr-defined]
    return {"total": read.count(), "updated": read.filter("bucket = -1").count()}


def read_levels(spark: object, opts: dict[str, str]) -> dict[str, int]:
    parents = spark.read.format("conch").options(**opts, partitions="3").load()  # type: ignore[attr-defined]
    kids = spark.read.format("conch").options(**opts, level="kids", partitions="2").load()  # type: ignore[attr-defined]
    p = parents.selectExpr("count(*) AS n", "sum(v) AS s").collect()[0]
    k = kids.selectExpr("count(*) AS n", "sum(v) AS s").collect()[0]
    return {"parents": p["n"], "parent_sum": p["s"], "kids": k["n"], "kid_sum": k["s"]}


JOBS: dict[str, Callable[[object, dict[str, str]], dict[str, int]]] = {"write": write_then_read, "read": read_levels}


def main() -> None:
    job, targets = JOBS[sys.argv[1]], json.loads(sys.argv[2])
    spark = conch.engines.spark.session(
        f"conch-cluster-{sys.argv[1]}",
        master="local-cluster[2,1,1024]",
        conf={"spark.driver.memory": "1g", "spark.executor.memory": "1g", "spark.sql.shuffle.partitions": "4"},
    )
    try:
        results = [job(spark, opts) for opts in targets]
        # Which processes did the work: the executors' Python workers report their pid and cwd.
        workers = spark.sparkContext.parallelize(range(8), 8).map(lambda _: (os.getpid(), os.getcwd())).distinct()
        print(json.dumps({"results": results, "workers": workers.collect(), "driver_cwd": os.getcwd()}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
