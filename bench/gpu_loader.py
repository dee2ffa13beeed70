"""Feeding a GPU (issue 22): `python -m bench.gpu_loader [--scale S] [--workers 0,2,...]`, also
run by `python -m bench` (workload "gpu_loader").

Two tables, one epoch each through `DataLoader(ds, batch_size=None, num_workers=k)` (persistent
workers, timed after a warm-up epoch), batches of 256, each batch moved to the device (CUDA
when there is one: `pin_memory=True` and `conch.engines.torch.to_device`; else the CPU, where the move
is a pass-through):

- **tensors**: 200k rows × `uint8[3072]` (a 32×32×3 image as a fixed-size list) + an int64
  label (618 MB at scale 1);
- **jpeg**: 40k 64×64 JPEGs + label, decoded in the loader (`conch.engines.torch.decoders.image()`; the
  Parquet and Lance loaders call the same decoder per value).

Systems: `conch.engines.torch.dataset`, a plain Parquet `IterableDataset` (row groups dealt to workers,
the way one would write it), and `lance.torch.data.LanceDataset` where pylance is installed
(sharded per worker by fragment, its best setting). Worker counts: 0, 2, 4, … up to the cores.

Printed and written per row: seconds, samples/s, GB/s of tensor data delivered, the main
process's CPU time per batch (`getrusage(RUSAGE_SELF)`: receiving, unpickling, pinning,
collating; at 0 workers also the reading), and the fraction of a training ceiling: a tiny model
step (linear classifier) timed on synthetic device tensors of the batch's shape gives the
ceiling in samples/s; the same step fed by the loader (at every worker count) over it is the
fraction. A single-process scan of the tensor table (`Scan.to_arrow`) is the reference speed.

CPU seconds per epoch of each process (main: `getrusage`; workers: /proc/PID/stat) give a
load-independent view: `critical` is the most any one process used, which is the epoch's time
on idle cores when the processes overlap, and `total` their sum (the parallelism's overhead).
On a shared machine where the kernel groups processes by session (`sched_autogroup`), extra
worker processes get no extra CPU share, so wall-time scaling is only seen on idle cores.

Results: bench/results/gpu_loader.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import torch

import conch
from bench import systems as S

RESULTS = Path(__file__).parent / "results"
BATCH = 256
ROW_GROUP = 8_192


# ----- data -----------------------------------------------------------------------------------------
def tensor_table(n: int) -> pa.Table:
    rng = np.random.default_rng(1)
    img = pa.FixedSizeListArray.from_arrays(pa.array(rng.integers(0, 256, n * 3072, dtype=np.uint8)), 3072)
    return pa.table(
        {"id": pa.array(np.arange(n, dtype=np.int64)), "img": img, "label": pa.array(rng.integers(0, 10, n))}
    )


def jpeg_table(n: int, side: int = 64) -> pa.Table:
    from PIL import Image

    rng = np.random.default_rng(2)
    yy, xx = np.mgrid[0:side, 0:side]
    out = []
    for i in range(n):  # smooth gradients plus noise: photo-like sizes (~2-3 KB at quality 90)
        base = (xx * (i % 7 + 1) + yy * (i % 5 + 1)) % 256
        rgb = np.stack([base, (base + 85) % 256, (255 - base)], axis=2).astype(np.int16)
        rgb = np.clip(rgb + rng.integers(-12, 12, rgb.shape), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(rgb).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "img": pa.array(out, pa.binary()),
            "label": pa.array(rng.integers(0, 10, n)),
        }
    )


def image_decoder() -> Callable[[bytes], Any]:
    try:
        from conch.engines.torch import decoders
    except ImportError:  # measuring the loader before issue 22 (the decoder module copied next to it)
        from conch.engines.torch import decoders
    return decoders.image()


# ----- loaders --------------------------------------------------------------------------------------
def _convert(table: pa.Table, decode: Callable[[bytes], Any] | None) -> dict[str, Any]:
    """A batch as tensors, the way a hand-written loader does it."""
    out: dict[str, Any] = {}
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        if name == "img" and decode is not None:
            out[name] = torch.stack([decode(v) for v in col.to_pylist()])
        elif pa.types.is_fixed_size_list(col.type):
            flat = col.flatten().to_numpy(zero_copy_only=False)
            out[name] = torch.from_numpy(flat.reshape(len(col), -1))
        else:
            out[name] = torch.from_numpy(col.to_numpy(zero_copy_only=False))
    return out


class ParquetLoader(torch.utils.data.IterableDataset):  # type: ignore[misc]
    """Row groups dealt round-robin to DataLoader workers; batches of BATCH rows as tensors."""

    def __init__(self, path: Path, columns: list[str], decode: Callable[[bytes], Any] | None) -> None:
        self.path, self.columns, self.decode = path, columns, decode

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        frags = [rg for f in pads.dataset(self.path).get_fragments() for rg in f.split_by_row_group()]
        for frag in frags[wid::nw]:
            for b in frag.to_batches(columns=self.columns, batch_size=BATCH):
                yield _convert(pa.Table.from_batches([b]), self.decode)


class _LanceConvert:
    def __init__(self, decode: Callable[[bytes], Any] | None) -> None:
        self.decode = decode

    def __call__(self, batch: Any, **_: Any) -> dict[str, Any]:
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else pa.table(batch)
        return _convert(table, self.decode)


_LanceDataset: Any = torch.utils.data.IterableDataset
with contextlib.suppress(ImportError):  # pylance where installed (importable by name: forkserver workers)
    from lance.torch.data import LanceDataset as _LanceDataset


class PerWorkerLance(_LanceDataset):  # type: ignore[misc]
    """LanceDataset sharded by fragment over DataLoader workers (it shards only by rank)."""

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        if info is not None:
            self.rank, self.world_size = info.id, info.num_workers
        it: Iterator[Any] = super().__iter__()
        return it


def lance_dataset(path: str, columns: list[str], decode: Callable[[bytes], Any] | None) -> Any:
    return PerWorkerLance(path, BATCH, columns=columns, auto_detect_rank=False, to_tensor_fn=_LanceConvert(decode))


def have_lance() -> bool:
    try:
        import lance.torch.data  # noqa: F401
    except ImportError:
        return False
    return True


# ----- measuring --------------------------------------------------------------------------------------
def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _worker_cpu(loader: Any) -> list[float]:
    """CPU seconds used so far by each of a DataLoader's (persistent) worker processes, from
    /proc (Linux; empty elsewhere or without workers)."""
    workers = getattr(getattr(loader, "_iterator", None), "_workers", None) or []
    out = []
    for w in workers:
        try:
            with open(f"/proc/{w.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return []
        out.append((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    return out


def _move(loader: Any, device: torch.device) -> Any:
    try:
        from conch.engines.torch import to_device
    except ImportError:  # the loader before issue 22: a plain copy per batch
        return ({k: v.to(device, non_blocking=True) for k, v in b.items()} for b in loader)
    return to_device(loader, device)


def epoch(loader: Any, device: torch.device, step: Callable[[dict[str, Any]], None] | None) -> dict[str, float]:
    """One epoch: samples, tensor bytes, batches, CPU seconds of the main process and of each
    worker (`critical`: the most any one process used, the epoch's time on idle cores)."""
    n = nbytes = batches = 0
    w0 = _worker_cpu(loader)
    c0 = _cpu()
    for b in _move(loader, device):
        n += len(b["label"])
        nbytes += sum(v.numel() * v.element_size() for v in b.values() if isinstance(v, torch.Tensor))
        batches += 1
        if step is not None:
            step(b)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    main = _cpu() - c0
    w1 = _worker_cpu(loader)
    workers = [b - a for a, b in zip(w0, w1, strict=False)] if len(w0) == len(w1) else []
    return {
        "rows": n,
        "bytes": nbytes,
        "batches": batches,
        "cpu": main,
        "workers_cpu": workers,
        "critical_cpu": max([main, *workers]),
        "total_cpu": main + sum(workers),
    }


class Model:
    """A linear classifier over the image (uint8 → float), the cheapest real training step."""

    def __init__(self, features: int, device: torch.device) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(features, 10).to(device)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=1e-3)

    def __call__(self, b: dict[str, Any]) -> None:
        x = b["img"].reshape(len(b["img"]), -1).float() / 255.0
        loss = torch.nn.functional.cross_entropy(self.net(x), b["label"])
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()


def ceiling(features: int, device: torch.device, steps: int = 60) -> float:
    """Samples/s of the model step on synthetic tensors already on the device."""
    m = Model(features, device)
    g = torch.Generator().manual_seed(0)
    b = {
        "img": torch.randint(0, 256, (BATCH, features), dtype=torch.uint8, generator=g).to(device),
        "label": torch.randint(0, 10, (BATCH,), generator=g).to(device),
    }
    for _ in range(5):
        m(b)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        m(b)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return steps * BATCH / (time.perf_counter() - t0)


def make_loader(ds: Any, workers: int, device: torch.device, context: str | None) -> Any:
    from torch.utils.data import DataLoader

    pin = device.type == "cuda"
    if not workers:
        return DataLoader(ds, batch_size=None, pin_memory=pin)
    return DataLoader(
        ds,
        batch_size=None,
        num_workers=workers,
        persistent_workers=True,
        pin_memory=pin,
        multiprocessing_context=context,
    )


def run_table(
    work: Path,
    name: str,
    data: pa.Table,
    workers: list[int],
    reps: int,
    device: torch.device,
    rec: list[dict[str, Any]],
    only: set[str] | None = None,
) -> None:
    import conch.engines.torch as ct

    decode = image_decoder() if name == "jpeg" else None
    t = conch.connect(S.fresh(work / f"{name}-conch")).create_table(name, [("id", pa.int64())])
    t.write(data)
    pq.write_table(data, S.fresh(work / f"{name}.parquet"), row_group_size=ROW_GROUP)
    systems: dict[str, Callable[[], Any]] = {
        "conch": lambda: ct.dataset(
            t.scan("img", "label"), batch_size=BATCH, decode={"img": decode} if decode else None
        ),
        "parquet": lambda: ParquetLoader(work / f"{name}.parquet", ["img", "label"], decode),
    }
    if have_lance():
        import lance

        path = str(S.fresh(work / f"{name}.lance"))
        lance.write_dataset(data, path, max_rows_per_file=max(data.num_rows // 16, 1))
        systems["lance"] = lambda: lance_dataset(path, ["img", "label"], decode)
    systems = {k: v for k, v in systems.items() if only is None or k in only}
    features = 3072 if name == "tensors" else 3 * 64 * 64
    ceil = ceiling(features, device)
    print(f"  {name}: training ceiling (synthetic tensors on {device}) {ceil:,.0f} samples/s", flush=True)
    if name == "tensors":
        scans = []
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            t.scan("img", "label").to_arrow()
            scans.append(time.perf_counter() - t0)
        s = median(scans[1:])
        rec.append(
            {
                "bench": f"gpu_loader/{name}",
                "system": "scan (reference)",
                "workers": 0,
                "seconds": s,
                "samples_per_s": data.num_rows / s,
                "gb_per_s": data.nbytes / s / 1e9,
            }
        )
        print(
            f"  {name}: one-process scan {data.num_rows / s:,.0f} rows/s, {data.nbytes / s / 1e9:.2f} GB/s", flush=True
        )
    for k in workers:
        for system, make in systems.items():
            ctx = "forkserver" if system == "lance" else None  # Lance is not fork-safe (it says so)
            loader = make_loader(make(), k, device, ctx)
            epoch(loader, device, None)  # warm-up: page cache, worker start-up
            runs = []
            for _ in range(reps):
                t0 = time.perf_counter()
                r = epoch(loader, device, None)
                r["seconds"] = time.perf_counter() - t0
                runs.append(r)
            model = Model(features, device)
            t0 = time.perf_counter()
            epoch(loader, device, model)
            trained = time.perf_counter() - t0
            del loader
            r = sorted(runs, key=lambda x: x["seconds"])[len(runs) // 2]
            secs = r["seconds"]
            row = {
                "bench": f"gpu_loader/{name}",
                "system": system,
                "workers": k,
                "seconds": secs,
                "rows": r["rows"],
                "samples_per_s": r["rows"] / secs,
                "gb_per_s": r["bytes"] / secs / 1e9,
                "main_cpu_us_per_batch": r["cpu"] / max(r["batches"], 1) * 1e6,
                "main_cpu_s": r["cpu"],
                "workers_cpu_s": r["workers_cpu"],
                "critical_cpu_s": r["critical_cpu"],
                "total_cpu_s": r["total_cpu"],
                "train_samples_per_s": r["rows"] / trained,
                "ceiling_samples_per_s": ceil,
                "fraction_of_ceiling": min(1.0, r["rows"] / trained / ceil),
            }
            rec.append(row)
            if r["rows"] != data.num_rows:
                print(f"  !! {system} delivered {r['rows']} rows of {data.num_rows}")
            print(
                f"  {name:<8} {system:<8} workers={k:<2} {secs * 1000:8.0f} ms {row['samples_per_s']:10,.0f} samples/s "
                f"{row['gb_per_s']:6.2f} GB/s  main {row['main_cpu_us_per_batch']:7.0f} µs/batch  "
                f"CPU s: critical {r['critical_cpu']:.2f} total {r['total_cpu']:.2f}  "
                f"train {row['fraction_of_ceiling']:.2f} of ceiling",
                flush=True,
            )


def main_cost(work: Path, rows: int = 10_000, epochs: int = 5) -> dict[int, float]:
    """Main-process CPU µs per batch (256 × 3 KB) with 1 and 2 persistent workers, `epochs`
    epochs after a warm-up one: the per-batch cost of receiving a batch from a worker."""
    from torch.utils.data import DataLoader

    import conch.engines.torch as ct

    t = conch.connect(S.fresh(work / "main-cost")).create_table("t", [("id", pa.int64())])
    t.write(tensor_table(rows))
    out = {}
    for k in (1, 2):
        loader = DataLoader(
            ct.dataset(t.scan("img", "label"), batch_size=BATCH, splits=8),
            batch_size=None,
            num_workers=k,
            persistent_workers=True,
        )
        for _ in loader:
            pass
        c0, n = _cpu(), 0
        for _ in range(epochs):
            for _ in loader:
                n += 1
        out[k] = (_cpu() - c0) / n * 1e6
        print(f"  main-process CPU, {k} worker(s): {out[k]:.0f} µs per batch over {n} batches", flush=True)
    return out


def summary(rec: list[dict[str, Any]]) -> list[str]:
    lines = []
    by = {(r["bench"], r["system"], r["workers"]): r for r in rec}
    for (bench, system, k), r in sorted(by.items(), key=lambda kv: str(kv[0])):
        zero = by.get((bench, system, 0))
        if k and zero and system != "scan (reference)":
            lines.append(
                f"{bench} {system}: {k} workers take {r['seconds'] / zero['seconds']:.2f}x the time of 0; "
                f"critical-path CPU {r['critical_cpu_s'] / zero['critical_cpu_s']:.2f}x (the time on idle cores), "
                f"total CPU {r['total_cpu_s'] / zero['total_cpu_s']:.2f}x"
            )
    for (bench, system, k), r in sorted(by.items(), key=lambda kv: str(kv[0])):
        c = by.get((bench, "conch", k))
        if c and system not in ("conch", "scan (reference)"):
            lines.append(f"{bench} workers={k}: conch/{system} time = {c['seconds'] / r['seconds']:.2f}x")
    return lines


def run(
    work: Path,
    scale: float,
    reps: int,
    out: Path,
    workers: list[int] | None = None,
    device: str | None = None,
    tables: tuple[str, ...] = ("tensors", "jpeg"),
    systems: set[str] | None = None,
) -> list[dict[str, Any]]:
    work.mkdir(parents=True, exist_ok=True)
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cores = S.cpu_count()
    ks = workers if workers is not None else sorted({0, *range(2, cores + 1, 2), cores})
    rec: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    print(f"gpu_loader: device {dev}, {cores} CPUs, workers {ks}", flush=True)
    if "tensors" in tables:
        tensors = tensor_table(max(int(200_000 * scale), BATCH))
        print(f"tensors: {tensors.num_rows} rows ({tensors.nbytes / 1e6:.0f} MB)", flush=True)
        run_table(work, "tensors", tensors, ks, reps, dev, rec, systems)
    if "jpeg" in tables:
        jpegs = jpeg_table(max(int(40_000 * scale), BATCH))
        print(f"jpeg: {jpegs.num_rows} rows ({jpegs.nbytes / 1e6:.0f} MB)", flush=True)
        run_table(work, "jpeg", jpegs, ks, reps, dev, rec, systems)
    lines = summary(rec)
    print("\n" + "\n".join(lines))
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "scale": scale,
        "reps": reps,
        "device": str(dev) + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else ""),
        "machine": S.machine(cores),
        "total_seconds": round(time.perf_counter() - t0, 1),
        "results": rec,
        "ratios": lines,
    }
    (out / "gpu_loader.json").write_text(json.dumps(doc, indent=1))
    print(f"wrote {out / 'gpu_loader.json'}")
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_loader", description=__doc__)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the row counts (0.05 for a 2-core machine)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workers", default=None, help="comma-separated worker counts (default 0, 2, 4, ... cores)")
    ap.add_argument("--device", default=None, help="cuda when available, else cpu")
    ap.add_argument("--tables", default="tensors,jpeg")
    ap.add_argument("--main-cost", action="store_true", help="only the main process's CPU per batch (1, 2 workers)")
    ap.add_argument("--systems", default=None, help="comma-separated subset of conch,parquet,lance")
    ap.add_argument("--work", type=Path, default=Path("/tmp/conch-bench/gpu_loader"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    ks = [int(x) for x in args.workers.split(",")] if args.workers else None
    if args.main_cost:
        main_cost(args.work)
        return
    systems = set(args.systems.split(",")) if args.systems else None
    run(args.work, args.scale, args.reps, args.out, ks, args.device, tuple(args.tables.split(",")), systems)


if __name__ == "__main__":
    main()
