"""A Spark read job on `local-cluster` (executor JVMs and Python workers in processes of their own,
each in its own working directory) over tables reached only through connection options: a
non-default metastore, a token, storage options. Run by `test_snapshot_spark.py` in an empty
working directory; prints one JSON line with what it read.

usage: python snapshot_spark_job.py '[{"warehouse": ..., "table": ..., "metastore": ..., ...}, ...]'
"""

from __future__ import annotations

import json
import os
import sys

import conch.engines.spark


def run(spark: object, opts: dict[str, str]) -> dict[str, int]:
    parents = spark.read.format("conch").options(**opts, partitions="3").load()  # type: ignore[attr-defined]
    kids = spark.read.format("conch").options(**opts, level="kids", partitions="2").load()  # type: ignore[attr-defined]
    p = parents.selectExpr("count(*) AS n", "sum(v) AS s").collect()[0]
    k = kids.selectExpr("count(*) AS n", "sum(v) AS s").collect()[0]
    return {"parents": p["n"], "parent_sum": p["s"], "kids": k["n"], "kid_sum": k["s"]}


def main() -> None:
    targets = json.loads(sys.argv[1])
    spark = conch.engines.spark.session(
        "conch-snapshot",
        master="local-cluster[2,1,1024]",
        conf={"spark.driver.memory": "1g", "spark.executor.memory": "1g", "spark.sql.shuffle.partitions": "2"},
    )
    try:
        results = [run(spark, opts) for opts in targets]
        workers = spark.sparkContext.parallelize(range(8), 8).map(lambda _: (os.getpid(), os.getcwd())).distinct()
        print(json.dumps({"results": results, "workers": workers.collect()}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
