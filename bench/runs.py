"""Issue 11's many-runs and memory rows: Conch vs Lance on tables *before* compaction, each
measurement in its own subprocess so its peak RSS is its own (`python -m bench --only runs`).

Shapes (u64 key + two f64 columns, the same data for both systems):

- `appends K`: K time-ordered appends of `rows` keys each (disjoint key ranges: one L0 run per
  commit). Lance: K `mode="append"` writes (one fragment per commit).
- `large + 8 small`: one run of `n` keys (even keys), then 8 commits of `n/100` random keys
  (about half of them new: inserts, the rest upserts of both columns). Lance: the base, then 8
  `merge_insert` upserts.
- `large + K partial`: one run of `n` keys, then K commits rewriting column `a` on `n/1000` random
  keys (partial-column upserts). Lance: K `merge_insert` updates of `a`.

Per shape: full scan and a 1 % value filter (`a < 0.01`), median of `reps` runs after a warm-up,
in a fresh process per (system, shape, query); peak RSS is that process's `VmHWM` (it includes
the interpreter and imports: ~100-150 MB). Results: `bench/results/runs.json`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import pyarrow as pa

from bench.rss import peak_rss


def _tables(shape: str, n: int, k: int, rows: int) -> list[tuple[str, pa.Table]]:
    """The commits of a shape: (kind, table) with kind "base", "append" or "upsert"."""
    rng = np.random.default_rng(11)
    out: list[tuple[str, pa.Table]] = []
    if shape == "appends":
        for i in range(k):
            ids = np.arange(i * rows, (i + 1) * rows, dtype=np.uint64)
            out.append(("append", pa.table({"id": ids, "a": rng.random(rows), "b": rng.random(rows)})))
        return out
    ids = np.arange(0, 2 * n, 2, dtype=np.uint64)
    out.append(("base", pa.table({"id": ids, "a": rng.random(n), "b": rng.random(n)})))
    for _ in range(k):
        if shape == "small":
            m = max(1, n // 100)
            sub = np.sort(rng.choice(2 * n, m, replace=False)).astype(np.uint64)
            out.append(("upsert", pa.table({"id": sub, "a": rng.random(m), "b": rng.random(m)})))
        else:
            m = max(1, n // 1000)
            sub = np.sort(rng.choice(n, m, replace=False)).astype(np.uint64) * 2
            out.append(("upsert", pa.table({"id": sub, "a": rng.random(m)})))
    return out


def build(system: str, shape: str, path: Path, n: int, k: int, rows: int) -> None:
    commits = _tables(shape, n, k, rows)
    if system == "conch":
        import conch

        # the shapes are tables *before* compaction: automatic maintenance would measure after it
        t = conch.connect(path, maintenance=conch.Policy(auto=False)).create_table("t", [("id", pa.uint64())])
        for _kind, tbl in commits:
            t.write(tbl)
        return
    import lance

    uri = str(path / "lance")
    ds = None
    for kind, tbl in commits:
        if ds is None:
            ds = lance.write_dataset(tbl, uri)
        elif kind == "append":
            ds = lance.write_dataset(tbl, uri, mode="append")
        elif "b" in tbl.column_names:
            ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(tbl)
        else:
            ds.merge_insert("id").when_matched_update_all().execute(tbl)


def measure(system: str, path: Path, query: str, reps: int) -> dict[str, Any]:
    """In this process: median seconds of `query` ("full" or "filter") and peak RSS."""
    if system == "conch":
        import conch

        t = conch.connect(path).table("t")

        def run() -> pa.Table:
            return (t.scan() if query == "full" else t.scan(where=t["a"] < 0.01)).to_arrow()
    else:
        import lance

        ds = lance.dataset(str(path / "lance"))

        def run() -> pa.Table:
            return ds.to_table() if query == "full" else ds.to_table(filter="a < 0.01")

    out = run()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
    return {"seconds": median(times), "rows": out.num_rows, "peak_rss": peak_rss()}


def run(work: Path, scale: float, reps: int, out: Path) -> list[dict[str, Any]]:
    """Build every shape for both systems and measure each query in a subprocess."""
    n = max(1000, int(1_000_000 * scale))
    rows = 1000
    shapes = [
        ("appends", f"{max(2, int(100 * scale))} appends", max(2, int(100 * scale))),
        ("appends", f"{max(2, int(1000 * scale))} appends", max(2, int(1000 * scale))),
        ("small", "large + 8 small runs", 8),
        ("partial", f"large + {max(2, int(100 * scale))} partial upserts", max(2, int(100 * scale))),
    ]
    results: list[dict[str, Any]] = []
    for shape, label, k in shapes:
        for system in ("conch", "lance"):
            path = work / f"{shape}{k}_{system}"
            if path.exists():
                shutil.rmtree(path)
            path.mkdir(parents=True)
            t0 = time.perf_counter()
            build(system, shape, path, n, k, rows)
            build_s = time.perf_counter() - t0
            for query in ("full", "filter"):
                cmd = [sys.executable, "-m", "bench.runs", "measure", system, str(path), query, str(reps)]
                got = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
                row = {"case": label, "query": query, "system": system, "build_s": round(build_s, 2), **got}
                results.append(row)
                print(
                    f"  runs {label:<28} {query:<6} {system:<6} {got['seconds'] * 1000:9.1f} ms "
                    f"rows={got['rows']} peak_rss={got['peak_rss'] / 2**20:.0f} MB build={build_s:.1f}s",
                    flush=True,
                )
    print()
    print("| case | query | conch | lance | conch / lance | conch RSS | lance RSS |")
    print("|---|---|---:|---:|---:|---:|---:|")
    by = {(r["case"], r["query"], r["system"]): r for r in results}
    for _shape, label, _k in shapes:
        for query in ("full", "filter"):
            c, ln = by[(label, query, "conch")], by[(label, query, "lance")]
            print(
                f"| {label} | {query} | {c['seconds'] * 1000:.1f} ms | {ln['seconds'] * 1000:.1f} ms | "
                f"{c['seconds'] / ln['seconds']:.2f}× | {c['peak_rss'] >> 20} MB | {ln['peak_rss'] >> 20} MB |"
            )
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.json").write_text(json.dumps({"scale": scale, "reps": reps, "results": results}, indent=1))
    return results


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "measure":
        _, _, system, path, query, reps = sys.argv
        print(json.dumps(measure(system, Path(path), query, int(reps))))
    else:
        run(Path("/tmp/conch-bench/runs"), float(sys.argv[1]) if len(sys.argv) > 1 else 1.0, 3, Path("bench/results"))
