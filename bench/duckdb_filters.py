"""Which filters DuckDB should hand to Conch: TPC-H in DuckDB 2.0 over Conch with every filter
taken (`push_filters=True`, the behaviour before issue 25's second pass), with the default rule
(`push_filters=None`: value filters only on tables storing `FILTER_MIN_BYTES`, key terms always)
and, for reference, over Parquet. Side by side in one process: per query the three sides take
turns, a checked warm-up run each, then `--reps` timed runs (best wall kept, with its CPU time).

DuckDB 2.0 drops the selectivity of a filter the source accepts from its join planner's estimate
(`docs/engines.md`), so taking a small table's filter can cost more than it saves.

    python -m bench.duckdb_filters --sf 0.1,1 --reps 3      # bench/results/duckdb_filters.json

It reuses `bench/tpch.py`'s generated data (`/tmp/conch-tpch`) and loading.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

from bench.tpch import RESULTS, TABLES, check_answer, dataset, load

SIDES = ("every filter", "default", "parquet")


def _connect(side: str, data_dir: Path, wh: Path) -> Any:
    import duckdb

    import conch.engines.duckdb as cd

    con = duckdb.connect()
    for name in TABLES:
        if side == "parquet":
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{data_dir / name}.parquet')")
        else:
            cd.register(con, name, cd.source(wh / name, push_filters=True if side == "every filter" else None))
    return con


def run_sf(sf: float, cache: Path, venv: Path, work: Path, reps: int) -> dict[str, Any]:
    data_dir = dataset(cache, sf, venv)
    queries = json.loads((data_dir / "queries.json").read_text())
    answers = json.loads((data_dir / "answers.json").read_text())
    sf_work = work / f"sf{sf:g}"
    load(data_dir, sf_work)
    cons = {s: _connect(s, data_dir, sf_work / "conch") for s in SIDES}
    rows: list[dict[str, Any]] = []
    try:
        for nr in sorted(queries, key=int):
            row: dict[str, Any] = {"query": int(nr)}
            for side, con in cons.items():
                err = check_answer(con.execute(queries[nr]).fetchall(), answers[nr])
                best, cpu = math.inf, 0.0
                for _ in range(reps):
                    t0, c0 = time.perf_counter(), time.process_time()
                    con.execute(queries[nr]).fetchall()
                    wall = time.perf_counter() - t0
                    if wall < best:
                        best, cpu = wall, time.process_time() - c0
                row[side] = {"wall_s": round(best, 5), "cpu_s": round(cpu, 5), "correct": err is None}
            rows.append(row)
            print(
                f"  SF {sf:<4g} q{int(nr):02d}  "
                + "  ".join(f"{s} {row[s]['wall_s'] * 1e3:7.1f} ms (cpu {row[s]['cpu_s'] * 1e3:6.1f})" for s in SIDES),
                flush=True,
            )
    finally:
        for con in cons.values():
            con.close()
        shutil.rmtree(sf_work, ignore_errors=True)
    geo = {}
    for side in SIDES[:2]:
        for what in ("wall_s", "cpu_s"):
            logs = [math.log(r[side][what] / r["parquet"][what]) for r in rows]
            geo[f"{side} {what[:-2]}"] = round(math.exp(sum(logs) / len(logs)), 3)
    print(f"  SF {sf:g} geometric mean ÷ Parquet: " + ", ".join(f"{k} {v:.2f}x" for k, v in geo.items()))
    return {"sf": sf, "queries": rows, "geomean": geo, "load_average": os.getloadavg()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", default="0.1,1")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/conch-bench/duckdb-filters"))
    ap.add_argument("--cache", type=Path, default=Path("/tmp/conch-tpch"))
    ap.add_argument("--gen-venv", type=Path, default=Path("/tmp/tpchgen"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    runs = [run_sf(float(s), a.cache, a.gen_venv, a.work, a.reps) for s in a.sf.split(",")]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "duckdb_filters.json").write_text(json.dumps({"reps": a.reps, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
