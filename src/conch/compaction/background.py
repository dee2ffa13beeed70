"""Settling: the writing process folds its tables' L0 runs into L1 in the background once it
stops writing to them (issue 10 item 6; measured in `docs/compaction.md`).

Why a second trigger: the commit-time trigger (`run.auto`) must stay cheap, so above
`Policy.small_bytes` it leaves L0 runs over L1 until they add up (size-tiered merges, a major at
`l1_ratio`). But a full scan over any L0 run of scattered keys cannot be zero-copy: every batch
of every column is spliced (`conch.scan.overlay`), so a 4-key upsert over a 259k-row table
already costs ~1.4× the scan of the same rows written once, and thousands of 200-row random
upserts 1.8–2.6×. Folding the L0 runs in at every commit would rewrite the component per commit
(work quadratic in the history). So the fold waits until the writer pauses: once a table has
had no write, delete or enrich from this process for `Policy.settle_after` seconds, a daemon
thread runs a major compaction of each of its components with L0 runs whose input fits
`Policy.auto_budget_bytes` (larger ones stay listed by `maintenance_plan()` for
`Table.compact()`), one task at a time, and stops early when a commit arrives (the next pause
settles again). A writer that pauses after every commit would otherwise pay a component rewrite
per commit, so settles of one table are spaced to take at most `MAX_SHARE` (10 %) of wall time.
`Table.wait_for_maintenance()` settles now instead of after the pause, and waits.

Concurrency is any compaction's (`run.py`): a write or delete committed while the settle runs
stays newer than its output; losing to another compactor makes it re-plan or give up. One
worker thread per process, started on first use (again in a forked child). `Catalog.close()`
drops its warehouse's pending settles and waits for a running one to stop after its current
task (the next writer or `Table.compact()` folds what is left). At interpreter exit
no new settle starts and what is pending is left to the next writer or `Table.compact()`; a
running one is given `EXIT_WAIT_SECONDS` to end, but by then Python refuses new thread-pool
work, so it usually fails before committing: like any failed compaction it leaves the table
unchanged and its files to `vacuum`.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import threading
import time
import warnings
from collections.abc import Callable

from conch.compaction.plan import CompactionTask, plan, within_budget
from conch.compaction.run import auto, commit, execute
from conch.errors import CommitConflictError, TableNotFoundError
from conch.manifest import TableState
from conch.policy import Policy
from conch.tablelog import TableLog
from conch.txn import Commit

EXIT_WAIT_SECONDS = 10.0  # at most this long for a running settle at interpreter exit
MAX_TASKS = 256  # per settle (a safety bound)
MAX_SHARE = 0.1  # settles of one table take at most this share of wall time (slow steady writers)

_Key = tuple[str, str]  # (warehouse URI, table id)


def _key(log: TableLog) -> _Key:
    return (log.warehouse.uri, log.id)


class Settler:
    """The process's settle queue and its worker thread (module doc)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[_Key, tuple[float, TableLog]] = {}  # monotonic time it is due, and a handle
        self._running: set[_Key] = set()
        self._spacing: dict[_Key, float] = {}  # earliest next settle after the last one (duty cycle)
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._forgetting: set[str] = set()  # warehouse URIs being closed: their settles stop

    def schedule(self, log: TableLog, delay: float) -> None:
        """Settle `log`'s table `delay` seconds from now (a later call postpones it)."""
        with self._cond:
            if self._stopping:
                return
            key = _key(log)
            self._due[key] = (max(time.monotonic() + delay, self._spacing.get(key, 0.0)), log)
            self._ensure_worker()
            self._cond.notify_all()

    def _ensure_worker(self) -> None:
        """Start the worker thread if it is not running (first use, or it died: a waiter must
        never wait on a thread that is gone). Called with the lock held."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._work, name="conch-settle", daemon=True)
            self._thread.start()

    def pending(self, log: TableLog) -> bool:
        """Whether this process still has to settle, or is settling, `log`'s table."""
        with self._cond:
            return _key(log) in self._due or _key(log) in self._running

    def wait(self, log: TableLog, timeout: float | None) -> bool:
        """Settle `log`'s table now if it is pending, and wait for it (at most `timeout`
        seconds). True when nothing is left pending."""
        key = _key(log)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if key in self._due:
                self._due[key] = (time.monotonic(), self._due[key][1])
                self._ensure_worker()
                self._cond.notify_all()
            while key in self._due or key in self._running:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def stop(self) -> None:
        """At exit: start nothing new, wait for a running settle."""
        with self._cond:
            self._stopping = True
            self._due.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(EXIT_WAIT_SECONDS)

    def forget(self, uri: str, timeout: float = EXIT_WAIT_SECONDS) -> None:
        """A catalog of warehouse `uri` is closing: drop its pending settles, and wait (at most
        `timeout` seconds) for a running one to stop after its current task."""
        deadline = time.monotonic() + timeout
        with self._cond:
            for key in [k for k in self._due if k[0] == uri]:
                del self._due[key]
            self._forgetting.add(uri)
            try:
                while any(k[0] == uri for k in self._running) and (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)
            finally:
                self._forgetting.discard(uri)

    def _next(self) -> tuple[_Key, TableLog] | None:
        """The next due table (waiting for it), or None when stopping."""
        with self._cond:
            while not self._stopping:
                now = time.monotonic()
                due = [k for k, (at, _) in self._due.items() if at <= now]
                if due:
                    key = min(due, key=lambda k: self._due[k][0])
                    log = self._due.pop(key)[1]
                    self._running.add(key)
                    return key, log
                self._cond.wait(min((at for at, _ in self._due.values()), default=now + 3600) - now)
            return None

    def _work(self) -> None:
        while (item := self._next()) is not None:
            key, log = item
            started = time.monotonic()
            try:
                settle(log, functools.partial(self._interrupted, key))
            except (CommitConflictError, TableNotFoundError):
                pass  # lost to another compactor after its re-plans, or the table was dropped
            except Exception as e:  # a background thread has no caller to raise to
                if not self._closing(key):  # at exit or close, failing is expected (module doc)
                    with contextlib.suppress(Exception):  # warnings made errors: the worker lives on
                        warnings.warn(
                            f"background compaction of table {log.name!r} stopped: {e!r}", RuntimeWarning, stacklevel=1
                        )
            finally:
                with self._cond:
                    now = time.monotonic()
                    self._spacing[key] = now + (now - started) * (1 / MAX_SHARE - 1)
                    self._running.discard(key)
                    self._cond.notify_all()

    def _interrupted(self, key: _Key) -> bool:
        """Whether the process is exiting, the table's catalog is closing, or a commit
        re-scheduled the table."""
        with self._cond:
            return self._closing(key) or key in self._due

    def _closing(self, key: _Key) -> bool:
        return self._stopping or key[0] in self._forgetting


def settle(log: TableLog, interrupted: Callable[[], bool] | None = None) -> int:
    """Major-compact, one task at a time, each component of `log`'s table that has L0 runs and
    fits the automatic budget, until none is left, `interrupted()` says a commit came or the
    process is exiting, or `MAX_TASKS` tasks ran (a safety bound: every task removes L0 runs,
    so the loop ends anyway). A task that lost to a concurrent compactor is planned again.
    Returns the tasks committed."""
    policy = log.warehouse.maintenance
    done = 0
    for _ in range(MAX_TASKS):
        if interrupted is not None and interrupted():
            break
        state = log.state()
        task = next(iter(settle_tasks(state, policy)), None)  # planned on the state it runs on
        if task is None:
            break
        try:
            commit(log, task, [execute(log, state, task, policy=policy)], state.seq)
        except CommitConflictError:
            continue  # another compactor removed an input meanwhile: plan again
        done += 1
    return done


def settle_tasks(state: TableState, policy: Policy) -> list[CompactionTask]:
    """The majors a settle runs on `state`: the forced ones that fold L0 runs into other runs
    (not a lone L0 run, already one run to read; not components that only hold several L1 runs)
    and fit the automatic budget."""
    l0 = {i for i, ks in state.key_spaces.items() if ks.lsm == 0}
    return [
        t
        for t in plan(state.key_spaces, state.fragments, policy, force=True).tasks
        if within_budget(t, policy) and len(t.inputs) >= 2 and l0 & set(t.inputs)
    ]


_settler = Settler()


def _reset_after_fork() -> None:
    global _settler
    _settler = Settler()  # the parent's worker thread does not exist in the child


os.register_at_fork(after_in_child=_reset_after_fork)
atexit.register(lambda: _settler.stop())


def after_commit(log: TableLog, done: Commit | None = None) -> None:
    """The automatic maintenance after a write, delete or enrich (`Warehouse.after_commit`):
    the bounded inline trigger (`run.auto`, bounded by what the commit `done` wrote), then the
    settle after the writer's pause."""
    auto(log, done)
    schedule(log)


def schedule(log: TableLog) -> None:
    """Settle the table after the policy's pause, if it has L0 runs left that the settle would
    fold (nothing when `Policy.settle_after` is None)."""
    policy = log.warehouse.maintenance
    if policy.settle_after is None:
        return
    if _settler.pending(log) or _needs_settling(log):
        _settler.schedule(log, policy.settle_after)


def _needs_settling(log: TableLog) -> bool:
    return bool(settle_tasks(log.state(), log.warehouse.maintenance))


def pending(log: TableLog) -> bool:
    """Whether this process has a settle of `log`'s table scheduled or running."""
    return _settler.pending(log)


def forget(warehouse_uri: str) -> None:
    """`Catalog.close()`: no settle of the warehouse's tables runs after it (module doc)."""
    _settler.forget(warehouse_uri)


def wait(log: TableLog, timeout: float | None = None) -> bool:
    """`Table.wait_for_maintenance`: settle `log`'s table now and wait for it, whether this
    process's commits scheduled it or another process wrote the runs (a Spark job commits from a
    Python worker of its own); True when nothing is left pending. Nothing when the policy has
    automatic or background maintenance off."""
    policy = log.warehouse.maintenance
    if policy.auto and policy.settle_after is not None and not _settler.pending(log) and _needs_settling(log):
        _settler.schedule(log, 0.0)
    return _settler.wait(log, timeout)
