"""A bulk load lands as it was written, in memory that does not grow with its size (issue 30
item 1): one `write` of a `RecordBatchReader` of sorted keys is cut into runs that overlap
nothing, so the default policy moves them all to L1 (no byte rewritten), whatever their bytes.

Before, a run had to hold `Policy.move_bytes` (4 MB) to move. Compressible columns (a sorted key
and floats derived from it) make runs of a million rows far smaller than that, so all but one
were merged inside `write()`, and the write's peak memory grew with its rows (1.57 GB at 10M
keys against 0.47 GB with automatic compaction off). Each load runs in a fresh subprocess under
a small `memory_budget`; the assertions are on its peak resident memory (`VmHWM`), not time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys
import numpy as np, pyarrow as pa
import conch
import vortex  # noqa: F401  (imported before the baseline: not the write's memory)

rows, path, move_rows = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))

schema = pa.schema([("id", pa.uint64()), ("a", pa.float64()), ("b", pa.float64())])

def batches():
    for start in range(0, rows, 100_000):
        ids = np.arange(start, min(rows, start + 100_000), dtype=np.uint64)
        yield pa.record_batch([ids, ids * 0.5, ids * 0.25], schema=schema)

policy = conch.Policy(settle_after=None, move_rows=move_rows)
t = conch.connect(path, maintenance=policy, memory_budget=32 << 20).create_table("t", [("id", pa.uint64())])
base = status("VmRSS:")
t.write(pa.RecordBatchReader.from_batches(schema, batches()))
peak = status("VmHWM:") - base
kinds = [(c.kind, c.summary) for c in t.history()]
plan = t.maintenance_plan()
n = t.scan("a").to_arrow().num_rows
print(json.dumps({"peak": peak, "kinds": kinds, "l0": plan.l0_runs, "l1": plan.l1_runs, "rows": n}))
"""


def _load(tmp_path: Path, rows: int, move_rows: int = 1 << 18) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(rows), str(tmp_path / f"w{rows}-{move_rows}"), str(move_rows)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_bulk_load_moves_every_run_in_memory_that_does_not_grow_with_it(tmp_path: Path) -> None:
    small, large = _load(tmp_path, 1_500_000), _load(tmp_path, 4_500_000)
    for got, rows in ((small, 1_500_000), (large, 4_500_000)):
        assert got["rows"] == rows
        # the write, then one move of all its runs: nothing merged, nothing rewritten
        assert [k for k, _ in got["kinds"]] == ["write", "compact"], got["kinds"]
        assert got["kinds"][1][1].startswith("move:"), got["kinds"]
        assert got["l0"] == 0 and got["l1"] >= 3
    # three times the rows, the same memory: the write holds one chunk (a quarter of the 32 MiB
    # budget) and the files being encoded, never the write
    assert large["peak"] < small["peak"] + (48 << 20), (small["peak"], large["peak"])
    assert large["peak"] < 400 << 20, large["peak"]


def test_runs_below_the_move_threshold_still_move_and_nothing_is_rewritten(tmp_path: Path) -> None:
    """With `move_rows` above the runs' rows (and the runs far below `move_bytes`) the disjoint runs
    still move (RocksDB's trivial move, whatever their size): folding 1.5M rows would need ~300 MB
    by the cost model (`plan.REWRITE_BYTES_PER_ROW`), over the 32 MiB budget, and rewrite every row
    of the write. (Before issue 30 they were merged inside `write()`, which grew its memory.)"""
    got = _load(tmp_path, 1_500_000, move_rows=1 << 40)
    assert [k for k, _ in got["kinds"]] == ["write", "compact"], got["kinds"]
    assert "move" in got["kinds"][1][1], got["kinds"]
    assert got["l0"] == 0 and got["l1"] >= 4 and got["rows"] == 1_500_000
