"""What branches cost (issue 23 item 4): creating one, fast-forwarding, and what live branches
add to a vacuum of the table.

    .venv/bin/python -m bench.branches [--runs 10 100 1000] [--branches 4] [--reps 3]

A table gets `runs` commits of 10 rows each (automatic compaction off, so it has `runs` live key
spaces and fragments). Measured, median of `reps` (wall and CPU seconds):

- `branch()`: one metastore record and one WAL entry that re-adds every live record (no data
  file is copied), and the entry's size;
- `fast_forward()` after one write on the branch;
- `vacuum(older_than_seconds=0)` of the table with no branch and with `--branches` branches,
  alternated in one run (each branch holds one write of its own).

Writes bench/results/branches.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

import conch

RESULTS = Path(__file__).parent / "results" / "branches.json"


def timed(fn: Any) -> tuple[float, float, Any]:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w, time.process_time() - c, out


def med(xs: list[float]) -> float:
    return round(statistics.median(xs) * 1000, 2)


def measure(runs: int, n_branches: int, reps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        cat = conch.connect(d, maintenance=conch.Policy(auto=False, settle_after=None))
        t = cat.create_table("t", [("id", pa.int64())])
        for i in range(runs):
            t.write(pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64()), "x": [float(i)] * 10}))
        create_w, create_c, ff_w, ff_c = [], [], [], []
        entry_bytes = 0
        for r in range(reps):
            w, c, b = timed(lambda r=r: t.branch(f"b{r}"))
            create_w.append(w)
            create_c.append(c)
            entry_bytes = len(cat.warehouse.metastore.read_log(b.id, 0, 1)[0].entry)
            b.write(pa.table({"id": pa.array([1], pa.int64()), "x": [9.0]}))
            w, c, _ = timed(lambda r=r: t.fast_forward(f"b{r}"))
            ff_w.append(w)
            ff_c.append(c)
            t.drop_branch(f"b{r}")
        vac: dict[str, list[float]] = {"0_w": [], "0_c": [], "n_w": [], "n_c": []}
        for _ in range(reps):  # alternate: no branch, then n branches
            w, c, _ = timed(lambda: t.vacuum(older_than_seconds=0))
            vac["0_w"].append(w)
            vac["0_c"].append(c)
            for j in range(n_branches):
                t.branch(f"v{j}").write(pa.table({"id": pa.array([j], pa.int64()), "x": [1.0]}))
            w, c, _ = timed(lambda: t.vacuum(older_than_seconds=0))
            vac["n_w"].append(w)
            vac["n_c"].append(c)
            for j in range(n_branches):
                t.drop_branch(f"v{j}")
        cat.close()
    return {
        "runs": runs,
        "branch_ms": med(create_w),
        "branch_cpu_ms": med(create_c),
        "seed_entry_bytes": entry_bytes,
        "fast_forward_ms": med(ff_w),
        "fast_forward_cpu_ms": med(ff_c),
        "vacuum_no_branch_ms": med(vac["0_w"]),
        "vacuum_no_branch_cpu_ms": med(vac["0_c"]),
        f"vacuum_{n_branches}_branches_ms": med(vac["n_w"]),
        f"vacuum_{n_branches}_branches_cpu_ms": med(vac["n_c"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--branches", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    rows = [measure(r, args.branches, args.reps) for r in args.runs]
    load = os.getloadavg()
    for row in rows:
        print(json.dumps(row))
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"load_average": load, "rows": rows}, indent=2))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
