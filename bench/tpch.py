"""TPC-H through DuckDB and Spark SQL: Conch tables vs the same data as Parquet (issue 25).

    python -m bench.tpch                    # SF 0.1 and 1 in DuckDB, SF 0.1 in Spark, best of 3
    python -m bench.tpch --quick            # SF 0.1, DuckDB and Spark, one timed run
    python -m bench.tpch --sf 0.1 --engines duckdb --queries 1,6,15

Data, the 22 queries and their reference answers come from DuckDB's `tpch` extension, a standard
nobody on this project wrote. `duckdb-extension-tpch` on PyPI ships the extension only for DuckDB
1.5.5, so the bench keeps a throwaway virtual environment with `duckdb==1.5.5` and the extension
(created with `pip` on first use, `--gen-venv`) and runs bench/tpch_gen.py there, which writes the
8 tables as Parquet (DuckDB's own writer), the queries and the answers under
`--cache/sf<SF>/` (reused by later runs).

The 8 tables are loaded into a Conch warehouse with their TPC-H primary keys as Conch keys
(`lineitem (l_orderkey, l_linenumber)`, `partsupp (ps_partkey, ps_suppkey)`, ...) from the same
Arrow data that `pyarrow.parquet.write_table` writes as the loading baseline (both timed from
memory, one commit per table; the background settle is waited for and counted, since a reader
would see its result).

Each query runs, engine by engine and side by side (Conch, then Parquet, so both see the same
cache state), once to check the answer against the reference and warm up, then `--reps` timed
runs (best kept). DuckDB reads Conch through `conch.engines.duckdb.source` (one view per table) and
Parquet through `read_parquet` views; Spark runs each query through `conch.engines.spark.sql` (temp
views over `spark.read.format("conch")` reading only the columns the query uses, its planning
timed with the query) and over `spark.read.parquet` temp views, in one local session. A wrong answer is reported (and counted)
per query, never hidden. Writes `bench/results/tpch.json`: per query and engine the seconds of
both sides, their ratio and whether each answer matched, the geometric mean of the ratios, and
the loading times.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import conch
from bench import systems as S

RESULTS = Path(__file__).parent / "results"
GEN = Path(__file__).parent / "tpch_gen.py"
TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
KEYS = {
    "region": ("r_regionkey",),
    "nation": ("n_nationkey",),
    "supplier": ("s_suppkey",),
    "customer": ("c_custkey",),
    "part": ("p_partkey",),
    "partsupp": ("ps_partkey", "ps_suppkey"),
    "orders": ("o_orderkey",),
    "lineitem": ("l_orderkey", "l_linenumber"),
}


# ----- data, queries, answers ----------------------------------------------------------------------
def generator_python(venv: Path) -> Path:
    """The generator venv's interpreter, creating the venv (duckdb 1.5.5 + tpch extension) if missing."""
    py = venv / "bin" / "python"
    check = [str(py), "-c", "import duckdb, duckdb_extension_tpch; assert duckdb.__version__ == '1.5.5'"]
    if py.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return py
    print(f"tpch: creating the generator environment {venv} (duckdb 1.5.5 + duckdb-extension-tpch)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "duckdb==1.5.5", "duckdb-extension-tpch==1.5.5"], check=True)
    subprocess.run(check, check=True)
    return py


def dataset(cache: Path, sf: float, venv: Path) -> Path:
    """`cache/sf<sf>/` with the 8 tables as Parquet, queries.json and answers.json (generated once)."""
    out = cache / f"sf{sf:g}"
    if not (out / "done").exists():
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        subprocess.run([str(generator_python(venv)), str(GEN), f"{sf:g}", str(out)], check=True)
        print(f"tpch: generated SF {sf:g} in {time.perf_counter() - t0:.1f} s -> {out}", flush=True)
    return out


# ----- answers ----------------------------------------------------------------------------------------
def _digits(text: str) -> int:
    return len(text) - text.index(".") - 1 if "." in text else 0


def _cell_matches(actual: Any, ref: str) -> bool:
    if actual is None:
        return ref in ("NULL", "")
    if isinstance(actual, bool):
        return str(actual).lower() == ref.lower()
    if isinstance(actual, int | float | Decimal):
        try:
            r = Decimal(ref)
        except InvalidOperation:
            return False
        a = Decimal(actual) if not isinstance(actual, float) else Decimal(repr(actual))
        # exact where both have the same digits (decimals); else equal to the coarser rounding
        # (Spark's avg of a decimal keeps 4 more digits than DuckDB's double) or 1e-9 relative
        tol = max(Decimal("1e-9") * abs(r), Decimal(5) * Decimal(10) ** -(min(_digits(str(a)), _digits(ref)) + 1))
        return abs(a - r) <= tol
    return str(actual) == ref


def check_answer(rows: Sequence[tuple[Any, ...]], answer: str) -> str | None:
    """None if `rows` equal the reference `answer` (DuckDB's `a|b` text, header first), else why not."""
    lines = answer.strip("\n").split("\n")
    ref = [line.split("|") for line in lines[1:]]
    if len(rows) != len(ref):
        return f"{len(rows)} rows, reference has {len(ref)}"
    for i, (got, want) in enumerate(zip(rows, ref, strict=True)):
        if len(got) != len(want):
            return f"row {i}: {len(got)} columns, reference has {len(want)}"
        for j, (a, r) in enumerate(zip(got, want, strict=True)):
            if not _cell_matches(a, r):
                return f"row {i} column {j}: {a!r} != reference {r!r}"
    return None


# ----- loading ----------------------------------------------------------------------------------------
def load(data_dir: Path, work: Path) -> tuple[conch.Catalog, dict[str, Any]]:
    """The 8 tables into a Conch warehouse and (the baseline) rewritten as Parquet, both timed."""
    wh = work / "conch"
    pq_dir = work / "parquet-write"
    shutil.rmtree(wh, ignore_errors=True)
    shutil.rmtree(pq_dir, ignore_errors=True)
    pq_dir.mkdir(parents=True)
    cat = conch.connect(wh)
    out: dict[str, Any] = {"tables": {}}
    total_c = total_p = cpu_c = cpu_p = 0.0
    for name in TABLES:
        data = pq.read_table(data_dir / f"{name}.parquet")
        c0, t0 = _cpu(), time.perf_counter()
        pq.write_table(data, pq_dir / f"{name}.parquet")
        p_s, p_cpu = time.perf_counter() - t0, _cpu() - c0
        key = [(k, data.schema.field(k).type) for k in KEYS[name]]
        values = pa.schema([f for f in data.schema if f.name not in KEYS[name]])
        c0, t0 = _cpu(), time.perf_counter()
        t = cat.create_table(name, key, values)
        t.write(data)
        t.wait_for_maintenance()
        c_s, c_cpu = time.perf_counter() - t0, _cpu() - c0
        total_c += c_s
        total_p += p_s
        cpu_c += c_cpu
        cpu_p += p_cpu
        out["tables"][name] = {
            "rows": data.num_rows,
            "conch_s": round(c_s, 4),
            "parquet_s": round(p_s, 4),
            "conch_cpu_s": round(c_cpu, 4),
            "parquet_cpu_s": round(p_cpu, 4),
        }
    out.update(conch_s=round(total_c, 3), parquet_s=round(total_p, 3), ratio=round(total_c / total_p, 3))
    out.update(conch_cpu_s=round(cpu_c, 3), parquet_cpu_s=round(cpu_p, 3), cpu_ratio=round(cpu_c / cpu_p, 3))
    print(
        f"tpch: loading the 8 tables: Conch {total_c:.2f} s, Parquet write {total_p:.2f} s, {total_c / total_p:.2f}x"
        f" (CPU, every thread: {cpu_c:.2f} s vs {cpu_p:.2f} s, {cpu_c / cpu_p:.2f}x)"
    )
    return cat, out


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# ----- engines ----------------------------------------------------------------------------------------
def _timed(fn: Callable[[], Any], reps: int) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()  # checked run, warms caches (its time counts only with reps=0)
    first = time.perf_counter() - t0
    best = first if reps <= 0 else math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def run_duckdb(data_dir: Path, wh: Path, queries: dict[str, str], reps: int) -> dict[str, dict[str, Any]]:
    import duckdb

    import conch.engines.duckdb as cd

    sides = {"conch": duckdb.connect(), "parquet": duckdb.connect()}
    for name in TABLES:
        cd.register(sides["conch"], name, cd.source(wh / name))
        sides["parquet"].execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{data_dir / name}.parquet')")
    out: dict[str, dict[str, Any]] = {}
    for nr, sql in queries.items():
        out[nr] = {}
        for side, con in sides.items():
            secs, rows = _timed(lambda c=con, q=sql: c.execute(q).fetchall(), reps)
            out[nr][side] = (secs, rows)
    for con in sides.values():
        con.close()
    return out


def run_spark(data_dir: Path, wh: Path, queries: dict[str, str], reps: int) -> dict[str, dict[str, Any]]:
    import conch.engines.spark

    spark = conch.engines.spark.session()
    try:
        out: dict[str, dict[str, Any]] = {}
        parquet = {n: spark.read.parquet(str(data_dir / f"{n}.parquet")) for n in TABLES}
        paths = {n: str(wh / n) for n in TABLES}
        for nr, sql in queries.items():
            out[nr] = {}
            # Conch: `conch.engines.spark.sql` registers the views reading only the columns the query
            # uses (PySpark 4.3 gives Python sources no column pruning); planning is timed too
            out[nr]["conch"] = _timed(
                lambda q=sql: [tuple(r) for r in conch.engines.spark.sql(spark, q, paths).collect()], reps
            )
            for n, df in parquet.items():
                df.createOrReplaceTempView(n)
            out[nr]["parquet"] = _timed(lambda q=sql: [tuple(r) for r in spark.sql(q).collect()], reps)
        return out
    finally:
        spark.stop()


# ----- the run ----------------------------------------------------------------------------------------
def compare(engine: str, sf: float, raw: dict[str, dict[str, Any]], answers: dict[str, str]) -> dict[str, Any]:
    rows = []
    for nr, sides in raw.items():
        (c_s, c_rows), (p_s, p_rows) = sides["conch"], sides["parquet"]
        c_err, p_err = check_answer(c_rows, answers[nr]), check_answer(p_rows, answers[nr])
        rows.append(
            {
                "query": int(nr),
                "conch_s": round(c_s, 5),
                "parquet_s": round(p_s, 5),
                "ratio": round(c_s / p_s, 3),
                "conch_correct": c_err is None,
                "parquet_correct": p_err is None,
                **({"conch_error": c_err} if c_err else {}),
                **({"parquet_error": p_err} if p_err else {}),
            }
        )
        mark = "ok" if c_err is None else f"WRONG ({c_err})"
        print(
            f"  {engine:<6} SF {sf:<4g} q{int(nr):02d}  conch {c_s * 1e3:9.1f} ms  parquet {p_s * 1e3:9.1f} ms"
            f"  {c_s / p_s:6.2f}x  {mark}",
            flush=True,
        )
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
    correct = sum(r["conch_correct"] for r in rows)
    print(f"  {engine:<6} SF {sf:<4g} geometric mean {geo:.2f}x, Conch answers correct {correct}/{len(rows)}")
    return {"engine": engine, "sf": sf, "queries": rows, "geomean": round(geo, 3), "correct": correct}


def run(
    work: Path,
    cache: Path,
    venv: Path,
    scale_factors: Sequence[float],
    engines: Sequence[str],
    spark_sf: Sequence[float],
    reps: int,
    only: Sequence[int] | None,
    out_dir: Path,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "machine": S.machine(),
        "reps": reps,
        "runs": [],
        "loading": {},
    }
    for sf in scale_factors:
        data_dir = dataset(cache, sf, venv)
        queries = json.loads((data_dir / "queries.json").read_text())
        answers = json.loads((data_dir / "answers.json").read_text())
        if only:
            queries = {k: v for k, v in queries.items() if int(k) in only}
        sf_work = work / f"sf{sf:g}"
        cat, loading = load(data_dir, sf_work)
        doc["loading"][f"{sf:g}"] = loading
        wh = sf_work / "conch"
        if "duckdb" in engines:
            doc["runs"].append(compare("duckdb", sf, run_duckdb(data_dir, wh, queries, reps), answers))
        if "spark" in engines and sf in spark_sf:
            doc["runs"].append(compare("spark", sf, run_spark(data_dir, wh, queries, reps), answers))
        cat.close() if hasattr(cat, "close") else None
        shutil.rmtree(sf_work, ignore_errors=True)
    print(summary(doc))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tpch.json").write_text(json.dumps(doc, indent=1))
    return doc


def summary(doc: dict[str, Any]) -> str:
    """A Markdown table: per query the Conch/Parquet ratio of each (engine, SF), then geometric means."""
    runs = doc["runs"]
    if not runs:
        return ""
    head = [f"{r['engine']} SF {r['sf']:g}" for r in runs]
    lines = ["| query | " + " | ".join(head) + " |", "|---|" + "---|" * len(runs)]
    nrs = sorted({q["query"] for r in runs for q in r["queries"]})
    for nr in nrs:
        cells = []
        for r in runs:
            q = next((q for q in r["queries"] if q["query"] == nr), None)
            cells.append("" if q is None else f"{q['ratio']:.2f}×" + ("" if q["conch_correct"] else " WRONG"))
        lines.append(f"| q{nr:02d} | " + " | ".join(cells) + " |")
    lines.append("| geometric mean | " + " | ".join(f"**{r['geomean']:.2f}×**" for r in runs) + " |")
    lines.append("| correct | " + " | ".join(f"{r['correct']}/{len(r['queries'])}" for r in runs) + " |")
    for sf, ld in doc["loading"].items():
        lines.append(
            f"\nloading SF {sf}: Conch {ld['conch_s']:.2f} s, Parquet write {ld['parquet_s']:.2f} s, {ld['ratio']:.2f}×"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.tpch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="SF 0.1, both engines, one timed run")
    ap.add_argument("--sf", default="0.1,1", help="scale factors (reference answers exist for 0.01, 0.1, 1)")
    ap.add_argument("--spark-sf", default="0.1", help="scale factors Spark runs at")
    ap.add_argument("--engines", default="duckdb,spark")
    ap.add_argument("--queries", default="", help="e.g. 1,6,15 (default: all 22)")
    ap.add_argument(
        "--reps", type=int, default=3, help="timed runs per query and side, after a checked one (best kept)"
    )
    ap.add_argument("--work", type=Path, default=Path("/tmp/conch-bench/tpch"))
    ap.add_argument("--cache", type=Path, default=Path("/tmp/conch-tpch"), help="generated data, kept across runs")
    ap.add_argument("--gen-venv", type=Path, default=Path("/tmp/tpchgen"), help="duckdb 1.5.5 + tpch extension")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    if a.quick:
        a.sf, a.reps = "0.1", 1
    run(
        a.work,
        a.cache,
        a.gen_venv,
        [float(s) for s in a.sf.split(",") if s],
        a.engines.split(","),
        [float(s) for s in a.spark_sf.split(",") if s],
        a.reps,
        [int(q) for q in a.queries.split(",") if q] or None,
        a.out,
    )


if __name__ == "__main__":
    main()
