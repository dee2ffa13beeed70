"""Compaction copies big blob values between blob files in parts (issue 33,
`conch.maintain.compaction.blobcopy`): the rewrite never holds a value whole, the output keeps
per-64 KiB-block integrity, and damage in an input is a `CorruptFileError` that commits nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch
from conch.errors import CorruptFileError
from conch.maintain.compaction import blobcopy
from services import MotoS3

OFF = conch.Policy(auto=False)

# a commit: rows (key, value size or None for null) written, then keys deleted
commits = st.lists(
    st.tuples(
        st.dictionaries(st.integers(0, 30), st.one_of(st.none(), st.integers(0, 6000)), max_size=12),
        st.lists(st.integers(0, 30), max_size=3),
    ),
    min_size=1,
    max_size=5,
)


def _value(key: int, size: int, seed: int) -> bytes:
    return bytes([(key * 7 + seed + i) % 251 for i in range(min(size, 251))]) * (size // 251 + 1)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=commits, merge=st.booleans())
def test_compaction_with_streamed_values_keeps_every_value(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, history: list, merge: bool
) -> None:
    """Against a dict model: values of at least 1,000 bytes are streamed (the threshold lowered
    from 8 MiB), shorter ones copied whole, in one column group and a nested struct."""
    monkeypatch.setattr(blobcopy, "STREAM_BYTES", 1000)
    cat = conch.connect(tmp_path_factory.mktemp("wh"), maintenance=OFF)
    meta = pa.struct([("clip", pa.binary())])
    t = cat.create_table("b", [("id", pa.int64())], schema=pa.schema([("v", pa.binary()), ("meta", meta)]))
    model: dict[int, tuple[bytes | None, bytes | None]] = {}
    for seed, (rows, deletes) in enumerate(history):
        if rows:
            written = {k: (None if n is None else _value(k, n, seed)) for k, n in rows.items()}
            side = {k: (None if n is None else _value(k, n // 2, seed + 1)) for k, n in rows.items()}
            t.write([{"id": k, "v": v, "meta": {"clip": side[k]}} for k, v in written.items()])
            model.update({k: (written[k], side[k]) for k in rows})
        if deletes:
            t.delete(deletes)
            for k in deletes:
                model.pop(k, None)
    if merge:
        t.compact(force=False, policy=conch.Policy(auto=False, l0_trigger=2, l1_ratio=1e9, small_bytes=0))
    else:
        t.compact()
    got = {r["id"]: (r["v"], r["meta"]["clip"]) for r in t.scan().to_arrow().to_pylist()}
    assert got == model
    assert not t.check().problems


def test_compaction_stream_copies_are_block_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blobcopy, "STREAM_BYTES", 100_000)
    cat = conch.connect(tmp_path / "wh", maintenance=OFF)
    t = cat.create_table("d", [("id", pa.int64())])
    big, small = os.urandom(1_000_000), os.urandom(20_000)
    t.write([{"id": 1, "v": big}, {"id": 2, "v": small}])
    t.write([{"id": 3, "v": os.urandom(300_000)}])
    blob = tmp_path / "wh" / t.open_blob(1, "v").name
    with open(blob, "r+b") as f:  # damage block 10 of the big value
        f.seek(700_000)
        b = f.read(1)
        f.seek(700_000)
        f.write(bytes([b[0] ^ 0xFF]))
    before = len(t.history())
    with pytest.raises(CorruptFileError, match=r"\.blobs is damaged"):
        t.compact()
    assert len(t.history()) == before  # nothing committed
    with open(blob, "r+b") as f:
        f.seek(700_000)
        f.write(b)
    t.compact()
    assert {r["id"]: r["v"] for r in t.scan(keys=[1, 2]).to_pylist()} == {1: big, 2: small}
    out = tmp_path / "wh" / t.open_blob(1, "v").name
    assert out != blob  # rewritten into a new blob file, itself block-checked
    with open(out, "r+b") as f:
        at = t.open_blob(1, "v").ref.offset + 500_000
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
    with t.open_blob(1, "v") as g, pytest.raises(CorruptFileError, match=r"\.blobs is damaged"):
        g.seek(490_000)
        g.read(20_000)


def test_compacting_big_values_keeps_memory_bounded(tmp_path: Path) -> None:
    """Two 150 MB values in two runs, compacted in a fresh process: the compaction adds at most
    100 MB to its peak RSS (whole values read by the scan took 2 GB: value, copies, output)."""
    size = 150 << 20
    src = tmp_path / "big.bin"
    with open(src, "wb") as f:
        block = os.urandom(1 << 20)
        for _ in range(size >> 20):
            f.write(block)
    cat = conch.connect(tmp_path / "wh", maintenance=OFF)
    t = cat.create_table("big", [("id", pa.int64())])
    for i in range(2):
        t.write([{"id": i, "video": conch.Blob.from_path(src)}, {"id": 10 + i, "video": b"small" * 300}])
    script = textwrap.dedent(
        f"""
        import conch
        def hwm():
            with open("/proc/self/status") as s:
                return [int(line.split()[1]) * 1024 for line in s if line.startswith("VmHWM:")][0]
        t = conch.connect({str(tmp_path / "wh")!r}, maintenance=conch.Policy(auto=False)).table("big")
        t.scan("id").to_arrow()  # the reader's own set-up, before the mark
        base = hwm()
        r = t.compact()
        assert r.runs_in == 2 and r.runs_out == 1, r
        print(base, hwm())
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=600)
    base, peak = map(int, out.stdout.split())
    assert peak - base < 100 << 20, f"compaction added {(peak - base) >> 20} MB of peak RSS for 2 x 150 MB values"
    with conch.connect(tmp_path / "wh").table("big").open_blob(1, "video") as f:
        f.seek(size - (1 << 20))
        assert f.read() == block


def test_compaction_streams_values_on_object_storage(monkeypatch: pytest.MonkeyPatch, moto_s3: MotoS3) -> None:
    """On S3 the input is read by ranged requests and the output uploaded in parts: the values
    and the block-checked ranged reads of the output are right."""
    monkeypatch.setattr(blobcopy, "STREAM_BYTES", 100_000)
    cat = conch.connect(moto_s3.uri(), storage_options=moto_s3.options, maintenance=OFF)
    t = cat.create_table("s3", [("id", pa.int64())])
    big, other, small = os.urandom(3_000_000), os.urandom(200_000), os.urandom(5_000)
    t.write([{"id": 1, "v": big}, {"id": 2, "v": small}])
    t.write([{"id": 3, "v": other}, {"id": 2, "v": None}])
    before = t.open_blob(1, "v").name
    r = t.compact()
    assert r.runs_in == 2 and r.runs_out == 1
    assert {row["id"]: row["v"] for row in t.scan().to_pylist()} == {1: big, 2: None, 3: other}
    with t.open_blob(1, "v") as f:
        assert f.name != before
        f.seek(2_500_000)
        assert f.read(100_000) == big[2_500_000:2_600_000]
    assert not t.check().problems
