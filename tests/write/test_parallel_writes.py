"""Parallel fragment writes (issue 24 item 2): a write's fragments (column groups x byte-bounded
row slices) are encoded by several threads at once, and the table that results is the same
whatever the thread count and timing: the same files (checksums) in the same manifest order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conch
from conch.files.format import FileJob


def _wide(rows: int, groups: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    cols: dict[str, pa.Array] = {"id": pa.array(rng.permutation(rows).astype(np.uint64))}
    for g in range(groups):
        vals = [
            pa.array(rng.random(rows)),
            pa.array(rng.integers(0, 5, rows)),
            pa.array([f"s{i % 7}" for i in range(rows)]),
        ]
        cols[f"g{g}"] = pa.StructArray.from_arrays(vals, ["x", "n", "s"])
    cols["blob"] = pa.array([bytes(rng.integers(0, 255, 600, dtype=np.uint8)) for _ in range(rows)], pa.binary())
    return pa.table(cols)


def _layout(t: conch.Table) -> list[tuple[object, ...]]:
    st_ = t.state()
    ks = sorted(st_.key_spaces.values(), key=lambda k: k.min_key)
    frs = sorted(st_.fragments.values(), key=lambda f: (f.group, f.start))
    return [(k.rows, k.min_key, k.max_key, k.bytes, k.checksum) for k in ks] + [
        (f.group, f.start, f.rows, f.column_ids, f.stats, f.bytes, f.checksum, f.blob_columns) for f in frs
    ]


@settings(deadline=None, max_examples=5)
@given(st.integers(1, 3000), st.integers(1, 4), st.integers(0, 1000), st.sampled_from([2, 3, 8]))
def test_the_same_files_whatever_the_thread_count(rows: int, groups: int, seed: int, threads: int) -> None:
    import tempfile

    data = _wide(rows, groups, seed)
    tables = []
    with tempfile.TemporaryDirectory() as d:
        for n in (1, threads):
            opts = conch.WriteOptions(fragment_bytes=20_000, chunk_rows=1200, write_threads=n)
            cat = conch.connect(str(Path(d) / f"t{n}"), write_options=opts, maintenance=conch.Policy(auto=False))
            t = cat.create_table("t", [("id", pa.uint64())])
            t.write(data)
            tables.append(t)
        one, many = tables
        assert _layout(one) == _layout(many)
        assert one.scan().to_arrow().equals(many.scan().to_arrow())
        got = many.scan().to_arrow()
        assert got.to_pylist() == data.sort_by("id").select(got.column_names).to_pylist()
        assert many.check().ok


def test_an_error_in_one_fragment_leaves_no_scratch_file(tmp_path: Path) -> None:
    cat = conch.connect(str(tmp_path), maintenance=conch.Policy(auto=False))
    t = cat.create_table("t", [("id", pa.uint64())])
    fmt = t.log.files.format
    jobs = [FileJob(pa.table({"c1": np.arange(1000.0) + i}), f"{t.log.id}/cg/_root/f{i}.vortex") for i in range(6)]

    def after(job: FileJob) -> int:
        if job.path.endswith("f2.vortex"):
            raise OSError("disk on fire")
        return job.table.num_rows

    with pytest.raises(OSError, match="disk on fire"):
        fmt.write_many(jobs, threads=3, after=after)
    assert not [p for p in tmp_path.rglob("*.tmp")]  # every scratch file was discarded
    assert not (tmp_path / f"{t.log.id}/cg/_root/f2.vortex").exists()
    done = fmt.write_many(jobs[3:], threads=2, after=lambda j: j.table.num_rows)
    assert [extra for _, extra in done] == [1000, 1000, 1000]  # in job order
    assert all(w.bytes > 0 and w.checksum for w, _ in done)


@pytest.mark.parametrize("bad", ["duplicate", "null key"])
def test_an_error_in_a_later_chunk_discards_the_files_in_flight(tmp_path: Path, bad: str) -> None:
    """A streamed write encodes chunk n's files while chunk n+1 is read and sorted (one
    `WriteQueue` for the write): an error in a later chunk waits for the files in flight, leaves
    no scratch file and commits nothing; the table then takes the same write without the bad row."""
    opts = conch.WriteOptions(chunk_rows=500, write_threads=2, fragment_bytes=2000)
    cat = conch.connect(str(tmp_path), write_options=opts, maintenance=conch.Policy(auto=False))
    t = cat.create_table("t", [("id", pa.int64())])
    ids: list[int | None] = list(range(3000))
    ids[2600] = 10 if bad == "duplicate" else None  # in the 6th chunk: earlier chunks are in flight
    data = pa.table({"id": pa.array(ids, pa.int64()), "x": np.arange(3000.0)})
    with pytest.raises(conch.ConchError):
        t.write(pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=100)))
    assert not [p for p in tmp_path.rglob("*.tmp")]
    assert t.history() == []
    good = data.filter(pa.array([i != 2600 for i in range(3000)]))
    t.write(pa.RecordBatchReader.from_batches(good.schema, good.to_batches(max_chunksize=100)))
    assert t.scan().to_arrow().to_pylist() == good.sort_by("id").to_pylist()
