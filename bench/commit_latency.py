"""Latency of small commits: 200 upserts of 2,000 random keys each into one table.

.venv/bin/python bench/commit_latency.py
"""

from __future__ import annotations

import tempfile
import time

import numpy as np
import pyarrow as pa

import conch


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
    main()
