"""Automatic compaction, measured (issue 10 item 6): reads after many small commits with the
default policy, as a ratio to the same rows written once; ingest cost and write amplification.

    .venv/bin/python bench/auto_compaction.py [--commits 500 3000] [--repeat 7] [--rows 1]

Workloads: `append` (`--rows` rows per commit, keys in time order) and `upsert` (random keys
over a key range of the commit count × rows, so about a third are updates). Reads: a full scan,
a 1 % value filter and a take of 50 random keys, each alternated rep by rep with the same query
on the rows written once (median wall and CPU time, ratio of the medians), in three states of the
default-policy table: right after the last commit (the background settle postponed, so what a
reader sees while the writer is still writing), settled (`Table.wait_for_maintenance()`, what a
reader sees once the writer paused for `Policy.settle_after`) and after `Table.compact()`.
Results: bench/results/auto_compaction.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

import conch
from conch.log.wal import AddFragment, AddKeySpace


def _keys(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    return np.arange(n, dtype=np.uint64) if kind == "append" else rng.integers(0, n, n).astype(np.uint64)


def _ingest(path: Path, keys: np.ndarray, policy: conch.Policy, rows: int = 1) -> tuple[conch.Table, float, float]:
    """The table (`rows` keys per commit; a key repeated within a commit keeps its last row),
    and the ingest's wall and CPU seconds (CPU: less noisy on a shared machine)."""
    t = conch.connect(path, maintenance=policy).create_table("t", [("id", pa.uint64())])
    x = np.random.default_rng(7).random(len(keys))
    start, cpu = time.perf_counter(), time.process_time()
    for lo in range(0, len(keys), rows):
        last = {int(k): i for i, k in enumerate(keys[lo : lo + rows], lo)}
        idx = list(last.values())
        t.write(pa.table({"id": pa.array(list(last), pa.uint64()), "x": x[idx], "s": [f"row {i}" for i in idx]}))
    return t, time.perf_counter() - start, time.process_time() - cpu


def _once(path: Path, keys: np.ndarray) -> conch.Table:
    x = np.random.default_rng(7).random(len(keys))
    last = {int(k): i for i, k in enumerate(keys)}  # the fresh row of each key
    ids = np.array(sorted(last), dtype=np.uint64)
    rows = [last[int(k)] for k in ids]
    t = conch.connect(path, maintenance=conch.Policy(auto=False)).create_table("t", [("id", pa.uint64())])
    t.write(pa.table({"id": ids, "x": x[rows], "s": [f"row {i}" for i in rows]}))
    return t


def _interleaved(a: Callable[[], object], b: Callable[[], object], repeat: int) -> tuple[float, ...]:
    """Median wall and CPU seconds of `a` and of `b`, run alternately after a warm-up each (as a
    reader that scans repeatedly would), so a load burst on the shared machine hits both."""
    a(), b()
    walls: tuple[list[float], list[float]] = ([], [])
    cpus: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for fn, w, c in ((a, walls[0], cpus[0]), (b, walls[1], cpus[1])):
            s, p = time.perf_counter(), time.process_time()
            fn()
            w.append(time.perf_counter() - s)
            c.append(time.process_time() - p)
    m = statistics.median
    return m(walls[0]), m(walls[1]), m(cpus[0]), m(cpus[1])


def _reads(t: conch.Table, once: conch.Table, repeat: int, take_keys: list[int]) -> dict[str, tuple[float, ...]]:
    """Query → (wall of `t`, wall of `once`, CPU of `t`, CPU of `once`), medians."""
    queries: dict[str, Callable[[conch.Table], object]] = {
        "full": lambda x: x.scan().to_arrow(),
        "filter 1%": lambda x: x.scan(where=x["x"] < 0.01).to_arrow(),
        "take 50": lambda x: x.scan(keys=take_keys).to_arrow(),
    }
    return {q: _interleaved(lambda f=f: f(t), lambda f=f: f(once), repeat) for q, f in queries.items()}


def _bytes(t: conch.Table, kinds: tuple[str, ...]) -> int:
    total = 0
    for _, _, e in t.log.entries():
        if e.kind in kinds:
            for op in e.ops:
                if isinstance(op, AddKeySpace):
                    total += op.key_space.bytes
                elif isinstance(op, AddFragment):
                    total += op.fragment.bytes
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, nargs="+", default=[500, 3000])
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--rows", type=int, default=1, help="rows per commit")
    ap.add_argument("--workloads", nargs="+", default=["append", "upsert"])
    ap.add_argument("--l0-trigger", type=int, default=conch.Policy().l0_trigger)
    ap.add_argument("--read-overhead", type=float, default=conch.Policy().read_overhead)
    ap.add_argument("--out", type=Path, default=Path("bench/results/auto_compaction.json"))
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    # the default policy, its settle postponed so "right after" is what a reader sees mid-ingest
    policy = conch.Policy(l0_trigger=args.l0_trigger, read_overhead=args.read_overhead, settle_after=3600)
    print(f"policy: {policy}; load average {os.getloadavg()[0]:.1f}")
    results = []
    for n in args.commits:
        for kind in args.workloads:
            keys = _keys(kind, n * args.rows, rng)
            take = [int(k) for k in rng.choice(np.unique(keys), 50, replace=False)]
            with tempfile.TemporaryDirectory() as d:
                auto, t_auto, cpu_auto = _ingest(Path(d) / "auto", keys, policy, args.rows)
                _, t_off, cpu_off = _ingest(Path(d) / "off", keys, conch.Policy(auto=False), args.rows)
                once = _once(Path(d) / "once", keys)
                assert auto.scan().to_arrow().equals(once.scan().to_arrow())
                ingested = _bytes(auto, ("write",))
                amp = _bytes(auto, ("compact",)) / max(ingested, 1)
                compactions = sum(1 for c in auto.history() if c.kind == "compact")
                print(
                    f"\n{kind} × {n} commits of {args.rows} row(s): ingest {t_auto:.2f}s with auto "
                    f"({n / t_auto:.0f} commits/s) vs {t_off:.2f}s off ({t_auto / t_off:.2f}×; CPU {cpu_auto:.2f}s vs "
                    f"{cpu_off:.2f}s, {cpu_auto / cpu_off:.2f}×); {compactions} compactions; write amplification "
                    f"{amp:.1f}× ({ingested:,} B ingested)"
                )
                row: dict[str, object] = {"workload": kind, "commits": n, "rows_per_commit": args.rows}
                row |= {"ingest_s": t_auto, "ingest_cpu_s": cpu_auto, "ingest_off_cpu_s": cpu_off, "write_amp": amp}
                for state in ("right after the last commit", "settled", "compacted"):
                    if state == "settled":
                        auto.wait_for_maintenance()
                    elif state == "compacted":
                        auto.compact()
                    plan = auto.maintenance_plan()
                    frags = len(auto.state().fragments)
                    print(f"  {state}: {plan.l0_runs} L0 + {plan.l1_runs} L1 runs, {frags} fragments")
                    reads = _reads(auto, once, args.repeat, take)
                    row[state] = {"l0": plan.l0_runs, "l1": plan.l1_runs, "reads": reads}
                    for read, (w, w1, c, c1) in reads.items():
                        print(
                            f"    {read:10s} once {w1 * 1000:7.2f} ms   auto {w * 1000:7.2f} ms   "
                            f"ratio {w / w1:.2f}× (CPU {c / c1:.2f}×)"
                        )
                results.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"load_average": os.getloadavg()[0], "results": results}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
