"""Issue 11's memory goal: peak RSS of writing, scanning (also after a 0.1 % upsert) and taking,
Conch vs Lance, as rows grow (`python -m bench --only memory`, or
`python -m bench.memory --rows 10M,50M,100M`).

Rows are a u64 key + two f64 columns (keys 0..n-1 in order, generated in 1M-row batches and
written as one streamed write). Each measurement runs in its own subprocess, so its peak RSS
(`VmHWM`, which includes the interpreter and imports: ~100-150 MB) is its own:

- `write`: the streamed write of n rows (Conch `Table.write(reader)`; Lance `write_dataset`).
- `scan`: a full scan, batches consumed and dropped (`to_record_batches()` / `to_batches()`).
- `take`: 50 random keys (Conch `scan(keys=...)`; Lance's positional `take`, keys are positions).
- `upsert`: a commit rewriting both columns of 0.1 % of the keys (random; Lance `merge_insert`).
- `scan after upsert`, `take after upsert`: as above, on the table with the upsert.

The Conch side runs on whatever `conch` the interpreter imports, so main and a branch compare by
running this module twice (`--systems conch --label main` with main's interpreter and
`PYTHONPATH`). Results: `bench/results/memory.json` (or `memory-<label>.json`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.rss import peak_rss

STEPS = ("write", "scan", "take", "upsert", "scan after upsert", "take after upsert")
BATCH = 1 << 20
SCHEMA = pa.schema([("id", pa.uint64()), ("a", pa.float64()), ("b", pa.float64())])


def _batches(n: int) -> Iterator[pa.RecordBatch]:
    rng = np.random.default_rng(11)
    for lo in range(0, n, BATCH):
        m = min(BATCH, n - lo)
        ids = np.arange(lo, lo + m, dtype=np.uint64)
        yield pa.RecordBatch.from_arrays(
            [pa.array(ids), pa.array(rng.random(m)), pa.array(rng.random(m))], schema=SCHEMA
        )


def _upsert(n: int) -> pa.Table:
    rng = np.random.default_rng(12)
    m = max(1, n // 1000)
    ids = np.sort(rng.choice(n, m, replace=False)).astype(np.uint64)
    return pa.table({"id": ids, "a": rng.random(m), "b": rng.random(m)}, schema=SCHEMA)


def _take_keys(n: int) -> list[int]:
    return sorted(np.random.default_rng(13).choice(n, min(50, n), replace=False).tolist())


def step(system: str, name: str, path: Path, n: int) -> dict[str, Any]:
    """Run one step in this process: rows it produced, seconds, peak RSS."""
    t0 = time.perf_counter()
    rows = 0
    if system == "conch":
        import conch

        if name == "write":
            t = conch.connect(path).create_table("t", [("id", pa.uint64())])
            t.write(pa.RecordBatchReader.from_batches(SCHEMA, _batches(n)))
            rows = n
        else:
            t = conch.connect(path).table("t")
            if name == "upsert":
                t.write(_upsert(n))
                rows = max(1, n // 1000)
            elif name.startswith("scan"):
                for b in t.scan().to_record_batches():
                    rows += b.num_rows
            else:
                rows = t.scan(keys=_take_keys(n)).to_arrow().num_rows
    else:
        import lance

        uri = str(path / "lance")
        if name == "write":
            lance.write_dataset(pa.RecordBatchReader.from_batches(SCHEMA, _batches(n)), uri)
            rows = n
        else:
            ds = lance.dataset(uri)
            if name == "upsert":
                ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(_upsert(n))
                rows = max(1, n // 1000)
            elif name.startswith("scan"):
                for b in ds.to_batches():
                    rows += b.num_rows
            else:
                rows = ds.take(_take_keys(n)).num_rows
    return {"rows": rows, "seconds": round(time.perf_counter() - t0, 2), "peak_rss": peak_rss()}


def parse_rows(s: str) -> list[int]:
    """`10M,50M,100M` → row counts (suffixes k, M)."""
    out = []
    for part in s.split(","):
        part = part.strip()
        mult = {"k": 1_000, "K": 1_000, "M": 1_000_000}.get(part[-1:], 1)
        out.append(int(float(part.rstrip("kKM")) * mult))
    return out


def run(
    work: Path, rows: list[int], out: Path, systems: tuple[str, ...] = ("conch", "lance"), label: str = ""
) -> list[dict[str, Any]]:
    """Every step for every system and row count, each in its own subprocess; prints a table."""
    results: list[dict[str, Any]] = []
    for n in rows:
        for system in systems:
            path = work / f"{system}-{n}"
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
            for name in STEPS:
                cmd = [sys.executable, "-m", "bench.memory", "--step", system, name, str(path), str(n)]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    got: dict[str, Any] = {"error": proc.stderr.strip().splitlines()[-1:], "peak_rss": 0}
                else:
                    got = json.loads(proc.stdout.strip().splitlines()[-1])
                results.append({"rows_total": n, "system": system, "step": name, **got})
                print(
                    f"  memory {n:>11,} {system:<6} {name:<18} peak_rss={got['peak_rss'] / 2**20:7.0f} MB "
                    f"{got.get('seconds', '-')} s {got.get('error', '')}",
                    flush=True,
                )
            shutil.rmtree(path, ignore_errors=True)
    print()
    print(table(results))
    out.mkdir(parents=True, exist_ok=True)
    name = f"memory-{label}.json" if label else "memory.json"
    (out / name).write_text(json.dumps({"rows": rows, "results": results}, indent=1))
    return results


def table(results: list[dict[str, Any]]) -> str:
    """Peak RSS in MB per (rows, step), Conch / Lance."""
    by = {(r["rows_total"], r["system"], r["step"]): r["peak_rss"] for r in results}
    lines = ["| rows | step | conch MB | lance MB | conch / lance |", "|---:|---|---:|---:|---:|"]
    for n in sorted({r["rows_total"] for r in results}):
        for name in STEPS:
            c, ln = by.get((n, "conch", name)), by.get((n, "lance", name))
            ratio = f"{c / ln:.2f}×" if c and ln else "–"
            cs = f"{c >> 20}" if c else "–"
            ls = f"{ln >> 20}" if ln else "–"
            lines.append(f"| {n:,} | {name} | {cs} | {ls} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    ap.add_argument("--rows", default="10M,50M,100M", help="row counts, e.g. 10M,50M,100M")
    ap.add_argument("--systems", default="conch,lance")
    ap.add_argument("--label", default="", help="results go to memory-<label>.json")
    ap.add_argument("--work", type=Path, default=Path("/tmp/conch-bench/memory"))
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    ap.add_argument("--step", nargs=4, metavar=("SYSTEM", "STEP", "PATH", "ROWS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step:
        system, name, path, n = args.step
        print(json.dumps(step(system, name, Path(path), int(n))))
        return
    run(args.work, parse_rows(args.rows), args.out, tuple(args.systems.split(",")), args.label)


if __name__ == "__main__":
    main()
