"""`conch.engines.spark.compact`: compaction planned on the driver, executed per key range as Spark
tasks, committed as one WAL entry per task, equals `Table.compact()` on the same table: the same
scans (now, `asof` before it, `since` inside its window) and the same runs and fragments modulo
ids. The table is built once and copied, so both compactions start from identical commits."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import conch
import conch.engines.spark
from conch.maintain.compaction.plan import table_ranges
from conftest_spark import spark_session

pytestmark = pytest.mark.spark

OFF = conch.Policy(auto=False)
SMALL = conch.Policy(auto=False, max_l1_rows=150)  # L1 ranges of at most 150 rows


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


def write_history(t: conch.Table, seed: int, rounds: int) -> None:
    """Overlapping writes, partial-column upserts (y keeps its older cell) and deletes."""
    rng = np.random.default_rng(seed)
    for i in range(rounds):
        ids = np.sort(rng.choice(800, 120, replace=False)).astype(np.uint64)
        cols: dict[str, Any] = {"id": ids, "x": pa.array(rng.integers(0, 100, len(ids)), pa.int64())}
        if i % 2 == 0:
            cols["g"] = pa.array([{"y": f"s{v}", "z": float(v)} for v in rng.integers(0, 9, len(ids))])
        t.write(pa.table(cols))
        if i % 3 == 2:
            t.delete([int(k) for k in rng.choice(800, 15, replace=False)])


def layout(t: conch.Table) -> tuple[list[Any], list[Any]]:
    """Runs and fragments without what differs between two equal compactions (ids, paths,
    wall-clock compaction times, file checksums); fragments named by their run's key span."""
    st = t.state()
    span = {k.id: (k.level, k.kind, k.min_key, k.max_key) for k in st.key_spaces.values()}
    runs = sorted((*span[k.id], k.rows, k.time, k.min_time, k.seq, k.lsm) for k in st.key_spaces.values())
    frs = sorted(
        (span[f.key_space], f.group, f.start, f.rows, f.column_ids, f.stats, f.time, f.lsm)
        for f in st.fragments.values()
    )
    return runs, frs


def test_equals_the_python_compaction(spark: Any, tmp_path: Path) -> None:
    wh = tmp_path / "built"
    t = conch.connect(str(wh), maintenance=OFF).create_table("t", [("id", pa.uint64())])
    write_history(t, seed=1, rounds=6)
    t.compact(policy=SMALL)  # L1 now has several ranges: the Spark compaction runs one task per range
    write_history(t, seed=2, rounds=5)  # new L0 runs over all of them, tombstones among them
    ranges = len(table_ranges(t.state().key_spaces.values()))
    assert ranges >= 3
    before = t.state().time
    shutil.copytree(wh, tmp_path / "py")
    shutil.copytree(wh, tmp_path / "sp")

    py = conch.connect(str(tmp_path / "py"), maintenance=OFF).table("t")
    sp = conch.connect(str(tmp_path / "sp"), maintenance=OFF).table("t")
    r_py = py.compact(policy=SMALL)
    r_sp = conch.engines.spark.compact(spark, str(tmp_path / "sp" / "t"), policy=SMALL)
    assert (r_sp.tasks, r_sp.runs_in, r_sp.runs_out) == (r_py.tasks, r_py.runs_in, r_py.runs_out)
    assert r_sp.tasks >= 1 and r_sp.runs_out >= ranges
    assert [c.kind for c in sp.history()] == [c.kind for c in py.history()]  # one "compact" entry per task
    assert sp.history()[-1].kind == "compact"
    assert layout(sp) == layout(py)
    assert sp.scan().to_arrow() == py.scan().to_arrow() == t.scan().to_arrow()
    assert sp.scan(asof=before).to_arrow() == py.scan(asof=before).to_arrow()
    mid = t.history()[-4].time  # inside the compaction's window: read through its retained originals
    assert sp.scan(since=mid).to_arrow() == py.scan(since=mid).to_arrow() == t.scan(since=mid).to_arrow()
    assert sp.check().ok


def test_a_write_during_the_job_stays_newer(spark: Any, tmp_path: Path) -> None:
    """A blind upsert committed after planning is never undone: the compaction's outputs take
    the newest input's time, so the later write still wins."""
    wh = str(tmp_path / "w")
    t = conch.connect(wh, maintenance=OFF).create_table("t", [("id", pa.uint64())])
    write_history(t, seed=3, rounds=4)
    expected = {r["id"]: r["x"] for r in t.scan("x").to_pylist()}
    conch.engines.spark.compact(spark, f"{wh}/t", force=True, policy=OFF)
    t.write({"id": pa.array([1, 2], pa.uint64()), "x": [-1, -2]})
    expected.update({1: -1, 2: -2})
    assert {r["id"]: r["x"] for r in t.scan("x").to_pylist()} == expected
    assert all(k.lsm == 1 for k in t.state().key_spaces.values() if k.seq < t.state().seq)


def test_nothing_to_do(spark: Any, tmp_path: Path) -> None:
    t = conch.connect(str(tmp_path / "w"), maintenance=OFF).create_table("t", [("id", pa.uint64())])
    t.write({"id": pa.array([1], pa.uint64()), "x": [1]})
    r = conch.engines.spark.compact(spark, str(tmp_path / "w" / "t"), force=False, policy=OFF)
    assert r.tasks == 0 and len(t.history()) == 1
