"""`compact()` before and after a change, side by side: `python -m bench.compacted --before PATH`.

For each family and size of `bench.lsm_shapes` (the default policy, its background settle off
while writing), the same history is ingested by this checkout and by the one at `--before`
(each in a child with its own `PYTHONPATH`), optionally settled (`--settle`), then `compact()`ed
by that code; the parent reads both tables and the rows written once, interleaved rep by rep
(full scan, 1 % filter, 50-key take: medians as ratios to once). Printed per side: the runs
`compact()` leaves, whether a second `compact()` commits anything (it should not), its seconds
and bytes written. Results in `bench/results/compacted.json`.

Why a bench of its own: `lsm_shapes` measures `compact()` after the settle, which on most
shapes leaves nothing for it to do; this one also measures it right after the last commit.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import bench.systems as S


def _child(path: str, settle: bool) -> dict[str, Any]:
    import conch

    t = conch.connect(path).table("t")
    if settle:
        t.wait_for_maintenance()
    seen = len(t.history())
    t0 = time.perf_counter()
    done = t.compact()
    wall = time.perf_counter() - t0
    plan = t.maintenance_plan()
    history = [f"{c.kind} {c.summary}" for c in t.history()[seen:]]
    seen = len(t.history())
    t.compact()
    return {
        "compact_s": round(wall, 2),
        "compact_mb": round(done.bytes_written / 2**20, 2),
        "runs": [plan.l0_runs, plan.l1_runs],
        "history": history,
        "second_commits": len(t.history()) - seen,
    }


def run(work: Path, family: str, n: int, commits: int, reps: int, before: Path, settle: bool) -> list[dict[str, Any]]:
    import conch
    from bench.lsm_shapes import _queries

    here = work / family / str(n)
    code = {"after": None, "before": {"PYTHONPATH": f"{before / 'src'}:."}}
    off, once = S.fresh(here / "auto-off"), S.fresh(here / "once")
    S.child_json("bench.lsm_shapes", ["auto-off", family, str(off), str(n), str(commits), str(off)])
    S.child_json("bench.lsm_shapes", ["once", family, str(once), str(n), str(commits), str(off)])
    got: dict[str, dict[str, Any]] = {}
    for side, env in code.items():
        path = S.fresh(here / side)
        S.child_json("bench.lsm_shapes", ["default", family, str(path), str(n), str(commits), str(off)], env)
        got[side] = S.child_json("bench.compacted", [str(path), str(settle)], env)
    tables = {s: conch.connect(here / s, maintenance=conch.Policy(auto=False)).table("t") for s in [*code, "once"]}
    queries = _queries(tables["once"])
    times: dict[tuple[str, str], list[float]] = {(s, q): [] for s in tables for q in queries}
    for f in queries.values():  # warm every table's caches once
        for t in tables.values():
            f(t)
    for _ in range(reps):
        for q, f in queries.items():
            for s, t in tables.items():
                t0 = time.perf_counter()
                f(t)
                times[(s, q)].append(time.perf_counter() - t0)
    med = {k: float(np.median(v)) for k, v in times.items()}
    out = []
    for side in code:
        ratios = {q: round(med[(side, q)] / med[("once", q)], 2) for q in queries}
        out.append({"family": family, "keys": n, "side": side, "settled_first": settle, **got[side], "ratios": ratios})
        r = out[-1]
        print(
            f"  {family:<8} {n:>10,} {side:<7} L0/L1 {r['runs'][0]}/{r['runs'][1]:<4} second: {r['second_commits']} "
            f"commit(s)  {r['compact_s']:6.2f} s {r['compact_mb']:7.2f} MB  "
            f"{ratios['full']:.2f}/{ratios['filter']:.2f}/{ratios['take']:.2f}  {' | '.join(r['history'])}",
            flush=True,
        )
    shutil.rmtree(here, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.compacted", description=__doc__)
    ap.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--before", type=Path, help="another checkout: its compact() beside this one")
    ap.add_argument("--families", default="ingest,partial,upserts")
    ap.add_argument("--sizes", default="200000,1000000")
    ap.add_argument("--commits", type=int, default=100)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--settle", action="store_true", help="settle (wait_for_maintenance) before compact()")
    ap.add_argument("--work", type=Path, default=Path("/tmp/conch-bench-compacted"))
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child[0], args.child[1] == "True")))
        return
    if args.before is None:
        sys.exit("--before PATH is required: the checkout to compare with")
    started = time.perf_counter()
    print("  family         keys side    runs after  second compact()  compact() s, MB  full/1%/take ÷ once  history")
    rows = []
    for family in args.families.split(","):
        for n in (int(s) for s in args.sizes.split(",")):
            rows += run(args.work, family, n, args.commits, args.reps, args.before.resolve(), args.settle)
    S.write_results(args.out, "compacted.json", args, rows, started)


if __name__ == "__main__":
    main()
