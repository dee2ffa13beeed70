"""Hugging Face `datasets` in and out (issue 33): datasets made here (no hub), written into Conch
and read back as an `IterableDataset` with identical bytes, labels and typed features."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pytest

import conch
import conch.engines.hf as hf
from conch.errors import InvalidArgumentError
from media_fixtures import png, wav

LABELS = ["cat", "dog", "eel"]
FEATURES = datasets.Features(
    {
        "img": datasets.Image(),
        "snd": datasets.Audio(),
        "label": datasets.ClassLabel(names=LABELS),
        "text": datasets.Value("string"),
    }
)


def _split(n: int, seed: int) -> datasets.Dataset:
    plain = datasets.Dataset.from_dict(
        {
            "img": [{"bytes": png(seed + i), "path": None} for i in range(n)],
            "snd": [{"bytes": wav(200.0 + seed + i), "path": None} for i in range(n)],
            "label": [(seed + i) % 3 for i in range(n)],
            "text": [f"row {seed + i}" for i in range(n)],
        }
    )
    return plain.cast(FEATURES)


def _expected(ds: datasets.Dataset) -> list[tuple[bytes, bytes, int, str]]:
    rows = ds.with_format("arrow")[:].to_pylist()
    return [(r["img"]["bytes"], r["snd"]["bytes"], r["label"], r["text"]) for r in rows]


def _got(it: datasets.IterableDataset) -> list[tuple[bytes, bytes, int, str]]:
    return [(r["img"]["bytes"], r["snd"]["bytes"], r["label"], r["text"]) for r in it.decode(False)]


def test_dataset_dict_round_trip(tmp_path: Path) -> None:
    dd = datasets.DatasetDict({"train": _split(40, 0), "test": _split(9, 100)})
    cat = conch.connect(tmp_path / "wh")
    t = hf.write(cat, dd, table="ds", progress=False, batch_rows=16)
    assert t.key_schema.names == ["split", "idx"]
    assert t.scan().count() == 49
    for split in ("train", "test"):
        it = hf.dataset(t.scan(where=t["split"] == split))
        assert isinstance(it, datasets.IterableDataset)
        assert it.features["img"] == datasets.Image()
        assert it.features["label"] == datasets.ClassLabel(names=LABELS)
        assert _got(it) == _expected(dd[split])
    # decoded as the features say: a PIL image, audio by torchcodec (FFmpeg), a label index
    it = hf.dataset(t.scan(where=t["split"] == "test"))
    assert it.features["snd"] == datasets.Audio()
    first = next(iter(it))
    assert first["img"].size == (48, 32) and first["label"] == 100 % 3
    samples = first["snd"].get_all_samples()
    with wave.open(io.BytesIO(wav(300.0))) as w:  # split "test" starts at seed 100: 200 + 100 Hz
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2") / 32768
        assert samples.sample_rate == w.getframerate() and samples.data.shape == (1, len(pcm))
    assert np.allclose(samples.data[0].numpy(), pcm, atol=1e-6)
    # header metadata beside the bytes
    meta = t.scan("img.width", "img.height", "img.format", "snd.sampling_rate", "snd.channels", limit=1).to_pylist()
    assert meta[0]["img"] == {"width": 48, "height": 32, "format": "PNG"}
    assert meta[0]["snd"] == {"sampling_rate": 8000, "channels": 1}


def test_shards_follow_the_scans_splits(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh", write_options=conch.WriteOptions(chunk_rows=20))
    t = hf.write(cat, _split(100, 0), table="ds", progress=False, batch_rows=20)
    scan = t.scan()
    it = hf.dataset(scan, n_shards=4)
    assert it.n_shards == len(scan.splits(4)) > 1
    shards = [_got(it.shard(it.n_shards, i)) for i in range(it.n_shards)]
    assert sorted(r for s in shards for r in s) == sorted(_expected(_split(100, 0)))


def test_iterable_dataset_with_a_key_and_images_stored_as_paths(tmp_path: Path) -> None:
    files = []
    for i in range(5):
        p = tmp_path / f"{i}.png"
        p.write_bytes(png(i))
        files.append(str(p))
    plain = datasets.Dataset.from_dict({"id": [10, 11, 12, 13, 14], "img": [{"bytes": None, "path": f} for f in files]})
    ds = plain.cast(datasets.Features({"id": datasets.Value("int64"), "img": datasets.Image()}))
    cat = conch.connect(tmp_path / "wh")
    t = hf.write(cat, ds.to_iterable_dataset(), key="id", table="paths", progress=False)
    assert t.key_schema.names == ["split", "id"]
    back = list(hf.dataset(t).decode(False))
    assert [r["id"] for r in back] == [10, 11, 12, 13, 14]
    assert [r["img"]["bytes"] for r in back] == [png(i) for i in range(5)]  # read from the paths
    assert [r["img"]["path"] for r in back] == [Path(f).name for f in files]  # as datasets embeds files
    assert [r["img"]["path"] for r in t.scan("img.path").to_pylist()] == files


def test_features_are_inferred_for_tables_not_made_by_write(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh")
    t = cat.create_table("mine", [("split", pa.string()), ("idx", pa.uint64())])
    hf.write(t, _split(3, 0), progress=False)
    it = hf.dataset(t)
    assert it.features["img"] == datasets.Image()
    assert it.features["label"] == datasets.Value("int64")  # names are kept only by a table write made
    assert [r[2] for r in _got(it)] == [0, 1, 2]


def test_bad_input_is_a_typed_error(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh")
    with pytest.raises(InvalidArgumentError, match="Dataset"):
        hf.write(cat, [{"a": 1}], table="x")
    with pytest.raises(InvalidArgumentError, match="table="):
        hf.write(cat, _split(2, 0))
    with pytest.raises(InvalidArgumentError, match="not in the dataset"):
        hf.write(cat, _split(2, 0), key="nope", table="x")


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "BMP", "WEBP", "TIFF"])
def test_image_header_metadata_matches_pillow(fmt: str) -> None:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (37, 23), (1, 2, 3)).save(buf, format=fmt)
    data = buf.getvalue()
    col = pa.array([{"bytes": data, "path": None}, None], pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    got = hf._media(col, hf._image_meta, hf._IMAGE).to_pylist()
    assert got[0] == {"bytes": data, "path": None, "width": 37, "height": 23, "format": fmt}
    assert got[1] is None


def test_arrow_batches_are_the_written_dataset(tmp_path: Path) -> None:
    """`with_format("arrow")` gives Arrow tables in the features' types: the same rows, bytes,
    labels and nulls as the dataset written, from every shard."""
    plain = datasets.Dataset.from_dict(
        {
            "img": [None if i % 7 == 3 else {"bytes": png(i), "path": f"/data/{i}.png"} for i in range(60)],
            "label": [i % 3 for i in range(60)],
            "text": [None if i % 5 == 0 else f"row {i}" for i in range(60)],
        }
    )
    features = datasets.Features({n: FEATURES[n] for n in ("img", "label", "text")})
    ds = plain.cast(features)
    cat = conch.connect(tmp_path / "wh", write_options=conch.WriteOptions(chunk_rows=16))
    t = hf.write(cat, ds, table="ds", progress=False, batch_rows=16)
    it = hf.dataset(t.scan(), n_shards=3)
    assert it.features == features
    assert it.n_shards > 1
    tables = list(it.with_format("arrow").iter(batch_size=7))
    assert all(tb.schema == features.arrow_schema for tb in tables)
    got = pa.concat_tables(tables).to_pylist()
    want = ds.with_format("arrow")[:].to_pylist()
    for r in want:  # as datasets embeds files: the path's file name
        if r["img"] is not None:
            r["img"]["path"] = Path(r["img"]["path"]).name
    assert got == want
    assert list(it.decode(False)) == want  # rows, formatted from the same tables


def test_reading_back_streams_in_bounded_memory(tmp_path: Path) -> None:
    """A 240 MB table of 16 MB fragments read back as Arrow batches in a fresh process: its peak
    RSS grows by far less than the table (the shards stream their splits' record batches)."""
    rows, size = 1200, 200_000

    def gen() -> Iterator[dict[str, Any]]:
        rng = np.random.default_rng(0)
        for i in range(rows):
            yield {"img": {"bytes": rng.bytes(size), "path": None}, "label": i % 3}

    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=LABELS)})
    # 16 MB fragments: a scan batch holds (at most) one fragment's values
    opts = conch.WriteOptions(fragment_bytes=16 << 20)
    cat = conch.connect(tmp_path / "wh", maintenance=conch.Policy(auto=False), write_options=opts)
    hf.write(cat, datasets.IterableDataset.from_generator(gen, features=features), table="big", progress=False)
    script = textwrap.dedent(
        f"""
        import conch, conch.engines.hf as hf
        def hwm():
            return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]) << 10
        t = conch.connect({str(tmp_path / "wh")!r}).table("big")
        t.scan("label", limit=1).to_arrow()  # the reader's own start (files opened, Vortex loaded)
        it = hf.dataset(t)  # (imports torch)
        before = hwm()
        print(sum(b.num_rows for b in it.with_format("arrow").iter(batch_size=10)), hwm() - before)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    n, grew = map(int, out.stdout.split())
    assert n == rows
    assert grew < rows * size / 3, f"peak RSS grew {grew >> 20} MB reading a {rows * size >> 20} MB table"
