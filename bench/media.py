"""Issue 33's goals, side by side: large values as files, streamed writes, Hugging Face in and out
(`python -m bench.media`; small: `python -m bench.media --gb 0.2 --scan-mb 50 --images 1000`).

- `open_blob`: 1 MB read at offset `size/2` of a `--gb` value through `Table.open_blob` (a
  metastore read for the newest version, then the locating scan) and `Snapshot.open_blob`:
  bytes read from storage (`BlobFile.bytes_read`), requests, median latency of open + seek +
  read (warm page cache), against reading the whole value with a scan (`scan(keys=[k])`, what a seeking
  decoder had to do before).
- `write`: peak RSS (`VmHWM`, a subprocess each) of writing the `--gb` value from a path
  (`conch.Blob.from_path`) against writing a `--bytes-mb` value given as bytes (the value held
  in memory: the only way before).
- `scan 5 as files`: peak RSS of reading 1 MB of each of 5 values of `--scan-mb` through
  `Scan.blob_files`, against `scan(limit=5).to_arrow()` of the same rows.
- `hf`: a `datasets.Dataset` of `--images` PNG images (32x32) with ClassLabel labels, made here:
  `conch.engines.hf.write` against `Dataset.save_to_disk` (median of `--reps`, alternated), then
  read back through `conch.engines.hf.dataset` and compared byte for byte.

Peak RSS includes the interpreter and imports: the `imports and open` step measures that floor
(a 5-row scan of the key column). Results:
`bench/results/media.json`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import pyarrow as pa

from bench.rss import peak_rss
from bench.systems import machine

MB = 1 << 20


def _value_file(path: Path, size: int) -> Path:
    """A file of `size` random-looking bytes (written in 8 MiB parts)."""
    if not path.exists() or path.stat().st_size != size:
        block = np.random.default_rng(1).bytes(8 * MB)
        with open(path, "wb") as f:
            for pos in range(0, size, len(block)):
                f.write(block[: min(len(block), size - pos)])
    return path


def _child(step: str, work: Path, size: int) -> dict[str, Any]:
    """One measurement in this (fresh) process."""
    import conch

    wh = work / f"wh-{step}"
    t0 = time.perf_counter()
    if step in ("write path", "write bytes"):
        shutil.rmtree(wh, ignore_errors=True)
        cat = conch.connect(wh, maintenance=conch.Policy(auto=False))
        t = cat.create_table("v", [("id", pa.int64())])
        src = work / f"value-{size}.bin"
        value: Any = conch.Blob.from_path(src) if step == "write path" else src.read_bytes()
        t.write([{"id": 1, "video": value}])
    elif step == "scan 5 as files":
        t = conch.connect(work / "wh-scan").table("v")
        got = 0
        for row in t.scan("video", limit=5).blob_files():
            got += len(row["video"].read(MB))
        assert got == 5 * MB
    elif step == "imports and open":  # the floor every other step's peak RSS includes
        t = conch.connect(work / "wh-scan").table("v")
        assert t.scan("id", limit=5).to_arrow().num_rows == 5
    elif step == "scan 5 as bytes":
        t = conch.connect(work / "wh-scan").table("v")
        assert t.scan("video", limit=5).to_arrow().num_rows == 5
    return {"step": step, "value_mb": size / MB, "seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss() / MB}


def _run_child(step: str, work: Path, size: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.media", "--child", step, "--work", str(work), "--size", str(size)],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def open_blob_side(work: Path, size: int, reps: int) -> list[dict[str, Any]]:
    import conch

    t = conch.connect(work / "wh-write path").table("v")
    at = size // 2
    times, f = [], None
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        f = t.open_blob(1, "video")
        f.seek(at)
        data = f.read(MB)
        times.append(time.perf_counter() - t0)
    assert f is not None and len(data) == MB
    snap = t.snapshot()
    snap_times = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        h = snap.open_blob(1, "video")
        h.seek(at)
        h.read(MB)
        snap_times.append(time.perf_counter() - t0)
    g = snap.open_blob(1, "video")  # reads on one open file
    reads = []
    for i in range(reps):
        t0 = time.perf_counter()
        g.seek(at + i * MB)
        g.read(MB)
        reads.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    scan = t.scan("video", keys=[1])
    whole = scan.to_arrow()
    whole_s = time.perf_counter() - t0
    assert whole.column("video")[0].as_py()[at : at + MB] == data
    return [
        {
            "case": "open_blob + seek + read 1 MB",
            "seconds": median(times[1:]),
            "bytes_read": f.bytes_read,
            "requests": f.requests,
        },
        {"case": "Snapshot.open_blob + seek + read 1 MB", "seconds": median(snap_times[1:])},
        {"case": "seek + read 1 MB on an open BlobFile", "seconds": median(reads)},
        {"case": "whole value by scan(keys=[k])", "seconds": whole_s, "bytes_read": scan.metrics().total_bytes_read},
    ]


def _images(n: int) -> Any:
    import datasets
    from PIL import Image

    rng = np.random.default_rng(5)
    imgs = []
    for _ in range(n):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, format="PNG")
        imgs.append({"bytes": buf.getvalue(), "path": None})
    names = [f"class{i}" for i in range(10)]
    feats = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=names)})
    plain = datasets.Dataset.from_dict({"image": imgs, "label": rng.integers(0, 10, n).tolist()})
    return plain.cast(feats)


def hf_side(work: Path, n: int, reps: int) -> list[dict[str, Any]]:
    import datasets

    import conch
    import conch.engines.hf as hf

    datasets.disable_progress_bars()
    ds = _images(n)
    cat = conch.connect(work / "wh-hf", maintenance=conch.Policy(auto=False))
    conch_s, disk_s = [], []
    for i in range(reps):
        t0 = time.perf_counter()
        t = hf.write(cat, ds, table=f"images{i}", progress=False)
        conch_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ds.save_to_disk(str(work / f"hf-disk-{i}"))
        disk_s.append(time.perf_counter() - t0)
    hf.dataset(t)  # datasets imports torch on the first IterableDataset: not part of the read
    t0 = time.perf_counter()
    back = list(hf.dataset(t).decode(False))
    read_s = time.perf_counter() - t0
    want = ds.with_format("arrow")[:].to_pylist()
    same = [(r["image"]["bytes"], r["label"]) for r in back] == [(r["image"]["bytes"], r["label"]) for r in want]
    t0 = time.perf_counter()
    loaded = datasets.load_from_disk(str(work / "hf-disk-0"))
    n_disk = sum(1 for _ in loaded.with_format("arrow").iter(batch_size=1000))
    disk_read_s = time.perf_counter() - t0
    assert n_disk
    return [
        {"case": f"ingest {n} images", "system": "conch hf.write", "seconds": median(conch_s)},
        {"case": f"ingest {n} images", "system": "datasets save_to_disk", "seconds": median(disk_s)},
        {"case": f"read {n} images back", "system": "conch hf.dataset", "seconds": read_s, "identical": same},
        {"case": f"read {n} images back", "system": "datasets load_from_disk (arrow)", "seconds": disk_read_s},
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=1.0, help="size of the large value (GB, 2**30 bytes)")
    ap.add_argument("--bytes-mb", type=int, default=100, help="size of the value written as bytes (MB)")
    ap.add_argument("--scan-mb", type=int, default=300, help="size of each of the 5 scanned values (MB)")
    ap.add_argument("--images", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--child")
    ap.add_argument("--work")
    ap.add_argument("--size", type=int)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, Path(args.work), args.size)))
        return
    import conch

    out: dict[str, Any] = {"machine": machine(), "rows": []}
    work = Path(tempfile.mkdtemp(prefix="bench-media-"))
    try:
        size = int(args.gb * (1 << 30))
        _value_file(work / f"value-{size}.bin", size)
        _value_file(work / f"value-{args.bytes_mb * MB}.bin", args.bytes_mb * MB)
        rows = [_run_child("write path", work, size), _run_child("write bytes", work, args.bytes_mb * MB)]
        for r in open_blob_side(work, size, args.reps * 5):
            rows.append({"step": "open_blob", "value_mb": size / MB, **r})
        scan_src = _value_file(work / f"value-{args.scan_mb * MB}.bin", args.scan_mb * MB)
        t = conch.connect(work / "wh-scan", maintenance=conch.Policy(auto=False)).create_table(
            "v", [("id", pa.int64())]
        )
        for i in range(5):
            t.write([{"id": i, "video": conch.Blob.from_path(scan_src)}])
        rows += [
            _run_child(s, work, args.scan_mb * MB) for s in ("imports and open", "scan 5 as files", "scan 5 as bytes")
        ]
        rows += [{"step": "hf", **r} for r in hf_side(work, args.images, args.reps)]
        out["rows"] = rows
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for r in out["rows"]:
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()})
    by = {(r["step"], r.get("case"), r.get("system")): r for r in out["rows"]}
    ingest = [r for r in out["rows"] if r["step"] == "hf" and r["case"].startswith("ingest")]
    if len(ingest) == 2:
        print(f"hf ingest / save_to_disk: {ingest[0]['seconds'] / ingest[1]['seconds']:.2f}x")
    ob = by.get(("open_blob", "open_blob + seek + read 1 MB", None))
    whole = by.get(("open_blob", "whole value by scan(keys=[k])", None))
    if ob and whole:
        print(
            f"open_blob 1 MB vs whole value: {whole['seconds'] / ob['seconds']:.0f}x faster, "
            f"{ob['bytes_read'] / MB:.2f} MB read of {whole['bytes_read'] / MB:.0f} MB"
        )
    results = Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    (results / "media.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("CONCH_PROGRESS", "0")
    main()
