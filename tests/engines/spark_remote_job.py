"""A Spark job on `local-cluster` (executor JVMs and Python workers in processes of their own,
each in its own working directory) against remote warehouses; run by `test_spark_remote.py`
in a fresh, empty working directory. Prints one JSON line with what it saw.

usage: python spark_remote_job.py '[{"warehouse": ..., "table": ..., "metastore": ..., ...}, ...]'
"""

from __future__ import annotations

import json
import os
import sys

import conch.engines.spark


def run(spark: object, opts: dict[str, str]) -> dict[str, int]:
    df = spark.range(0, 2000, numPartitions=4).selectExpr("id", "id % 7 AS bucket", "CAST(id AS STRING) AS name")  # type: ignore[attr-defined]
    df.repartitionByRange(4, "id").write.format("conch").options(**opts, key="id").mode("append").save()
    update = spark.range(0, 2000, 100, numPartitions=2).selectExpr("id", "-1L AS bucket")  # type: ignore[attr-defined]
    update.write.format("conch").options(**opts).mode("append").save()
    read = spark.read.format("conch").options(**opts, partitions="4").load()  # type: ignore[attr-defined]
    return {"total": read.count(), "updated": read.filter("bucket = -1").count()}


def main() -> None:
    targets = json.loads(sys.argv[1])
    spark = conch.engines.spark.session(
        "conch-remote",
        master="local-cluster[2,1,1024]",
        conf={"spark.driver.memory": "1g", "spark.executor.memory": "1g", "spark.sql.shuffle.partitions": "4"},
    )
    try:
        results = [run(spark, opts) for opts in targets]
        # Which processes did the work: the executors' Python workers report their pid and cwd.
        workers = spark.sparkContext.parallelize(range(8), 8).map(lambda _: (os.getpid(), os.getcwd())).distinct()
        print(json.dumps({"results": results, "workers": workers.collect(), "driver_cwd": os.getcwd()}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
