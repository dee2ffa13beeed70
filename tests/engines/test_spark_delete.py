"""`conch.engines.spark.delete_where`: a delete by filter evaluated as a Spark job over key-range splits
and committed as one serial tombstone commit, equal to `Table.delete(where=...)` in Python."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import conch
import conch.engines.spark
from conch.expr.syntax import parse
from conftest_spark import spark_session
from nested_fixtures import make_recordings

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


def build(wh: Path) -> conch.Table:
    """Several overlapping runs: full writes, partial-column upserts (y keeps its older cell),
    nulls, and a blind delete, so fresh records differ from the newest rows."""
    rng = np.random.default_rng(5)
    # no background settle: the runs stay as written and both tables' logs stay step for step
    t = conch.connect(str(wh), maintenance=conch.Policy(settle_after=None)).create_table("t", [("id", pa.uint64())])
    for i in range(4):
        ids = np.sort(rng.choice(600, 250, replace=False)).astype(np.uint64)
        x = pa.array([None if v % 17 == 0 else int(v) for v in rng.integers(0, 10, len(ids))], pa.int64())
        cols: dict[str, Any] = {"id": ids, "x": x}
        if i % 2 == 0:
            cols["y"] = pa.array([f"s{v}" for v in rng.integers(0, 5, len(ids))])
        t.write(pa.table(cols))
    t.delete([int(k) for k in range(0, 600, 23)])
    return t


@pytest.mark.parametrize(
    "where",
    [
        "x < 3",  # value column only: pushed into the scan
        "x between 2 and 4 or (y is null and id >= 300)",  # keys and values mixed
        "y in ('s1', 's3') and not x > 6",
        "x > 100",  # matches nothing: an empty tombstone commit, as in Python
    ],
)
def test_equals_the_python_delete(spark: Any, tmp_path: Path, where: str) -> None:
    py, sp = build(tmp_path / "py"), build(tmp_path / "sp")
    assert py.scan().to_arrow() == sp.scan().to_arrow()
    c_py = py.delete(where=parse(where))
    c_sp = conch.engines.spark.delete_where(spark, str(tmp_path / "sp" / "t"), where=where, partitions=3)
    assert c_sp.kind == c_py.kind == "delete" and c_sp.seq == c_py.seq
    assert c_sp.summary == c_py.summary  # "<n> keys at root where <filter>"
    assert sp.scan().to_arrow() == py.scan().to_arrow()
    # one tombstone key space holding exactly the keys Python tombstoned
    spans = [(k.rows, k.min_key, k.max_key) for k in sp.state().key_spaces.values() if k.kind == "tombstone"]
    assert sorted(spans) == sorted(
        (k.rows, k.min_key, k.max_key) for k in py.state().key_spaces.values() if k.kind == "tombstone"
    )
    assert sp.scan(asof=c_sp.time - 1).count() == py.scan(asof=c_py.time - 1).count()  # time travel intact


def test_child_level_and_connection_options(spark: Any, tmp_path: Path) -> None:
    t = make_recordings(conch.connect(str(tmp_path / "w")))
    conch.engines.spark.delete_where(
        spark, warehouse=str(tmp_path / "w"), table=t.name, where="duration > 18", level="scenes.clips"
    )
    assert [c["scenes.clips"] for c in t.scan(level="scenes.clips").to_pylist()] == ["c2"]
    assert {f["scenes.clips"] for f in t.scan(level="scenes.clips.frames").to_pylist()} == {"c2"}


def test_bad_calls_change_nothing(spark: Any, tmp_path: Path) -> None:
    t = conch.connect(str(tmp_path / "w")).create_table("t", [("id", pa.uint64())])
    t.write([{"id": 1, "x": 1}])
    path = str(tmp_path / "w" / "t")
    with pytest.raises(conch.ColumnNotFoundError):
        conch.engines.spark.delete_where(spark, path, where="nope > 0")
    with pytest.raises(conch.FilterSyntaxError):
        conch.engines.spark.delete_where(spark, path, where="x >")
    with pytest.raises(conch.InvalidArgumentError, match="partitions"):
        conch.engines.spark.delete_where(spark, path, where="x > 0", partitions=0)
    with pytest.raises(conch.TableNotFoundError):
        conch.engines.spark.delete_where(spark, str(tmp_path / "w" / "nope"), where="x > 0")
    assert len(t.history()) == 1 and t.scan().count() == 1


def test_a_concurrent_writer_is_never_undone(spark: Any, tmp_path: Path) -> None:
    """While the Spark job runs, a writer flips keys between matching (x=1) and not. The delete
    commits directly after the state it evaluated (re-running the job when it lost the race), so
    it removes exactly the keys that matched just before it."""
    t = conch.connect(str(tmp_path / "w")).create_table("t", [("id", pa.uint64())])
    keys = list(range(40))
    t.write([{"id": k, "x": k % 2} for k in keys])
    started = threading.Event()

    def writer() -> None:
        w = conch.connect(str(tmp_path / "w")).table("t")
        started.set()
        for i in range(6):
            w.write([{"id": k, "x": (k + i + 1) % 2} for k in keys[i % 4 :: 4]])

    th = threading.Thread(target=writer)
    th.start()
    started.wait()
    try:
        c = conch.engines.spark.delete_where(spark, str(tmp_path / "w" / "t"), where="x = 1", partitions=2)
    finally:
        th.join()
    before = {r["id"]: r["x"] for r in t.scan(asof=c.time - 1).to_pylist()}
    after = {r["id"] for r in t.scan(asof=c.time).to_pylist()}
    assert after == {k for k, x in before.items() if x != 1}
    assert f"{sum(1 for x in before.values() if x == 1)} keys" in c.summary
