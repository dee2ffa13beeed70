"""`conch.files.ipc`, the one format of mask files and displacement maps: what is written reads back
equal, maps written before it (Arrow IPC files, not streams) still read, damage is named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conch.errors import CorruptFileError
from conch.files.integrity import digest
from conch.files.ipc import read_table, table_bytes
from conch.files.masks import RunsMask, decode_mask, encode_mask
from conch.files.storage.local import LocalStorage
from conch.maintain.compaction.displacement import MAP_SCHEMA, displace, read_map

runs = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 1 << 40), st.integers(1, 1 << 20)), max_size=40
)


def _map(rows: list[tuple[str, int, int]]) -> pa.Table:
    return pa.table(
        {
            "origin": [o for o, _, _ in rows],
            "origin_start": [s for _, s, _ in rows],
            "dest": ["d"] * len(rows),
            "dest_start": [s + 7 for _, s, _ in rows],
            "length": [n for _, _, n in rows],
        },
        schema=MAP_SCHEMA,
    )


def _old_map_bytes(t: pa.Table) -> bytes:
    """A displacement map as written before `conch.files.ipc`: an Arrow IPC file, zstd."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, MAP_SCHEMA, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


@settings(max_examples=40, deadline=None)
@given(rows=runs, level=st.sampled_from([None, 9]))
def test_tables_read_back_equal_in_both_formats(rows: list[tuple[str, int, int]], level: int | None) -> None:
    t = _map(rows)
    assert read_table(table_bytes(t, level), "x", MAP_SCHEMA).equals(t)
    assert read_table(_old_map_bytes(t), "x", MAP_SCHEMA).equals(t)


def test_map_written_as_an_ipc_file_still_reads(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    old = _map([("a", 0, 10), ("a", 20, 5), ("b", 3, 2)])
    data = _old_map_bytes(old)
    storage.write("t/maps/old.arrow", data)
    got = read_map(storage, "t/maps/old.arrow", digest(data))
    assert got.equals(old)
    dest, row = displace(got, "a", np.array([0, 9, 10, 22, 25]))
    assert row.tolist() == [7, 16, -1, 29, -1] and dest.tolist() == [0, 0, -1, 0, -1]


@settings(max_examples=30, deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(1, 9)), min_size=0, max_size=30),
    cut=st.integers(1, 200),
)
def test_mask_bytes_decode_to_the_same_runs_and_damage_is_named(steps: list[tuple[int, int, int]], cut: int) -> None:
    pos, file, length, p, f = [], [], [], 0, 0
    for gp, gf, n in steps:
        p, f = p + gp, f + gf
        pos.append(p)
        file.append(f)
        length.append(n)
        p, f = p + n, f + n
    mask = RunsMask.from_runs(np.array(pos, np.int64), np.array(file, np.int64), np.array(length, np.int64))
    data = encode_mask(mask)
    back = decode_mask(data, "m.mask")
    assert back.pos.tolist() == pos and back.file.tolist() == file and back.length.tolist() == length
    with pytest.raises(CorruptFileError, match=r"mask file m\.mask is damaged"):
        decode_mask(data[: min(cut, len(data) // 2)], "m.mask")


def test_a_table_of_other_columns_is_damage() -> None:
    other = pa.table({"x": [1, 2]})
    with pytest.raises(CorruptFileError, match=r"maps/x.arrow is damaged \(unexpected columns \['x'\]\)"):
        read_table(table_bytes(other), "displacement map maps/x.arrow", MAP_SCHEMA)
