"""The cost model's numbers on `maintenance_plan()` tasks (issue 30 item 1): bytes a task
rewrites, runs a scan of its range merges before and after it, and its memory, which an
automatic trigger treats as a hard limit (`connect(memory_budget=)`)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import conch
from conch.maintain.compaction.background import settle_tasks
from conch.maintain.compaction.plan import REWRITE_BYTES_PER_ROW, within_budget


def _overlapping(path: Path, budget: int, policy: conch.Policy) -> conch.Table:
    t = conch.connect(path, maintenance=policy, memory_budget=budget).create_table("t", [("id", pa.int64())])
    for i in range(4):  # four interleaved runs of 50k keys: one component, every run overlapping
        ids = list(range(i, 200_000, 4))
        t.write(pa.table({"id": ids, "a": [float(i)] * len(ids)}))
    return t


def test_plan_shows_what_a_task_costs_and_removes(tmp_path: Path) -> None:
    t = _overlapping(tmp_path / "w", 1 << 30, conch.Policy(auto=False))
    (task,) = t.maintenance_plan(conch.Policy(settle_after=None)).tasks
    assert task.kind == "major" and task.scan_runs_before == 4 and task.scan_runs_after == 1
    assert task.bytes_rewritten == task.input_bytes > 0
    assert task.memory_bytes == REWRITE_BYTES_PER_ROW * 200_000
    assert "merges 4 → 1 runs" in str(t.maintenance_plan(conch.Policy(settle_after=None)))


def test_memory_budget_is_a_hard_limit_for_automatic_compaction(tmp_path: Path) -> None:
    """200k input rows need ~40 MB by the model: under a 16 MiB budget the commit-time trigger
    and the settle leave the runs (reads stay right), under 1 GiB they fold them; an explicit
    `compact()` runs whatever the budget."""
    policy = conch.Policy(settle_after=None, small_bytes=64 << 20, l0_trigger=4)
    tight = _overlapping(tmp_path / "tight", 16 << 20, policy)
    roomy = _overlapping(tmp_path / "roomy", 1 << 30, policy)
    assert tight.maintenance_plan().l0_runs == 4  # planned, never run
    (task,) = tight.maintenance_plan().tasks
    assert not within_budget(task, policy, memory=16 << 20) and within_budget(task, policy, memory=1 << 30)
    assert roomy.maintenance_plan().l0_runs == 0
    state = tight.log.state()  # the settle plans the same major and leaves it too
    assert settle_tasks(state, policy, 16 << 20) == [] and len(settle_tasks(state, policy, 1 << 30)) == 1
    want = roomy.scan().to_arrow()
    assert tight.scan().to_arrow().equals(want)
    tight.compact()
    assert tight.maintenance_plan().l0_runs == 0 and tight.scan().to_arrow().equals(want)
