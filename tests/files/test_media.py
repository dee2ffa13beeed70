"""Large values as files (issue 33): `open_blob` / `Scan.blob_files` read exactly the ranges asked
for, verified per 64 KiB block; values given as paths, file objects and `conch.Blob` are
written as streams in bounded memory."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch
from conch.errors import CorruptFileError, InvalidArgumentError, KeyNotFoundError
from conch.files.blobfile import BlobFile, BlobRef
from conch.files.storage import LocalStorage
from helpers import run_cli
from media_fixtures import png, wav
from services import MotoS3

SIZES = [0, 1, 700, 64 << 10, (64 << 10) + 1, 300_000, 1_000_003]


def _values(seed: int = 3) -> dict[int, bytes]:
    rng = np.random.default_rng(seed)
    return {i: rng.bytes(n) for i, n in enumerate(SIZES)}


class _Stored(tuple[conch.Table, dict[int, bytes]]):
    def __repr__(self) -> str:  # hypothesis prints its arguments: not megabytes of values
        return "<table m>"


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[conch.Table, dict[int, bytes]]:
    root = tmp_path_factory.mktemp("media")
    cat = conch.connect(root / "wh", maintenance=conch.Policy(auto=False))
    t = cat.create_table("m", [("id", pa.int64())])
    values = _values()
    t.write([{"id": k, "video": v} for k, v in values.items()])
    # a second write overwrites key 5 from a path: open_blob must find the fresh cell
    fresh = np.random.default_rng(9).bytes(500_000)
    (root / "fresh.bin").write_bytes(fresh)
    t.write([{"id": 5, "video": Path(root / "fresh.bin")}])
    values[5] = fresh
    return _Stored((t, values))


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_ranged_reads_equal_slices_of_the_whole_value(
    table: tuple[conch.Table, dict[int, bytes]], data: st.DataObject
) -> None:
    t, values = table
    key = data.draw(st.sampled_from(sorted(values)))
    whole = values[key]
    with t.open_blob(key, "video") as f:
        assert isinstance(f, io.RawIOBase) and f.seekable() and f.readable() and not f.writable()
        assert f.size == len(whole)
        budget = 4096  # the blob file's block table (8 bytes per 64 KiB block), read once
        for _ in range(data.draw(st.integers(1, 4))):
            start = data.draw(st.integers(0, len(whole) + 10))
            n = data.draw(st.integers(-1, len(whole) + 10))
            whence = data.draw(st.sampled_from([io.SEEK_SET, io.SEEK_END, io.SEEK_CUR]))
            pos = {io.SEEK_SET: start, io.SEEK_END: start - len(whole), io.SEEK_CUR: start - f.tell()}[whence]
            assert f.seek(pos, whence) == start
            expected = whole[start:] if n < 0 else whole[start : start + n]
            assert f.read(n) == expected
            assert f.tell() == max(start, min(len(whole), start + len(expected)))
            budget += len(expected) + 2 * (64 << 10) if expected else 0
        assert f.bytes_read <= budget  # a read reads its range and at most a block more at each end


def test_ranged_reads_through_buffered_readers_and_scans(table: tuple[conch.Table, dict[int, bytes]]) -> None:
    t, values = table
    buffered = io.BufferedReader(t.open_blob(6, "video"), buffer_size=4096)
    buffered.seek(123_456)
    assert buffered.read(10_000) == values[6][123_456:133_456]
    rows = list(t.scan("video").blob_files())
    assert [r["id"] for r in rows] == sorted(values)
    assert {r["id"]: r["video"].read() for r in rows} == values
    snap = t.snapshot()
    t.write([{"id": 1, "video": b"newer"}])
    assert snap.open_blob(1, "video").read() == values[1]  # the snapshot's version, not the newest
    assert t.open_blob(1, "video").read() == b"newer"
    t.write([{"id": 1, "video": values[1]}])


def test_open_blob_errors(table: tuple[conch.Table, dict[int, bytes]]) -> None:
    t, _ = table
    with pytest.raises(KeyNotFoundError, match="999"):
        t.open_blob(999, "video")
    t.write([{"id": 100, "x": 1.0}])
    with pytest.raises(KeyNotFoundError, match="no value"):
        t.open_blob(100, "video")
    with pytest.raises(InvalidArgumentError, match="not binary"):
        t.open_blob(100, "x")
    with pytest.raises(InvalidArgumentError, match="filter"):
        list(t.scan("video", where=t["video"] == b"x").blob_files())
    f = t.open_blob(3, "video")
    f.close()
    with pytest.raises(ValueError, match="closed"):
        f.read(1)
    with pytest.raises(InvalidArgumentError, match="not a file"):
        conch.Blob.from_path("/nonexistent/x.mp4")
    t.delete([100])


def test_nested_levels_by_full_key(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh", maintenance=conch.Policy(auto=False))
    t = cat.create_table("v", [("id", pa.int64())])
    clip = os.urandom(200_000)
    t.write([{"id": 1, "clips": [{"$": 7, "frames": clip}, {"$": 8, "frames": b"tiny"}]}])
    with t.open_blob((1, 7), "frames", level="clips") as f:
        f.seek(150_000)
        assert f.read(100) == clip[150_000:150_100]
    assert t.open_blob((1, 8), "frames", level="clips").read() == b"tiny"


def _flip(path: Path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


def test_damage_in_a_range_is_a_corrupt_file_error_naming_the_file(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh", maintenance=conch.Policy(auto=False))
    t = cat.create_table("d", [("id", pa.int64())])
    value = os.urandom(1_000_000)
    t.write([{"id": 1, "video": value}])
    f = t.open_blob(1, "video")
    blob = tmp_path / "wh" / f.name
    _flip(blob, 700_000)  # inside block 10 (64 KiB blocks)
    with t.open_blob(1, "video") as g:
        assert g.read(100) == value[:100]  # blocks the damage is not in still read
        g.seek(690_000)
        with pytest.raises(CorruptFileError, match=r"\.blobs is damaged"):
            g.read(20_000)
    with pytest.raises(CorruptFileError, match=r"\.blobs"):
        t.scan("video").to_arrow()  # the whole-value take finds it too
    assert any(p.file.endswith(".blobs") for p in t.check().problems)
    _flip(blob, 700_000)
    _flip(blob, len(value) + 3)  # the blob file's block table
    # this process verified the table before: its values still read, checked against it ...
    assert t.open_blob(1, "video").read(10) == value[:10]
    assert any(p.file.endswith(".blobs") for p in t.check().problems)  # ... check() names it,
    script = f"import conch; conch.connect({str(tmp_path / 'wh')!r}).table('d').open_blob(1, 'video').read(1)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode and "(block table)" in out.stderr  # ... and a process opening it afresh fails


def test_blob_files_without_a_block_table_are_verified_per_value(tmp_path: Path) -> None:
    """A reference without a block-table checksum (blob files written before them) hashes the
    whole value once, streamed, against the blob index's per-value hash."""
    cat = conch.connect(tmp_path / "wh", maintenance=conch.Policy(auto=False))
    t = cat.create_table("d", [("id", pa.int64())])
    value = os.urandom(300_000)
    t.write([{"id": 1, "video": value}])
    ref = t.open_blob(1, "video").ref
    legacy = BlobRef(ref.path, ref.offset, ref.length, ref.value_hash, "")
    storage = LocalStorage(tmp_path / "wh")
    f = BlobFile(storage, legacy)
    f.seek(1000)
    assert f.read(10) == value[1000:1010]
    assert f.bytes_read >= len(value)  # the whole value, once
    _flip(tmp_path / "wh" / ref.path, 250_000)
    with pytest.raises(CorruptFileError, match="does not match its recorded checksum"):
        BlobFile(storage, legacy).read(10)


def test_values_given_as_streams(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh", maintenance=conch.Policy(auto=False))
    t = cat.create_table("s", [("id", pa.int64())])
    a, b, c = os.urandom(3_000_000), os.urandom(20_000), b"x" * 10
    (tmp_path / "a.bin").write_bytes(a)
    with open(tmp_path / "a.bin", "rb") as fa:
        fa.seek(1000)  # a file object is read from its position
        t.write(
            [
                {"id": 1, "v": conch.Blob.from_path(tmp_path / "a.bin"), "meta": {"clip": io.BytesIO(b)}},
                {"id": 2, "v": fa, "meta": {"clip": None}},
                {"id": 3, "v": c, "meta": {"clip": conch.Blob.from_file(io.BytesIO(b"y" * 5))}},
            ]
        )
    got = t.scan().to_arrow().to_pylist()
    assert [(r["v"], r["meta"]["clip"]) for r in got] == [(a, b), (a[1000:], None), (c, b"y" * 5)]
    # a streamed column's statistics hold no bounds of its tokens: filters on it are right
    assert [r["id"] for r in t.scan("v", where=t["v"] == c).to_arrow().to_pylist()] == [3]
    assert not t.check().problems
    big = cat.create_table("big", [("id", pa.int64())], schema=pa.schema([("v", pa.string())]))
    with pytest.raises(conch.SchemaError, match="cannot write binary"):  # a file is binary
        big.write([{"id": 1, "v": conch.Blob.from_path(tmp_path / "a.bin")}])
    assert big.scan().count() == 0


def test_torch_decoders_accept_blob_files(tmp_path: Path) -> None:
    import torch

    from conch.engines.torch import decoders

    cat = conch.connect(tmp_path / "wh", maintenance=conch.Policy(auto=False))
    t = cat.create_table("m", [("id", pa.int64())])
    t.write([{"id": i, "img": png(i), "snd": wav(220.0 * (i + 1))} for i in range(3)])
    for row in t.scan("img", "snd").blob_files():
        img = decoders.image()(row["img"])
        snd = decoders.audio()(row["snd"])
        assert torch.equal(img, decoders.image()(png(row["id"])))
        assert torch.equal(snd, decoders.audio()(wav(220.0 * (row["id"] + 1))))


def test_open_blob_on_object_storage_is_one_ranged_request(tmp_path: Path, moto_s3: MotoS3) -> None:
    cat = conch.connect(moto_s3.uri(), storage_options=moto_s3.options, maintenance=conch.Policy(auto=False))
    t = cat.create_table("s3", [("id", pa.int64())])
    value = os.urandom(20 << 20)  # over the 8 MiB multipart part size
    (tmp_path / "v.bin").write_bytes(value)
    t.write([{"id": 1, "video": conch.Blob.from_path(tmp_path / "v.bin")}])
    with t.open_blob(1, "video") as f:
        f.seek(10 << 20)
        assert f.read(1 << 20) == value[10 << 20 : 11 << 20]
        table_read = f.requests  # the block table, read once on open
        assert table_read == 2 and f.bytes_read < (1 << 20) + 2 * (64 << 10) + 8 * 400
        f.read(1 << 20)
        assert f.requests == table_read + 1  # each read: one ranged request


def test_writing_a_large_value_from_a_path_keeps_memory_bounded(tmp_path: Path) -> None:
    """300 MB written from a file: peak RSS stays far below the value (subprocess, VmHWM)."""
    size = 300 << 20
    src = tmp_path / "big.bin"
    with open(src, "wb") as f:
        block = os.urandom(1 << 20)
        for _ in range(size >> 20):
            f.write(block)
    script = textwrap.dedent(
        f"""
        import conch, pyarrow as pa, sys
        cat = conch.connect({str(tmp_path / "wh")!r}, maintenance=conch.Policy(auto=False))
        t = cat.create_table("big", [("id", pa.int64())])
        t.write([{{"id": 1, "video": conch.Blob.from_path({str(src)!r})}}])
        f = t.open_blob(1, "video")
        f.seek({size // 2})
        with open({str(src)!r}, "rb") as g:
            g.seek({size // 2})
            assert f.read(1 << 20) == g.read(1 << 20)
        with open("/proc/self/status") as s:
            print([int(line.split()[1]) * 1024 for line in s if line.startswith("VmHWM:")][0])
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=600)
    peak = int(out.stdout.strip().splitlines()[-1])
    assert peak < 250 << 20, f"peak RSS {peak >> 20} MB writing a {size >> 20} MB value"
    with conch.connect(tmp_path / "wh").table("big").open_blob(1, "video") as f:
        f.seek(size - 10)
        assert f.read() == block[-10:]


def test_cli_ingests_a_folder_of_media_files(tmp_path: Path) -> None:
    folder = tmp_path / "media"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.png").write_bytes(png(1, (40, 30)))
    (folder / "sub" / "b.wav").write_bytes(wav(440.0, seconds=0.25, rate=8000))
    (folder / "notes.txt").write_text("not media")
    big = os.urandom(2_000_000)
    (folder / "sub" / "c.mp4").write_bytes(big)
    wh = tmp_path / "wh"
    out = run_cli(
        wh,
        "ingest-media",
        str(folder),
        "-t",
        "files",
        "--pattern",
        "*.png",
        "--pattern",
        "*.wav",
        "--pattern",
        "*.MP4",
        "--batch",
        "2",
    )
    assert out.returncode == 0, out.stderr
    assert "ingested 3 files" in out.stdout
    t = conch.connect(wh).table("files")
    rows = {
        r["path"]: r
        for r in t.scan("size", "mime", "width", "height", "sample_rate", "channels", "seconds").to_pylist()
    }
    assert sorted(rows) == ["a.png", "sub/b.wav", "sub/c.mp4"]
    assert (rows["a.png"]["width"], rows["a.png"]["height"], rows["a.png"]["mime"]) == (40, 30, "image/png")
    assert (rows["sub/b.wav"]["sample_rate"], rows["sub/b.wav"]["channels"], rows["sub/b.wav"]["seconds"]) == (
        8000,
        1,
        0.25,
    )
    assert rows["sub/c.mp4"]["size"] == len(big) and rows["sub/c.mp4"]["width"] is None
    with t.open_blob("sub/c.mp4", "bytes") as f:
        f.seek(1_500_000)
        assert f.read(1000) == big[1_500_000:1_501_000]
    assert t.open_blob("a.png", "bytes").read() == png(1, (40, 30))
    bad = run_cli(wh, "ingest-media", str(tmp_path / "nope"), "-t", "files")
    assert bad.returncode == 2 and "is not a folder" in bad.stderr


def test_media_doc_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/media.md's worked example, on files that packages ship."""
    import re
    import sysconfig

    import datasets  # noqa: F401  (the set-up installs the example's packages: a missing one is a broken install)
    import sklearn  # noqa: F401
    import torch  # noqa: F401

    if not (Path(sysconfig.get_paths()["stdlib"]) / "test" / "audiodata" / "pluck-pcm16.wav").exists():
        pytest.skip("this Python ships without its test package")
    doc = Path(__file__).parents[2] / "docs" / "media.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"media.md block {i + 1}", "exec"), scope)
    assert scope["rate"] == 11025 and len(scope["frames"]) == 400  # type: ignore[arg-type]  # 100 stereo 16-bit frames
    f = scope["f"]
    assert isinstance(f, BlobFile) and f.requests == 2  # the block table, then one read: wave's small reads hit it


def test_nested_writes_stream_values_given_as_files(tmp_path: Path) -> None:
    """`with t.write() as w:`, a record and a member assignment take `conch.Blob`, `Path` and
    binary file objects as `t.write` does: streamed, never typed as Python objects."""
    a, b, c = os.urandom(3_000_000), os.urandom(70_000), os.urandom(5_000)
    (tmp_path / "a.bin").write_bytes(a)
    (tmp_path / "b.bin").write_bytes(b)
    cat = conch.connect(tmp_path / "wh", maintenance=conch.Policy(auto=False))
    t = cat.create_table("rec", [("id", pa.int64())])
    t.write([{"id": 1, "clips": [{"$": 0, "video": b"old", "note": "n"}]}])
    with t.write() as w:
        w.clips[1][1].video = conch.Blob.from_path(tmp_path / "a.bin")
        w.clips[1][2].video = tmp_path / "b.bin"
        w.clips[1][2].meta.thumb = io.BytesIO(c)
    assert w.commit is not None
    t.clips[1][3] = {"video": conch.Blob.from_file(io.BytesIO(c)), "note": "x"}
    t.clips[1][0].video = tmp_path / "b.bin"
    got = {r["clips"]: r for r in t.scan(level="clips").to_pylist()}
    assert got[0]["video"] == b and got[0]["note"] == "n"
    assert got[1]["video"] == a and got[2]["video"] == b and got[2]["meta"]["thumb"] == c
    assert got[3]["video"] == c
    with t.open_blob((1, 1), "video", level="clips") as f:
        f.seek(2_000_000)
        assert f.read(10) == a[2_000_000:2_000_010]
    assert not t.check().problems
