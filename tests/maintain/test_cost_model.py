"""The cost model's numbers on `maintenance_plan()` tasks (issue 30 item 1): bytes a task
rewrites, runs a scan of its range merges before and after it, and its memory, which an
automatic trigger treats as a hard limit (`connect(memory_budget=)`)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import conch
from conch.maintain.compaction.background import settle, settle_tasks
from conch.maintain.compaction.plan import REWRITE_BYTES_PER_ROW, within_budget
from conch.maintain.compaction.rewrite import MIN_SLICE_ROWS, Layout, _slices, input_view, sliced_memory


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


def test_a_rewrite_in_key_slices_reads_like_the_inputs(tmp_path: Path) -> None:
    """Under a 16 MiB budget a major of 300k input rows scans its inputs in slices of 64k rows
    (`rewrite._slices`): partial columns, deletes of present and absent keys and re-inserts
    across slice boundaries read the same before and after, and the output is one run per range."""
    cat = conch.connect(tmp_path / "w", maintenance=conch.Policy(auto=False), memory_budget=16 << 20)
    t = cat.create_table("t", [("id", pa.int64())])
    t.write(pa.table({"id": list(range(0, 200_000)), "a": [1.0] * 200_000, "b": ["x"] * 200_000}))
    upserted = list(range(5, 200_000, 7))
    t.write(pa.table({"id": upserted, "a": [2.0] * len(upserted)}))
    t.delete([*range(60_000, 70_000), 250_000])
    t.write(pa.table({"id": list(range(65_000, 66_000)), "b": ["y"] * 1000}))
    state = t.log.state()
    (task,) = t.maintenance_plan(conch.Policy(settle_after=None)).tasks
    view = input_view(state, task)
    assert len(_slices(view, Layout(1), cat.warehouse.key_cache, MIN_SLICE_ROWS)) >= 3  # sliced, or the test is moot
    want = t.scan().to_arrow()
    t.compact()
    assert t.maintenance_plan().l0_runs == 0
    assert t.scan().to_arrow().equals(want)


def test_the_settle_weighs_a_major_by_the_slices_it_runs_in(tmp_path: Path) -> None:
    """200k input rows: ~40 MB as one merge (`memory_bytes`), ~20 MB merged in key slices as the
    rewrite runs them (`rewrite.sliced_memory`). Under a 32 MiB budget the commit-time trigger still
    leaves the runs (its hard limit is the whole-task figure), the settle runs the major (a
    5M-key table's ten L0 runs were left for good at the default budget) and reads do not change."""
    policy = conch.Policy(settle_after=None, small_bytes=64 << 20, l0_trigger=4)
    t = _overlapping(tmp_path / "w", 32 << 20, policy)
    (task,) = t.maintenance_plan().tasks
    assert task.memory_bytes > 32 << 20 >= sliced_memory(task, 32 << 20)
    assert not within_budget(task, policy, memory=32 << 20) and t.maintenance_plan().l0_runs == 4
    assert len(settle_tasks(t.log.state(), policy, 32 << 20)) == 1
    want = t.scan().to_arrow()
    assert settle(t.log) == 1
    assert t.maintenance_plan().l0_runs == 0 and t.scan().to_arrow().equals(want)
