"""Issue 24's write benchmarks, side by side in one run (`python -m bench --only writes`, or
`python -m bench.writes`); results in `bench/results/writes.json`.

- **Bulk load**: `keys` rows (u64 key + two random f64) as a `RecordBatchReader` of
  `batch_rows`-row batches, written by Conch with the default policy, Conch with
  `Policy(auto=False)`, Parquet (`pq.ParquetWriter`, batch by batch) and Lance
  (`lance.write_dataset` of the reader). Each in a fresh subprocess: wall time of the write (the
  commit-time maintenance it runs included) and the process's peak RSS (`VmHWM`, interpreter and
  imports included). For Conch also the L0/L1 runs left and the bytes compactions wrote.
- **Wide table**: `wide_rows` × `wide_cols` f64 columns in 10 column groups (struct columns for
  Conch; flat columns for Parquet and Lance), write time, then reads of one column and of all
  columns (median of `reps`).
- **Write amplification per workload** (default policy, settled with `wait_for_maintenance`):
  bytes compactions wrote / bytes writes committed, from the WAL (a run moved to L1 as it is
  counts nothing), plus the ingest time: a bulk load of disjoint runs, time-ordered appends,
  random upserts into a base table, and one-row commits.

`--quick` scales every size down (a smoke run in seconds).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import pyarrow as pa

from bench import systems as S
from bench.rss import peak_rss

RESULTS = Path(__file__).parent / "results"
SCHEMA = pa.schema([("id", pa.uint64()), ("a", pa.float64()), ("b", pa.float64())])
GROUPS = 10


def _reader(keys: int, batch_rows: int) -> pa.RecordBatchReader:
    def gen() -> Iterator[pa.RecordBatch]:
        for i, start in enumerate(range(0, keys, batch_rows)):
            n = min(batch_rows, keys - start)
            rng = np.random.default_rng(i)
            ids = np.arange(start, start + n, dtype=np.uint64)
            yield pa.record_batch([ids, rng.random(n), rng.random(n)], schema=SCHEMA)

    return pa.RecordBatchReader.from_batches(SCHEMA, gen())


# ----- bulk load: one subprocess per system --------------------------------------------------------
def _bulk_child(system: str, path: Path, keys: int, batch_rows: int) -> dict[str, Any]:
    reader = _reader(keys, batch_rows)
    extra: dict[str, Any] = {}
    # Each system's modules are imported before the clock starts: a write's throughput, not an
    # import's (conch + vortex take ~0.6 s to import, lance ~0.7 s; they were timed until now).
    if system.startswith("conch"):
        import vortex  # noqa: F401  (conch imports it on first use)

        import conch
    elif system == "parquet":
        import pyarrow.parquet as pq
    else:
        import lance
    c0 = _cpu()
    t0 = time.perf_counter()
    if system.startswith("conch"):
        policy = conch.Policy(auto=False) if system == "conch auto-off" else conch.Policy()
        t = conch.connect(path, maintenance=policy).create_table("t", [("id", pa.uint64())])
        t.write(reader)
        secs = time.perf_counter() - t0
        p = t.maintenance_plan()
        from bench.compaction import bytes_by_kind

        kinds = bytes_by_kind(t)
        extra = {"l0_runs": p.l0_runs, "l1_runs": p.l1_runs, "compaction_bytes": kinds.get("compact", 0)}
        extra["commits"] = [c.summary for c in t.history()]
    elif system == "parquet":
        with pq.ParquetWriter(path / "t.parquet", SCHEMA) as w:
            for b in reader:
                w.write_batch(b)
        secs = time.perf_counter() - t0
    else:
        lance.write_dataset(reader, str(path / "lance"))
        secs = time.perf_counter() - t0
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu = round(ru.ru_utime + ru.ru_stime, 2)  # the whole process: imports and data generation too
    write_cpu = round(_cpu() - c0, 2)  # the write alone (the input's generation included: ~0.01 s per 1M rows)
    return {
        "seconds": round(secs, 3),
        "cpu_s": cpu,
        "write_cpu_s": write_cpu,
        "peak_rss_mb": round(peak_rss() / 2**20),
        **extra,
    }


BULK_SYSTEMS = ("conch default", "conch auto-off", "parquet", "lance")


def bulk(
    work: Path, keys: int, batch_rows: int, out: list[dict[str, Any]], systems: tuple[str, ...] = BULK_SYSTEMS
) -> None:
    for system in systems:
        path = work / "bulk" / system.replace(" ", "_")
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        r = _child(["bulk", system, str(path), str(keys), str(batch_rows)])
        r["bytes"] = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        row = {"section": "bulk load", "case": f"{keys:,} keys, {batch_rows:,}-row batches", "system": system, **r}
        out.append(row)
        print(
            f"  bulk {system:<16} {r['seconds']:8.2f} s (process CPU {r['cpu_s']:6.2f} s, the write's {r['write_cpu_s']:5.2f} s)  peak RSS {r['peak_rss_mb']:6} MB  {_more(r)}",
            flush=True,
        )
        shutil.rmtree(path, ignore_errors=True)


def _more(r: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in r.items() if k in ("l0_runs", "l1_runs", "compaction_bytes", "bytes"))


def _child(args: list[str]) -> dict[str, Any]:
    return S.child_json("bench.writes", args)


_cpu = S.process_cpu


# ----- wide table ----------------------------------------------------------------------------------
def _wide(rows: int, cols: int) -> tuple[pa.Table, pa.Table]:
    """The same values nested in GROUPS struct columns (Conch's column groups) and flat."""
    rng = np.random.default_rng(5)
    ids = pa.array(np.arange(rows, dtype=np.uint64))
    flat: dict[str, Any] = {"id": ids}
    per = cols // GROUPS
    nested: dict[str, Any] = {"id": ids}
    for g in range(GROUPS):
        arrays = [pa.array(rng.random(rows)) for _ in range(per)]
        names = [f"c{g * per + i}" for i in range(per)]
        flat.update(zip(names, arrays, strict=True))
        nested[f"g{g}"] = pa.StructArray.from_arrays(arrays, names)
    return pa.table(nested), pa.table(flat)


def wide(work: Path, rows: int, cols: int, reps: int, out: list[dict[str, Any]]) -> None:
    import lance
    import pyarrow.parquet as pq

    import conch

    nested, flat = _wide(rows, cols)
    case = f"{rows:,} x {cols:,} f64, {GROUPS} groups"
    root = work / "wide"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    writes: dict[str, list[float]] = {"conch": [], "parquet": [], "lance": []}
    cpus: dict[str, list[float]] = {k: [] for k in writes}
    t: Any = None
    for rep in range(reps):
        for system in writes:
            path = root / f"{system}{rep}"
            c0 = _cpu()
            t0 = time.perf_counter()
            if system == "conch":
                t = conch.connect(path, maintenance=conch.Policy(auto=False)).create_table("t", [("id", pa.uint64())])
                t.write(nested)
            elif system == "parquet":
                pq.write_table(flat, path)
            else:
                lance.write_dataset(flat, str(path))
            writes[system].append(time.perf_counter() - t0)
            cpus[system].append(_cpu() - c0)
            if rep < reps - 1:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
    last = reps - 1
    lds = lance.dataset(str(root / f"lance{last}"))
    one = f"c{cols // 2}"
    g = (cols // 2) // (cols // GROUPS)
    reads = {
        "read 1 column": {
            "conch": lambda: t.scan(f"g{g}.{one}").to_arrow(),
            "parquet": lambda: pq.read_table(root / f"parquet{last}", columns=["id", one]),
            "lance": lambda: lds.to_table(columns=["id", one]),
        },
        "read all columns": {
            "conch": lambda: t.scan().to_arrow(),
            "parquet": lambda: pq.read_table(root / f"parquet{last}"),
            "lance": lambda: lds.to_table(),
        },
    }
    for system, ts in writes.items():
        cpu = round(median(cpus[system]), 2)
        row = {"section": "wide", "case": f"write {case}", "system": system, "seconds": round(median(ts), 3)}
        out.append({**row, "cpu_s": cpu})
        print(f"  wide write {system:<8} {median(ts):8.2f} s (process CPU {cpu:6.2f} s)", flush=True)
    for what, fns in reads.items():
        for system, fn in fns.items():
            fn()
            ts = []
            for _ in range(max(reps, 3)):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            out.append({"section": "wide", "case": f"{what} of {case}", "system": system, "seconds": median(ts)})
            print(f"  wide {what:<16} {system:<8} {median(ts) * 1000:8.1f} ms", flush=True)
    shutil.rmtree(root, ignore_errors=True)


# ----- write amplification -------------------------------------------------------------------------
def amplification(work: Path, scale: float, out: list[dict[str, Any]]) -> None:
    import conch
    from bench.compaction import bytes_by_kind

    rng = np.random.default_rng(9)
    n_base = int(1_000_000 * scale)

    def rows(ids: np.ndarray) -> pa.Table:
        return pa.table({"id": pa.array(ids.astype(np.uint64)), "a": rng.random(len(ids)), "b": rng.random(len(ids))})

    workloads: dict[str, Any] = {
        "bulk load (disjoint runs)": lambda t: t.write(_reader(int(4_000_000 * scale), int(1_000_000 * scale))),
        "200 time-ordered appends": lambda t: [
            t.write(rows(np.arange(i * 5000, (i + 1) * 5000) + 0)) for i in range(max(2, int(200 * scale)))
        ],
        "100 random upserts of 10k keys over a base": lambda t: (
            [t.write(rows(np.arange(n_base)))]
            + [
                t.write(rows(np.sort(rng.choice(n_base, 10_000, replace=False))))
                for _ in range(max(2, int(100 * scale)))
            ]
        ),
        "300 one-row commits": lambda t: [
            t.write(rows(np.array([int(k)]))) for k in rng.choice(10**6, max(2, int(300 * scale)), replace=False)
        ],
    }
    for name, fn in workloads.items():
        path = work / "amp"
        shutil.rmtree(path, ignore_errors=True)
        t = conch.connect(path).create_table("t", [("id", pa.uint64())])
        t0 = time.perf_counter()
        fn(t)
        ingest = time.perf_counter() - t0
        t0 = time.perf_counter()
        t.wait_for_maintenance(timeout=600)
        settle = time.perf_counter() - t0
        kinds = bytes_by_kind(t)
        ingested = sum(v for k, v in kinds.items() if k != "compact")
        amp = round(kinds.get("compact", 0) / max(ingested, 1), 2)
        p = t.maintenance_plan()
        row = {
            "section": "write amplification",
            "case": name,
            "system": "conch default",
            "ingest_s": round(ingest, 2),
            "settle_s": round(settle, 2),
            "ingested_bytes": ingested,
            "compaction_bytes": kinds.get("compact", 0),
            "write_amplification": amp,
            "l0_runs": p.l0_runs,
            "l1_runs": p.l1_runs,
        }
        out.append(row)
        print(f"  amp {name:<44} ingest {ingest:7.2f} s settle {settle:6.2f} s  amp {amp:6.2f}x", flush=True)
        del t
        shutil.rmtree(path, ignore_errors=True)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    q = 0.05 if args.quick else 1.0
    work = args.work
    if "bulk" in args.parts:
        print(f"bulk load ({int(args.keys * q):,} keys)", flush=True)
        systems = tuple(x.strip() for x in args.bulk_systems.split(","))
        bulk(work, int(args.keys * q), max(1000, int(args.batch_rows * q)), out, systems)
    if "wide" in args.parts:
        print("wide table", flush=True)
        wide(work, int(args.wide_rows * q), args.wide_cols, args.reps, out)
    if "amp" in args.parts:
        print("write amplification", flush=True)
        amplification(work, q * args.amp_scale, out)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.writes", description=__doc__)
    ap.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--keys", type=int, default=5_000_000, help="bulk load rows (the issue's 20M on a large machine)")
    ap.add_argument("--batch-rows", type=int, default=1_000_000)
    ap.add_argument("--bulk-systems", default=",".join(BULK_SYSTEMS), help="of: " + ", ".join(BULK_SYSTEMS))
    ap.add_argument("--wide-rows", type=int, default=100_000)
    ap.add_argument("--wide-cols", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--amp-scale", type=float, default=1.0, help="multiply the amplification workloads' sizes")
    ap.add_argument("--parts", default="bulk,wide,amp")
    ap.add_argument("--quick", action="store_true", help="every size x 0.05: a smoke run")
    ap.add_argument("--work", type=Path, default=Path("/tmp/conch-bench-writes"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.child:
        kind, system, path, keys, batch_rows = args.child
        assert kind == "bulk"
        print(json.dumps(_bulk_child(system, Path(path), int(keys), int(batch_rows))))
        return
    t0 = time.perf_counter()
    rows = run(args)
    S.write_results(args.out, "writes-quick.json" if args.quick else "writes.json", args, rows, t0)


if __name__ == "__main__":
    main()
