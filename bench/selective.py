"""Issue 24 item 4: spec/001's selective blob scan and a take of 20–50 keys, Conch vs Lance side by
side (`python -m bench.selective`); results in `bench/results/selective.json`.

- **scan**: workload 4 of `python -m bench`: `scale` × 50,000 records of 20 KB audio blobs, the
  metadata (`silence_ratio`, `audio_length`) and the audio written as separate column groups and
  commits (spec/001), read as `scan(t["audio.bytes"], where=t["silence_ratio"] < x)`; Lance:
  `to_table(columns=["id", "audio_bytes"], filter="silence_ratio < x")`.
- **take**: workload 5: `scale` × 1M records of 1 KB strings, 20–50 random keys per query;
  Conch `scan(keys=q)`, Lance `take(q)` (the key is the row position).

Conch and Lance alternate call by call (a load burst on the shared machine hits both), after a
warm-up (the scan once, every take query once: warm page cache); every figure is the median over `reps` calls of wall time (`perf_counter`) and CPU
time (`process_time`). `--profile` prints cProfile's top functions of Conch's calls and the number
of Python function calls per query. The data is built once under `--work` and reused while its
parameters match (`--rebuild` to force).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import conch
from bench import systems as S

RESULTS = Path(__file__).parent / "results"
BLOB = 20_000
SELECTIVITY = 0.01


def _built(root: Path, tag: str) -> bool:
    return (root / "built").exists() and (root / "built").read_text() == tag


def build_scan(work: Path, scale: float, rebuild: bool) -> tuple[conch.Catalog, conch.Table, Any]:
    import lance

    n = int(50_000 * scale)
    root = work / "scan"
    tag = f"scan n={n} blob={BLOB} v1"
    if rebuild or not _built(root, tag):
        data = S.audio_table(n, BLOB)
        S.fresh(root)
        cat = conch.connect(root / "conch")
        t = cat.create_table("audio", [("id", pa.uint64())])
        t.write(data.select(["id", "silence_ratio", "audio_length"]))
        audio = pa.StructArray.from_arrays([data.column("audio_bytes").combine_chunks().cast(pa.binary())], ["bytes"])
        t.write(pa.table({"id": data.column("id"), "audio": audio}))
        del audio
        S.lance_write(data.select(["id", "silence_ratio", "audio_length", "audio_bytes"]), root / "lance")
        (root / "built").write_text(tag)
    cat = conch.connect(root / "conch")
    return cat, cat.table("audio"), lance.dataset(str(root / "lance"))


def build_take(work: Path, scale: float, rebuild: bool) -> tuple[conch.Table, Any, int]:
    import lance

    n = int(1_000_000 * scale)
    root = work / "take"
    tag = f"take n={n} v1"
    if rebuild or not _built(root, tag):
        rng = np.random.default_rng(5)
        data = pa.table({"id": pa.array(np.arange(n, dtype=np.uint64)), "s": S.strings(rng, n, 1024)})
        S.fresh(root)
        cat = conch.connect(root / "conch")
        cat.create_table("strings", [("id", pa.uint64())]).write(data)
        S.lance_write(data, root / "lance")
        (root / "built").write_text(tag)
    return conch.connect(root / "conch").table("strings"), lance.dataset(str(root / "lance")), n


PARQUET_REPS = 3
SHAPES = ((20_000, 20_000), (50_000, 20_000), (200_000, 1_000))  # issue 30: rows × blob bytes


def build_shape(work: Path, n: int, blob: int, rebuild: bool) -> tuple[conch.Catalog, conch.Table, Any, Path]:
    """spec/001's shape at `n` rows of `blob`-byte audio: Conch (metadata in one commit, the
    `audio` group in another), Lance (one dataset) and Parquet (one file, 1k-row row groups with
    a page index: tuned for selective reads and takes)."""
    import lance
    import pyarrow.parquet as pq

    root = work / f"shape-{n}x{blob}"
    tag = f"shape n={n} blob={blob} v1"
    if rebuild or not _built(root, tag):
        data = S.audio_table(n, blob)
        S.fresh(root)
        cat = conch.connect(root / "conch")
        t = cat.create_table("audio", [("id", pa.uint64())])
        t.write(data.select(["id", "silence_ratio", "audio_length"]))
        audio = pa.StructArray.from_arrays([data.column("audio_bytes").combine_chunks().cast(pa.binary())], ["bytes"])
        t.write(pa.table({"id": data.column("id"), "audio": audio}))
        del audio
        t.wait_for_maintenance()
        flat = data.select(["id", "silence_ratio", "audio_length", "audio_bytes"])
        S.lance_write(flat, root / "lance")
        pq.write_table(flat, root / "data.parquet", row_group_size=1024, write_page_index=True)
        (root / "built").write_text(tag)
    cat = conch.connect(root / "conch")
    return cat, cat.table("audio"), lance.dataset(str(root / "lance")), root / "data.parquet"


Case = tuple[dict[str, Callable[[int], Any]], Callable[[int], int]]  # the systems' calls, the rows each returns


def shape_cases(work: Path, n: int, blob: int, reps: int, rebuild: bool) -> dict[str, Case]:
    """The three read cases of one shape: spec/001's 1 % blob scan and takes of 20 and 50
    random keys (`reps` queries each), per system."""
    import pyarrow.parquet as pq

    cat, t, lds, pqpath = build_shape(work, n, blob, rebuild)
    pf = pq.ParquetFile(pqpath)
    spans = row_group_spans(pf)
    x = SELECTIVITY
    expected = int(pc.less(pf.read(columns=["silence_ratio"]).column(0), x).to_numpy().sum())
    # Lance at its fastest: unordered (Conch returns key order; in order, Lance took 2.6× longer)
    scan: dict[str, Callable[[int], Any]] = {
        "conch": lambda i: cat.scan(t["audio.bytes"], where=t["silence_ratio"] < x).to_arrow(),
        "lance": lambda i: lds.to_table(
            columns=["id", "audio_bytes"], filter=f"silence_ratio < {x}", scan_in_order=False
        ),
        "parquet": lambda i: pq.read_table(pqpath, columns=["id", "audio_bytes"], filters=[("silence_ratio", "<", x)]),
    }
    cases: dict[str, Case] = {"1% blob scan": (scan, lambda i: expected)}
    rng = np.random.default_rng(n)
    for k in (20, 50):
        qs = [np.sort(rng.choice(n, size=k, replace=False)).tolist() for _ in range(reps)]
        take: dict[str, Callable[[int], Any]] = {
            "conch": lambda i, qs=qs: t.scan("audio.bytes", keys=qs[i]).to_arrow(),
            "lance": lambda i, qs=qs: lds.take(qs[i], columns=["id", "audio_bytes"]),
            "parquet": lambda i, qs=qs: parquet_take(pf, spans, qs[i]),
        }
        cases[f"{k}-key take"] = (take, lambda i, k=k: k)
    return cases


def read_shapes(
    work: Path, reps: int, rebuild: bool = False, shapes: tuple[tuple[int, int], ...] = SHAPES
) -> list[dict[str, Any]]:
    """Issue 30's read matrix: per shape, spec/001's 1 % blob scan and takes of 20 and 50 random
    keys, Conch, Lance and Parquet alternated call by call (medians of wall and CPU ms)."""
    out: list[dict[str, Any]] = []
    for n, blob in shapes:
        for case, (fns, rows) in shape_cases(work, n, blob, reps, rebuild).items():

            def check(s: str, i: int, got: Any, case: str = case, rows: Callable[[int], int] = rows) -> None:
                assert got.num_rows == rows(i), (case, s, got.num_rows, rows(i))

            warm = reps if "take" in case else 1  # every take query once: its values in the page cache
            # Parquet is 10-300x off and reads whole row groups (a 20-key take: ~20 of 20 MB each):
            # timed on its own, a few calls, so the matrix runs in minutes
            res = alternate({s: f for s, f in fns.items() if s != "parquet"}, reps, check, warm=warm)
            res |= alternate({"parquet": fns["parquet"]}, min(reps, PARQUET_REPS), check)
            for s, r in res.items():
                row = {"rows": n, "blob_bytes": blob, "case": case, "system": s, **r}
                row["wall_vs_lance"] = round(r["wall_ms"] / res["lance"]["wall_ms"], 2)
                row["cpu_vs_lance"] = round(r["cpu_ms"] / max(res["lance"]["cpu_ms"], 1e-9), 2)
                out.append(row)
                print(
                    f"  {n:>8,} × {blob:>6,} B  {case:<14} {s:<8} {r['wall_ms']:9.2f} {r['cpu_ms']:9.2f}"
                    f"  {row['wall_vs_lance']:6.2f}x {row['cpu_vs_lance']:6.2f}x",
                    flush=True,
                )
    return out


def row_group_spans(pf: Any) -> np.ndarray:
    """(min, max) of `id` per row group of a Parquet file, from its footer statistics."""
    md = pf.metadata
    col = md.schema.to_arrow_schema().get_field_index("id")
    return np.array(
        [
            (md.row_group(g).column(col).statistics.min, md.row_group(g).column(col).statistics.max)
            for g in range(md.num_row_groups)
        ],
        dtype=np.int64,
    )


def parquet_take(pf: Any, spans: np.ndarray, keys: list[int]) -> pa.Table:
    """Parquet's best take: only the row groups whose `id` statistics hold a wanted key (what a
    reader with the footer's statistics does), then the rows of those keys."""
    k = np.asarray(keys, dtype=np.int64)
    at = np.searchsorted(spans[:, 1], k, "left")
    groups = sorted({int(g) for g, key in zip(at, k, strict=True) if g < len(spans) and spans[g, 0] <= key})
    t = pf.read_row_groups(groups, columns=["id", "audio_bytes"])
    return t.filter(pc.is_in(t.column("id"), value_set=pa.array(k, t.column("id").type)))


def print_before_after(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> None:
    """The matrix with both Conchs: each one's ms and its ratio to Lance timed beside it."""
    print(
        f"\n  {'shape':<21} {'case':<14} {'before ms':>9} {'÷lance':>7} {'after ms':>9} {'÷lance':>7}  (wall; CPU ÷lance)"
    )
    old = {(r["rows"], r["blob_bytes"], r["case"]): r for r in before if r["system"] == "conch"}
    for r in after:
        b = old.get((r["rows"], r["blob_bytes"], r["case"]))
        if r["system"] != "conch" or b is None:
            continue
        print(
            f"  {r['rows']:>8,} × {r['blob_bytes']:>6,} B  {r['case']:<14} {b['wall_ms']:9.2f} {b['wall_vs_lance']:6.2f}x"
            f" {r['wall_ms']:9.2f} {r['wall_vs_lance']:6.2f}x  (CPU {b['cpu_vs_lance']:.2f}x → {r['cpu_vs_lance']:.2f}x)"
        )


SHAPES_HEADER = f"  {'shape':<21} {'case':<14} {'system':<8} {'wall ms':>9} {'CPU ms':>9}  {'÷lance':>7} {'CPU÷':>6}"


def alternate(
    fns: dict[str, Callable[[int], Any]], reps: int, check: Callable[[str, int, Any], None], warm: int = 1
) -> dict[str, dict[str, float]]:
    """Median wall and CPU ms of each system's call `fn(i)` (query i), the systems alternating,
    after a warm-up of queries 0..warm-1 (warm page cache, as every workload of `bench`)."""
    wall: dict[str, list[float]] = {s: [] for s in fns}
    cpu: dict[str, list[float]] = {s: [] for s in fns}
    for i in range(warm):
        for s, fn in fns.items():
            check(s, i, fn(i))
    for i in range(reps):
        for s, fn in fns.items():
            c0, t0 = time.process_time(), time.perf_counter()
            out = fn(i)
            wall[s].append(time.perf_counter() - t0)
            cpu[s].append(time.process_time() - c0)
            check(s, i, out)
    return {s: {"wall_ms": median(wall[s]) * 1e3, "cpu_ms": median(cpu[s]) * 1e3} for s in fns}


def profile(name: str, fn: Callable[[int], Any], reps: int, top: int) -> dict[str, float]:
    """cProfile over `reps` calls: prints the top functions; returns calls per query."""
    pr = cProfile.Profile()
    pr.enable()
    for i in range(reps):
        fn(i)
    pr.disable()
    st = pstats.Stats(pr)
    calls = st.total_calls / reps  # type: ignore[attr-defined]
    print(f"\n--- cProfile of conch {name}: {calls:.0f} Python function calls per query ---")
    st.sort_stats("cumulative").print_stats(top)
    st.sort_stats("tottime").print_stats(top)
    return {"python_calls_per_query": round(calls)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.selective", description=__doc__)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--parts", default="scan,take", help="of: scan, take, shapes (issue 30's read matrix)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/conch-bench-selective"))
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--before", type=Path, default=None, help="shapes: another checkout's Conch run first, beside")
    ap.add_argument("--profile", action="store_true", help="cProfile Conch's calls (after the timed runs)")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--out", type=Path, default=RESULTS / "selective.json")
    ap.add_argument("--shapes-out", type=Path, default=RESULTS / "selective_shapes.json")
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    args.work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    load = os.getloadavg()
    print(f"bench.selective: scale={args.scale} reps={args.reps}; load average {load[0]:.2f}")

    if "shapes" in parts:
        out = args.shapes_out
        before: list[dict[str, Any]] = []
        if args.before is not None:  # the other checkout's Conch first, same data, same run
            print(f"Conch of {args.before}:", flush=True)
            tmp = out.with_name("selective_shapes-before.json")
            cmd = [sys.executable, "-m", "bench.selective", "--parts", "shapes", "--reps", str(args.reps)]
            cmd += ["--work", str(args.work), "--shapes-out", str(tmp)]
            env = {**os.environ, "PYTHONPATH": str(args.before / "src")}
            subprocess.run(cmd, env=env, check=True)
            before = json.loads(tmp.read_text())["rows"]
            print("this checkout's Conch:", flush=True)
        print(SHAPES_HEADER, flush=True)
        matrix = read_shapes(args.work, args.reps, args.rebuild)
        if before:
            print_before_after(before, matrix)
        out.parent.mkdir(parents=True, exist_ok=True)
        doc = {"reps": args.reps, "load_average": load, "machine": S.machine(), "rows": matrix, "before": before}
        out.write_text(json.dumps(doc, indent=2))
        print(f"wrote {out}")
        if not parts - {"shapes"}:
            return

    if "scan" in parts:
        cat, t, lds = build_scan(args.work, args.scale, args.rebuild)
        x = SELECTIVITY
        expected: dict[str, int] = {}

        def check(s: str, i: int, out: Any) -> None:
            expected.setdefault("rows", out.num_rows)
            assert out.num_rows == expected["rows"], (s, out.num_rows, expected)

        fns: dict[str, Callable[[int], Any]] = {
            "conch": lambda i: cat.scan(t["audio.bytes"], where=t["silence_ratio"] < x).to_arrow(),
            "lance": lambda i: lds.to_table(columns=["id", "audio_bytes"], filter=f"silence_ratio < {x}"),
        }
        res = alternate(fns, args.reps, check)
        extra: dict[str, Any] = {}
        if args.profile:
            extra = profile("scan", fns["conch"], args.reps, args.top)
        for s, r in res.items():
            rows.append({"case": f"audio.bytes where silence_ratio < {x}", "system": s, **r, "rows": expected["rows"]})
        rows[-2].update(extra)

    if "take" in parts:
        t5, lds5, n = build_take(args.work, args.scale, args.rebuild)
        rng = np.random.default_rng(5)
        qs = [np.sort(rng.choice(n, size=int(rng.integers(20, 51)), replace=False)).tolist() for _ in range(args.reps)]

        def check5(s: str, i: int, out: Any) -> None:
            assert out.num_rows == len(qs[i]), (s, out.num_rows, len(qs[i]))

        fns5: dict[str, Callable[[int], Any]] = {
            "conch": lambda i: t5.scan(keys=qs[i]).to_arrow(),
            "lance": lambda i: lds5.take(qs[i]),
        }
        # every query once before timing: the values it takes are in the page cache for both
        res = alternate(fns5, args.reps, check5, warm=args.reps)
        extra = {}
        if args.profile:
            extra = profile("take", fns5["conch"], args.reps, args.top)
        for s, r in res.items():
            rows.append({"case": "take 20-50 random keys", "system": s, **r})
        rows[-2].update(extra)

    print(f"\n{'case':<42} {'system':<6} {'wall ms':>8} {'cpu ms':>8}  ratio to lance (wall, cpu)")
    by = {(r["case"], r["system"]): r for r in rows}
    for r in rows:
        lance_r = by.get((r["case"], "lance"))
        ratio = ""
        if lance_r and r["system"] != "lance":
            ratio = f"  {r['wall_ms'] / lance_r['wall_ms']:.2f}x, {r['cpu_ms'] / max(lance_r['cpu_ms'], 1e-9):.2f}x"
        print(f"{r['case']:<42} {r['system']:<6} {r['wall_ms']:8.2f} {r['cpu_ms']:8.2f}{ratio}")
    doc = {
        "scale": args.scale,
        "reps": args.reps,
        "load_average": load,
        "load_average_after": os.getloadavg(),
        "machine": S.machine(),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
