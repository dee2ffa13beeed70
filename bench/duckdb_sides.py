"""TPC-H in DuckDB 2.0 over Conch with different `conch.engines.duckdb.source(...)` settings, and
over Parquet, side by side in one process (issue 25): per query every side runs once checked
against the reference answer, then the sides take turns for `--reps` timed runs; the median wall
and CPU time (`time.process_time`) of each side are kept, with its ratio to Parquet.

Sides (`--sides`, Parquet always added):
- `every filter`: `push_filters=True`, every filter Conch can compute exactly is taken (the
  behaviour before issue 25's second pass). DuckDB 2.0 drops the selectivity of a filter the source
  accepts from its join planner's estimate (`docs/engines.md`), so taking a small table's filter
  can cost more than it saves;
- `default`: `source()`'s defaults (value filters only on tables storing `FILTER_MIN_BYTES`, key
  terms always; compact Arrow types);
- `table types`: `compact_types=False`, batches in the table's own Arrow types (plain strings
  where Vortex holds dictionaries, decimal128).

    python -m bench.duckdb_sides --sf 0.1,1 --sides "every filter,default" --reps 3
    python -m bench.duckdb_sides --sf 1 --queries 1,4 --sides "default,table types" --reps 7

Results: bench/results/duckdb_sides.json. It reuses `bench/tpch.py`'s generated data
(`/tmp/conch-tpch`) and loading (`--warehouse`: an already loaded Conch warehouse of the one
scale factor given, skipping the load).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from bench.tpch import RESULTS, TABLES, check_answer, dataset, load
from conch.errors import TableNotFoundError

SOURCE_OPTIONS: dict[str, dict[str, Any]] = {
    "every filter": {"push_filters": True},
    "default": {},
    "table types": {"compact_types": False},
}
PARQUET = "parquet"


def _connect(side: str, data_dir: Path, wh: Path) -> Any:
    import duckdb

    import conch.engines.duckdb as cd

    con = duckdb.connect()
    for name in TABLES:
        if side == PARQUET:
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{data_dir / name}.parquet')")
            continue
        try:  # a --warehouse may hold only the tables the chosen queries read
            cd.register(con, name, cd.source(wh / name, **SOURCE_OPTIONS[side]))
        except TableNotFoundError:
            continue
    return con


def _time(con: Any, query: str) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    con.execute(query).fetchall()
    return time.perf_counter() - t0, time.process_time() - c0


def run_sf(sf: float, sides: list[str], a: argparse.Namespace) -> dict[str, Any]:
    data_dir = dataset(a.cache, sf, a.gen_venv)
    queries = json.loads((data_dir / "queries.json").read_text())
    answers = json.loads((data_dir / "answers.json").read_text())
    wh, sf_work = a.warehouse, a.work / f"sf{sf:g}"
    if wh is None:
        load(data_dir, sf_work)
        wh = sf_work / "conch"
    cons = {s: _connect(s, data_dir, wh) for s in sides}
    rows: list[dict[str, Any]] = []
    try:
        for nr in a.queries.split(",") if a.queries else sorted(queries, key=int):
            row: dict[str, Any] = {"query": int(nr)}
            times: dict[str, list[tuple[float, float]]] = {s: [] for s in sides}
            for side, con in cons.items():
                row[f"{side} correct"] = check_answer(con.execute(queries[nr]).fetchall(), answers[nr]) is None
            for _ in range(a.reps):
                for side, con in cons.items():
                    times[side].append(_time(con, queries[nr]))
            for side, ts in times.items():
                row[side] = {
                    "wall_s": statistics.median(w for w, _ in ts),
                    "cpu_s": statistics.median(c for _, c in ts),
                }
            rows.append(row)
            p = row[PARQUET]
            print(
                f"  SF {sf:<4g} q{int(nr):02d}  "
                + "  ".join(
                    f"{s} {row[s]['wall_s'] * 1e3:7.1f} ms cpu {row[s]['cpu_s'] * 1e3:6.1f}"
                    + ("" if s == PARQUET else f" ({row[s]['cpu_s'] / p['cpu_s']:.2f}x cpu)")
                    for s in sides
                ),
                flush=True,
            )
    finally:
        for con in cons.values():
            con.close()
        if a.warehouse is None:
            shutil.rmtree(sf_work, ignore_errors=True)
    geo = {}
    for side in sides[:-1]:
        for what in ("wall_s", "cpu_s"):
            logs = [math.log(r[side][what] / r[PARQUET][what]) for r in rows]
            geo[f"{side} {what[:-2]}"] = round(math.exp(sum(logs) / len(logs)), 3)
    print(f"  SF {sf:g} geometric mean ÷ Parquet: " + ", ".join(f"{k} {v:.2f}x" for k, v in geo.items()))
    return {"sf": sf, "queries": rows, "geomean": geo, "load_average": os.getloadavg()}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.duckdb_sides", description=__doc__.splitlines()[0])
    ap.add_argument("--sf", default="0.1,1", help="scale factors, comma-separated")
    ap.add_argument("--sides", default="every filter,default", help=f"of {', '.join(SOURCE_OPTIONS)}")
    ap.add_argument("--queries", default="", help="e.g. 1,4 (default: all 22)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/conch-bench/duckdb-sides"))
    ap.add_argument("--warehouse", type=Path, default=None)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/conch-tpch"))
    ap.add_argument("--gen-venv", type=Path, default=Path("/tmp/tpchgen"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    sides = [s.strip() for s in a.sides.split(",")]
    unknown = [s for s in sides if s not in SOURCE_OPTIONS]
    if unknown:
        ap.error(f"unknown side(s) {unknown}; known: {', '.join(SOURCE_OPTIONS)}")
    scale_factors = [float(s) for s in a.sf.split(",")]
    if a.warehouse is not None and len(scale_factors) != 1:
        ap.error("--warehouse holds one scale factor: give one --sf")
    runs = [run_sf(sf, [*sides, PARQUET], a) for sf in scale_factors]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "duckdb_sides.json").write_text(json.dumps({"reps": a.reps, "sides": sides, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
