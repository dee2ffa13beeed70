"""Automatic compaction, measured (issue 10 item 6): reads after many small commits with the
default policy, as a ratio to the same rows written once; ingest cost and write amplification.

    .venv/bin/python bench/auto_compaction.py [--commits 500 3000] [--repeat 7]

Workloads: `append` (one row per commit, keys in time order) and `upsert` (one row per commit,
random keys over a key range of the commit count, so about a third are updates). Reads: a full
scan, a 1 % value filter and a take of 50 random keys; each the median of `--repeat` runs.
"""

from __future__ import annotations

import argparse
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


def _ingest(path: Path, keys: np.ndarray, policy: conch.Policy) -> tuple[conch.Table, float, float]:
    """The table, and the ingest's wall and CPU seconds (CPU: less noisy on a shared machine)."""
    t = conch.connect(path, maintenance=policy).create_table("t", [("id", pa.uint64())])
    x = np.random.default_rng(7).random(len(keys))
    start, cpu = time.perf_counter(), time.process_time()
    for i, k in enumerate(keys):
        t.write(pa.table({"id": pa.array([k], pa.uint64()), "x": [float(x[i])], "s": [f"row {i}"]}))
    return t, time.perf_counter() - start, time.process_time() - cpu


def _once(path: Path, keys: np.ndarray) -> conch.Table:
    x = np.random.default_rng(7).random(len(keys))
    last = {int(k): i for i, k in enumerate(keys)}  # the fresh row of each key
    ids = np.array(sorted(last), dtype=np.uint64)
    rows = [last[int(k)] for k in ids]
    t = conch.connect(path, maintenance=conch.Policy(auto=False)).create_table("t", [("id", pa.uint64())])
    t.write(pa.table({"id": ids, "x": x[rows], "s": [f"row {i}" for i in rows]}))
    return t


def _median(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm the caches, as a reader that scans repeatedly would
    times = []
    for _ in range(repeat):
        s = time.perf_counter()
        fn()
        times.append(time.perf_counter() - s)
    return statistics.median(times)


def _reads(t: conch.Table, repeat: int, take_keys: list[int]) -> dict[str, float]:
    return {
        "full": _median(lambda: t.scan().to_arrow(), repeat),
        "filter 1%": _median(lambda: t.scan(where=t["x"] < 0.01).to_arrow(), repeat),
        "take 50": _median(lambda: t.scan(keys=take_keys).to_arrow(), repeat),
    }


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
    ap.add_argument("--workloads", nargs="+", default=["append", "upsert"])
    ap.add_argument("--l0-trigger", type=int, default=conch.Policy().l0_trigger)
    ap.add_argument("--read-overhead", type=float, default=conch.Policy().read_overhead)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    policy = conch.Policy(l0_trigger=args.l0_trigger, read_overhead=args.read_overhead)
    print(f"policy: {policy}")
    for n in args.commits:
        for kind in args.workloads:
            keys = _keys(kind, n, rng)
            take = [int(k) for k in rng.choice(np.unique(keys), 50, replace=False)]
            with tempfile.TemporaryDirectory() as d:
                auto, t_auto, cpu_auto = _ingest(Path(d) / "auto", keys, policy)
                _, t_off, cpu_off = _ingest(Path(d) / "off", keys, conch.Policy(auto=False))
                once = _once(Path(d) / "once", keys)
                assert auto.scan().to_arrow().equals(once.scan().to_arrow())
                r_once, r_auto = _reads(once, args.repeat, take), _reads(auto, args.repeat, take)
                plan = auto.maintenance_plan()
                ingested = _bytes(auto, ("write",))
                amp = _bytes(auto, ("compact",)) / max(ingested, 1)
                compactions = sum(1 for c in auto.history() if c.kind == "compact")
                print(
                    f"\n{kind} × {n} one-row commits: ingest {t_auto:.2f}s with auto ({n / t_auto:.0f} commits/s) vs "
                    f"{t_off:.2f}s off ({t_auto / t_off:.2f}×; CPU {cpu_auto:.2f}s vs {cpu_off:.2f}s, "
                    f"{cpu_auto / cpu_off:.2f}×); {compactions} compactions; write amplification "
                    f"{amp:.1f}× ({ingested:,} B ingested); end state {plan.l0_runs} L0 + {plan.l1_runs} L1 runs"
                )
                for read in r_once:
                    print(
                        f"  {read:10s} once {r_once[read] * 1000:7.2f} ms   auto {r_auto[read] * 1000:7.2f} ms   "
                        f"ratio {r_auto[read] / r_once[read]:.2f}×"
                    )


if __name__ == "__main__":
    main()
