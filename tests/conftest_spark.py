"""The one local Spark session the Spark tests share (quiet, local[2], pushdown enabled).

Imported by the Spark test modules; `spark_session()` starts Spark once per test run (about
10 s), every later call returns the same session.
"""

from __future__ import annotations

import functools
import tempfile
from typing import Any

# removed when the worker exits (Conch tables never live here: Spark's own default location)
SPARK_WAREHOUSE = tempfile.TemporaryDirectory(prefix="conch-spark-")


@functools.cache
def spark_session() -> Any:
    import conch.engines.spark

    return conch.engines.spark.session(
        "conch-tests",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.memory": "1g",
            "spark.sql.warehouse.dir": SPARK_WAREHOUSE.name,
            "spark.sql.execution.arrow.maxRecordsPerBatch": "1000",
        },
    )
