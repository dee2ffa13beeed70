"""Feeding models and engines (issue 13): `python -m bench.loaders [--scale S] [--reps R]`, also
run by `python -m bench` (workload "loaders").

1. Data loader throughput, one epoch through `DataLoader(ds, batch_size=None, num_workers=k)`
   for k = 0, 1, 2 (persistent workers, timed after a warm-up epoch), on the same rows: `conch.engines.torch.dataset` vs `lance.torch.data.LanceDataset`
   vs a Parquet + `pyarrow.dataset` loader (row groups dealt to workers). Samples/s on a
   metadata table (numbers + a 16-float vector) and MB/s on a 20 KB-blob table. Lance's dataset
   shards only across ranks, so each worker would read everything: here each DataLoader worker
   is given its own rank of the worker count (fragment sharding), its best configuration.
2. Random access by key for map-style datasets: 64 random keys per query, Conch
   `map_dataset.__getitems__` (a take by key) vs Lance `take` (by row position).
3. Polars and DuckDB on a selective filter (1 %): with pushdown into Conch, vs reading a
   materialised scan (and, for DuckDB, the plain Arrow stream, which gets no pushdown).

Prints medians and ratios; writes bench/results/loaders.json.
"""

from __future__ import annotations

import argparse
import json
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
from lance.torch.data import LanceDataset

import conch
from bench import systems as S

RESULTS = Path(__file__).parent / "results"
BATCH = 256


def _interleaved(fns: dict[Any, Callable[[], Any]], reps: int) -> dict[Any, tuple[float, Any]]:
    """Median time of each function, the systems taking turns within each repetition so that
    a machine whose load changes (a shared 2-core box) slows all of them alike."""
    outs = {k: fn() for k, fn in fns.items()}  # warm-up: page cache, worker start-up
    times: dict[Any, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            outs[k] = fn()
            times[k].append(time.perf_counter() - t0)
    return {k: (median(v), outs[k]) for k, v in times.items()}


# ----- data -----------------------------------------------------------------------------------------
def metadata(n: int) -> pa.Table:
    rng = np.random.default_rng(7)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 16, dtype=np.float32)), 16)
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "x": pa.array(rng.random(n)),
            "y": pa.array(rng.random(n, dtype=np.float32)),
            "label": pa.array(rng.integers(0, 10, n)),
            "vec": vec,
        }
    )


def blobs(n: int, size: int = 20_000) -> pa.Table:
    rng = np.random.default_rng(8)
    data = rng.integers(0, 256, n * size, dtype=np.uint8)
    offsets = pa.py_buffer(np.arange(n + 1, dtype=np.int32) * size)
    blob = pa.Array.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(data)])
    return pa.table(
        {"id": pa.array(np.arange(n, dtype=np.int64)), "label": pa.array(rng.integers(0, 10, n)), "blob": blob}
    )


# ----- loaders --------------------------------------------------------------------------------------
class ParquetLoader(torch.utils.data.IterableDataset):  # type: ignore[misc]
    """Row groups dealt round-robin to DataLoader workers; batches of BATCH rows as tensors."""

    def __init__(self, path: Path, columns: list[str]) -> None:
        self.path, self.columns = path, columns

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from conch.engines.torch import to_tensors

        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        frags = [rg for f in pads.dataset(self.path).get_fragments() for rg in f.split_by_row_group()]
        for frag in frags[wid::nw]:
            for b in frag.to_batches(columns=self.columns, batch_size=BATCH):
                yield to_tensors(pa.Table.from_batches([b]))


def lance_to_tensors(batch: Any, **_: Any) -> dict[str, Any]:
    """Lance's batches converted as the other loaders' are (its own converter rejects binary)."""
    from conch.engines.torch import to_tensors

    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else pa.table(batch)
    return to_tensors(table)


class PerWorkerLance(LanceDataset):  # type: ignore[misc]
    """LanceDataset sharded by fragment over DataLoader workers (it shards only by rank)."""

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        if info is not None:
            self.rank, self.world_size = info.id, info.num_workers
        return super().__iter__()


def _loader(ds: Any, workers: int, context: str | None) -> Any:
    """Persistent workers: an epoch is timed after a warm-up epoch started them."""
    from torch.utils.data import DataLoader

    if not workers:
        return DataLoader(ds, batch_size=None)
    return DataLoader(
        ds, batch_size=None, num_workers=workers, persistent_workers=True, multiprocessing_context=context
    )


def _epoch(loader: Any) -> int:
    return sum(len(b["id"]) for b in loader)


def loader_throughput(work: Path, name: str, data: pa.Table, reps: int, rec: list[dict[str, Any]]) -> None:
    import lance

    import conch.engines.torch as ct

    columns = data.column_names
    cat = conch.connect(S.fresh(work / f"{name}-conch"))
    t = cat.create_table(name, [("id", pa.int64())])
    t.write(data)
    pq.write_table(data, S.fresh(work / f"{name}.parquet"), row_group_size=16_384)
    lance.write_dataset(data, str(S.fresh(work / f"{name}.lance")), max_rows_per_file=max(data.num_rows // 8, 1))
    nbytes = data.nbytes
    systems = {
        "conch": lambda: ct.dataset(t.scan(*columns[1:]), batch_size=BATCH),
        "lance": lambda: PerWorkerLance(
            str(work / f"{name}.lance"), BATCH, columns=columns, auto_detect_rank=False, to_tensor_fn=lance_to_tensors
        ),
        "parquet+pyarrow": lambda: ParquetLoader(work / f"{name}.parquet", columns),
    }
    for workers in (0, 1, 2):
        # Lance is not fork-safe (it says so): its workers start with forkserver.
        loaders = {
            system: _loader(make(), workers, "forkserver" if system == "lance" else None)
            for system, make in systems.items()
        }
        timed = _interleaved({k: (lambda ld=ld: _epoch(ld)) for k, ld in loaders.items()}, reps)
        del loaders
        for system, (secs, n) in timed.items():
            if n != data.num_rows:
                print(f"  !! {system} with {workers} workers delivered {n} rows of {data.num_rows}")
            row = {
                "bench": f"loader/{name}",
                "system": system,
                "workers": workers,
                "seconds": secs,
                "samples_per_s": n / secs,
                "mb_per_s": nbytes / secs / 1e6,
                "rows": n,
            }
            rec.append(row)
            print(
                f"  loader {name:<9} {system:<16} workers={workers}  {secs * 1000:8.1f} ms  "
                f"{n / secs:10.0f} samples/s  {nbytes / secs / 1e6:8.1f} MB/s",
                flush=True,
            )


def random_access(work: Path, name: str, data: pa.Table, reps: int, rec: list[dict[str, Any]]) -> None:
    import lance

    import conch.engines.torch as ct

    cat = conch.connect(work / f"{name}-conch")
    t = cat.table(name)
    m = ct.map_dataset(t.scan(*data.column_names[1:]))
    ds = lance.dataset(str(work / f"{name}.lance"))
    rng = np.random.default_rng(3)
    queries = [sorted(rng.choice(data.num_rows, 64, replace=False).tolist()) for _ in range(20)]
    runs = {
        "conch map_dataset": lambda: [m.__getitems__(q) for q in queries],
        "lance take": lambda: [ds.take(q).num_rows for q in queries],
    }
    for system, (secs, _) in _interleaved(runs, reps).items():
        per = secs / len(queries)
        rec.append({"bench": f"take/{name}", "system": system, "seconds": per, "keys": 64})
        print(f"  take   {name:<9} {system:<18} {per * 1000:8.2f} ms per 64 random keys", flush=True)


def engines(work: Path, n: int, reps: int, rec: list[dict[str, Any]]) -> None:
    """A table like the demo's: metadata plus a 512-byte payload per row; a 1 % filter on `x`."""
    import duckdb
    import polars as pl

    import conch.engines.duckdb as cdb
    import conch.engines.polars as cpl

    data = metadata(n)
    payload = pa.py_buffer(np.random.default_rng(9).integers(0, 256, n * 512, dtype=np.uint8))
    offsets = pa.py_buffer(np.arange(n + 1, dtype=np.int32) * 512)
    data = data.append_column("payload", pa.Array.from_buffers(pa.binary(), n, [None, offsets, payload]))
    t = conch.connect(S.fresh(work / "engine-conch")).create_table("engine", [("id", pa.int64())])
    t.write(data)
    print(f"engines: {n} rows, {data.nbytes / 1e6:.0f} MB; select id, x, y where x < 0.01")
    cut = 0.01

    def pl_push() -> int:
        return cpl.scan(t).filter(pl.col("x") < cut).select("id", "x", "y").collect().height

    def pl_mat() -> int:
        return pl.from_arrow(t.scan().to_arrow()).filter(pl.col("x") < cut).select("id", "x", "y").height

    def dd_push() -> int:
        src = cdb.source(t)  # noqa: F841 - found by DuckDB by name
        return duckdb.sql(f"select id, x, y from src where x < {cut}").to_arrow_table().num_rows

    def dd_stream() -> int:
        stream = t.scan()  # noqa: F841 - the scan result protocol (__arrow_c_stream__): no pushdown
        return duckdb.sql(f"select id, x, y from stream where x < {cut}").to_arrow_table().num_rows

    def dd_mat() -> int:
        whole = t.scan().to_arrow()  # noqa: F841
        return duckdb.sql(f"select id, x, y from whole where x < {cut}").to_arrow_table().num_rows

    runs = {
        ("polars", "pushdown (conch.engines.polars.scan)"): pl_push,
        ("polars", "materialised scan"): pl_mat,
        ("duckdb", "pushdown (conch.engines.duckdb.source)"): dd_push,
        ("duckdb", "plain Arrow stream"): dd_stream,
        ("duckdb", "materialised scan"): dd_mat,
    }
    for (engine, how), (secs, rows) in _interleaved(runs, reps).items():
        rec.append({"bench": f"engine/{engine}", "system": how, "seconds": secs, "rows": rows})
        print(f"  {engine:<7} {how:<32} {secs * 1000:8.1f} ms  ({rows} rows)", flush=True)


def summary(rec: list[dict[str, Any]]) -> list[str]:
    """Ratios: Conch's time over each other system's (< 1: Conch faster)."""
    lines = []
    by = {(r["bench"], r["system"], r.get("workers")): r["seconds"] for r in rec}
    for (bench, system, workers), secs in sorted(by.items(), key=lambda kv: str(kv[0])):
        if bench.startswith("loader/") and system != "conch":
            c = by[(bench, "conch", workers)]
            lines.append(f"{bench} workers={workers}: conch/{system} time = {c / secs:.2f}x")
    for bench in sorted({r["bench"] for r in rec if r["bench"].startswith("take/")}):
        lines.append(
            f"{bench}: conch/lance time = {by[(bench, 'conch map_dataset', None)] / by[(bench, 'lance take', None)]:.2f}x"
        )
    for engine in ("polars", "duckdb"):
        push = by.get(
            (f"engine/{engine}", f"pushdown (conch.{engine}.{'scan' if engine == 'polars' else 'source'})", None)
        )
        mat = by.get((f"engine/{engine}", "materialised scan", None))
        if push and mat:
            lines.append(f"engine/{engine}: pushdown/materialised time = {push / mat:.2f}x")
    return lines


def run(work: Path, scale: float, reps: int, out: Path) -> list[dict[str, Any]]:
    """Every loader benchmark; returns the rows and writes out/loaders.json."""
    work.mkdir(parents=True, exist_ok=True)
    rec: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    meta = metadata(int(400_000 * scale))
    blob = blobs(int(4_000 * scale))
    print(f"loaders: metadata {meta.num_rows} rows ({meta.nbytes / 1e6:.0f} MB), blobs {blob.num_rows} x 20 KB")
    loader_throughput(work, "metadata", meta, reps, rec)
    loader_throughput(work, "blobs", blob, reps, rec)
    random_access(work, "metadata", meta, reps, rec)
    random_access(work, "blobs", blob, reps, rec)
    engines(work, int(200_000 * scale), reps, rec)
    lines = summary(rec)
    print("\n" + "\n".join(lines))
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "scale": scale,
        "reps": reps,
        "machine": S.machine(),
        "total_seconds": round(time.perf_counter() - t0, 1),
        "results": rec,
        "ratios": lines,
    }
    (out / "loaders.json").write_text(json.dumps(doc, indent=1))
    print(f"wrote {out / 'loaders.json'}")
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.loaders", description=__doc__)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/conch-bench/loaders"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    run(args.work, args.scale, args.reps, args.out)


if __name__ == "__main__":
    main()
