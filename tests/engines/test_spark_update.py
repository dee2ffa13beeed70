"""`conch.engines.spark.update_where`: an update by predicate computed as a Spark job over key-range
splits and committed as one serial commit, equal to `Table.update(where=..., set=...)` in Python."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import conch
import conch.engines.spark
from conch.expr.syntax import parse
from conftest_spark import spark_session

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


def build(wh: Path) -> conch.Table:
    rng = np.random.default_rng(7)
    t = conch.connect(str(wh), maintenance=conch.Policy(settle_after=None)).create_table("t", [("id", pa.uint64())])
    for i in range(3):
        ids = np.sort(rng.choice(400, 150, replace=False)).astype(np.uint64)
        cols: dict[str, Any] = {"id": ids, "x": pa.array(rng.integers(0, 10, len(ids)), pa.int64())}
        if i != 1:
            cols["y"] = pa.array([f"s{v}" for v in rng.integers(0, 4, len(ids))])
        t.write(pa.table(cols))
    t.delete([int(k) for k in range(0, 400, 31)])
    return t


def test_spark_update_equals_python_update(spark: Any, tmp_path: Path) -> None:
    a = build(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    b = conch.connect(str(tmp_path / "b"), maintenance=conch.Policy(settle_after=None)).table("t")
    v = a.state().seq
    values = {"x": lambda r: pc.multiply(r["x"], 100), "y": "updated"}
    where = "x < 4 and id >= 50"
    py = a.update(where=parse(where), set=values)
    sp = conch.engines.spark.update_where(spark, str(tmp_path / "b" / "t"), where=where, set=values, partitions=3)
    assert py.kind == sp.kind == "update" and py.seq == sp.seq == v + 1
    assert a.to_arrow().to_pylist() == b.to_arrow().to_pylist()
    changed = b.changes(v).to_pylist()
    assert changed and all(r["_change"] == "update" and r["y"] == "updated" for r in changed)
