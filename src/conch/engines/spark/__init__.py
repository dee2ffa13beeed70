"""Conch on Apache Spark: the `conch` data source (read, write, pushdown) and a session helper.

Importing this package imports PySpark (install with `pip install 'conch[spark]'`); the core
`conch` package never does.

>>> import conch.engines.spark
>>> spark = conch.engines.spark.session()  # doctest: +SKIP
>>> df = spark.read.format("conch").load("warehouse/audio")  # doctest: +SKIP
>>> conch.engines.spark.delete_where(spark, "warehouse/audio", where="silence_ratio > 0.9")  # doctest: +SKIP
>>> conch.engines.spark.compact(spark, "warehouse/audio")  # doctest: +SKIP
>>> conch.engines.spark.build_indexes(spark, "warehouse/audio")  # doctest: +SKIP
>>> conch.engines.spark.sql(spark, "select count(*) from a where x > 1", {"a": "warehouse/audio"})  # doctest: +SKIP
"""

from conch.engines.spark.compaction import compact
from conch.engines.spark.delete import delete_where
from conch.engines.spark.enrich import run_spark as _registered_enrich_engine  # noqa: F401 - registers it
from conch.engines.spark.indexes import build_indexes
from conch.engines.spark.prune import sql
from conch.engines.spark.session import register, session
from conch.engines.spark.update import update_where

__all__ = ["build_indexes", "compact", "delete_where", "register", "session", "sql", "update_where"]
