"""The scan result protocol (issue 9 item 5): Arrow C stream consumers (pyarrow, Polars, DuckDB)
read `Scan`, nested and exploded results directly; `count()` reads keys, not values; metrics
are per scan even when scans run concurrently."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pytest

import conch
from conch import _
from conch.scan import ScanResult

sys.path.insert(0, str(Path(__file__).parents[1]))
from nested_fixtures import make_recordings


@pytest.fixture
def t(catalog: conch.Catalog) -> conch.Table:
    t = catalog.create_table("t", [("id", pa.uint64())])
    t.write({"id": list(range(50)), "x": [float(i) for i in range(50)], "g": [{"s": str(i)} for i in range(50)]})
    t.write({"id": [3, 60], "x": [-1.0, 60.0]})
    return t


def test_arrow_polars_duckdb_read_a_scan(t: conch.Table) -> None:
    scan = t.scan("x", where=t["x"] < 10)
    want = scan.to_arrow()
    assert want.column("id").to_pylist() == list(range(10))
    assert pa.table(scan).equals(want)
    df = pl.DataFrame(scan)
    assert df.columns == ["id", "x"] and df["id"].to_list() == list(range(10))
    assert df["x"][3] == -1.0
    assert scan.to_polars().equals(df)
    rel = duckdb.sql("select count(*), sum(x), max(id) from scan")
    assert rel.fetchall() == [(10, float(sum(range(10))) - 4.0, 9)]
    # nested groups come through as structs
    whole = t.scan()
    assert duckdb.sql("select g.s from whole where id = 7").fetchall() == [("7",)]
    assert pl.DataFrame(whole).height == 51


def test_nested_and_exploded_results_share_the_protocol(catalog: conch.Catalog) -> None:
    rec = make_recordings(catalog)
    clips = rec.scenes.clips
    q = clips.select(duration=_.duration, camera=_.camera).scan()
    assert isinstance(q, ScanResult)
    want = q.to_arrow()
    assert pa.table(q).equals(want)
    assert pl.DataFrame(q).height == want.num_rows == q.count()
    assert duckdb.sql("select count(*) from q").fetchall() == [(want.num_rows,)]
    assert q.schema == want.schema
    assert q.metrics().rows_out >= want.num_rows
    ex = rec.scenes.tags.explode().scan()
    assert isinstance(ex, ScanResult)
    tags = ex.to_arrow()
    assert tags.num_rows > 0 and pa.table(ex).equals(tags) and ex.count() == tags.num_rows
    assert pl.DataFrame(ex).columns == tags.column_names


def test_count_reads_keys_only(catalog: conch.Catalog) -> None:
    t = catalog.create_table("blobs", [("id", pa.uint64())])
    n = 10_000
    rng = np.random.default_rng(1)
    t.write({"id": list(range(n)), "score": rng.random(n), "audio": [rng.bytes(2000) for _ in range(n)]})
    catalog.warehouse.format.clear_cache()
    scan = t.scan()
    assert scan.count() == n
    m = scan.metrics()
    assert m.value_bytes_read == 0  # 20 MB of blobs untouched
    assert 0 < m.key_bytes_read < 1 << 20
    filtered = t.scan(where=t["score"] < 0.25)
    assert filtered.count() == filtered.to_arrow().num_rows
    catalog.warehouse.format.clear_cache()
    filtered.count()
    assert filtered.metrics().value_bytes_read < 1 << 20  # the score column, not the blobs
    assert t.scan(limit=7).count() == 7


def test_metrics_are_per_scan_under_concurrency(catalog: conch.Catalog) -> None:
    tables = []
    for name, size in (("a", 40), ("b", 4000)):
        t = catalog.create_table(name, [("id", pa.uint64())])
        t.write({"id": list(range(2000)), "v": [b"v" * size] * 2000})
        tables.append(t)
    alone = []
    for t in tables:
        catalog.warehouse.format.clear_cache()
        s = t.scan()
        s.to_arrow()
        alone.append(s.metrics().value_bytes_read)  # keys stay in the key cache
    assert alone[1] > 10 * alone[0]
    catalog.warehouse.format.clear_cache()
    scans = [t.scan() for t in tables]
    threads = [threading.Thread(target=s.to_arrow) for s in scans]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert [s.metrics().value_bytes_read for s in scans] == alone
