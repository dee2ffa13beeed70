"""Key-range splits (issue 9 item 6): disjoint, together exactly the scan, picklable and read in
other processes from the warehouse URI, pinned to the commit they were planned at."""

from __future__ import annotations

import multiprocessing
import pickle
import random
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest

import conch
from conch.scan import Split


def _read(split: Split) -> list[dict]:
    return split.to_arrow().to_pylist()


def _table(tmp_path: Path, shape: str) -> conch.Table:
    opts = conch.WriteOptions(chunk_rows=50, fragment_bytes=2048)
    t = conch.connect(tmp_path / "w", write_options=opts).create_table("t", [("id", pa.int64())])
    rng = random.Random(shape)
    if shape == "disjoint":  # many disjoint runs: cut at run starts
        for i in range(12):
            ids = list(range(i * 100, i * 100 + 80))
            t.write({"id": ids, "x": [float(k) for k in ids]})
    else:  # overlapping runs and deletes: cut at sampled quantiles
        for _ in range(6):
            ids = sorted(rng.sample(range(2000), 300))
            t.write({"id": ids, "x": [rng.random() for _ in ids], "y": [str(k) for k in ids]})
        t.delete(sorted(rng.sample(range(2000), 100)))
    return t


@pytest.mark.parametrize("shape", ["disjoint", "overlapping"])
def test_splits_union_is_the_scan(tmp_path: Path, shape: str) -> None:
    t = _table(tmp_path, shape)
    for scan in (t.scan(), t.scan("x", where=t["x"] > 0.3), t.scan(keys=conch.KeyRange(150, 1234))):
        want = scan.to_pylist()
        for n in (1, 2, 5, 9):
            splits = scan.splits(n)
            assert 1 <= len(splits) <= n
            parts = [pickle.loads(pickle.dumps(s)).to_arrow().to_pylist() for s in splits]
            assert [r for p in parts for r in p] == want  # disjoint, ordered, complete
            if n > 1 and len(want) > 100 and scan.plan.key_predicate is None:
                sizes = [len(p) for p in parts]
                assert len(splits) >= 2 and max(sizes) <= 3 * len(want) / len(splits)


def test_splits_are_read_in_other_processes_at_the_pinned_commit(tmp_path: Path) -> None:
    t = _table(tmp_path, "overlapping")
    scan = t.scan("x", "y")
    want = scan.to_pylist()
    splits = scan.splits(4)
    t.write({"id": [1, 5000], "x": [99.0, 99.0]})  # later commits are not seen by the splits
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=ctx) as pool:
        parts = list(pool.map(_read, splits))
    assert [r for p in parts for r in p] == want


def test_split_arguments(tmp_path: Path) -> None:
    t = _table(tmp_path, "disjoint")
    with pytest.raises(conch.ConchError, match="limit"):
        t.scan(limit=3).splits(2)
    with pytest.raises(conch.ConchError, match="positive"):
        t.scan().splits(0)
    assert len(t.scan().splits()) == 1  # 960 rows: one split by default
    empty = t.scan(keys=conch.KeyRange(5000, 6000)).splits(3)
    assert sum(s.to_arrow().num_rows for s in empty) == 0


def test_a_table_never_written_splits_into_one_empty_split(tmp_path: Path) -> None:
    t = conch.connect(tmp_path / "w").create_table("t", [("id", pa.int64())], pa.schema([("x", pa.float64())]))
    scan = t.scan()
    (split,) = scan.splits(4)
    assert split.seq == 0
    t.write({"id": [1, 2], "x": [1.0, 2.0]})  # written after planning: the split is pinned before it
    for s in (split, pickle.loads(pickle.dumps(split))):
        out = s.to_arrow()
        assert out.num_rows == 0 and out.schema.names == ["id", "x"]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        assert list(pool.map(_read, [split])) == [[]]
    (now,) = t.scan().splits(1)
    assert now.to_arrow().to_pylist() == [{"id": 1, "x": 1.0}, {"id": 2, "x": 2.0}]
