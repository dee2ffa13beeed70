"""The cost of `Table.changes()` against the number of commits in the interval and against the
table's size (issue 23: cost follows the commits, not the table).

    .venv/bin/python -m bench.changes [--sizes 10000 100000 1000000] [--commits 1 10 50] [--keys 100]

Each table gets `size` rows in one write (compacted), then `max(commits)` commits that each
upsert `keys` random existing keys (a value column changes). `changes(v)` over the last `c`
commits is timed (best of 3), next to the naive full diff of the same two versions (two full
scans, joined on the key), which is what a change feed costs without the log. Writes
bench/results/changes.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import conch

RESULTS = Path(__file__).parent / "results" / "changes.json"


def best(fn: Any, reps: int = 3) -> float:
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return min(out)


def full_diff(t: conch.Table, a: int, b: int) -> int:
    """The baseline: every key of both versions, compared."""
    before = t.scan(version=a).to_arrow()
    after = t.scan(version=b).to_arrow()
    joined = before.join(after, "id", join_type="full outer", left_suffix="_a", right_suffix="_b")
    x_a, x_b = joined.column("x_a").to_numpy(zero_copy_only=False), joined.column("x_b").to_numpy(zero_copy_only=False)
    return int(np.sum(x_a != x_b))


def measure(size: int, commits: list[int], keys: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(size)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        cat = conch.connect(d, maintenance=conch.Policy(auto=False, settle_after=None))
        t = cat.create_table("t", [("id", pa.int64())])
        t.write(pa.table({"id": np.arange(size), "x": rng.random(size)}))
        t.compact()
        versions = [t.state().seq]
        for _ in range(max(commits)):
            ids = np.sort(rng.choice(size, keys, replace=False))
            versions.append(t.write(pa.table({"id": ids, "x": rng.random(keys)})).seq)
        last = versions[-1]
        for c in commits:
            since = versions[-1 - c]
            ch = t.changes(since)
            n = ch.to_arrow().num_rows
            secs = best(lambda ch=ch: ch.to_arrow())
            naive = best(lambda since=since: full_diff(t, since, last), reps=1 if size >= 1_000_000 else 3)
            assert full_diff(t, since, last) == n
            row = {
                "table_rows": size,
                "commits": c,
                "changed_keys": n,
                "looked_up": ch.scanned_keys,
                "changes_s": round(secs, 4),
                "full_diff_s": round(naive, 4),
            }
            print(
                f"  rows {size:>9,}  commits {c:>3}  changed {n:>6}  changes() {secs * 1000:8.1f} ms"
                f"  full diff {naive * 1000:9.1f} ms",
                flush=True,
            )
            rows.append(row)
        cat.close()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--commits", type=int, nargs="+", default=[1, 10, 50])
    p.add_argument("--keys", type=int, default=100)
    args = p.parse_args()
    rows = []
    for size in args.sizes:
        rows += measure(size, sorted(args.commits), args.keys)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"keys_per_commit": args.keys, "rows": rows}, indent=1))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
