"""Expire and reclaim (issue 10 item 5): the time-travel horizon and vacuum under it.

The model test checks that expire + vacuum change no read at or after the horizon (every
retained version, full scans and `since` scans), that reads before it raise `TimeTravelError`
naming it, that the files only expired states used are really gone (and nothing else), and that
the bytes reported are the bytes that left the disk. Overwrites (a `Truncate` plus a rewrite,
as a Spark overwrite commits) stand in for every commit that removes files from the state, as
compaction does.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch
from conch.errors import CommitConflictError, InvalidArgumentError, TimeTravelError
from conch.files.blobs import BLOB_SUFFIX
from conch.log.metastore.sqlite import SqliteMetastore
from conch.log.wal import RegisterSnapshot, Truncate, referenced_paths
from conch.maintain.expire import state_paths
from conch.model.time import format_time
from conch.write.stage import stage_write

KEYS = 12


def overwrite(t: conch.Table, rows: list[dict[str, Any]]) -> conch.Commit:
    """Replace the whole table by `rows` in one commit (removes every live file, as a Spark
    overwrite or a compaction does)."""
    wh = t.log.warehouse
    with t.log.staging():  # a vacuum may remove its files meanwhile: a conflict, as for writes
        staged = stage_write(t.log.files, t.state(), rows, "", wh.write_options, True, False)
    txn = staged.transaction("overwrite", f"{len(rows)} rows")
    return t.log.commit(dataclasses.replace(txn, ops=(Truncate(), *txn.ops)))


def disk(t: conch.Table) -> dict[str, int]:
    """The table's files and their sizes (the object-store metastore's `_log/` excluded)."""
    return {f.path: f.size for f in t.log.storage.list(t.id) if not f.path.startswith(f"{t.id}/_")}


def rows(scan: conch.Scan) -> list[dict[str, Any]]:
    return sorted(scan.to_pylist(), key=lambda r: r["id"])


def retained_reads(t: conch.Table) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Every read the horizon promises to keep: each retained version, and `since` each
    retained version's time at the newest state."""
    h = t.log.horizon()
    out = {}
    for c in t.history():
        if c.time >= h:
            out["version", c.seq] = rows(t.scan(version=c.seq))
            out["since", c.seq] = rows(t.scan(since=c.time))
    return out


def needed_files(t: conch.Table) -> set[str]:
    """The files some retained version's state references, the registered snapshots, and the
    snapshots registered after the horizon (a flush whose registration raced the vacuum's
    forgetting: deleted by a later vacuum)."""
    h = t.log.horizon()
    need = {p for _, p in t.log.warehouse.metastore.snapshots(t.id)}
    for seq, time_us, entry in t.log.entries():
        if time_us >= h:
            need.update(state_paths(t.state_at(version=seq)))
        if time_us > h:
            need.update(referenced_paths(entry, BLOB_SUFFIX))
    return need


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.lists(st.integers(0, KEYS - 1), min_size=1, max_size=6, unique=True)),
        st.tuples(st.just("delete"), st.lists(st.integers(0, KEYS - 1), min_size=1, max_size=3, unique=True)),
        st.tuples(st.just("overwrite"), st.lists(st.integers(0, KEYS - 1), max_size=5, unique=True)),
        st.tuples(st.just("flush"), st.just([])),
        st.tuples(st.just("expire"), st.integers(1, 6)),
    ),
    min_size=3,
    max_size=14,
)


@settings(deadline=None, max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_model_reads_at_or_after_the_horizon_survive_expire_and_vacuum(tmp_path: Path, ops: list[Any]) -> None:
    where = tmp_path / f"w{time.time_ns()}"  # one warehouse per example
    # no settle: a background compaction committing during an expire or vacuum changes the disk under it
    cat = conch.connect(where, maintenance=conch.Policy(settle_after=None))
    cat.warehouse.flush_every = 4  # many snapshots
    t = cat.create_table("t", [("id", pa.int64())])
    for n, (op, arg) in enumerate(ops, 1):
        if op == "write":
            cols = "ab"[n % 2] if n % 3 else "ab"  # partial-column upserts
            t.write([{"id": k, **{c: n * 100 + k for c in cols}} for k in arg])
        elif op == "delete":
            t.delete(arg)
        elif op == "overwrite":
            overwrite(t, [{"id": k, "a": -n, "b": -k} for k in arg])
        elif op == "flush":
            t.flush()
        else:
            before = retained_reads(t)
            result = t.expire(retain_last=arg)
            assert result.horizon == t.log.horizon() and result.horizon <= max((c.time for c in t.history()), default=0)
            files_before = disk(t)
            vac = t.vacuum(older_than_seconds=0)  # its commit may flush a new snapshot
            files_after = disk(t)
            # the bytes and files reported are the ones that left the disk; expire predicted them
            gone = set(files_before) - set(files_after)
            assert (len(gone), sum(files_before[p] for p in gone)) == (vac.files_removed, vac.bytes_removed)
            assert (vac.expired_files, vac.expired_bytes) == (result.reclaimable_files, result.reclaimable_bytes)
            # nothing a retained read needs is gone, everything else is
            need = needed_files(t)
            assert need <= set(files_after)
            assert set(files_after) - need == set(), "files only expired states used are gone"
            # every read the horizon keeps is unchanged (the vacuum's own commit changes no data)
            after = retained_reads(t)
            assert all(after[k] == v for k, v in before.items() if k in after)
            for c in t.history():
                if c.time < result.horizon:
                    with pytest.raises(TimeTravelError, match=f"horizon of table 't': version {result.version} "):
                        t.scan(version=c.seq)
                    with pytest.raises(TimeTravelError, match="horizon"):
                        t.scan(asof=c.time)
    fresh = conch.connect(where).table("t")
    assert rows(fresh.scan()) == rows(t.scan())
    assert fresh.check().ok


def test_horizon_semantics(tmp_path: Path) -> None:
    # Version numbers are spelled out below: no automatic compaction commits between the writes.
    t = conch.connect(tmp_path, maintenance=conch.Policy(auto=False)).create_table("t", [("id", pa.int64())])
    commits = [t.write([{"id": i % 3, "v": i}]) for i in range(6)]
    assert t.expire(older_than="7d").horizon == 0  # nothing is a week old: nothing expired
    r = t.expire(retain_last=3)
    assert (r.version, r.horizon) == (4, commits[3].time) and r.commit is not None and r.commit.kind == "expire"
    assert str(r).startswith("horizon moved to version 4")
    # reads at the horizon and after it work; `since` before it too (it needs no expired state)
    assert t.scan(asof=commits[3].time).to_pylist() == t.scan(version=4).to_pylist()
    assert len(t.scan(since=commits[0].time).to_pylist()) == 3
    with pytest.raises(TimeTravelError, match=re.escape(f"version 4 at {format_time(r.horizon)} (time {r.horizon})")):
        t.scan(asof=commits[3].time - 1)
    with pytest.raises(TimeTravelError, match=r"^version 2 "):
        t.scan(version=2)
    with pytest.raises(TimeTravelError, match="horizon"):
        t.state_at(version=1)
    # it never moves back, and a no-op commits nothing
    again = t.expire(retain_last=5)
    assert (again.horizon, again.commit) == (r.horizon, None) and str(again).startswith("horizon stays at")
    # it never passes the newest commit: older_than="0s" keeps the current state readable
    latest = t.expire(older_than="0s")
    assert latest.horizon == t.history()[-2].time  # the newest commit before the expire itself
    assert t.scan().to_pylist() == t.scan(version=latest.version).to_pylist()
    assert t.state().horizon == latest.horizon


def test_older_than_forms(tmp_path: Path) -> None:
    # versions are spelled out: no settle commits while the test sleeps between them
    cat = conch.connect(tmp_path / "w", maintenance=conch.Policy(settle_after=None))
    t = cat.create_table("t", [("id", pa.int64())])
    c1 = t.write([{"id": 1}])
    c2 = t.write([{"id": 2}])
    time.sleep(0.05)
    t.write([{"id": 3}])
    assert t.expire(older_than=c1.datetime).version == 1  # an absolute time: the version live then
    assert t.expire(older_than=format_time(c2.time)).version == 2  # an ISO string
    assert t.expire(older_than=c2.time).version == 2  # an int: µs since the epoch, a commit time (was OverflowError)
    assert t.expire(older_than=str(c2.time)).version == 2  # the same as the CLI passes it
    for ago in (timedelta(milliseconds=10), "0.01s", "0.01S"):  # ages: durations before now
        newest = t.history()[-1].seq  # every commit is a version (expires too)
        time.sleep(0.05)
        assert t.expire(older_than=ago).version == newest
    assert t.expire(older_than=timedelta(days=1), retain_last=1).commit is None  # both: the earlier
    bad_values = (-1, 0, 3600, 0.01, float("nan"), float("inf"), 10**20, 2**64, "7x", "yesterday", 1.5j)
    bad_values += ("-3s", timedelta(seconds=-1), "1" + "0" * 400 + "d", "10000-01-01", "3600", True)
    for bad in bad_values:
        with pytest.raises(InvalidArgumentError, match="older_than"):
            t.expire(older_than=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"'3600s' for 3600 seconds"):  # an int is a point, not an age
        t.expire(older_than=3600)
    for n in (0, -2, True, 1.5):
        with pytest.raises(InvalidArgumentError, match="retain_last"):
            t.expire(retain_last=n)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="retain_last"):
        t.expire()
    assert [c.kind for c in t.history()].count("expire") == 5  # failed calls committed nothing


def test_time_arguments_follow_one_rule(tmp_path: Path) -> None:
    """An int is µs since the epoch everywhere; an age is a duration; out of range is typed
    (`asof=2**64` reached SQLite as an OverflowError)."""
    from conch.model.time import to_cutoff, to_time

    t = conch.connect(tmp_path, maintenance=conch.Policy(auto=False)).create_table("t", [("id", pa.int64())])
    c = t.write([{"id": 1}])
    for bad in (2**63, 2**64, 10**30, -(2**63), "99999999999999999999999", "-99999999999999999999999"):
        for what in ("asof", "since"):
            with pytest.raises(TimeTravelError, match=what):
                t.scan(**{what: bad}).to_arrow()
    assert to_time(c.time) == to_cutoff(c.time) == to_cutoff(str(c.time)) == c.time
    assert to_cutoff("0s", now_us=c.time) == to_cutoff(timedelta(0), now_us=c.time) == c.time
    assert to_cutoff("2d", now_us=c.time) == c.time - 2 * 86_400_000_000
    assert to_cutoff("100000w", now_us=c.time) == 0  # older than the epoch: nothing is
    assert to_time(format_time(c.time)) == c.time  # exact to the µs, far from 1970 too
    assert to_time("9999-12-31T23:59:59.999999") == to_time(datetime.max) == 253_402_300_799_999_999


def test_old_snapshots_are_forgotten_and_deleted(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "w")
    cat.warehouse.flush_every = 5
    t = cat.create_table("t", [("id", pa.int64())])
    for i in range(30):
        t.write([{"id": i % 7, "v": i}])
    ms = cat.warehouse.metastore
    snaps = ms.snapshots(t.id)
    assert len(snaps) >= 5
    r = t.expire(retain_last=8)
    base = ms.latest_snapshot(t.id, r.version)
    assert base is not None
    vac = t.vacuum(older_than_seconds=0)
    left = ms.snapshots(t.id)
    assert left[0] == base and all(s >= base[0] for s, _ in left)
    assert vac.snapshots_removed == len(snaps) - len([s for s in snaps if s[0] >= base[0]])
    files = disk(t)
    assert not [p for s, p in snaps if s < base[0] and p in files], "old snapshot files are deleted"
    assert all(p in files for _, p in left)
    again = conch.connect(tmp_path / "w").table("t")
    assert again.scan(version=r.version).to_pylist() == t.scan(version=r.version).to_pylist()
    assert again.check().ok


def test_pinned_reader_keeps_its_files_for_the_grace_period(catalog: conch.Catalog) -> None:
    """A scan opened before an expire keeps reading: vacuum reclaims under the horizon of the
    expires older than its grace period; with grace 0 the files go."""
    t = catalog.create_table("t", [("id", pa.int64())])
    t.write([{"id": i, "v": i} for i in range(5)])
    pinned = t.scan(version=1)  # resolves its state now, reads later
    overwrite(t, [{"id": 9, "v": 9}])
    r = t.expire(retain_last=1)
    assert r.reclaimable_files == 2  # the first write's key space and fragment
    kept = t.vacuum(older_than_seconds=60)
    assert (kept.expired_files, kept.horizon) == (0, 0)  # the expire is younger than the grace
    assert kept.expired_held == 2 and "grace period of 1m held back 2 files" in " ".join(str(kept).split())
    assert len(pinned.to_pylist()) == 5
    gone = t.vacuum(older_than_seconds=0)
    assert (gone.expired_files, gone.expired_bytes) == (2, r.reclaimable_bytes) and gone.horizon == r.horizon
    assert gone.expired_held == 0 and "held back" not in str(gone)
    with pytest.raises(TimeTravelError):
        t.scan(version=1)


def test_vacuum_never_deletes_the_object_store_wal(tmp_path: Path) -> None:
    """The object-store metastore keeps `<table>/_log/` beside the data: not vacuum's."""
    cat = conch.connect(
        tmp_path / "w", metastore="storage", maintenance=conch.Policy(auto=False)
    )  # history() counts commits
    t = cat.create_table("t", [("id", pa.int64())])
    for i in range(3):
        t.write([{"id": i}])
    t.flush()
    time.sleep(0.05)
    assert t.vacuum(older_than_seconds=0).files_removed == 0
    again = conch.connect(tmp_path / "w", metastore="storage").table("t")
    assert len(again.history()) == 5 and again.scan().to_arrow().num_rows == 3


def test_cli_expire_and_vacuum(tmp_path: Path) -> None:
    w = str(tmp_path / "w")
    t = conch.connect(w, maintenance=conch.Policy(auto=False)).create_table(
        "t", [("id", pa.int64())]
    )  # versions are commits
    first = t.write([{"id": 1, "v": 1}])
    overwrite(t, [{"id": 2, "v": 2}])
    t.write([{"id": 3, "v": 3}])

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "conch.apps.cli", "--warehouse", w, *args]
        env = {"COLUMNS": "200", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}  # this checkout's conch
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)

    out = cli("expire", "t", "--retain-last", "2")
    assert out.returncode == 0 and "horizon moved to version 2" in out.stdout and "2 files" in out.stdout, out
    bad = cli("scan", "t", "--asof", str(first.time))
    assert bad.returncode == 2 and "time-travel horizon" in bad.stderr and "version 2" in bad.stderr
    held = cli("vacuum", "t")  # the default grace period, 1h: the expire is seconds old
    assert held.returncode == 0 and "removed 0 files" in held.stdout, held
    assert "grace period of 1h held back" in " ".join(held.stdout.split()), held.stdout
    vac = cli("vacuum", "t", "--older-than", "0s")  # the same forms as expire's --older-than
    assert vac.returncode == 0 and "removed 2 files" in vac.stdout and "of which 2 files" in vac.stdout, vac
    assert "held back" not in vac.stdout
    assert cli("expire", "t", "--older-than", "3x").returncode == 2
    for bad in ("0", "3600", "-1s", "soon", "99999999999999999999999"):  # an int is a point in time: µs
        out = cli("vacuum", "t", "--older-than", bad)
        assert out.returncode == 2 and "older_than" in out.stderr and "Traceback" not in out.stderr, (bad, out)
    out = cli("expire", "t", "--older-than", "3600")
    assert out.returncode == 2 and "'3600s' for 3600 seconds" in " ".join(out.stderr.split()), out
    assert cli("expire", "t", "--older-than", str(first.time)).returncode == 0  # a commit time, as history shows


# ----- races ---------------------------------------------------------------------------------------
class IndexesLate(SqliteMetastore):
    """The warehouse's SQLite metastore, except that indexing a snapshot first runs `meanwhile`
    once: what other processes commit between a flush's registration in the log and its index
    step (`TableLog.flush`) lands exactly there."""

    def __init__(self, path: Path, meanwhile: Callable[[], None]) -> None:
        super().__init__(path)
        self.meanwhile: Callable[[], None] | None = meanwhile

    def add_snapshot(self, table_id: str, seq: int, path: str) -> None:
        if self.meanwhile is not None:
            run, self.meanwhile = self.meanwhile, None
            run()
        super().add_snapshot(table_id, seq, path)


def flush_interleaved(tmp_path: Path, meanwhile: Callable[[conch.Table], None]) -> tuple[conch.Table, int, str]:
    """A table with 3 versions flushed by a handle whose index step waits for `meanwhile` (run
    on another handle); returns the other handle, the flushed version and its snapshot."""
    w = tmp_path / "w"
    other = conch.connect(w, maintenance=conch.Policy(auto=False)).create_table("t", [("id", pa.int64())])
    other.log.warehouse.flush_every = 0
    for i in range(3):
        other.write([{"id": i, "v": i}])
    ms = IndexesLate(w / "_catalog.sqlite", lambda: meanwhile(other))
    flushing = conch.connect(w, metastore=ms, maintenance=conch.Policy(auto=False)).table("t")
    seq = flushing.flush()
    (path,) = [op.path for _, _, e in other.log.entries() for op in e.ops if isinstance(op, RegisterSnapshot)][:1]
    return other, seq, path


def test_vacuum_keeps_a_snapshot_registered_in_the_log_before_it_is_indexed(tmp_path: Path) -> None:
    """A flush registers its snapshot in the log, then indexes it in the metastore. A vacuum in
    between, under a horizon past the registration, must keep the file: once indexed it is the
    snapshot readers at the horizon load (it used to be deleted, and every later load of the
    horizon's state raised `CorruptFileError`: registered in the metastore, not in storage)."""

    def meanwhile(t: conch.Table) -> None:
        for i in range(3, 5):
            t.write([{"id": i, "v": i}])
        t.expire(retain_last=1)
        t.vacuum(older_than_seconds=0)

    t, seq, path = flush_interleaved(tmp_path, meanwhile)
    assert t.log.warehouse.metastore.snapshots(t.id) == [(seq, path)]
    assert path in disk(t)
    assert t.check().ok
    t.vacuum(older_than_seconds=0)  # loads the state at the horizon from that snapshot
    assert rows(t.scan()) == [{"id": i, "v": i} for i in range(5)]
    assert needed_files(t) == set(disk(t))


def test_a_snapshot_vacuumed_before_it_is_indexed_is_forgotten_again(tmp_path: Path) -> None:
    """A flush's snapshot that a vacuum may reclaim before it is indexed (a newer snapshot
    already loads every state at or after the horizon) must not stay indexed without its file."""

    def meanwhile(t: conch.Table) -> None:
        for i in range(3, 5):
            t.write([{"id": i, "v": i}])
        t.flush()  # the newer snapshot
        t.write([{"id": 5, "v": 5}])
        t.expire(retain_last=1)
        t.vacuum(older_than_seconds=0)

    t, seq, _ = flush_interleaved(tmp_path, meanwhile)
    assert all(s > seq for s, _ in t.log.warehouse.metastore.snapshots(t.id))
    assert t.check().ok, t.check()
    t.vacuum(older_than_seconds=0)
    assert rows(t.scan()) == [{"id": i, "v": i} for i in range(6)]
    assert needed_files(t) == set(disk(t))


def _race(warehouse: str, role: str, stop: threading.Event, out: dict[str, Any]) -> None:
    # no settle: one committing after the race would stage files while the test compares the disk
    cat = conch.connect(warehouse, maintenance=conch.Policy(settle_after=None))
    cat.warehouse.flush_every = 7
    t = cat.table("t")
    done = conflicts = 0
    errors: list[str] = []
    i = 0
    while not stop.is_set() or done == 0:
        i += 1
        try:
            if role == "writer":
                t.write([{"id": i % 20, "v": i}])
            elif role == "overwriter":  # removes every live file, as a compaction does
                overwrite(t, [{"id": k, "v": i} for k in range(20)])
            elif role == "flush":
                t.flush()
            elif role == "expire":
                t.expire(retain_last=2)
            elif role == "vacuum":
                t.vacuum(older_than_seconds=0)
            else:  # a reader of the newest state: never expired, never fails
                assert len(t.scan().to_pylist()) == 20
            done += 1
        except CommitConflictError:
            conflicts += 1
        except Exception:
            errors.append(traceback.format_exc(limit=6))
            if len(errors) > 3:
                break
    out[role] = (done, conflicts, errors)


def test_expire_and_vacuum_race_writers_flushes_and_readers(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "w")
    t = conch.connect(warehouse).create_table("t", [("id", pa.int64())])
    t.write([{"id": k, "v": 0} for k in range(20)])
    roles = ["writer", "overwriter", "flush", "expire", "vacuum", "reader"]
    stop = threading.Event()
    out: dict[str, Any] = {}
    threads = [threading.Thread(target=_race, args=(warehouse, r, stop, out)) for r in roles]
    for th in threads:
        th.start()
    time.sleep(4)
    stop.set()
    for th in threads:
        th.join(120)
    for role, (done, _, errors) in out.items():
        assert not errors, f"{role} raised:\n" + "\n".join(errors)
        assert done > 0, role
    t = conch.connect(warehouse).table("t")
    assert t.check().ok
    vac = t.vacuum(older_than_seconds=0)
    assert needed_files(t) == set(disk(t)), vac
    h = t.log.horizon()
    assert h > 0
    for c in t.history():
        if c.time >= h:
            assert len(t.scan(version=c.seq).to_pylist()) == 20
        else:
            with pytest.raises(TimeTravelError):
                t.scan(version=c.seq)


@pytest.mark.spark
def test_spark_read_before_the_horizon_names_it(tmp_path: Path) -> None:
    from conftest_spark import spark_session

    cat = conch.connect(
        tmp_path / "wh", maintenance=conch.Policy(auto=False)
    )  # retain_last=1 keeps c2, not a compaction after it
    t = cat.create_table("t", [("id", pa.int64())])
    c1 = t.write({"id": [1, 2], "x": [1.0, 2.0]})
    c2 = t.write({"id": [3], "x": [3.0]})
    t.expire(retain_last=1)
    spark = spark_session()
    path = str(tmp_path / "wh" / "t")
    assert spark.read.format("conch").option("asof", str(c2.time)).load(path).count() == 3
    with pytest.raises(Exception, match="time-travel horizon"):
        spark.read.format("conch").option("asof", str(c1.time)).load(path).count()
    since = spark.read.format("conch").option("since", str(c1.time)).load(path)
    assert since.count() == 3  # `since` before the horizon needs no expired state
