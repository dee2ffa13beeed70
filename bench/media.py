"""Issue 33's goals, side by side: large values as files, streamed writes, Hugging Face in and out
(`python -m bench.media`; small: `python -m bench.media --gb 0.2 --scan-mb 50 --images 1000`; Hugging
Face only, at 2k / 10k / 50k images: `python -m bench.media --only hf`).

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
- `open_blob` under load: the same with `--hogs` busy processes beside it.
- `compact`: 4 values of `--scan-mb` in two runs, compacted in a fresh process: the peak RSS the
  rewrite adds (big values are copied between blob files in parts).
- `hf`: a `datasets.Dataset` of `--images` PNG images (32x32) with ClassLabel labels, made here:
  `conch.engines.hf.write` against `Dataset.save_to_disk` (median of `--reps`, alternated), then
  read back through `conch.engines.hf.dataset` and compared byte for byte, against
  `load_from_disk` (memory-mapped), both as undecoded rows and as Arrow batches of 1000; the
  ingest also at the `--hf-sizes` multiples of `--images` (5x smaller and larger by default).

It ends with the goals table (measured, goal, met).

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
    elif step == "import conch":
        pass  # the package alone (`import conch` loads no engine: pandas, torch, datasets, Spark)
    elif step == "compact":  # two runs of 2 values each, compacted: the peak RSS the rewrite adds
        t = conch.connect(work / "wh-compact", maintenance=conch.Policy(auto=False)).table("v")
        t.scan("id").to_arrow()
        base = peak_rss()
        r = t.compact()
        assert r.runs_in == 2 and r.runs_out == 1, r
        return {
            "step": step,
            "value_mb": size / MB,
            "seconds": time.perf_counter() - t0,
            "peak_rss_mb": peak_rss() / MB,
            "added_rss_mb": (peak_rss() - base) / MB,
        }
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


def _hogs(n: int) -> list[subprocess.Popen[bytes]]:
    """`n` busy processes: the machine under load while a latency is measured."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def open_blob_loaded(work: Path, size: int, reps: int, hogs: int) -> dict[str, Any]:
    """Median open + seek + read 1 MB with `hogs` busy processes beside it."""
    import conch

    t = conch.connect(work / "wh-write path").table("v")
    busy = _hogs(hogs)
    try:
        time.sleep(0.5)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            with t.open_blob(1, "video") as f:
                f.seek(size // 2)
                f.read(MB)
            times.append(time.perf_counter() - t0)
    finally:
        for h in busy:
            h.kill()
            h.wait()
    return {
        "case": f"open_blob + seek + read 1 MB, {hogs} busy processes beside",
        "seconds": median(times),
        "load": os.getloadavg()[0],
    }


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
            "requests": f.requests,  # the last open's: the blob file's block table was read by the first
            "load": os.getloadavg()[0],
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


def hf_ingest(work: Path, n: int, reps: int) -> list[dict[str, Any]]:
    """Ingest only (a dataset of `n` images), conch against save_to_disk, alternated."""
    import datasets

    import conch
    import conch.engines.hf as hf

    datasets.disable_progress_bars()
    ds = _images(n)
    cat = conch.connect(work / f"wh-hf-{n}", maintenance=conch.Policy(auto=False))
    hf.write(cat, ds, table="warm", progress=False)
    conch_s, disk_s = [], []
    for i in range(reps):
        t0 = time.perf_counter()
        hf.write(cat, ds, table=f"images{i}", progress=False)
        conch_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ds.save_to_disk(str(work / f"hf-disk-{n}-{i}"))
        disk_s.append(time.perf_counter() - t0)
    shutil.rmtree(work / f"wh-hf-{n}", ignore_errors=True)
    for i in range(reps):
        shutil.rmtree(work / f"hf-disk-{n}-{i}", ignore_errors=True)
    return [
        {"case": f"ingest {n} images", "system": "conch hf.write", "seconds": median(conch_s)},
        {"case": f"ingest {n} images", "system": "datasets save_to_disk", "seconds": median(disk_s)},
    ]


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
    disk = str(work / "hf-disk-0")

    def rows_conch() -> list[Any]:
        return list(hf.dataset(t).decode(False))

    def rows_disk() -> list[Any]:
        return list(datasets.load_from_disk(disk).cast_column("image", datasets.Image(decode=False)))

    def arrow_conch() -> int:
        return sum(b.num_rows for b in hf.dataset(t).with_format("arrow").iter(batch_size=1000))

    def arrow_disk() -> int:
        return sum(b.num_rows for b in datasets.load_from_disk(disk).with_format("arrow").iter(batch_size=1000))

    read: dict[str, list[float]] = {}
    for _ in range(reps):  # alternated
        for name, f in (("rows_conch", rows_conch), ("rows_disk", rows_disk), ("arrow_conch", arrow_conch)):
            t0 = time.perf_counter()
            got = f()
            read.setdefault(name, []).append(time.perf_counter() - t0)
            if name == "rows_conch":
                back = got
        t0 = time.perf_counter()
        assert arrow_disk() == n
        read.setdefault("arrow_disk", []).append(time.perf_counter() - t0)
    want = ds.with_format("arrow")[:].to_pylist()
    same = [(r["image"]["bytes"], r["label"]) for r in back] == [(r["image"]["bytes"], r["label"]) for r in want]
    return [
        {"case": f"ingest {n} images", "system": "conch hf.write", "seconds": median(conch_s)},
        {"case": f"ingest {n} images", "system": "datasets save_to_disk", "seconds": median(disk_s)},
        {
            "case": f"read {n} images back as rows (undecoded)",
            "system": "conch hf.dataset",
            "seconds": median(read["rows_conch"]),
            "identical": same,
        },
        {
            "case": f"read {n} images back as rows (undecoded)",
            "system": "datasets load_from_disk",
            "seconds": median(read["rows_disk"]),
        },
        {
            "case": f"read {n} images back as Arrow batches",
            "system": "conch hf.dataset",
            "seconds": median(read["arrow_conch"]),
        },
        {
            "case": f"read {n} images back as Arrow batches",
            "system": "datasets load_from_disk",
            "seconds": median(read["arrow_disk"]),
        },
    ]


def goals(rows: list[dict[str, Any]], hogs: int) -> list[dict[str, Any]]:
    """Issue 33's goals against what this run measured (one row each: measured, goal, met)."""
    by = {(r["step"], r.get("case"), r.get("system")): r for r in rows}
    step = {r["step"]: r for r in rows if "case" not in r}
    out: list[dict[str, Any]] = []

    def goal(what: str, measured: str, target: str, met: bool) -> None:
        out.append({"goal": what, "measured": measured, "target": target, "met": met})

    ob = by.get(("open_blob", "open_blob + seek + read 1 MB", None))
    whole = by.get(("open_blob", "whole value by scan(keys=[k])", None))
    if ob and whole:
        mb = ob["bytes_read"] / MB
        goal(
            "open_blob: 1 MB at offset size/2 reads ~1 MB",
            f"{mb:.2f} MB, {ob['requests']} requests (whole value: {whole['bytes_read'] / MB:.0f} MB)",
            "<= 1.2 MB",
            mb <= 1.2,
        )
        goal(
            "open_blob latency (open + locate + seek + read 1 MB), no load added",
            f"{ob['seconds'] * 1e3:.2f} ms (load {ob['load']:.0f})",
            "<= 5 ms",
            ob["seconds"] <= 0.005,
        )
    loaded = next((r for r in rows if r.get("case", "").startswith("open_blob + seek + read 1 MB, ")), None)
    if loaded:
        goal(
            f"open_blob latency, {hogs} busy processes beside (load {loaded['load']:.0f})",
            f"{loaded['seconds'] * 1e3:.2f} ms",
            "<= 5 ms",
            loaded["seconds"] <= 0.005,
        )
    if "write path" in step:
        r = step["write path"]
        goal(
            f"write a {r['value_mb']:.0f} MB value from a path: peak RSS",
            f"{r['peak_rss_mb']:.0f} MB",
            "<= 300 MB",
            r["peak_rss_mb"] <= 300,
        )
    if "scan 5 as files" in step:
        r, floor, imp = step["scan 5 as files"], step.get("imports and open"), step.get("import conch")
        extra = (
            f" (import conch {imp['peak_rss_mb']:.0f} MB, connect + 5-row key scan {floor['peak_rss_mb']:.0f} MB)"
            if floor and imp
            else ""
        )
        goal(
            f"scan 5 rows of {r['value_mb']:.0f} MB values as files: peak RSS",
            f"{r['peak_rss_mb']:.0f} MB{extra}",
            "<= 100 MB",
            r["peak_rss_mb"] <= 100,
        )
    if "compact" in step:
        r = step["compact"]
        goal(
            f"compact 4 x {r['value_mb']:.0f} MB values in 2 runs: peak RSS added",
            f"{r['added_rss_mb']:.0f} MB (peak {r['peak_rss_mb']:.0f} MB)",
            "<= 100 MB",
            r["added_rss_mb"] <= 100,
        )
    for case in sorted(
        {c for (s, c, _) in by if s == "hf" and c and c.startswith("ingest")}, key=lambda c: int(c.split()[1])
    ):
        a, b = by[("hf", case, "conch hf.write")], by[("hf", case, "datasets save_to_disk")]
        ratio = a["seconds"] / b["seconds"]
        goal(
            f"hf {case}: time / save_to_disk",
            f"{ratio:.2f}x ({a['seconds']:.3f} s vs {b['seconds']:.3f} s)",
            "<= 1.0x",
            ratio <= 1.0,
        )
    back = next((r for r in rows if r.get("system") == "conch hf.dataset" and "identical" in r), None)
    if back:
        goal("hf round trip: identical bytes and labels", str(back["identical"]), "True", bool(back["identical"]))
    for case in sorted({c for (s, c, _) in by if s == "hf" and c and c.startswith("read")}):
        a, b = by[("hf", case, "conch hf.dataset")], by[("hf", case, "datasets load_from_disk")]
        goal(
            f"hf {case}: time / load_from_disk (memory-mapped)",
            f"{a['seconds'] / b['seconds']:.2f}x ({a['seconds']:.3f} s vs {b['seconds']:.3f} s)",
            "none (measured)",
            True,
        )
    return out


def render(rows: list[dict[str, Any]]) -> str:
    lines = ["| goal | measured | target | met |", "|---|---|---|---|"]
    lines += [f"| {g['goal']} | {g['measured']} | {g['target']} | {'yes' if g['met'] else 'NO'} |" for g in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=1.0, help="size of the large value (GB, 2**30 bytes)")
    ap.add_argument("--bytes-mb", type=int, default=100, help="size of the value written as bytes (MB)")
    ap.add_argument("--scan-mb", type=int, default=300, help="size of each of the 5 scanned values (MB)")
    ap.add_argument("--images", type=int, default=10_000)
    ap.add_argument("--hf-sizes", default="0.2,5", help="ingest also at these multiples of --images")
    ap.add_argument("--hogs", type=int, default=2, help="busy processes for open_blob under load")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", choices=["hf"], help="hf: only the Hugging Face steps (ingest and read back)")
    ap.add_argument("--child")
    ap.add_argument("--work")
    ap.add_argument("--size", type=int)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, Path(args.work), args.size)))
        return
    out: dict[str, Any] = {"machine": machine(), "rows": []}
    work = Path(tempfile.mkdtemp(prefix="bench-media-"))
    try:
        size = int(args.gb * (1 << 30))
        rows = [] if args.only == "hf" else _blob_rows(args, work, size)
        rows += [{"step": "hf", **r} for r in hf_side(work, args.images, args.reps)]
        for f in (float(x) for x in args.hf_sizes.split(",") if x):
            rows += [{"step": "hf", **r} for r in hf_ingest(work, max(1, int(args.images * f)), args.reps)]
        out["rows"] = rows
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for r in out["rows"]:
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()})
    out["goals"] = goals(out["rows"], args.hogs)
    print(render(out["goals"]))
    results = Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    (results / ("media-hf.json" if args.only == "hf" else "media.json")).write_text(json.dumps(out, indent=1))


def _blob_rows(args: argparse.Namespace, work: Path, size: int) -> list[dict[str, Any]]:
    """Every step but Hugging Face's (module doc)."""
    import conch

    _value_file(work / f"value-{size}.bin", size)
    _value_file(work / f"value-{args.bytes_mb * MB}.bin", args.bytes_mb * MB)
    rows = [_run_child("write path", work, size), _run_child("write bytes", work, args.bytes_mb * MB)]
    for r in open_blob_side(work, size, args.reps * 5):
        rows.append({"step": "open_blob", "value_mb": size / MB, **r})
    scan_src = _value_file(work / f"value-{args.scan_mb * MB}.bin", args.scan_mb * MB)
    t = conch.connect(work / "wh-scan", maintenance=conch.Policy(auto=False)).create_table("v", [("id", pa.int64())])
    for i in range(5):
        t.write([{"id": i, "video": conch.Blob.from_path(scan_src)}])
    rows.append({"step": "open_blob", "value_mb": size / MB, **open_blob_loaded(work, size, args.reps * 5, args.hogs)})
    rows += [
        _run_child(s, work, args.scan_mb * MB)
        for s in ("import conch", "imports and open", "scan 5 as files", "scan 5 as bytes")
    ]
    c = conch.connect(work / "wh-compact", maintenance=conch.Policy(auto=False)).create_table("v", [("id", pa.int64())])
    for i in range(2):
        c.write(
            [
                {"id": i, "video": conch.Blob.from_path(scan_src)},
                {"id": 10 + i, "video": conch.Blob.from_path(scan_src)},
            ]
        )
    rows.append(_run_child("compact", work, args.scan_mb * MB))
    return rows


if __name__ == "__main__":
    os.environ.setdefault("CONCH_PROGRESS", "0")
    main()
