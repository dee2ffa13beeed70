"""Compact Arrow types for DuckDB (`conch.engines.duckdb.source(compact_types=...)`): TPC-H
queries in DuckDB 2.0 over Conch with compact types (dictionary-encoded strings as Arrow
dictionaries, decimal(15, 2) as decimal64), without them, and over Parquet. Side by side in one
process: per query the sides take turns, a checked run each, then `--reps` timed runs; the median
wall and CPU time (`time.process_time`) of each side are kept.

    python -m bench.duckdb_compact --sf 1 --queries 1,4 --reps 7   # bench/results/duckdb_compact.json

It reuses `bench/tpch.py`'s generated data (`/tmp/conch-tpch`) and loading (`--warehouse`: an
already loaded Conch warehouse of the same scale factor, skipping the load).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from bench.tpch import RESULTS, TABLES, check_answer, dataset, load
from conch.errors import TableNotFoundError

SIDES = ("compact", "table types", "parquet")


def _connect(side: str, data_dir: Path, wh: Path) -> Any:
    import duckdb

    import conch.engines.duckdb as cd

    con = duckdb.connect()
    for name in TABLES:
        if side == "parquet":
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{data_dir / name}.parquet')")
        else:
            try:  # a --warehouse may hold only the tables the chosen queries read
                cd.register(con, name, cd.source(wh / name, compact_types=side == "compact"))
            except TableNotFoundError:
                continue
    return con


def run(a: argparse.Namespace) -> dict[str, Any]:
    data_dir = dataset(a.cache, a.sf, a.gen_venv)
    queries = json.loads((data_dir / "queries.json").read_text())
    answers = json.loads((data_dir / "answers.json").read_text())
    wh = a.warehouse
    if wh is None:
        load(data_dir, a.work)
        wh = a.work / "conch"
    cons = {s: _connect(s, data_dir, wh) for s in SIDES}
    rows = []
    try:
        for nr in a.queries.split(","):
            row: dict[str, Any] = {"query": int(nr)}
            times: dict[str, list[tuple[float, float]]] = {s: [] for s in SIDES}
            for side, con in cons.items():
                row[f"{side} correct"] = check_answer(con.execute(queries[nr]).fetchall(), answers[nr]) is None
            for _ in range(a.reps):
                for side, con in cons.items():
                    t0, c0 = time.perf_counter(), time.process_time()
                    con.execute(queries[nr]).fetchall()
                    times[side].append((time.perf_counter() - t0, time.process_time() - c0))
            for side, ts in times.items():
                row[side] = {
                    "wall_s": statistics.median(w for w, _ in ts),
                    "cpu_s": statistics.median(c for _, c in ts),
                }
            rows.append(row)
            p = row["parquet"]
            print(
                f"q{int(nr):02d}  "
                + "  ".join(
                    f"{s} {row[s]['wall_s'] * 1e3:6.0f} ms cpu {row[s]['cpu_s'] * 1e3:5.0f}"
                    + ("" if s == "parquet" else f" ({row[s]['cpu_s'] / p['cpu_s']:.2f}x cpu)")
                    for s in SIDES
                ),
                flush=True,
            )
    finally:
        for con in cons.values():
            con.close()
        if a.warehouse is None:
            shutil.rmtree(a.work, ignore_errors=True)
    return {"sf": a.sf, "reps": a.reps, "queries": rows, "load_average": os.getloadavg()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=1)
    ap.add_argument("--queries", default="1,4")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--work", type=Path, default=Path("/tmp/conch-bench/duckdb-compact"))
    ap.add_argument("--warehouse", type=Path, default=None)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/conch-tpch"))
    ap.add_argument("--gen-venv", type=Path, default=Path("/tmp/tpchgen"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    out = run(a)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "duckdb_compact.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
