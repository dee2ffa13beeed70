"""Compaction beside live writers (issue 10 item 8, DESIGN §4 and §6).

- processes writing, deleting and compacting at once: no write lost, no deleted key resurrected;
- two compactors on the same inputs: one wins, the other is rejected and leaves only garbage
  that vacuum removes;
- a compactor SIGKILLed at random moments: the table stays readable at its last commit, and
  vacuum removes what the killed compactor wrote.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import conch
from conch.maintain.compaction import CompactionResult, commit, execute, plan_tasks
from conch.maintain.vacuum import referenced_files

pytestmark = pytest.mark.xdist_group("processes")

OFF = conch.Policy(auto=False)


def _writer(wh: str, w: int, n: int, out: mp.Queue) -> None:
    t = conch.connect(wh).table("t")  # the default policy: automatic compaction in each writer
    seen = []
    for i in range(n):
        shared = 200 + (i * 7 + w) % 50  # keys every writer updates: the newest commit wins
        c = t.write(pa.table({"id": pa.array([(w + 1) * 1000 + i, shared], pa.int64()), "v": [i, w * 100 + i]}))
        seen.append(((w + 1) * 1000 + i, i, c.time))
        seen.append((shared, w * 100 + i, c.time))
    out.put(("w", seen))


def _deleter(wh: str, out: mp.Queue) -> None:
    t = conch.connect(wh).table("t")
    for start in range(0, 100, 5):
        t.delete(list(range(start, start + 5)))
    out.put(("d", []))


def _compactor(wh: str, stop: str, out: mp.Queue) -> None:
    t = conch.connect(wh, maintenance=OFF).table("t")
    rng = random.Random(os.getpid())
    total = CompactionResult()
    while not Path(stop).exists():
        total = total + t.compact(force=rng.random() < 0.5, policy=conch.Policy(l0_trigger=2, max_l1_rows=40))
        time.sleep(rng.uniform(0, 0.02))
    out.put(("c", [total.tasks, total.conflicts]))


def test_writers_deleters_and_a_compactor_lose_nothing(tmp_path: Path) -> None:
    wh = str(tmp_path / "w")
    t = conch.connect(wh).create_table("t", [("id", pa.int64())], pa.schema([("v", pa.int64())]))
    t.write(pa.table({"id": pa.array(range(250), pa.int64()), "v": [0] * 250}))
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    stop = str(tmp_path / "stop")
    writers = [ctx.Process(target=_writer, args=(wh, w, 25, out)) for w in range(2)]
    others = [ctx.Process(target=_deleter, args=(wh, out)), ctx.Process(target=_compactor, args=(wh, stop, out))]
    for p in writers + others:
        p.start()
    results = [out.get(timeout=300) for _ in range(3)]  # writers and the deleter
    Path(stop).touch()
    results.append(out.get(timeout=300))
    for p in writers + others:
        p.join(60)
        assert p.exitcode == 0
    want = {k: 0 for k in range(100, 250)}
    newest: dict[int, tuple[int, int]] = {}
    for kind, seen in results:
        for key, value, at in seen if kind == "w" else []:
            if key not in newest or at > newest[key][1]:
                newest[key] = (value, at)
    want.update({k: v for k, (v, _) in newest.items()})
    t = conch.connect(wh).table("t")
    got = {r["id"]: r["v"] for r in t.scan().to_pylist()}
    assert got == dict(sorted(want.items()))  # every write there, its newest value; 0..99 deleted
    kinds = [c.kind for c in t.history()]
    assert kinds.count("write") == 51 and kinds.count("delete") == 20
    assert kinds.count("compact") > 0  # by the compactor process or the writers' automatic ones


def _staged_twice(tmp_path: Path) -> tuple[conch.Table, list[str], list[str]]:
    t = conch.connect(tmp_path, maintenance=OFF).create_table("t", [("id", pa.int64())])
    for i in range(6):
        t.write(pa.table({"id": pa.array([i, i + 10], pa.int64()), "v": [i, i]}))
    state = t.state()
    (task,) = plan_tasks(t.log, conch.Policy(), force=True)
    a = execute(t.log, state, task)
    b = execute(t.log, state, task)
    commit(t.log, task, [a], state.seq)
    with pytest.raises(conch.CommitConflictError, match="removed by a concurrent commit"):
        commit(t.log, task, [b], state.seq)
    return t, a.files, b.files


def test_two_compactors_one_wins_the_other_leaves_only_garbage(tmp_path: Path) -> None:
    t, won, lost = _staged_twice(tmp_path)
    storage = t.log.storage
    assert all(storage.exists(f) for f in won)
    assert not any(storage.exists(f) for f in lost)  # the loser deleted what it wrote
    assert [c.kind for c in t.history()].count("compact") == 1
    assert t.scan().to_pylist() == [{"id": k, "v": k % 10} for k in sorted([*range(6), *range(10, 16)])]


def _compact_forever(wh: str) -> None:
    t = conch.connect(wh, maintenance=OFF).table("t")
    while True:
        t.compact(policy=conch.Policy(max_l1_rows=7))
        t.write(pa.table({"id": pa.array([10_000 + os.getpid()], pa.int64()), "v": [1]}))


def _mine(t: pa.Table) -> pa.Table:
    return t.filter(pc.less(t.column("id"), 10_000))


def test_a_sigkilled_compactor_leaves_a_readable_table_and_only_garbage(tmp_path: Path) -> None:
    wh = str(tmp_path / "w")
    t = conch.connect(wh, maintenance=OFF).create_table("t", [("id", pa.int64())])
    rng = random.Random(5)
    ctx = mp.get_context("spawn")
    for round_ in range(4):
        for i in range(8):
            t.write(pa.table({"id": pa.array([round_ * 100 + i, rng.randrange(50)], pa.int64()), "v": [i, round_]}))
        want = _mine(t.scan().to_arrow())
        p = ctx.Process(target=_compact_forever, args=(wh,))
        p.start()
        time.sleep(rng.uniform(1.0, 3.0))  # spawn takes ~1 s: killed before, during or after compactions
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        got = conch.connect(wh).table("t").scan().to_arrow()
        assert _mine(got).equals(want)  # besides the compactor's own committed writes (ids >= 10,000)
    time.sleep(0.05)  # vacuum(0) keeps files younger than the file system's clock slack
    t.vacuum(older_than_seconds=0)
    left = {f.path for f in t.log.storage.list(t.id)}
    assert left <= referenced_files(t.log)  # garbage of killed compactions removed
    assert t.scan().to_arrow().num_rows >= 32
