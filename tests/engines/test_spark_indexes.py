"""`conch.engines.spark.build_indexes`: index files built on executors (IVF trained once on the
driver from executors' samples) answer searches exactly as `Table.build_indexes()` on the same
table. The table is built once and copied, so both builds start from identical commits."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import conch
import conch.engines.spark
from conftest_spark import spark_session

pytestmark = pytest.mark.spark

OFF = conch.Policy(auto=False)
DIM = 8


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


def vecs(m: np.ndarray) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(m.reshape(-1).astype(np.float32)), DIM)


def history(t: conch.Table) -> None:
    """Four runs with overlapping keys (upserts hide older vectors), a delete, clustered data."""
    rng = np.random.default_rng(5)
    centers = rng.normal(size=(6, DIM)) * 4
    for i in range(4):
        ids = np.sort(rng.choice(3000, 700, replace=False))
        m = centers[rng.integers(0, 6, len(ids))] + rng.normal(size=(len(ids), DIM))
        caps = [" ".join(["red", "car", "sky", "tree"][j % 4] for j in range(int(x) % 7)) for x in ids]
        t.write(pa.table({"id": ids, "a": vecs(m), "b": vecs(-m + 0.1 * i), "cap": caps}))
        if i == 2:
            t.delete([int(k) for k in ids[:40]])


def results(t: conch.Table, queries: np.ndarray, column: str) -> tuple[list[tuple[int, int]], np.ndarray]:
    got = t.search(queries, k=15, column=column, columns=["id"]).to_arrow()
    return list(zip(got["_query"].to_pylist(), got["id"].to_pylist())), got["_distance"].to_numpy()


def same(a: tuple[list[Any], np.ndarray], b: tuple[list[Any], np.ndarray]) -> bool:
    """The same keys in the same order at the same distances (faiss's and numpy's float sums)."""
    return a[0] == b[0] and bool(np.allclose(a[1], b[1], rtol=1e-5, atol=1e-5))


def files(t: conch.Table) -> list[tuple[str, str, int, int]]:
    st = t.state()
    # a text file's bytes hold tantivy's random segment ids: its size may differ by a digit
    return sorted(
        (f.index, f.key_space, f.rows, f.bytes if f.path.endswith(".cix") else 0) for f in st.index_files.values()
    )


def test_spark_build_answers_like_the_local_build(spark: Any, tmp_path: Path) -> None:
    t = conch.connect(str(tmp_path / "local"), maintenance=OFF).create_table(
        "t",
        [("id", pa.int64())],
        pa.schema([("a", pa.list_(pa.float32(), DIM)), ("b", pa.list_(pa.float32(), DIM)), ("cap", pa.string())]),
    )
    t.create_index("a", metric="l2")  # flat: exact
    t.create_index("b", metric="cosine", index="ivf", nlist=8, nprobe=2)  # trained: approximate
    t.create_index("cap", kind="text")  # a tantivy index per run
    history(t)
    shutil.copytree(tmp_path / "local", tmp_path / "spark")
    remote = conch.connect(str(tmp_path / "spark"), maintenance=OFF).table("t")
    queries = np.random.default_rng(9).normal(size=(12, DIM)) * 4
    before = {c: results(t, queries, c) for c in "ab"}  # every run searched exactly

    assert t.build_indexes(min_rows=100) is not None
    done = conch.engines.spark.build_indexes(spark, str(tmp_path / "spark" / "t"), min_rows=100)
    assert done is not None and remote.history()[0].kind == "index"

    assert files(remote) == files(t) and len(files(t)) == 12  # three indexes × four runs
    assert same(results(remote, queries, "a"), results(t, queries, "a"))
    assert same(results(t, queries, "a"), before["a"])  # flat files: still the exact answer
    assert same(results(remote, queries, "b"), results(t, queries, "b"))
    assert not same(results(t, queries, "b"), before["b"])  # nprobe 2 of 8 lists: the files answered
    assert "ivf index file" in remote.search(queries[0], column="b").explain()
    text = [remote.search_text("red car", k=20).to_pylist(), t.search_text("red car", k=20).to_pylist()]
    assert text[0] == text[1] and len(text[0]) == 20
    # nothing left to build: both say so
    assert conch.engines.spark.build_indexes(spark, str(tmp_path / "spark" / "t"), min_rows=100) is None
    assert remote.check().ok
