"""Background settling (`conch.maintain.compaction.background`): after the writer pauses, the L0 runs the
commit-time trigger left are folded in by a thread of the writing process; the table reads the
same before and after, including while the same process keeps writing and deleting."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pyarrow as pa
import pytest

import conch
from conch.maintain.compaction import background
from helpers import id_to_v, upsert_random

# commit-time compaction never runs (no small-table trigger, no count trigger): every L0 run
# left is the settle's to fold
LAZY = {"small_bytes": 0, "l0_trigger": 1000, "l1_ratio": 1000.0}


def _upsert(t: conch.Table, model: dict[int, int], rng: random.Random, n: int) -> None:
    upsert_random(t, model, rng, n)


_rows = id_to_v


def test_settle_folds_l0_runs_after_the_writer_pauses(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path, maintenance=conch.Policy(**LAZY, settle_after=0.05))
    t = cat.create_table("t", [("id", pa.int64())])
    rng, model = random.Random(1), {}
    for _ in range(6):
        _upsert(t, model, rng, 40)
    deadline = time.monotonic() + 120  # a bound on waiting, not a speed assertion
    while t.maintenance_plan().l0_runs and time.monotonic() < deadline:
        time.sleep(0.05)
    plan = t.maintenance_plan()
    assert (plan.l0_runs, plan.l1_runs) == (0, 1)  # folded without anyone asking
    assert _rows(t) == model
    assert t.wait_for_maintenance(timeout=60)


def test_wait_settles_without_the_pause(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path, maintenance=conch.Policy(**LAZY, settle_after=3600))
    t = cat.create_table("t", [("id", pa.int64())])
    rng, model = random.Random(2), {}
    for _ in range(4):
        _upsert(t, model, rng, 30)
    assert t.maintenance_plan().l0_runs >= 3  # the hour-long pause has not passed
    assert t.wait_for_maintenance()
    assert t.maintenance_plan().l0_runs == 0
    assert _rows(t) == model


def test_wait_settles_runs_another_process_wrote(tmp_path: Path) -> None:
    """Runs committed by a process that does not settle (a Spark job commits from a Python
    worker with settling off) are folded by `wait_for_maintenance()` in any process."""
    writer = conch.connect(tmp_path, maintenance=conch.Policy(**LAZY, settle_after=None))
    t = writer.create_table("t", [("id", pa.int64())])
    rng, model = random.Random(6), {}
    for _ in range(3):
        _upsert(t, model, rng, 25)
    reader = conch.connect(tmp_path, maintenance=conch.Policy(**LAZY)).table("t")
    assert reader.maintenance_plan().l0_runs == 3
    assert reader.wait_for_maintenance()
    assert reader.maintenance_plan().l0_runs == 0
    assert _rows(reader) == model


def test_close_drops_pending_settles_and_none_runs_after_it(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "a", maintenance=conch.Policy(**LAZY, settle_after=3600))
    t = cat.create_table("t", [("id", pa.int64())])
    rng, model = random.Random(8), {}
    for _ in range(3):
        _upsert(t, model, rng, 30)
    assert background.pending(t.log)
    cat.close()
    assert not background.pending(t.log) and t.maintenance_plan().l0_runs == 3  # left to the next writer

    # due at once: whether or not it ran before close(), nothing runs after it
    cat = conch.connect(tmp_path / "b", maintenance=conch.Policy(**LAZY, settle_after=0.0))
    t = cat.create_table("t", [("id", pa.int64())])
    for _ in range(6):
        _upsert(t, model, rng, 30)
    cat.close()
    seq = t.state().seq
    assert not background.pending(t.log)
    time.sleep(0.3)
    assert t.state().seq == seq


def test_a_failed_settle_under_warnings_as_errors_leaves_the_worker_alive(tmp_path: Path) -> None:
    """A settle that fails warns; with warnings made errors (pytest -W error, a library's
    filter) the warning raises in the worker thread: it must live on, or every later wait hangs."""
    cat = conch.connect(tmp_path, maintenance=conch.Policy(**LAZY, settle_after=3600))
    broken, ok = cat.create_table("broken", [("id", pa.int64())]), cat.create_table("ok", [("id", pa.int64())])
    rng, model = random.Random(9), {}
    for _ in range(3):
        _upsert(broken, model, rng, 20)
    for f in broken.state().fragments.values():
        (tmp_path / f.path).unlink()  # its settle fails reading its data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert broken.wait_for_maintenance(timeout=120)  # a bound on waiting, not a speed assertion
    model = {}
    for _ in range(3):
        _upsert(ok, model, rng, 20)
    assert ok.wait_for_maintenance(timeout=120)
    assert ok.maintenance_plan().l0_runs == 0 and _rows(ok) == model


@pytest.mark.parametrize("policy", [conch.Policy(**LAZY, settle_after=None), conch.Policy(auto=False)])
def test_settling_off(tmp_path: Path, policy: conch.Policy) -> None:
    t = conch.connect(tmp_path, maintenance=policy).create_table("t", [("id", pa.int64())])
    rng, model = random.Random(3), {}
    for _ in range(3):
        _upsert(t, model, rng, 20)
    assert t.wait_for_maintenance(timeout=0)  # nothing pending
    assert t.maintenance_plan().l0_runs == 3
    assert _rows(t) == model


def test_a_lone_run_is_not_rewritten(tmp_path: Path) -> None:
    """One write to a new table is one run already: settling it would only rewrite it."""
    t = conch.connect(tmp_path, maintenance=conch.Policy(**LAZY, settle_after=0)).create_table(
        "t", [("id", pa.int64())]
    )
    _upsert(t, {}, random.Random(7), 30)
    assert t.wait_for_maintenance()
    assert [c.kind for c in t.history()] == ["write"]


def test_bad_settle_after_is_refused() -> None:
    with pytest.raises(conch.InvalidArgumentError, match="settle_after"):
        conch.Policy(settle_after=-1)


def test_settle_beside_writes_and_deletes_of_the_same_process(tmp_path: Path) -> None:
    """Settles run (pause 0) while a second thread keeps upserting and deleting through another
    handle and the main thread waits for settles at random points: no write lost, no deleted key
    back, every read equal to the model of what had committed."""
    cat = conch.connect(tmp_path, maintenance=conch.Policy(**LAZY, settle_after=0))
    t = cat.create_table("t", [("id", pa.int64())])
    other = conch.connect(tmp_path, maintenance=conch.Policy(**LAZY, settle_after=0)).table("t")
    model: dict[int, int] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer() -> None:
        rng = random.Random(4)
        try:
            for i in range(60):
                with lock:  # the model changes with the commit, never between
                    if i % 5 == 4 and model:
                        gone = rng.sample(sorted(model), min(5, len(model)))
                        other.delete(gone)
                        for k in gone:
                            del model[k]
                    else:
                        _upsert(other, model, rng, rng.randint(1, 30))
        except BaseException as e:  # surfaced in the main thread
            errors.append(e)

    th = threading.Thread(target=writer)
    th.start()
    rng = random.Random(5)
    while th.is_alive():
        t.wait_for_maintenance(timeout=30)
        with lock:
            assert _rows(t) == model
        time.sleep(rng.uniform(0, 0.05))
    th.join()
    assert not errors, errors
    assert t.wait_for_maintenance(timeout=120) and other.wait_for_maintenance(timeout=120)
    assert _rows(t) == model
    assert t.maintenance_plan().l0_runs == 0
    assert t.check().ok


def test_exit_during_a_settle_leaves_the_table_consistent(tmp_path: Path) -> None:
    """A process that exits right after its writes (pause 0: a settle is starting or running,
    and may fail at exit) leaves the table consistent and readable with every committed row."""
    script = textwrap.dedent(
        f"""
        import pyarrow as pa, conch
        t = conch.connect({str(tmp_path)!r}, maintenance=conch.Policy(small_bytes=0, l0_trigger=1000,
                          l1_ratio=1000.0, settle_after=0)).create_table("t", [("id", pa.int64())])
        for i in range(8):
            t.write(pa.table({{"id": pa.array(range(i, 400, 3), pa.int64()), "v": pa.array([i] * len(range(i, 400, 3)))}}))
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=600)
    t = conch.connect(tmp_path, maintenance=conch.Policy(auto=False)).table("t")
    expected = {}
    for i in range(8):
        expected.update((k, i) for k in range(i, 400, 3))
    assert _rows(t) == expected
    assert t.check().ok


def _over_budget(path: Path, policy: conch.Policy) -> tuple[conch.Table, pa.Table]:
    """A table whose settle major (four overlapping runs of 20k keys) holds more input bytes than
    `policy.auto_budget_bytes`, cut into `max_l1_rows` pieces."""
    t = conch.connect(path, maintenance=policy).create_table("t", [("id", pa.int64())])
    for i in range(4):
        ids = list(range(i, 80_000, 4))
        t.write(pa.table({"id": ids, "v": [float(k * 10 + i) for k in ids]}))
    return t, t.scan().to_arrow()


def test_a_settle_major_over_the_budget_runs_in_parts_and_commits_once(tmp_path: Path) -> None:
    """The settle's forced major over more input than the automatic budget runs as its output
    pieces' key ranges one after another (`run.staged_parts`), each within the budget, and one
    commit adds them all (a 5M-key table being written was never settled: 82 MB of runs against
    a 64 MB budget). Reads are the same before and after, at every version."""
    policy = conch.Policy(**LAZY, settle_after=None, auto_budget_bytes=8_000, max_l1_rows=8_000)
    t, want = _over_budget(tmp_path, policy)
    (task,) = background.settle_tasks(t.log.state(), policy)
    assert task.input_bytes > policy.auto_budget_bytes
    parts: list[int] = []
    real = background.staged_parts
    try:
        background.staged_parts = lambda *a, **k: (parts.append(1), real(*a, **k))[1]  # type: ignore[assignment]
        seq = t.state().seq
        assert background.settle(t.log) == 1
    finally:
        background.staged_parts = real  # type: ignore[assignment]
    assert t.maintenance_plan().l0_runs == 0
    assert t.scan().to_arrow().equals(want)
    assert t.snapshot(version=seq).scan().to_arrow().equals(want)
    (done,) = [c for c in t.history() if c.kind == "compact"]
    assert done.summary == f"major: 4 runs → {sum(1 for ks in t.state().key_spaces.values())}"
    assert len(t.state().key_spaces) == 10 and len(parts) == 1  # 80k keys in pieces of 8k, one part each


def test_a_commit_between_parts_abandons_the_settle_major(tmp_path: Path) -> None:
    """A commit arriving while the settle runs a major in parts stops it between two parts: nothing
    is committed, the table reads the same, and `vacuum` removes the parts written."""
    policy = conch.Policy(**LAZY, settle_after=None, auto_budget_bytes=8_000, max_l1_rows=8_000)
    t, want = _over_budget(tmp_path, policy)
    files = {p for p in tmp_path.rglob("*") if p.is_file()}
    asked = []
    assert background.settle(t.log, interrupted=lambda: (asked.append(1), len(asked) > 1)[1]) == 0
    assert len(asked) >= 2  # asked before the task, then between its first and second part
    assert t.maintenance_plan().l0_runs == 4 and not [c for c in t.history() if c.kind == "compact"]
    assert t.scan().to_arrow().equals(want)
    left = {p for p in tmp_path.rglob("*") if p.is_file()} - files  # the first part's files
    assert any(p.suffix == ".vortex" for p in left)
    time.sleep(0.05)  # vacuum(0) keeps files younger than the file system's clock slack
    t.vacuum(older_than_seconds=0)
    assert not any(p.exists() for p in left)
    assert t.scan().to_arrow().equals(want)
