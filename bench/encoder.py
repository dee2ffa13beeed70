"""What Vortex's default write spends per column type, and what it buys (issue 24 item 3):
`python -m bench.encoder [--rows N] [--reps R]`; results in `bench/results/encoder.json`.

Per column type (`rows` values each): the process CPU time (all threads: Vortex encodes on its
own) and wall time of `vortex.io.write` with the default strategy and with
`VortexWriteOptions.compact()`, of `vortex.compress` alone, of writing an array `vortex.compress`
already encoded, and of an uncompressed Arrow IPC file (the floor: the bytes only), with each
file's size. Medians of `reps`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import pyarrow as pa

RESULTS = Path(__file__).parent / "results"


def columns(n: int) -> dict[str, pa.Array]:
    rng = np.random.default_rng(4)
    words = np.array([f"word{i:03d}" for i in range(200)])
    blobs = [os.urandom(1024) for _ in range(max(1, n // 100))]  # already compressed: random bytes
    return {
        "random f64": pa.array(rng.random(n)),
        "f64 2 decimals": pa.array(np.round(rng.random(n) * 1000, 2)),
        "sorted u64": pa.array(np.cumsum(rng.integers(0, 10, n)).astype(np.uint64)),
        "small ints i64": pa.array(rng.integers(0, 100, n)),
        "hashes u64": pa.array(rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64)),
        "strings, 200 distinct": pa.array(words[rng.integers(0, 200, n)]),
        "random strings 16 B": pa.array(np.char.mod("%016x", rng.integers(0, 2**62, n)).astype(str)),
        "1 KB compressed blobs": pa.array(blobs, pa.binary()),
        # TPC-H's column types (lineitem: prices and discounts, ship dates, comments)
        "decimal(15,2) prices": _decimal(rng.integers(90_000, 10_500_000, n)),
        "decimal(15,2) 11 values": _decimal(rng.integers(0, 11, n)),
        "date32 7 years": pa.array(rng.integers(8000, 10557, n).astype(np.int32)).cast(pa.date32()),
        "comment text 10-43 B": pa.array([" ".join(words[rng.integers(0, 200, 1 + i % 5)]) for i in range(n)]),
    }


def _decimal(cents: np.ndarray) -> pa.Array:
    """decimal128(15, 2) values of the non-negative unscaled integers `cents`."""
    words = np.zeros((len(cents), 2), dtype=np.int64)
    words[:, 0] = cents
    return pa.Array.from_buffers(pa.decimal128(15, 2), len(cents), [None, pa.py_buffer(words.tobytes())])


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _measure(fn: Callable[[], Any], reps: int) -> tuple[float, float]:
    fn()
    walls, cpus = [], []
    for _ in range(reps):
        c0, t0 = _cpu(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(_cpu() - c0)
    return median(walls), median(cpus)


def run(rows: int, reps: int) -> list[dict[str, Any]]:
    import pyarrow.ipc as ipc
    import vortex as vx

    d = Path(tempfile.mkdtemp(prefix="conch-encoder-"))
    out: list[dict[str, Any]] = []
    try:
        for name, arr in columns(rows).items():
            table = pa.table({"c": arr})
            compressed = vx.compress(vx.array(table))
            paths = {k: str(d / f"{k}.vx") for k in ("default", "compact", "precompressed")}

            def ipc_write(table: pa.Table = table) -> None:
                with ipc.new_file(str(d / "x.arrow"), table.schema) as w:
                    w.write_table(table)

            cases: dict[str, Callable[[], Any]] = {
                "vortex default": lambda t=table, p=paths: vx.io.write(t, p["default"]),
                "vortex compact": lambda t=table, p=paths: vx.io.VortexWriteOptions.compact().write(t, p["compact"]),
                "vortex.compress only": lambda t=table: vx.compress(vx.array(t)),
                "write precompressed": lambda c=compressed, p=paths: vx.io.write(c, p["precompressed"]),
                "arrow ipc (no compression)": ipc_write,
            }
            sizes = {
                "vortex default": paths["default"],
                "vortex compact": paths["compact"],
                "write precompressed": paths["precompressed"],
                "arrow ipc (no compression)": str(d / "x.arrow"),
            }
            for case, fn in cases.items():
                wall, cpu = _measure(fn, reps)
                size = os.path.getsize(sizes[case]) if case in sizes else None
                row = {
                    "column": name,
                    "case": case,
                    "rows": len(arr),
                    "arrow_bytes": table.nbytes,
                    "wall_s": round(wall, 4),
                    "cpu_s": round(cpu, 4),
                    "bytes": size,
                    "ratio": round(table.nbytes / size, 2) if size else None,
                }
                out.append(row)
                shown = "" if size is None else f"{size / 2**20:7.2f} MB (x{row['ratio']})"
                print(
                    f"  {name:<22} {case:<28} wall {wall * 1000:8.1f} ms  cpu {cpu * 1000:8.1f} ms  {shown}", flush=True
                )
            print(f"  {name:<22} encodings: {str(compressed)[:100]}", flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.encoder", description=__doc__)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    rows = run(args.rows, args.reps)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "encoder.json").write_text(json.dumps({"rows": rows, "cpus": os.cpu_count()}, indent=1) + "\n")
    print(f"wrote {args.out / 'encoder.json'}")


if __name__ == "__main__":
    main()
