"""The commit-time trigger off the writer's thread (`Policy(background=True)`,
`conch.maintain.compaction.background`), its stop trigger, and the commit budget weighed in rows
as well as bytes (`plan.rewrite_work`)."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import conch
from conch.maintain.compaction import background
from helpers import id_to_v, upsert_random


def _upsert(t: conch.Table, model: dict[int, int], rng: random.Random, n: int) -> None:
    upsert_random(t, model, rng, n, keys=2_000)


_rows = id_to_v


def test_the_trigger_runs_on_the_maintenance_thread_and_reads_stay_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran_in: list[str] = []
    real = background.compact

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]  # records the thread, runs the real one
        ran_in.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(background, "compact", spy)
    cat = conch.connect(tmp_path, maintenance=conch.Policy(background=True, settle_after=None))
    t = cat.create_table("t", [("id", pa.int64())])
    rng, model = random.Random(3), {}
    for _ in range(12):
        _upsert(t, model, rng, 50)
        assert _rows(t) == model  # whatever the trigger has done so far
    assert t.wait_for_maintenance(timeout=120)
    assert ran_in and set(ran_in) == {"conch-settle"}  # never the writer's thread
    assert any(c.kind == "compact" for c in t.history())  # it did compact: a small table is folded
    assert t.maintenance_plan().l0_runs < 12
    assert _rows(t) == model


def test_writers_wait_at_the_stop_trigger(tmp_path: Path) -> None:
    """A writer faster than the compactor is held at `stop_runs` L0 runs: after every write the
    table's L0 runs are under the bound (a small table: each trigger pass folds it whole)."""
    policy = conch.Policy(background=True, settle_after=None, stop_runs=3, l0_trigger=2)
    cat = conch.connect(tmp_path, maintenance=policy)
    t = cat.create_table("t", [("id", pa.int64())])
    rng, model = random.Random(4), {}
    for _ in range(25):
        _upsert(t, model, rng, 20)
        assert t.maintenance_plan().l0_runs <= policy.stop_runs
    assert t.wait_for_maintenance(timeout=120)
    assert _rows(t) == model


def test_a_closed_catalog_gets_no_background_trigger(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path, maintenance=conch.Policy(background=True, settle_after=None))
    t = cat.create_table("t", [("id", pa.int64())])
    rng, model = random.Random(5), {}
    for _ in range(6):
        _upsert(t, model, rng, 30)
    cat.close()  # waits for a running pass, drops the queued ones
    assert not background.pending(t.log)
    seq = t.log.state().seq
    again = conch.connect(tmp_path).table("t")
    assert again.log.state().seq == seq  # nothing committed after close returned
    assert _rows(again) == model


def test_the_commit_budget_weighs_rows_of_a_compressible_table(tmp_path: Path) -> None:
    """300k rows of a u64 key and a derived f64 compress to ~0.3 MB: by bytes alone a major of
    them fits a 4 MB commit budget, so every second 20k-row upsert rewrote the whole table in
    the writer's thread. Weighed in rows (`ROW_WORK_BYTES` a row) it waits until it is amortized
    over the commits that wrote L0 (`major_amplification`)."""
    cat = conch.connect(tmp_path, maintenance=conch.Policy(settle_after=None))
    t = cat.create_table("t", [("id", pa.uint64())])
    ids = np.arange(300_000, dtype=np.uint64)
    t.write(pa.table({"id": ids, "x": ids.astype(np.float64) * 0.25}))
    rng = np.random.default_rng(6)
    majors = []
    for c in range(9):
        keys = np.sort(rng.choice(300_000, 20_000, replace=False)).astype(np.uint64)
        t.write(pa.table({"id": keys, "x": rng.random(len(keys))}))
        if any(h.kind == "compact" and h.summary.startswith("major") for h in t.history()):
            majors.append(c)
    # (L1 + L0) / L0 in rows: 300k + 20k c over 20k c <= 3 from the 8th upsert on
    assert majors and majors[0] >= 6, majors
    assert t.scan().to_arrow().num_rows == 300_000
