"""Spark on shared-nothing executors: a `local-cluster` job (two executor processes whose
working directories differ from the driver's and each other's) writes, upserts and reads tables
whose files are on S3 (moto) and whose metastore is the HTTP server or PostgreSQL. Nothing in
the job may open a file of the driver's machine: the driver runs in an empty directory that must
stay empty, and the warehouse is only reachable through its URIs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import conch
from helpers import run_spark_job
from services import MotoS3, Postgres, ServerProcess

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_local_cluster_on_s3_through_http_and_postgres(moto_s3: MotoS3, postgres: Postgres, tmp_path: Path) -> None:
    storage_options = json.dumps(moto_s3.options)
    server = ServerProcess(moto_s3.uri(), {"writer-token-1": "write"}, env=moto_s3.env).start()
    pg_dsn, pg_wh = postgres.dsn(), moto_s3.uri()
    try:
        targets = [
            {"warehouse": server.url, "table": "events", "token": "writer-token-1", "storageOptions": storage_options},
            {"warehouse": pg_wh, "table": "events", "metastore": pg_dsn, "storageOptions": storage_options},
        ]
        driver_cwd = tmp_path / "driver"
        out = run_spark_job("write", targets, driver_cwd)
        assert out["results"] == [{"total": 2000, "updated": 20}] * 2
        cwds = {cwd for _, cwd in out["workers"]}
        assert len(cwds) == 2 and str(driver_cwd) not in cwds  # two executors, none in the driver's directory
        assert list(driver_cwd.iterdir()) == []  # nothing was written next to the driver
        for cwd in cwds:  # local-cluster's per-application work directory (logs only)
            shutil.rmtree(Path(cwd).parent, ignore_errors=True)
        # The same tables from this process, through each metastore: one commit per Spark job.
        via_http = conch.connect(server.url, token="writer-token-1", storage_options=moto_s3.options).table("events")
        via_pg = conch.connect(pg_wh, metastore=pg_dsn, storage_options=moto_s3.options).table("events")
        for t in (via_http, via_pg):
            assert [c.kind for c in t.history() if c.kind != "compact"] == ["write", "write"]
            assert t.scan(keys=[100]).to_arrow().column("bucket").to_pylist() == [-1]
    finally:
        server.stop()
