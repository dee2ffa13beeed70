"""The background settle never touches a table after `Catalog.close()`, after interpreter
shutdown begins, or after its warehouse directory is removed (issue 20 item 5,
`conch.maintain.compaction.background`); and a process that reopened a warehouse for a snapshot never
starts one (`conch.api.connection.reopen`)."""

from __future__ import annotations

import pickle
import random
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pyarrow as pa

import conch
from conch.maintain.compaction import background

LAZY = {"small_bytes": 0, "l0_trigger": 1000, "l1_ratio": 1000.0}  # every L0 run is the settle's


def _upsert(t: conch.Table, rng: random.Random, n: int = 30) -> None:
    ids = sorted(rng.sample(range(400), n))
    t.write(pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([rng.randint(0, 9) for _ in ids], pa.int64())}))


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def test_close_during_a_running_settle_returns_only_when_it_has_stopped(tmp_path: Path) -> None:
    """`close()` while a settle runs: once it returns, no commit and no file appear."""
    cat = conch.connect(tmp_path / "wh", maintenance=conch.Policy(**LAZY, settle_after=0.0))
    t = cat.create_table("t", [("id", pa.int64())])
    rng = random.Random(1)
    for _ in range(40):  # each commit reschedules the settle: one is due or running at close()
        _upsert(t, rng)
    cat.close()
    assert not background.pending(t.log)
    seq, files = t.state().seq, _tree(tmp_path / "wh")
    for _ in range(10):  # a bound on watching, not a speed assertion
        time.sleep(0.1)
        assert t.state().seq == seq
    assert _tree(tmp_path / "wh") == files


def test_writes_after_close_schedule_no_settle(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh", maintenance=conch.Policy(**LAZY, settle_after=0.0))
    t = cat.create_table("t", [("id", pa.int64())])
    cat.close()
    rng = random.Random(2)
    for _ in range(3):
        _upsert(t, rng)  # the handle reconnects: writes work ...
    assert not background.pending(t.log)  # ... and leave the runs to the next compaction
    time.sleep(0.3)
    assert t.maintenance_plan().l0_runs == 3


def test_a_removed_warehouse_directory_is_never_recreated(tmp_path: Path) -> None:
    """A pending settle of a warehouse whose directory is removed (a temporary directory
    cleaned up) is dropped: nothing writes there again."""
    cat = conch.connect(tmp_path / "wh", maintenance=conch.Policy(**LAZY, settle_after=0.3))
    t = cat.create_table("t", [("id", pa.int64())])
    rng = random.Random(3)
    for _ in range(3):
        _upsert(t, rng)
    assert background.pending(t.log)
    with warnings.catch_warnings(record=True) as caught:  # process-wide: the settle thread's too
        warnings.simplefilter("always")
        shutil.rmtree(tmp_path / "wh")
        assert t.wait_for_maintenance(timeout=60)  # the settle is dropped, not run
        time.sleep(0.5)
    assert not (tmp_path / "wh").exists()
    assert not background.pending(t.log)
    assert not [w for w in caught if "background compaction" in str(w.message)]  # not even tried


def test_no_settle_runs_once_shutdown_began(tmp_path: Path) -> None:
    """A settle due after the main thread finished (interpreter shutdown has begun; a
    non-daemon thread keeps the process alive past the settle's due time) never runs: no
    commit, no file."""
    script = textwrap.dedent(
        f"""
        import os, threading, time, pyarrow as pa, conch
        from conch.maintain.compaction import background
        root = {str(tmp_path / "wh")!r}
        t = conch.connect(root, maintenance=conch.Policy(small_bytes=0, l0_trigger=1000, l1_ratio=1000.0,
                          settle_after=0.5)).create_table("t", [("id", pa.int64())])
        for i in range(4):
            t.write(pa.table({{"id": pa.array(range(i, 400, 3), pa.int64())}}))
        assert background.pending(t.log)

        def files():
            return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)

        def watch():
            threading.main_thread().join()  # shutdown has begun
            before = files()
            time.sleep(1.5)  # the settle was due 0.5 s after the last write
            print("kinds", [c.kind for c in t.history()], "same files", files() == before)

        threading.Thread(target=watch).start()
        """
    )
    out = subprocess.run([sys.executable, "-c", script], check=True, timeout=600, capture_output=True, text=True)
    assert "kinds ['write', 'write', 'write', 'write'] same files True" in out.stdout, out.stderr[-2000:]
    assert "background compaction" not in out.stderr  # no failed settle either
    t = conch.connect(tmp_path / "wh", maintenance=conch.Policy(auto=False)).table("t")
    assert [c.kind for c in t.history()] == ["write"] * 4
    assert t.check().ok


def test_a_settle_is_never_started_in_a_process_that_reopened_a_snapshot(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh", maintenance=conch.Policy(**LAZY, settle_after=0.0))
    t = cat.create_table("t", [("id", pa.int64())])
    _upsert(t, random.Random(4))
    script = textwrap.dedent(
        """
        import pickle, sys, random, pyarrow as pa
        from conch.maintain.compaction import background
        snap = pickle.loads(sys.stdin.buffer.read())
        log = snap.log
        assert log.warehouse.maintenance.settle_after is None
        ids = sorted(random.Random(5).sample(range(400), 30))
        for _ in range(3):  # commits through the reopened warehouse (as an enrich worker does)
            from conch.api.table import Table
            Table(log).write(pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([1] * 30, pa.int64())}))
        assert not background.pending(log)
        print("ok", background._settler._thread is None)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], input=pickle.dumps(t.snapshot()), capture_output=True, timeout=600
    )
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert out.stdout.decode().split() == ["ok", "True"]  # no settle thread was ever started there
    cat.close()


def test_close_waits_for_a_running_settle_of_its_own_warehouse_only(tmp_path: Path) -> None:
    """Closing one catalog leaves the settles of another warehouse running."""
    a = conch.connect(tmp_path / "a", maintenance=conch.Policy(**LAZY, settle_after=3600))
    b = conch.connect(tmp_path / "b", maintenance=conch.Policy(**LAZY, settle_after=3600))
    ta, tb = a.create_table("t", [("id", pa.int64())]), b.create_table("t", [("id", pa.int64())])
    rng = random.Random(6)
    for _ in range(3):
        _upsert(ta, rng)
        _upsert(tb, rng)
    done = threading.Event()
    threading.Thread(target=lambda: (a.close(), done.set()), daemon=True).start()
    assert done.wait(120)
    assert not background.pending(ta.log) and background.pending(tb.log)
    assert tb.wait_for_maintenance(timeout=120)
    assert tb.maintenance_plan().l0_runs == 0 and ta.maintenance_plan().l0_runs == 3
    b.close()
