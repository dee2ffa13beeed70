"""Group commit (`conch.log.groupcommit`): concurrent writers of one table in one process append
together, each gets its own version, and the conflict rules still hold inside a batch.

The metastore is the real SQLite one; `Gate` subclasses it only to hold the first append until
the other writers have queued behind it (so the batch they form is certain, not a matter of
thread timing) and to record what each append carried.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch
from conch.errors import CommitConflictError, MetastoreUnavailableError
from conch.log import groupcommit
from conch.log.metastore.base import LogEntry
from conch.log.metastore.sqlite import SqliteMetastore
from conch.log.wal import Transaction

OFF = conch.Policy(auto=False)


class Gate(SqliteMetastore):
    """SQLite; the first `append_batch` waits for `release`; every call's batch size is kept."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, create=True)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.sizes: list[int] = []
        self.gated = False

    def append_batch(self, table_id: str, expected_seq: int, entries: list[str]) -> list[LogEntry]:
        if self.gated and not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(60)
        self.sizes.append(len(entries))
        return super().append_batch(table_id, expected_seq, entries)


def _queued(t: conch.Table, n: int) -> None:
    """Wait until `n` commits to `t` wait in its group (behind a held leader)."""
    g = groupcommit.group(t.log.warehouse.metastore, t.log.id)
    for _ in range(6000):
        with g.cond:
            if len(g.queue) >= n:
                return
        threading.Event().wait(0.01)
    raise AssertionError(f"only {len(g.queue)} commits queued, expected {n}")


def _gated_table(tmp_path: Path) -> tuple[conch.Table, Gate]:
    ms = Gate(tmp_path / "c.sqlite")
    t = conch.connect(tmp_path / "wh", metastore=ms, maintenance=OFF).create_table("t", [("id", pa.int64())])
    t.write(pa.table({"id": [0], "v": [0.0]}))
    ms.gated, ms.sizes = True, []
    return t, ms


def _run(fns: list[Any]) -> list[Any]:
    out: list[Any] = [None] * len(fns)

    def go(i: int) -> None:
        try:
            out[i] = fns[i]()
        except Exception as e:
            out[i] = e

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(fns))]
    for th in threads:
        th.start()
    return [threads, out]


def test_queued_writers_commit_in_one_append(tmp_path: Path) -> None:
    """While one append is held, five writers queue; the next leader appends all five at once,
    each gets its own version, and the table holds every row."""
    t, ms = _gated_table(tmp_path)
    threads, out = _run([lambda: t.write(pa.table({"id": [1], "v": [1.0]}))])
    assert ms.entered.wait(60)
    more, out2 = _run([lambda k=k: t.write(pa.table({"id": [k], "v": [float(k)]})) for k in range(2, 7)])
    _queued(t, 5)
    ms.release.set()
    for th in threads + more:
        th.join()
    commits = out + out2
    assert all(isinstance(c, conch.Commit) for c in commits), commits
    assert sorted(c.seq for c in commits) == list(range(2, 8))
    assert ms.sizes == [1, 5]  # the held one, then the five queued behind it together
    assert t.scan().to_arrow().sort_by("id").column("id").to_pylist() == list(range(7))
    assert [c.seq for c in t.history()] == list(range(1, 8))


def test_conflicting_pair_in_one_batch(tmp_path: Path) -> None:
    """Two tags of one name queued in the same batch: the first commits, the second is refused
    by the conflict rules (`wal.conflicts`) exactly as if the first had committed before it; a
    blind upsert in the same batch commits."""
    t, ms = _gated_table(tmp_path)
    threads, out = _run([lambda: t.write(pa.table({"id": [1], "v": [1.0]}))])
    assert ms.entered.wait(60)
    more, out2 = _run(
        [lambda: t.tag("release"), lambda: t.tag("release"), lambda: t.write(pa.table({"id": [2], "v": [2.0]}))]
    )
    _queued(t, 3)
    ms.release.set()
    for th in threads + more:
        th.join()
    tags = out2[:2]
    assert sum(isinstance(r, CommitConflictError) for r in tags) == 1, tags
    assert sum(isinstance(r, conch.Commit) for r in tags) == 1, tags
    err = next(r for r in tags if isinstance(r, CommitConflictError))
    assert "tag 'release' was created concurrently" in str(err)
    assert isinstance(out[0], conch.Commit) and isinstance(out2[2], conch.Commit)
    assert ms.sizes == [1, 2]  # the refused tag took no slot in the append
    assert t.tags() == {"release": 1}
    assert t.scan().to_arrow().column("id").to_pylist() == [0, 1, 2]


@settings(deadline=None, max_examples=16, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    writers=st.lists(
        st.lists(st.tuples(st.integers(0, 20), st.integers(0, 1000)), min_size=1, max_size=6), min_size=2, max_size=6
    ),
    shared=st.booleans(),
    maintained=st.booleans(),
    metastore=st.sampled_from([None, "storage"]),
)
def test_concurrent_writers_match_the_model(
    tmp_path_factory: pytest.TempPathFactory, writers: Any, shared: bool, maintained: bool, metastore: str | None
) -> None:
    """N threads upsert concurrently (through one handle, or one catalog each; with the
    commit-time compaction on or off; SQLite, or the WAL as objects in storage, which cannot
    batch: batches of one): every commit gets a distinct version, and the table equals the
    model: the upserts applied in version order."""
    root = tmp_path_factory.mktemp("gc")
    policy = conch.Policy(settle_after=None) if maintained else OFF

    def connect() -> conch.Catalog:
        return conch.connect(root, maintenance=policy, metastore=metastore)

    base = connect().create_table("t", [("id", pa.int64())])
    barrier = threading.Barrier(len(writers))
    done: list[list[tuple[int, int, int]]] = [[] for _ in writers]

    def writer(w: int) -> None:
        t = base if shared else connect().table("t")
        barrier.wait()
        for k, v in writers[w]:
            c = t.write(pa.table({"id": [k], "v": [v]}))
            done[w].append((c.seq, k, v))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(len(writers))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    commits = sorted(c for d in done for c in d)
    assert len(commits) == sum(len(w) for w in writers)
    versions = [c[0] for c in commits]
    assert versions == [c.seq for c in base.history() if c.kind == "write"]  # distinct, each its own
    if not maintained:
        assert versions == list(range(1, len(commits) + 1))  # gapless
    model: dict[int, int] = {}
    for _, k, v in commits:
        model[k] = v
    got = base.scan().to_arrow().sort_by("id")
    assert got.column("id").to_pylist() == sorted(model)
    assert got.column("v").to_pylist() == [model[k] for k in sorted(model)]


def test_commit_time_compaction_runs_once_per_table(tmp_path: Path) -> None:
    """While one writer thread runs the commit-time trigger of a table, another thread's commit
    skips it instead of planning the same task and losing its commit (`run.auto`); the next
    commit after that runs it."""
    from conch.maintain.compaction import run

    t = conch.connect(tmp_path, maintenance=conch.Policy(settle_after=None)).create_table("t", [("id", pa.int64())])
    busy = run._auto_lock((t.log.warehouse.uri, t.log.id))
    with busy:  # as if another thread were compacting the table
        for k in range(4):
            t.write(pa.table({"id": [k], "v": [float(k)]}))
        assert [c.kind for c in t.history()].count("compact") == 0
    t.write(pa.table({"id": [9], "v": [9.0]}))
    assert [c.kind for c in t.history()].count("compact") == 1
    assert t.scan().to_arrow().column("id").to_pylist() == [0, 1, 2, 3, 9]


def test_leader_of_a_failed_batch_it_is_not_in_still_commits_its_own(tmp_path: Path) -> None:
    """With batches of one (a metastore without `append_batch`), the writer that leads may carry
    another writer's transaction; when that append fails, the error is the other writer's: the
    leader goes on to commit its own transaction, exactly once, and raises nothing."""
    t = conch.connect(tmp_path / "wh", maintenance=OFF).create_table("t", [("id", pa.int64())])
    t.write(pa.table({"id": [0], "v": [0.0]}))
    base = t.log._group_log()
    calls: list[list[str]] = []

    def append(seq: int, entries: list[str]) -> list[LogEntry]:
        calls.append(entries)
        if len(calls) == 1:
            raise MetastoreUnavailableError("the metastore went away for the other writer's append")
        return base.append(seq, entries)

    log = groupcommit.Log(base.name, base.state, base.entries, append, 1)
    g = groupcommit.Group()
    other = groupcommit.Pending(Transaction("write", summary="other"), -1)
    g.queue.append(other)  # queued ahead of this writer, whose thread waits for its result
    entry, rec = groupcommit.commit(g, log, Transaction("write", summary="mine"))
    assert isinstance(other.error, MetastoreUnavailableError) and other.done
    assert entry.summary == "mine" and rec.seq == 2
    assert g.queue == [] and not g.leading
    assert [c.summary for c in t.history()] == [t.history()[0].summary, "mine"]
