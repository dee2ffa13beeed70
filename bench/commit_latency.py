"""Latency of small commits.

- `one_row`: the fixed cost of a commit. One-row appends, one commit each, into Conch (an upsert
  of a new key, default maintenance policy), Lance (`write_dataset(mode="append")`) and Delta
  (`write_deltalake(mode="append")`); median and p90 wall time per commit, and CPU time per
  commit (process-wide: it includes Lance's and Delta's own threads; on a shared machine it is
  the steadier number). `python -m bench
  --only commit` runs it as the "one-row commit" row.
- `main`: 200 upserts of 2,000 random keys each into one table.
- `concurrent`: commits/s of one-row upserts from 1, 2, 4 and 8 threads of one process into one
  table (one shared handle, default policy), which group commit (`conch.log.groupcommit`)
  appends together; wall and CPU seconds, and the mean entries per metastore append.

.venv/bin/python bench/commit_latency.py [commits] [--concurrent-only] [--auto-off]
"""

from __future__ import annotations

import itertools
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

import conch


def _row(k: int) -> pa.Table:
    return pa.table({"id": pa.array([k], pa.int64()), "x": [k * 0.5], "s": [f"value {k}"]})


def _timed(commit: Callable[[int], object], commits: int, warmup: int = 5) -> tuple[list[float], float]:
    """Wall seconds of each commit after `warmup` untimed ones, and CPU seconds per commit."""
    for k in range(warmup):
        commit(k)
    walls = []
    cpu = time.process_time()
    for k in range(warmup, warmup + commits):
        t = time.perf_counter()
        commit(k)
        walls.append(time.perf_counter() - t)
    return walls, (time.process_time() - cpu) / commits


def one_row(work: Path, commits: int = 200) -> dict[str, dict[str, float]]:
    """Per system: median and p90 wall seconds and CPU seconds of a one-row commit."""
    import lance
    from deltalake import write_deltalake

    work.mkdir(parents=True, exist_ok=True)
    table = conch.connect(tempfile.mkdtemp(prefix="conch-", dir=work)).create_table("t", [("id", pa.int64())])
    lance_uri = tempfile.mkdtemp(prefix="lance-", dir=work) + "/ds"
    delta_uri = tempfile.mkdtemp(prefix="delta-", dir=work)

    def conch_upsert(k: int) -> None:
        table.write(_row(k))

    def lance_append(k: int) -> None:
        lance.write_dataset(_row(k), lance_uri, mode="append" if k else "create")

    def delta_append(k: int) -> None:
        write_deltalake(delta_uri, _row(k), mode="append")

    out: dict[str, dict[str, float]] = {}
    for name, fn in (("conch", conch_upsert), ("lance", lance_append), ("delta", delta_append)):
        walls, cpu = _timed(fn, commits)
        walls.sort()
        out[name] = {"median": statistics.median(walls), "p90": walls[int(len(walls) * 0.9)], "cpu": cpu}
        print(
            f"  one-row commit  {name:<6} median {out[name]['median'] * 1e3:6.2f} ms  "
            f"p90 {out[name]['p90'] * 1e3:6.2f} ms  cpu {cpu * 1e3:6.2f} ms  ({commits} commits)",
            flush=True,
        )
    return out


def concurrent(
    work: Path,
    threads: tuple[int, ...] = (1, 2, 4, 8),
    per_thread: int = 40,
    reps: int = 3,
    policy: conch.Policy | None = None,
) -> dict[int, dict[str, float]]:
    """Per thread count: commits/s (median of `reps` fresh tables) of one-row upserts, each
    thread committing `per_thread` rows of its own keys into one shared table handle (`policy`:
    the maintenance policy, default the default one)."""
    work.mkdir(parents=True, exist_ok=True)
    out: dict[int, dict[str, float]] = {}
    for n in threads:
        rates, cpus, appends = [], [], []
        for _ in range(reps):
            cat = conch.connect(tempfile.mkdtemp(prefix="conch-", dir=work), maintenance=policy)
            table = cat.create_table("t", [("id", pa.int64())])
            table.write(_row(-1))
            barrier = threading.Barrier(n + 1)

            def writer(w: int, table: conch.Table = table, barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                for i in range(per_thread):
                    table.write(_row(w * per_thread + i))

            ts = [threading.Thread(target=writer, args=(w,)) for w in range(n)]
            for t in ts:
                t.start()
            barrier.wait()
            start, cpu = time.perf_counter(), time.process_time()
            for t in ts:
                t.join()
            wall = time.perf_counter() - start
            rates.append(n * per_thread / wall)
            cpus.append((time.process_time() - cpu) / (n * per_thread))
            writes = [c for c in table.history() if c.kind == "write"][1:]
            times = sorted(c.time for c in writes)
            # entries of one batched append have consecutive commit times (µs apart)
            batches = 1 + sum(1 for a, b in itertools.pairwise(times) if b - a > 1)
            appends.append(len(writes) / batches)
            assert len(writes) == n * per_thread and table.scan().to_arrow().num_rows == n * per_thread + 1
            cat.close()  # no background settle outlives the table's directory
        out[n] = {
            "commits_per_s": statistics.median(rates),
            "cpu_per_commit": statistics.median(cpus),
            "entries_per_append": statistics.median(appends),
        }
        print(
            f"  {n} thread(s) x {per_thread} one-row commits: {out[n]['commits_per_s']:7.1f} commits/s  "
            f"cpu {out[n]['cpu_per_commit'] * 1e3:6.2f} ms/commit  "
            f"~{out[n]['entries_per_append']:.1f} write entries per append",
            flush=True,
        )
    return out


def main(commits: int = 200, rows: int = 2000) -> float:
    table = conch.connect(tempfile.mkdtemp(prefix="conch-commit-")).create_table("t", [("id", pa.int64())])
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(commits):
        ids = rng.choice(1_000_000, rows, replace=False)
        table.write(pa.table({"id": ids, "v": rng.random(rows)}))
    per_commit_ms = (time.perf_counter() - start) / commits * 1000
    print(f"{per_commit_ms:.2f} ms per {rows}-row commit ({commits} commits, fsync + synchronous=FULL)")
    return per_commit_ms


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 200
    work = Path(tempfile.mkdtemp(prefix="commit-latency-"))
    if "--concurrent-only" not in sys.argv:
        one_row(work, n)
        main(n)
    off = "--auto-off" in sys.argv  # group commit alone, without the commit-time compactions
    concurrent(work / "concurrent", policy=conch.Policy(auto=False) if off else None)
