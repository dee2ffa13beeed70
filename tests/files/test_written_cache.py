"""Small files a process writes are read back from its memory (`VortexFormat._keep_written`): the
same rows, types and nulls as a fresh process reading the files, and no storage read."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import numpy as np
import pyarrow as pa

import conch


def _rows(ids: list[int]) -> pa.Table:
    n = len(ids)
    rng = np.random.default_rng(ids[0] if ids else 0)
    nulls = rng.random(n) < 0.2
    return pa.table(
        {
            "id": pa.array(ids, pa.uint64()),
            "i8": pa.array(rng.integers(-100, 100, n), pa.int8(), mask=nulls),
            "u32": pa.array(rng.integers(0, 2**32, n, dtype=np.uint64), pa.uint32()),
            "f32": pa.array(rng.random(n), pa.float32()),
            "f64": pa.array(np.where(rng.random(n) < 0.1, -0.0, rng.random(n)), mask=nulls),
            "flag": pa.array(rng.random(n) < 0.5),
            "name": pa.array([f"n{i}" if i % 3 else None for i in ids], pa.string()),
            "raw": pa.array([bytes([i % 256]) * (i % 7) for i in ids], pa.binary()),
            "at": pa.array(
                [dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in ids],
                pa.timestamp("us", "UTC"),
            ),
            "day": pa.array([dt.date(2026, 1, 1) + dt.timedelta(days=i % 400) for i in ids], pa.date32()),
            "price": pa.array([decimal.Decimal(i) / 100 for i in ids], pa.decimal128(12, 2)),
            "nested": pa.array([{"x": i, "y": [i, i + 1]} for i in ids]),
        }
    )


def test_a_process_reads_the_small_files_it_wrote_as_another_process_reads_them(tmp_path: Path) -> None:
    writer = conch.connect(tmp_path, maintenance=conch.Policy(auto=False))
    t = writer.create_table("t", [("id", pa.uint64())])
    t.write(_rows(list(range(0, 3000, 3))))
    t.write(_rows(list(range(1, 900, 2))))  # overlaps the first: a merge of both runs
    t.delete([4, 5, 6])
    t.write(_rows(list(range(5000, 5100))).select(["id", "name", "f64"]))  # some columns only
    keys = [0, 1, 3, 5001, 2997, 4]

    fresh = conch.connect(tmp_path, maintenance=conch.Policy(auto=False)).table("t")
    # the first scans of flat columns: the writer takes what it wrote from memory, a fresh
    # process reads storage (a list column is read from the file: `nested` is not kept)
    s, f = t.scan("i8", "name", "at", "price"), fresh.scan("i8", "name", "at", "price")
    s.to_arrow()
    f.to_arrow()
    assert s.metrics().value_bytes_read == 0 and s.metrics().key_bytes_read == 0
    assert f.metrics().value_bytes_read > 0 and f.metrics().key_bytes_read > 0

    for q in (
        lambda x: x.scan(),
        lambda x: x.scan(where=x["f64"] < 0.3),
        lambda x: x.scan(keys=keys),
        lambda x: x.scan("name", where=x["id"] >= 2990),
    ):
        mine, theirs = q(t).to_arrow(), q(fresh).to_arrow()
        assert mine.schema == theirs.schema
        assert mine.equals(theirs)
        assert mine.num_rows > 0


def test_a_merge_of_runs_written_by_this_process_writes_what_a_fresh_process_would(tmp_path: Path) -> None:
    """The compaction reads its inputs from memory: its output is the same fresh rows."""
    for name in ("kept", "fresh"):
        cat = conch.connect(tmp_path / name, maintenance=conch.Policy(auto=False))
        t = cat.create_table("t", [("id", pa.uint64())])
        for start in range(5):
            t.write(_rows(list(range(start, 2000, 5 - start))))
        if name == "fresh":  # compact from a process that wrote nothing
            t = conch.connect(tmp_path / name, maintenance=conch.Policy(auto=False)).table("t")
        t.compact()
    a = conch.connect(tmp_path / "kept").table("t").scan().to_arrow()
    b = conch.connect(tmp_path / "fresh").table("t").scan().to_arrow()
    assert a.equals(b) and a.num_rows == 2000
