"""Concurrency and crash safety: real processes, real SQLite, real SIGKILL."""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

import conch
from conch.errors import CommitConflictError
from conch.log.wal import CLOCK_SLACK_US
from helpers import local_path

WRITERS = 4
COMMITS = 25


def _writer(warehouse: str, proc: int, out: mp.Queue) -> None:
    t = conch.connect(warehouse).table("t")
    commits = []
    for i in range(COMMITS):
        c = t.write(pa.table({"id": pa.array([proc * 1000 + i], pa.int64()), "proc": [proc], "i": [i]}))
        commits.append((c.seq, c.time))
    out.put((proc, commits))


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "w")
    conch.connect(warehouse).create_table(
        "t", [("id", pa.int64())], pa.schema([("proc", pa.int64()), ("i", pa.int64())])
    )
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(warehouse, p, out)) for p in range(WRITERS)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    t = conch.connect(warehouse).table("t")
    history = t.history()
    assert [c.seq for c in history] == list(range(1, len(history) + 1))
    assert [c.kind for c in history].count("write") == WRITERS * COMMITS
    # auto flushes register snapshots through the log; automatic compaction (the default policy)
    # runs in the writers beside each other's commits and must lose nothing either
    assert {c.kind for c in history} <= {"write", "flush", "compact"}
    times = [c.time for c in history]
    assert all(a < b for a, b in itertools.pairwise(times)), "commit times must strictly increase"
    by_seq = {c.seq: c.time for c in history}
    for commits in results.values():
        assert [by_seq[s] for s, _ in commits] == [tm for _, tm in commits], "each writer saw its real commit"
        assert [tm for _, tm in commits] == sorted(tm for _, tm in commits)
    rows = t.scan().to_pylist()
    assert rows == [{"id": p * 1000 + i, "proc": p, "i": i} for p in range(WRITERS) for i in range(COMMITS)]


def test_cas_append_rejects_a_stale_sequence(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("id", pa.int64())])
    t.write([{"id": 1}])
    with pytest.raises(CommitConflictError):
        catalog.warehouse.metastore.append(t.id, 0, '{"kind":"write","ops":[]}')
    assert len(t.history()) == 1


CRASH_AFTER_FILES = """
import os, signal, sys, pyarrow as pa, conch
from conch.write.stage import stage_write
t = conch.connect(sys.argv[1]).table("t")
rows = pa.table({"id": pa.array(range(100, 200), pa.int64()), "v": pa.array(range(100), pa.int64())})
staged = stage_write(t.log.files, t.state(), rows)
assert staged.files  # every file is written, nothing is committed yet
os.kill(os.getpid(), signal.SIGKILL)
"""

CRASH_MID_WRITE = """
import os, signal, sys, pyarrow as pa, conch
from conch.files.fragments import VortexFormat
written = []
original = VortexFormat._encode  # every file's encoding, whichever thread runs it
def dying_write(self, job, *args, **kwargs):
    written.append(job.path)
    if len(written) == 2:  # the key space is written, its fragment is not
        os.kill(os.getpid(), signal.SIGKILL)
    return original(self, job, *args, **kwargs)
VortexFormat._encode = dying_write
opts = conch.WriteOptions(chunk_rows=10, write_threads=1)  # one file after the other
t = conch.connect(sys.argv[1], write_options=opts).table("t")
t.write(pa.table({"id": pa.array(range(100, 200), pa.int64()), "v": pa.array(range(100), pa.int64())}))
"""


@pytest.mark.parametrize("script", [CRASH_AFTER_FILES, CRASH_MID_WRITE], ids=["after-files", "mid-write"])
def test_killed_writer_leaves_last_commit_and_vacuum_removes_orphans(tmp_path: Path, script: str) -> None:
    warehouse = str(tmp_path / "w")
    t = conch.connect(warehouse).create_table("t", [("id", pa.int64())])
    t.write(pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array(range(10), pa.int64())}))
    before = t.scan().to_arrow()
    files_before = {f.path for f in t.log.storage.list(t.id)}

    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script), warehouse], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]

    t = conch.connect(warehouse).table("t")
    assert t.scan().to_arrow().equals(before)
    assert len(t.history()) == 1
    orphans = {f.path for f in t.log.storage.list(t.id)} - files_before
    assert orphans, "the killed writer left files behind"

    held = t.vacuum(older_than_seconds=3600)
    assert held.files_removed == 0, "the grace period protects in-flight writes"
    assert held.files_held == len(orphans) and f"held back {len(orphans)} unreferenced files" in " ".join(
        str(held).split()
    )
    # vacuum keeps files younger than the clock slack even with no grace period: let it pass
    time.sleep(CLOCK_SLACK_US / 1e6 + 0.05)
    dry = t.vacuum(older_than_seconds=0, dry_run=True)
    assert dry.files_removed == len(orphans)
    result = t.vacuum(older_than_seconds=0)
    assert result.files_removed == len(orphans)
    assert {f.path for f in t.log.storage.list(t.id)} == files_before
    assert conch.connect(warehouse).table("t").scan().to_arrow().equals(before)
    t.write([{"id": 500, "v": 5}])
    assert t.scan().to_arrow().num_rows == 11


def test_vacuum_keeps_files_needed_for_time_travel(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("id", pa.int64())])
    c1 = t.write([{"id": 1, "v": 1}])
    t.write(pa.table({"id": pa.array([1], pa.int64()), "v": pa.array([2], pa.int64())}))
    t.flush()
    assert t.vacuum(older_than_seconds=0).files_removed == 0
    assert t.scan(asof=c1.time).to_pylist() == [{"id": 1, "v": 1}]
    assert t.scan().to_pylist() == [{"id": 1, "v": 2}]


def test_flush_then_reopen_reads_snapshot_plus_tail(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "w")
    t = conch.connect(warehouse, maintenance=conch.Policy(auto=False)).create_table(
        "t", [("id", pa.int64())]
    )  # history() counts commits
    for i in range(5):
        t.write([{"id": i, "v": i}])
    seq = t.flush()
    t.write([{"id": 0, "v": 100}])
    t.delete([1])
    reopened = conch.connect(warehouse).table("t")
    assert reopened.log.warehouse.metastore.latest_snapshot(reopened.id) == (
        seq,
        reopened.log.warehouse.metastore.latest_snapshot(reopened.id)[1],
    )
    assert reopened.scan().to_pylist() == [{"id": 0, "v": 100}, {"id": 2, "v": 2}, {"id": 3, "v": 3}, {"id": 4, "v": 4}]
    assert reopened.scan(asof=reopened.history()[2].time).to_pylist() == [{"id": i, "v": i} for i in range(3)]
    assert os.path.exists(
        local_path(reopened.log.storage, reopened.log.warehouse.metastore.latest_snapshot(reopened.id)[1])
    )


def test_vacuum_keeps_blob_files_of_live_data(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("id", pa.int64())])
    t.write([{"id": i, "audio": {"bytes": bytes([i]) * 4096}} for i in range(20)])
    assert any(f.blob_columns for f in t.state().fragments.values()), "values of 4 KB go out of line"
    t.vacuum(older_than_seconds=0)
    catalog.warehouse.format.clear_cache()
    assert t.scan("audio.bytes", keys=[3]).to_pylist() == [{"id": 3, "audio": {"bytes": bytes([3]) * 4096}}]


def test_concurrent_commuting_schema_changes_rebase(catalog: conch.Catalog) -> None:
    from conch.write.stage import stage_write

    t = catalog.create_table("t", [("id", pa.int64())])
    t.write([{"id": 1, "x": 1}])
    state = t.state()
    child = pa.table({"id": [1], "clips": pa.array([[{"$": 1}]], pa.list_(pa.struct([("$", pa.int64())])))})
    adds_level = stage_write(t.log.files, state, child)  # a new level, no new value column
    adds_column = stage_write(t.log.files, state, pa.table({"id": [1], "y": ["a"]}))
    t.log.commit(adds_column.transaction("write"))
    t.log.commit(adds_level.transaction("write"))  # disjoint additions commute: rebased, not refused
    assert t.schema.columns == ["x", "y"]
    assert "clips" in t.state().schema.levels
    t.write([{"id": 2, "z": 2.5}])  # gets a fresh column id: y's data stays y's
    assert t.scan().to_pylist() == [{"id": 1, "x": 1, "y": "a", "z": None}, {"id": 2, "x": None, "y": None, "z": 2.5}]


def test_concurrent_clashing_schema_changes_conflict(catalog: conch.Catalog) -> None:
    from conch.write.stage import stage_write

    t = catalog.create_table("t", [("id", pa.int64())])
    t.write([{"id": 1, "x": 1}])
    state = t.state()
    as_string = stage_write(t.log.files, state, pa.table({"id": [2], "y": ["a"]}))
    as_float = stage_write(t.log.files, state, pa.table({"id": [3], "y": [1.5]}))
    as_group = stage_write(t.log.files, state, pa.table({"id": [4], "y": pa.array([{"a": 1}])}))
    t.log.commit(as_string.transaction("write"))
    for loser in (as_float, as_group):
        with pytest.raises(CommitConflictError, match="'y"):
            t.log.commit(loser.transaction("write"))
        assert not any(t.log.storage.exists(f) for f in loser.files), "a conflicted write's files are removed"
    assert t.schema.columns == ["x", "y"]
    assert t.scan().to_pylist() == [{"id": 1, "x": 1, "y": None}, {"id": 2, "x": None, "y": "a"}]


def test_commit_after_a_vacuum_removed_its_staged_files_fails(catalog: conch.Catalog) -> None:
    from conch.write.stage import stage_write

    t = catalog.create_table("t", [("id", pa.int64())])
    t.write([{"id": 1, "v": 1}])
    staged = stage_write(t.log.files, t.state(), pa.table({"id": [2], "v": [2]}))
    t.vacuum(older_than_seconds=0)  # the staged files are unreferenced and past the cutoff
    with pytest.raises(CommitConflictError, match=r"gone|vacuum"):
        t.log.commit(staged.transaction("write"))
    assert t.scan().to_pylist() == [{"id": 1, "v": 1}]


def test_staged_files_older_than_a_later_vacuum_cutoff_conflict(catalog: conch.Catalog) -> None:
    """Even when the files survive (e.g. vacuum ran dry or lost a race), a commit after a vacuum
    whose cutoff is newer than the write's start must not go through."""
    from conch.write.stage import stage_write

    t = catalog.create_table("t", [("id", pa.int64())])
    t.write([{"id": 1, "v": 1}])
    staged = stage_write(t.log.files, t.state(), pa.table({"id": [2], "v": [2]}))
    staged.started -= 10  # the write began well before the vacuum's cutoff below
    t.vacuum(older_than_seconds=5)  # the files are newer than 5 s: kept, but the cutoff is logged
    assert all(t.log.storage.exists(f) for f in staged.files)
    with pytest.raises(CommitConflictError, match="vacuum"):
        t.log.commit(staged.transaction("write"))
