"""A local Spark session with sensible defaults, and registration of the `conch` source.

`session()` takes care of the traps listed in DESIGN §8: Python workers run this interpreter
(`PYSPARK_PYTHON`), timestamps are UTC, and logging is quiet (a log4j2 file shipped with
this package silences the per-task stack traces Spark prints for a failed Python task).

>>> import conch.engines.spark
>>> spark = conch.engines.spark.session()  # doctest: +SKIP
>>> spark.read.format("conch").load("warehouse/audio").show()  # doctest: +SKIP
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from importlib import resources
from typing import Any


def log4j_config() -> str:
    """Path of the quiet log4j2 configuration shipped as package data."""
    return str(resources.files("conch.engines.spark").joinpath("log4j2.properties"))


def register(spark: Any) -> Any:
    """Register the `conch` data source with a session (any session: `spark.newSession()` has
    its own registry); registering it again is a no-op. Returns the session.

    PySpark 4.3 checks a new name against the *active* session's sources, not the target's: a
    `newSession()` (not active) was refused with `DATA_SOURCE_ALREADY_EXISTS` and could then
    not `read.format("conch")`. The target is made the active session while registering.
    """
    from conch.engines.spark.source import ConchDataSource

    jss = getattr(spark, "_jsparkSession", None)
    if jss is None:  # Spark Connect: the server's session, one registry
        spark.dataSource.register(ConchDataSource)
        return spark
    if jss.sessionState().dataSourceManager().dataSourceExists(ConchDataSource.name()):
        return spark
    sessions = spark.sparkContext._jvm.org.apache.spark.sql.SparkSession
    previous = sessions.getActiveSession()
    sessions.setActiveSession(jss)
    try:
        spark.dataSource.register(ConchDataSource)
    finally:
        if previous.isDefined():
            sessions.setActiveSession(previous.get())
        else:
            sessions.clearActiveSession()
    return spark


def session(
    app_name: str = "conch",
    master: str = "local[2]",
    conf: dict[str, str] | None = None,
    quiet: bool = True,
) -> Any:
    """Get or create a Spark session ready for Conch: local by default, `conch` registered.

    `conf` adds or overrides Spark settings, e.g. `{"spark.driver.memory": "4g"}`.
    """
    from conch.model.deps import optional_import

    optional_import("pyspark")
    # PySpark 4.3 warns about pandas 3 on import; the Arrow-only paths Conch uses are unaffected.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    from pyspark.sql import SparkSession

    # Workers must import conch and the same pyarrow: run them on this very interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "2g",
        # saveAsTable / CREATE TABLE would otherwise create ./spark-warehouse in the cwd
        "spark.sql.warehouse.dir": os.path.join(tempfile.gettempdir(), "conch-spark-warehouse"),
    }
    if quiet:
        settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{log4j_config()}"
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    return register(spark)
