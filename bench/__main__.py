"""`python -m bench [--scale S] [--reps R] [--only 1,4,b]`: Conch vs Parquet (pyarrow, default
and tuned), Lance, Delta and DuckDB-over-Parquet on the workloads of issue 5, in one process on
the same generated data; `b` adds the backends (bench/backends.py: metastores, S3 vs local);
`runs` adds issue 11's tables before compaction vs Lance, with peak RSS (bench/runs.py); `commit`
the one-row commit latency vs Lance and Delta appends (bench/commit_latency.py); `writes` issue 24's
bulk load, wide table and write amplification (bench/writes.py); `selective` its 1 % blob scan and
take vs Lance (bench/selective.py). Prints a table of medians and ratios to Conch, writes
bench/results/scan.json and bench/results/scan.png."""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import conch
from bench import systems as S

RESULTS = Path(__file__).parent / "results"


class Recorder:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, workload: str, case: str, system: str, seconds: float | None, **extra: Any) -> None:
        self.rows.append({"workload": workload, "case": case, "system": system, "seconds": seconds, **extra})
        shown = f"{seconds * 1000:10.1f} ms" if seconds is not None else "       n/a"
        more = " ".join(f"{k}={v}" for k, v in extra.items())
        print(f"  {workload:<3} {case:<34} {system:<16} {shown} {more}", flush=True)


def conch_table(root: Path, name: str, data: pa.Table | None = None) -> tuple[conch.Catalog, conch.Table]:
    cat = conch.connect(root)
    t = cat.create_table(name, [("id", pa.uint64())])
    if data is not None:
        t.write(data)
    return cat, t


# ----- workloads ------------------------------------------------------------------------------------
def w1_w2_w3(work: Path, scale: float, reps: int, rec: Recorder) -> None:
    n = int(2_000_000 * scale)
    data = S.metadata_table(n)
    paths = {
        "parquet": work / "w1" / "default.parquet",
        "parquet-tuned": work / "w1" / "tuned.parquet",
        "lance": work / "w1" / "lance",
        "delta": work / "w1" / "delta",
    }
    counter = [0]

    def conch_write() -> None:
        counter[0] += 1
        root = S.fresh(work / "w1" / f"conch{counter[0] % 2}")
        conch_table(root, "meta", data)

    writers = {
        "conch": conch_write,
        "parquet": lambda: S.parquet_write(data, S.fresh(paths["parquet"]), tuned=False),
        "parquet-tuned": lambda: S.parquet_write(data, S.fresh(paths["parquet-tuned"]), tuned=True),
        "lance": lambda: S.lance_write(data, paths["lance"]),
        "delta": lambda: S.delta_write(data, paths["delta"]),
    }
    for sys_name, fn in writers.items():
        secs, _ = S.timed(fn, reps, warmup=False)
        where = work / "w1" / f"conch{counter[0] % 2}" if sys_name == "conch" else paths[sys_name]
        rec.add("1", f"write {n:,} rows", sys_name, secs, bytes=S.dir_size(where), arrow_bytes=data.nbytes)
    cat = conch.connect(work / "w1" / f"conch{counter[0] % 2}")
    t = cat.table("meta")
    import lance

    lds = lance.dataset(str(paths["lance"]))
    pq_default, pq_tuned = str(paths["parquet"]), str(paths["parquet-tuned"])

    def run(wl: str, case: str, fns: dict[str, Any]) -> None:
        for sys_name, fn in fns.items():
            secs, out = S.timed(fn, reps)
            rec.add(wl, case, sys_name, secs, rows=out.num_rows)

    run(
        "2",
        "full scan",
        {
            "conch": lambda: t.scan().to_arrow(),
            "parquet": lambda: S.parquet_read(paths["parquet"]),
            "parquet-tuned": lambda: S.parquet_read(paths["parquet-tuned"]),
            "lance": lambda: lds.to_table(),
            "delta": lambda: S.delta_read(paths["delta"]),
            "duckdb": lambda: S.duck(f"select * from read_parquet('{pq_default}')"),
        },
    )
    run(
        "2",
        "project f0",
        {
            "conch": lambda: t.scan("f0").to_arrow(),
            "parquet": lambda: S.parquet_read(paths["parquet"], ["id", "f0"]),
            "parquet-tuned": lambda: S.parquet_read(paths["parquet-tuned"], ["id", "f0"]),
            "lance": lambda: lds.to_table(columns=["id", "f0"]),
            "delta": lambda: S.delta_read(paths["delta"], ["id", "f0"]),
            "duckdb": lambda: S.duck(f"select id, f0 from read_parquet('{pq_default}')"),
        },
    )
    for pct in (1, 10):
        hi = n * pct // 100
        run(
            "3",
            f"sorted key id < {pct}%",
            {
                "conch": lambda hi=hi: t.scan(keys=conch.KeyRange(None, (hi,))).to_arrow(),
                "parquet": lambda hi=hi: S.parquet_read(paths["parquet"], filters=[("id", "<", hi)]),
                "parquet-tuned": lambda hi=hi: S.parquet_read(paths["parquet-tuned"], filters=[("id", "<", hi)]),
                "lance": lambda hi=hi: lds.to_table(filter=f"id < {hi}"),
                "delta": lambda hi=hi: S.delta_read(paths["delta"], filt=pc.field("id") < hi),
                "duckdb": lambda hi=hi: S.duck(f"select * from read_parquet('{pq_tuned}') where id < {hi}"),
            },
        )
    for pct in (1, 10):
        x = pct / 100
        run(
            "3",
            f"unsorted f0 < {x} ({pct}%)",
            {
                "conch": lambda x=x: t.scan(where=t["f0"] < x).to_arrow(),
                "parquet": lambda x=x: S.parquet_read(paths["parquet"], filters=[("f0", "<", x)]),
                "parquet-tuned": lambda x=x: S.parquet_read(paths["parquet-tuned"], filters=[("f0", "<", x)]),
                "lance": lambda x=x: lds.to_table(filter=f"f0 < {x}"),
                "delta": lambda x=x: S.delta_read(paths["delta"], filt=pc.field("f0") < x),
                "duckdb": lambda x=x: S.duck(f"select * from read_parquet('{pq_tuned}') where f0 < {x}"),
            },
        )


W4_SELECTIVITY = (0.01, 0.1, 0.5)  # spec/001's scan at 1 %, 10 % and 50 % (issue 11)


def w4_case(x: float) -> str:
    return f"audio.bytes where silence<{x}"


def w4(work: Path, scale: float, reps: int, rec: Recorder) -> None:
    n = int(50_000 * scale)
    data = S.audio_table(n, 20_000)
    root = S.fresh(work / "w4" / "conch")
    cat, t = conch_table(root, "audio")
    # metadata and audio as separate groups and commits (spec/001): two key spaces, same keys
    t.write(data.select(["id", "silence_ratio", "audio_length"]))
    audio = pa.StructArray.from_arrays([data.column("audio_bytes").combine_chunks().cast(pa.binary())], ["bytes"])
    t.write(pa.table({"id": data.column("id"), "audio": audio}))
    del audio
    pq_default, pq_tuned, lds = S.write_take_copies(data, work / "w4")
    del data

    def conch_scan(x: float) -> pa.Table:
        return cat.scan(t["audio.bytes"], where=t["silence_ratio"] < x).to_arrow()

    # bytes read from storage, cold Conch caches: counted by Vortex reads + blob ranges
    cat.warehouse.format.clear_cache()
    cat.warehouse.key_cache = type(cat.warehouse.key_cache)(cat.warehouse.format)
    sc = cat.scan(t["audio.bytes"], where=t["silence_ratio"] < 0.01)
    r0 = S.rchar()
    out = sc.to_arrow()
    conch_rchar = S.rchar() - r0
    m = sc.metrics()
    returned = out.column("audio").combine_chunks().field("bytes").nbytes
    print("\n".join("    " + line for line in sc.explain().splitlines()))
    for x in W4_SELECTIVITY:
        fns = {
            "parquet": lambda x=x: pq.read_table(
                pq_default, columns=["id", "audio_bytes"], filters=[("silence_ratio", "<", x)]
            ),
            "parquet-tuned": lambda x=x: pq.read_table(
                pq_tuned, columns=["id", "audio_bytes"], filters=[("silence_ratio", "<", x)]
            ),
            "lance": lambda x=x: lds.to_table(columns=["id", "audio_bytes"], filter=f"silence_ratio < {x}"),
            "delta": lambda x=x: S.delta_read(
                work / "w4" / "delta", ["id", "audio_bytes"], pc.field("silence_ratio") < x
            ),
            "duckdb": lambda x=x: S.duck(
                f"select id, audio_bytes from read_parquet('{pq_tuned}') where silence_ratio < {x}"
            ),
        }
        if x != W4_SELECTIVITY[0]:  # wider selections: the whole-file readers add nothing but minutes
            fns = {k: fns[k] for k in ("parquet-tuned", "lance")}
        # Conch and Lance alternate rep by rep: a burst of load on the shared machine hits both
        secs_c, secs_l, out, out_l = S.interleaved(lambda x=x: conch_scan(x), fns.pop("lance"), reps)
        extra: dict[str, Any] = {"rows": out.num_rows}
        if x == W4_SELECTIVITY[0]:
            extra |= {
                "bytes_read": m.total_bytes_read,
                "rchar": conch_rchar,
                "bytes_returned": returned,
                "read_over_returned": round(m.total_bytes_read / max(returned, 1), 3),
            }
        rec.add("4", w4_case(x), "conch", secs_c, **extra)
        rec.add("4", w4_case(x), "lance", secs_l, rows=out_l.num_rows)
        for sys_name, fn in fns.items():
            r0 = S.rchar()
            fn()
            read = S.rchar() - r0
            secs, out = S.timed(fn, reps, warmup=False)
            rec.add("4", w4_case(x), sys_name, secs, rows=out.num_rows, rchar=read)


def w5(work: Path, scale: float, reps: int, rec: Recorder, queries: int = 100) -> None:
    n = int(1_000_000 * scale)
    rng = np.random.default_rng(5)
    data = pa.table({"id": pa.array(np.arange(n, dtype=np.uint64)), "s": S.strings(rng, n, 1024)})
    root = S.fresh(work / "w5" / "conch")
    _cat, t = conch_table(root, "strings", data)
    pq_default, pq_tuned, lds = S.write_take_copies(data, work / "w5")
    del data
    qs = [np.sort(rng.choice(n, size=int(rng.integers(20, 51)), replace=False)).tolist() for _ in range(queries)]
    slow = qs[:5]  # whole-file scanners: a few queries are enough for a median

    def per_query(fn: Any, qlist: list[list[int]]) -> float:
        fn(qlist[0])
        times = []
        for q in qlist:
            t0 = time.perf_counter()
            out = fn(q)
            times.append(time.perf_counter() - t0)
            assert out.num_rows == len(q), (out.num_rows, len(q))
        return float(np.median(times))

    cases = {
        "conch": (lambda q: t.scan(keys=q).to_arrow(), qs),
        "lance": (lambda q: lds.take(q), qs),  # id == row position: Lance's take by row index
        "parquet": (lambda q: pq.read_table(pq_default, filters=[("id", "in", q)]), slow),
        "parquet-tuned": (lambda q: pq.read_table(pq_tuned, filters=[("id", "in", q)]), qs[:20]),
        "delta": (lambda q: S.delta_read(work / "w5" / "delta", filt=pc.field("id").isin(q)), slow),
        "duckdb": (
            lambda q: S.duck(f"select * from read_parquet('{pq_tuned}') where id in ({','.join(map(str, q))})"),
            qs[:20],
        ),
    }
    # Conch and Lance query by query, alternating: load bursts on a shared machine hit both
    conch_fn, lance_fn = cases.pop("conch")[0], cases.pop("lance")[0]
    times_c, times_l = [], []
    conch_fn(qs[0]), lance_fn(qs[0])
    for q in qs:
        for fn, times in ((conch_fn, times_c), (lance_fn, times_l)):
            t0 = time.perf_counter()
            out = fn(q)
            times.append(time.perf_counter() - t0)
            assert out.num_rows == len(q), (out.num_rows, len(q))
    for sys_name, times in (("conch", times_c), ("lance", times_l)):
        rec.add("5", "take 20-50 random keys (per query)", sys_name, float(np.median(times)), queries=len(qs))
    for sys_name, (fn, ql) in cases.items():
        rec.add("5", "take 20-50 random keys (per query)", sys_name, per_query(fn, ql), queries=len(ql))


def w6(work: Path, scale: float, reps: int, rec: Recorder) -> None:
    n, k = int(1_000_000 * scale), int(100_000 * scale)
    base = S.wide_table(n, 10)
    rng = np.random.default_rng(6)
    keys = np.sort(rng.choice(n, size=k, replace=False)).astype(np.uint64)
    new_vals = rng.random(k)
    upd = pa.table({"id": pa.array(keys), "c3": new_vals})
    final_c3 = base.column("c3").to_numpy().copy()
    final_c3[keys.astype(np.int64)] = new_vals
    clean = base.set_column(4, "c3", pa.array(final_c3))
    times: dict[str, list[float]] = {"conch": [], "lance": [], "delta": []}
    for rep in range(reps):
        _cat, t = conch_table(S.fresh(work / "w6" / f"conch{rep}"), "wide", base)
        t0 = time.perf_counter()
        t.write(upd)
        times["conch"].append(time.perf_counter() - t0)
        lds = S.lance_write(base, work / "w6" / f"lance{rep}")
        t0 = time.perf_counter()
        lds.merge_insert("id").when_matched_update_all().execute(upd)
        times["lance"].append(time.perf_counter() - t0)
        S.delta_write(base, work / "w6" / f"delta{rep}")
        from deltalake import DeltaTable

        dt = DeltaTable(str(work / "w6" / f"delta{rep}"))
        t0 = time.perf_counter()
        dt.merge(upd, predicate="t.id = s.id", source_alias="s", target_alias="t").when_matched_update(
            {"c3": "s.c3"}
        ).execute()
        times["delta"].append(time.perf_counter() - t0)
    for sys_name, ts in times.items():
        rec.add("6", f"upsert 1 column on {k:,} of {n:,} keys", sys_name, float(np.median(ts)))
    # merge-on-read vs the same data written once
    _cat_clean, t_clean = conch_table(S.fresh(work / "w6" / "conch_clean"), "wide", clean)
    secs_mor, got = S.timed(lambda: t.scan().to_arrow(), reps)
    assert np.array_equal(got.column("c3").to_numpy(), final_c3)
    secs_clean, _ = S.timed(lambda: t_clean.scan().to_arrow(), reps)
    rec.add(
        "6", "full read after upsert (merge-on-read)", "conch", secs_mor, ratio_to_clean=round(secs_mor / secs_clean, 2)
    )
    rec.add("6", "full read of clean table", "conch", secs_clean)
    lance_clean = S.lance_write(clean, work / "w6" / "lance_clean")
    secs_l, _ = S.timed(lambda: lds.to_table(), reps)
    secs_lc, _ = S.timed(lambda: lance_clean.to_table(), reps)
    rec.add("6", "full read after upsert (merge-on-read)", "lance", secs_l, ratio_to_clean=round(secs_l / secs_lc, 2))
    rec.add("6", "full read of clean table", "lance", secs_lc)


def w7(work: Path, scale: float, reps: int, rec: Recorder) -> None:
    """Issue 10's workload 7: 500 commits of 2,000 random keys (every key written about twice),
    default policy, read as a ratio to the same rows written in one commit: right after the
    last commit (L0 runs the commit-time trigger left over L1), and once the writer's
    background settle has folded them in (`Table.wait_for_maintenance()`; the policy's pause is
    set to an hour so the first reads are not raced by it)."""
    commits, per = max(2, int(500 * scale)), 2000
    universe = commits * per // 2  # every key written about twice: overlapping runs
    rng = np.random.default_rng(7)
    cat = conch.connect(S.fresh(work / "w7" / "conch_lsm"), maintenance=conch.Policy(settle_after=3600))
    t = cat.create_table("lsm", [("id", pa.uint64())])
    final: dict[str, np.ndarray] = {f"c{i}": np.full(universe, np.nan) for i in range(4)}
    written = np.zeros(universe, dtype=bool)
    t0 = time.perf_counter()
    for _ in range(commits):
        ks = np.sort(rng.choice(universe, size=per, replace=False))
        vals = {f"c{i}": rng.random(per) for i in range(4)}
        t.write(pa.table({"id": pa.array(ks.astype(np.uint64)), **vals}))
        for c, v in vals.items():
            final[c][ks] = v
        written[ks] = True
    write_secs = time.perf_counter() - t0
    ids = np.nonzero(written)[0]
    one = pa.table({"id": pa.array(ids.astype(np.uint64)), **{c: v[ids] for c, v in final.items()}})
    _, t_one = conch_table(S.fresh(work / "w7" / "conch_one"), "one", one)
    probe = [int(k) for k in rng.choice(ids, size=50, replace=False)]
    queries = {
        "full scan": lambda x: x.scan().to_arrow(),
        "1 % filter": lambda x: x.scan(where=x["c0"] < 0.01).to_arrow(),
        "50-key take": lambda x: x.scan(keys=probe).to_arrow(),
    }
    got = t.scan().to_arrow()
    assert got.num_rows == len(ids) and np.array_equal(got.column("c2").to_numpy(), final["c2"][ids])
    l0 = t.maintenance_plan().l0_runs

    def measure(when: str, **extra: Any) -> None:
        # each query alternates with the same query on the one-commit table: a load burst on
        # the shared machine hits both sides of the ratio
        for q, fn in queries.items():
            secs, once, _, _ = S.interleaved(lambda fn=fn: fn(t), lambda fn=fn: fn(t_one), reps)
            rec.add(
                "7",
                f"{q} after {commits} commits, {when}",
                "conch",
                secs,
                ratio_to_one_commit=round(secs / once, 2),
                **extra,
            )
            rec.add("7", f"{q}, same data in one commit ({when})", "conch", once)

    measure("right after the last", l0_runs=l0, write_s=round(write_secs, 1))
    t1 = time.perf_counter()
    assert t.wait_for_maintenance()
    measure("settled", settle_s=round(time.perf_counter() - t1, 2))


BLOB_BYTES = 20_000


def w8(work: Path, scale: float, reps: int, rec: Recorder) -> None:
    """Issue 11's blob streaming: every value of a column of 20 KB blobs (5 GB at scale 1),
    streamed batch by batch and dropped (Conch `to_record_batches()`, Lance `to_batches()`)."""
    n = max(1000, int(250_000 * scale))
    per = 5000  # rows per generated batch (100 MB): the data never sits in memory whole
    schema = pa.schema([("id", pa.uint64()), ("audio", pa.binary())])

    def batches() -> Any:
        rng = np.random.default_rng(8)
        for lo in range(0, n, per):
            m = min(per, n - lo)
            data = rng.integers(0, 256, size=m * BLOB_BYTES, dtype=np.uint8)
            offsets = np.arange(m + 1, dtype=np.int32) * BLOB_BYTES
            blobs = pa.Array.from_buffers(pa.binary(), m, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
            yield pa.record_batch([pa.array(np.arange(lo, lo + m, dtype=np.uint64)), blobs], schema=schema)

    import lance

    _cat, t = conch_table(S.fresh(work / "w8" / "conch"), "blobs")
    t.write(pa.RecordBatchReader.from_batches(schema, batches()), progress=False)
    lds = lance.write_dataset(pa.RecordBatchReader.from_batches(schema, batches()), str(S.fresh(work / "w8" / "lance")))

    def drain(it: Any) -> pa.Table:
        rows = nbytes = 0
        for b in it:
            rows += b.num_rows
            nbytes += b.column(b.schema.get_field_index("audio")).nbytes
        return pa.table({"rows": [rows], "bytes": [nbytes]})

    case = f"stream {n * BLOB_BYTES / 1e9:.1f} GB of 20 KB blobs"
    secs_c, secs_l, out_c, out_l = S.interleaved(
        lambda: drain(t.scan("audio").to_record_batches()), lambda: drain(lds.to_batches(columns=["audio"])), reps
    )
    for sys_name, secs, out in (("conch", secs_c, out_c), ("lance", secs_l, out_l)):
        rows = out.column("rows")[0].as_py()
        assert rows == n, (sys_name, rows, n)
        rec.add("8", case, sys_name, secs, rows=rows, gb_per_s=round(n * BLOB_BYTES / secs / 1e9, 2))


# ----- report -----------------------------------------------------------------------------------------
SYSTEMS = ["conch", "parquet", "parquet-tuned", "lance", "delta", "duckdb"]


def table(rows: list[dict[str, Any]]) -> str:
    cases: dict[tuple[str, str], dict[str, float | None]] = {}
    for r in rows:
        cases.setdefault((r["workload"], r["case"]), {})[r["system"]] = r["seconds"]
    head = f"| # | case | {' | '.join(SYSTEMS)} |"
    lines = [head, "|---|---|" + "---:|" * len(SYSTEMS)]
    for (wl, case), by in cases.items():
        base = by.get("conch")
        cells = []
        for s in SYSTEMS:
            v = by.get(s)
            if v is None:
                cells.append("–")
            elif s == "conch" or not base:
                cells.append(f"{v * 1000:.1f} ms")
            else:
                cells.append(f"{v * 1000:.1f} ms ({v / base:.1f}×)")
        lines.append(f"| {wl} | {case} | {' | '.join(cells)} |")
    return "\n".join(lines)


def chart(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases: dict[str, dict[str, float]] = {}
    for r in rows:
        if r["seconds"] is not None:
            cases.setdefault(f"{r['workload']}: {r['case']}", {})[r["system"]] = r["seconds"]
    cases = {c: by for c, by in cases.items() if "conch" in by and len(by) > 1}
    fig, ax = plt.subplots(figsize=(12, 0.55 * max(4, len(cases)) + 2))
    others = [s for s in SYSTEMS if s != "conch"]
    h = 0.8 / len(others)
    for j, s in enumerate(others):
        ys, xs = [], []
        for i, by in enumerate(cases.values()):
            if s in by:
                ys.append(i + j * h)
                xs.append(by[s] / by["conch"])
        ax.barh(ys, xs, height=h, label=s)
    ax.axvline(1.0, color="black", lw=1)
    ax.set_xscale("log")
    ax.set_yticks([i + 0.4 - h / 2 for i in range(len(cases))], list(cases), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time relative to Conch (log scale; > 1 = Conch faster)")
    ax.legend(fontsize=8)
    ax.set_title("Conch vs alternatives, median wall time, warm cache, 2 cores")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every row count (1 = issue 5 sizes)")
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions per measurement (median)")
    ap.add_argument(
        "--only",
        default="1,2,3,4,5,6,7,8,commit,runs,memory,loaders,gpu_loader,compaction,writes,selective,b,tpch",
        help="workloads to run, e.g. 4,5,loaders (8: blob streaming; b: backends; commit: one-row commit latency "
        "vs Lance and Delta; runs: issue 11's many-runs rows with peak RSS; compaction: bench/compaction.py; "
        "memory: peak RSS vs Lance as keys grow, bench/memory.py; writes: bulk load, wide table, write "
        "amplification, bench/writes.py; selective: spec/001's 1 %% scan and a take vs Lance, bench/selective.py; tpch: TPC-H in DuckDB and Spark vs Parquet, bench/tpch.py, SF 0.1 "
        "and 1 (SF 0.1 only, one timed run, with --scale below 1 or as tpch-quick)); bench/goals.py's table of "
        "issues 10 and 11's goals closes every run",
    )
    ap.add_argument("--memory-rows", default="10M,50M,100M", help="row counts of `--only memory` (times --scale)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/conch-bench"), help="scratch directory for data")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    only = set(args.only.split(","))
    args.work.mkdir(parents=True, exist_ok=True)
    rec = Recorder()
    t0 = time.perf_counter()
    print(f"conch bench: scale={args.scale} reps={args.reps}; {S.fs_cache_note()}; {S.cpu_count()} CPUs")
    if only & {"1", "2", "3"}:
        w1_w2_w3(args.work, args.scale, args.reps, rec)
    for wl, fn in (("4", w4), ("5", w5), ("6", w6), ("7", w7), ("8", w8)):
        if wl in only:
            fn(args.work, args.scale, args.reps, rec)
            shutil.rmtree(args.work / f"w{wl}", ignore_errors=True)
    if "commit" in only:  # the fixed cost of a commit: one-row appends vs Lance and Delta
        from bench import commit_latency

        commits = max(20, int(200 * args.scale))
        for system, r in commit_latency.one_row(args.work / "commit", commits).items():
            rec.add("8", "one-row commit (median)", system, r["median"], p90_ms=round(r["p90"] * 1e3, 2))
        # group commit: one-row commits from writer threads of one process (seconds per commit)
        for n, r in commit_latency.concurrent(args.work / "commit" / "threads", (1, 8), max(10, commits // 5)).items():
            rec.add(
                "8",
                f"one-row commits from {n} thread(s)",
                "conch",
                1 / r["commits_per_s"],
                commits_per_s=round(r["commits_per_s"], 1),
                entries_per_append=round(r["entries_per_append"], 2),
            )
        shutil.rmtree(args.work / "commit", ignore_errors=True)
    if "runs" in only:  # tables before compaction vs Lance, peak RSS per subprocess: bench/results/runs.json
        from bench import runs

        runs.run(args.work / "runs", args.scale, args.reps, args.out)
        shutil.rmtree(args.work / "runs", ignore_errors=True)
    if "memory" in only:  # peak RSS of write/scan/take vs Lance as keys grow: bench/results/memory.json
        from bench import memory

        rows = [max(10_000, int(n * args.scale)) for n in memory.parse_rows(args.memory_rows)]
        memory.run(args.work / "memory", rows, args.out)
    if "loaders" in only:  # data loaders, Polars/DuckDB pushdown: bench/results/loaders.json
        from bench import loaders

        loaders.run(args.work / "loaders", args.scale, args.reps, args.out)
    if "gpu_loader" in only:  # feeding a GPU (issue 22), on CUDA where there is one: bench/results/gpu_loader.json
        from bench import gpu_loader

        gpu_loader.run(args.work / "gpu_loader", args.scale, args.reps, args.out)
    if "compaction" in only:  # the LSM tree maintained, vs Lance and Delta: bench/results/compaction.json
        from bench import compaction

        compaction.run(args.work / "compaction", args.scale, args.reps, args.out)
        from bench import minor_compaction  # minor vs major compaction as data bytes grow

        for payload in (100, 2_000, 20_000):
            print(minor_compaction.measure(max(int(20_000 * args.scale), 2_000), payload))
    if "writes" in only:  # issue 24: bulk load (time, peak RSS), wide table, write amplification
        from bench import writes

        writes.main(
            [
                "--keys", str(max(100_000, int(5_000_000 * args.scale))),
                "--wide-rows", str(max(5_000, int(100_000 * args.scale))),
                "--reps", str(args.reps),
                "--amp-scale", str(min(1.0, args.scale)),
                "--work", str(args.work / "writes"),
                "--out", str(args.out),
            ]
        )  # fmt: skip
    if "selective" in only:  # issue 24: spec/001's 1 % blob scan and a 20-50-key take vs Lance
        from bench import selective

        selective.main(
            ["--scale", str(args.scale), "--reps", str(max(20, args.reps)), "--work", str(args.work / "selective"),
             "--out", str(args.out / "selective.json")]
        )  # fmt: skip
        shutil.rmtree(args.work / "selective", ignore_errors=True)
    if "b" in only:  # backends: metastores' commits, local vs S3 scans (bench/backends.py)
        from bench import backends

        doc_b = backends.run(rows=max(int(5000 * args.scale), 500), reps=args.reps)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "backends.json").write_text(json.dumps(doc_b, indent=1))
    if only & {"tpch", "tpch-quick"}:  # TPC-H, DuckDB and Spark over Conch vs Parquet: bench/results/tpch.json
        from bench import tpch

        quick = "tpch-quick" in only or args.scale < 1
        tpch.run(
            args.work / "tpch",
            Path("/tmp/conch-tpch"),
            Path("/tmp/tpchgen"),
            [0.1] if quick else [0.1, 1.0],
            ["duckdb", "spark"],
            [0.1],
            1 if quick else args.reps,
            None,
            args.out,
        )
    total = time.perf_counter() - t0
    if rec.rows:  # else only the loader or compaction benchmarks ran: keep scan.json as it is
        write_scan(rec, args, total)
    from bench import goals  # issue 11's goals from every result file there is

    goals.report(args.out)


def write_scan(rec: Recorder, args: argparse.Namespace, total: float) -> None:
    print()
    print(table(rec.rows))
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {
        "scale": args.scale,
        "reps": args.reps,
        "cache": S.fs_cache_note(),
        "machine": S.machine(),
        "total_seconds": round(total, 1),
        "results": rec.rows,
    }
    (args.out / "scan.json").write_text(json.dumps(doc, indent=1))
    chart(rec.rows, args.out / "scan.png")
    print(f"\nwrote {args.out / 'scan.json'} and {args.out / 'scan.png'} in {total:.0f} s")


if __name__ == "__main__":
    main()
