"""Spark `local-cluster` executors read through the DataFrame's pinned snapshot, which reopens
the warehouse with the options the data source was given (issue 20 item 1): a non-default
SQLite metastore, and the HTTP server with a token over S3 reached only through
`storageOptions` (no AWS environment variables anywhere in the job)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import conch
from helpers import run_spark_job
from services import MotoS3, ServerProcess

pytestmark = [pytest.mark.spark, pytest.mark.slow]
TOKEN = "snap-spark-token"
KID = pa.struct([("$", pa.uint64()), ("v", pa.int64())])


def _fill(cat: conch.Catalog) -> None:
    t = cat.create_table("t", [("id", pa.uint64())], schema=pa.schema([("v", pa.int64()), ("kids", pa.list_(KID))]))
    for v in (1, 2):
        t.write([{"id": p, "v": v, "kids": [{"$": c, "v": v} for c in range(3)]} for p in range(50)])


def test_local_cluster_reads_with_the_connection_options(moto_s3: MotoS3, tmp_path: Path) -> None:
    wh, other = tmp_path / "wh", f"sqlite:///{tmp_path}/other.sqlite"
    _fill(conch.connect(wh, metastore=other, maintenance=conch.Policy(settle_after=None)))
    server = ServerProcess(moto_s3.uri(), {TOKEN: "admin"}, env=moto_s3.env).start()
    try:
        _fill(conch.connect(server.url, token=TOKEN, storage_options=moto_s3.options))
        targets = [
            {"warehouse": str(wh), "table": "t", "metastore": other},
            {"warehouse": server.url, "table": "t", "token": TOKEN, "storageOptions": json.dumps(moto_s3.options)},
        ]
        driver_cwd = tmp_path / "driver"
        out = run_spark_job("read", targets, driver_cwd)
        want = {"parents": 50, "parent_sum": 100, "kids": 150, "kid_sum": 300}
        assert out["results"] == [want, want]
        cwds = {cwd for _, cwd in out["workers"]}
        assert len(cwds) == 2 and str(driver_cwd) not in cwds  # two executors, none in the driver's directory
        assert not (wh / "_catalog.sqlite").exists()  # nobody opened the default metastore
        for cwd in cwds:  # local-cluster's per-application work directory (logs only)
            shutil.rmtree(Path(cwd).parent, ignore_errors=True)
    finally:
        server.stop()
