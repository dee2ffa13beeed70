"""Conch on Apache Spark: the `conch` data source (read, write, pushdown) and a session helper.

Importing this package imports PySpark (install with `pip install 'conch[spark]'`); the core
`conch` package never does.

>>> import conch.spark
>>> spark = conch.spark.session()  # doctest: +SKIP
>>> df = spark.read.format("conch").load("warehouse/audio")  # doctest: +SKIP
>>> conch.spark.delete_where(spark, "warehouse/audio", where="silence_ratio > 0.9")  # doctest: +SKIP
>>> conch.spark.compact(spark, "warehouse/audio")  # doctest: +SKIP
>>> conch.spark.sql(spark, "select count(*) from a where x > 1", {"a": "warehouse/audio"})  # doctest: +SKIP
"""

from conch.spark.compaction import compact
from conch.spark.delete import delete_where
from conch.spark.prune import sql
from conch.spark.session import register, session
from conch.spark.update import update_where

__all__ = ["compact", "delete_where", "register", "session", "sql", "update_where"]
