"""`bench.lsm_shapes`' Spark family compares one Spark job with a local write of the same rows:
the job (several range-partitioned tasks, one commit) must write exactly `spark_rows`, or every
ratio of the family compares different tables."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import conch
from conftest_spark import spark_session

pytestmark = pytest.mark.spark

sys.path.insert(0, str(Path(__file__).parents[2]))  # bench/ is run as `python -m bench...` from the root
from bench.lsm_shapes import SCHEMA, SPARK_TASKS, spark_job, spark_rows  # noqa: E402


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


def test_spark_job_writes_spark_rows_in_one_commit(spark: Any, tmp_path: Path) -> None:
    t = conch.connect(tmp_path, maintenance=conch.Policy(auto=False)).create_table("t", [("id", pa.uint64())], SCHEMA)
    spark_job(str(tmp_path), auto_compact=False)(3000)
    got = t.scan().to_arrow().sort_by("id")
    assert got.cast(SCHEMA).equals(spark_rows(np.arange(3000, dtype=np.uint64)))  # key: not null
    (job,) = t.history()  # autoCompact=false: the job commits and compacts nothing
    assert f"from {SPARK_TASKS} tasks" in job.summary
    assert pa.compute.sum(pa.compute.equal(got.column("a"), 0.0)).as_py() == 30  # the 1 % filter's rows
