"""The writing process's maintenance thread: settling (it folds its tables' L0 runs into L1 once
it stops writing to them; issue 10 item 6; measured in `docs/compaction.md`) and, with
`Policy(background=True)`, the commit-time trigger itself.

**The trigger off the writer's thread** (issue 30). By default the commit-time trigger
(`run.auto`) runs in the writer's thread after each commit, so a write's time includes the
compaction it caused. With `Policy.background` a commit queues it instead (`Settler.trigger`):
the thread runs it as soon as it is free, commits that arrive meanwhile coalesce (their work
and commits add up: `run_trigger` runs at most one budgeted pass per commit), and a writer whose
table holds `Policy.stop_runs` L0 runs waits for the pass queued or running (`Settler.throttle`:
Paimon's stop trigger, so a compactor that falls behind slows writers instead of letting reads
degrade; a pass that cannot bring the runs under the bound lets the writer go on). Triggers go
before settles; a queued trigger interrupts a settle like a commit does.

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
worker thread per process, started on first use (again in a forked child).

**It never touches a table** (checked before every task and again before every commit, so a
task whose output is ready but may no longer commit is dropped, its files left to `vacuum`):
- after `Catalog.close()`: the warehouse is marked closed, its pending settles are dropped,
  and `close()` waits for a running one to stop after its current task (bounded by
  `Policy.auto_budget_bytes`); writes through handles used after `close()` schedule none;
- after interpreter shutdown begins: once the main thread has finished (Python's shutdown
  waits for non-daemon threads, then runs `atexit`) or `sys.is_finalizing()`, nothing is
  scheduled or started and a running settle stops before its commit; `atexit` waits for it
  at most `EXIT_WAIT_SECONDS`;
- after its warehouse directory is removed (a local warehouse whose root is gone, say a
  temporary directory cleaned up): its settles are dropped, and nothing writes there again;
- in a process that reopened the warehouse for a snapshot, a split or a Spark task
  (`conch.api.connection.reopen`): settling is off there (`Policy.settle_after=None`).

Why it is on by default, in a library (docs/compaction.md, "Background maintenance: the
decision"): a table left with L0 runs reads up to 2.6× slower on every scan until someone
compacts, and the writing process is the one place that knows the writer paused.
`conch.Policy(settle_after=None)` turns it off (Lance and delta-rs behaviour: only explicit or
commit-time compaction).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable

from conch.errors import CommitConflictError, TableNotFoundError
from conch.files.manifest import TableState
from conch.files.storage.local import LocalStorage
from conch.log.tablelog import TableLog
from conch.log.txn import Commit
from conch.log.warehouse import Warehouse
from conch.maintain.compaction.plan import CompactionTask, commit_budget, plan, within_budget
from conch.maintain.compaction.rewrite import input_rows, sliced_memory
from conch.maintain.compaction.run import auto, commit, compact, partitions, staged_parts, written_by
from conch.model.policy import Policy

EXIT_WAIT_SECONDS = 10.0  # at most this long for a running settle at interpreter exit
MAX_TASKS = 256  # per settle (a safety bound)
MAX_SHARE = 0.1  # settles of one table take at most this share of wall time (slow steady writers)

_Key = tuple[str, str]  # (warehouse URI, table id)


def _key(log: TableLog) -> _Key:
    return (log.warehouse.uri, log.id)


def shutting_down() -> bool:
    """Whether interpreter shutdown has begun: the main thread has finished (Python then waits
    for non-daemon threads and runs `atexit`), or the interpreter is finalizing."""
    return sys.is_finalizing() or not threading.main_thread().is_alive()


def gone(log: TableLog) -> bool:
    """Whether `log`'s warehouse may no longer be touched by a background settle: its catalog
    was closed, or it is a local warehouse whose directory was removed."""
    wh = log.warehouse
    if wh.closed:
        return True
    storage = wh.storage
    return isinstance(storage, LocalStorage) and not storage.root.is_dir()


def halted(log: TableLog) -> bool:
    """Whether a settle of `log`'s table must not start, go on or commit (module doc)."""
    return shutting_down() or gone(log)


class Settler:
    """The process's settle queue and its worker thread (module doc)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[_Key, tuple[float, TableLog]] = {}  # monotonic time it is due, and a handle
        # tables whose commits asked for the commit-time trigger: a handle, the work written
        # (`run.written_by`) and the commits since it last ran (commits that arrive while it runs coalesce)
        self._triggered: dict[_Key, tuple[TableLog, int, int]] = {}
        self._running: dict[_Key, TableLog] = {}
        self._spacing: dict[_Key, float] = {}  # earliest next settle after the last one (duty cycle)
        self._thread: threading.Thread | None = None
        self._stopping = False

    def schedule(self, log: TableLog, delay: float) -> None:
        """Settle `log`'s table `delay` seconds from now (a later call postpones it); nothing
        once shutdown began or for a closed or removed warehouse (module doc)."""
        with self._cond:
            if self._stopping or halted(log):
                return
            key = _key(log)
            self._due[key] = (max(time.monotonic() + delay, self._spacing.get(key, 0.0)), log)
            self._ensure_worker()
            self._cond.notify_all()

    def trigger(self, log: TableLog, written: int) -> bool:
        """Run the commit-time trigger of `log`'s table on the worker thread, for a commit that
        wrote `written` (`run.written_by`: bytes, or rows where they cost more); False (nothing queued) once shutdown began or for a closed or
        removed warehouse: the caller runs it itself."""
        with self._cond:
            if self._stopping or halted(log):
                return False
            key = _key(log)
            _, before, commits = self._triggered.get(key, (log, 0, 0))
            self._triggered[key] = (log, before + written, commits + 1)
            self._ensure_worker()
            self._cond.notify_all()
            return True

    def throttle(self, log: TableLog, runs: Callable[[], int], limit: int) -> None:
        """The stop trigger: while `runs()` (the table's L0 runs) is at least `limit` and the
        worker has the table's trigger queued or running, wait for it. A pass that could not
        bring the runs under the limit (its budgets refused) lets the writer go on: the writer is
        throttled to the compactor's pace, never stopped by what the compactor will not do."""
        key = _key(log)
        while runs() >= limit:
            with self._cond:
                if not (key in self._triggered or key in self._running) or self._stopping:
                    return
                if self._thread is None or not self._thread.is_alive():
                    return
                self._cond.wait(1.0)

    def _ensure_worker(self) -> None:
        """Start the worker thread if it is not running (first use, or it died: a waiter must
        never wait on a thread that is gone). Called with the lock held."""
        if (self._thread is None or not self._thread.is_alive()) and not shutting_down():
            self._thread = threading.Thread(target=self._work, name="conch-settle", daemon=True)
            self._thread.start()

    def pending(self, log: TableLog) -> bool:
        """Whether this process still has to settle, or is settling, `log`'s table."""
        with self._cond:
            key = _key(log)
            return key in self._due or key in self._running or key in self._triggered

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
            while key in self._due or key in self._running or key in self._triggered:
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
            self._triggered.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(EXIT_WAIT_SECONDS)

    def forget(self, warehouse: Warehouse) -> None:
        """`warehouse` is closed (`Warehouse.closed` set): drop its pending settles, and wait for
        a running one to stop, which it does before its next task or commit (module doc)."""
        with self._cond:
            for key in [k for k, (_, log) in self._due.items() if log.warehouse is warehouse]:
                del self._due[key]
            for key in [k for k, (log, _, _) in self._triggered.items() if log.warehouse is warehouse]:
                del self._triggered[key]
            while any(log.warehouse is warehouse for log in self._running.values()):
                self._cond.wait(0.5)

    def _next(self) -> tuple[_Key, TableLog, tuple[int, int] | None] | None:
        """The next table to work on (waiting for one), or None when stopping: a triggered one
        first, in the order their commits came (with the bytes and commits written since its
        last trigger), then a due settle (None)."""
        with self._cond:
            while not self._stopping:
                while self._triggered:
                    key = next(iter(self._triggered))
                    log, written, commits = self._triggered.pop(key)
                    if not halted(log):
                        self._running[key] = log
                        return key, log, (written, commits)
                now = time.monotonic()
                due = [k for k, (at, _) in self._due.items() if at <= now]
                if due:
                    key = min(due, key=lambda k: self._due[k][0])
                    log = self._due.pop(key)[1]
                    if halted(log):  # closed, removed or shutting down meanwhile: dropped
                        continue
                    self._running[key] = log
                    return key, log, None
                self._cond.wait(min((at for at, _ in self._due.values()), default=now + 3600) - now)
            return None

    def _work(self) -> None:
        while (item := self._next()) is not None:
            key, log, triggered = item
            started = time.monotonic()
            stop = functools.partial(self._halted, key, log)
            try:
                if triggered is not None:
                    run_trigger(log, *triggered, stop=stop)
                else:
                    settle(log, functools.partial(self._interrupted, key), stop)
            except (CommitConflictError, TableNotFoundError):
                pass  # lost to another compactor after its re-plans, or the table was dropped
            except Exception as e:  # a background thread has no caller to raise to
                if not self._halted(key, log):  # at exit or close, failing is expected (module doc)
                    with contextlib.suppress(Exception):  # warnings made errors: the worker lives on
                        warnings.warn(
                            f"background compaction of table {log.name!r} stopped: {e!r}", RuntimeWarning, stacklevel=1
                        )
            finally:
                with self._cond:
                    now = time.monotonic()
                    if triggered is None:  # the duty cycle spaces settles, not the commit-time trigger
                        self._spacing[key] = now + (now - started) * (1 / MAX_SHARE - 1)
                    self._running.pop(key, None)
                    self._cond.notify_all()

    def _interrupted(self, key: _Key) -> bool:
        """Whether a commit re-scheduled the table (the next pause settles it again)."""
        with self._cond:
            return key in self._due or key in self._triggered

    def _halted(self, key: _Key, log: TableLog) -> bool:
        """Whether the settle must stop before its next task or commit: the process is exiting,
        or the table's warehouse was closed or removed."""
        return self._stopping or halted(log)


def settle(log: TableLog, interrupted: Callable[[], bool] | None = None, stop: Callable[[], bool] | None = None) -> int:
    """Major-compact, one task at a time, each component of `log`'s table that has L0 runs and
    fits the automatic budget, until none is left, `interrupted()` says a commit came, `stop()`
    says the table may no longer be touched (checked again between a task's output and its
    commit: an output that may not commit is left to `vacuum`), or `MAX_TASKS` tasks ran (a
    safety bound: every task removes L0 runs, so the loop ends anyway). A task that lost to a
    concurrent compactor is planned again. Returns the tasks committed."""
    policy = log.warehouse.maintenance
    done = 0

    def halt() -> bool:  # checked before each task and between the parts of one
        return (interrupted is not None and interrupted()) or (stop is not None and stop())

    for _ in range(MAX_TASKS):
        if halt():
            break
        state = log.state()
        memory = log.warehouse.memory_budget
        # planned on the state it runs on
        task = next(iter(settle_tasks(state, policy, memory, partitions(log, state))), None)
        if task is None:
            break
        try:
            parts = staged_parts(log, state, task, policy, halt)
            if parts is None or (stop is not None and stop()):
                break  # the output stays uncommitted: `vacuum` removes its files
            commit(log, task, parts, state.seq)
        except CommitConflictError:
            continue  # another compactor removed an input meanwhile: plan again
        done += 1
    return done


def settle_tasks(
    state: TableState,
    policy: Policy,
    memory: int | None = None,
    partition_of: Callable[[bytes], bytes] | None = None,
) -> list[CompactionTask]:
    """The majors a settle runs on `state`: the forced ones that fold L0 runs into other runs
    (not a lone L0 run, already one run to read; not components that only hold several L1 runs)
    and fit the automatic budget and the warehouse's `memory` budget, weighed as the rewrite
    runs them, slice by slice (`rewrite.sliced_memory`: the whole-task figure kept a 5M-key table's
    ten L0 runs out of every settle, read at 2-3× settled). The commit-time trigger keeps the
    whole-task figure, which also keeps a major of over ~5M rows (seconds) out of the writer.
    A forced major runs in parts of its output pieces (`run.staged_parts`), so it fits the
    automatic budget when each piece's share of its input does. `partition_of`: the table's
    partitions (`run.partitions`: a fold never crosses one)."""
    l0 = {i for i, ks in state.key_spaces.items() if ks.lsm == 0}
    return [
        t
        for t in plan(state.key_spaces, state.fragments, policy, force=True, partition_of=partition_of).tasks
        if within_budget(t, policy, budget=policy.auto_budget_bytes * _pieces(t, policy))
        and (memory is None or sliced_memory(t, memory) <= memory)
        and len(t.inputs) >= 2
        and (t.kind == "fold" or l0 & set(t.inputs))
    ]


def _pieces(task: CompactionTask, policy: Policy) -> int:
    """The parts a forced major runs in, at least (`run.staged_parts`: one per output piece of
    `Policy.max_l1_rows` rows; its input rows counted once, as a lower bound of its keys)."""
    if task.kind != "major" or not task.recut:
        return 1
    return max(1, input_rows(task) // max(1, policy.max_l1_rows) // 2)


_settler = Settler()


def _reset_after_fork() -> None:
    global _settler
    _settler = Settler()  # the parent's worker thread does not exist in the child


os.register_at_fork(after_in_child=_reset_after_fork)
atexit.register(lambda: _settler.stop())


def after_commit(log: TableLog, done: Commit | None = None) -> None:
    """The automatic maintenance after a write, delete or enrich (`Warehouse.after_commit`):
    the commit-time trigger (bounded by what the commit `done` wrote), on the worker thread
    (`Policy.background`, throttling the writer at `Policy.stop_runs` L0 runs) or in this thread
    (`run.auto`), then the settle after the writer's pause."""
    policy = log.warehouse.maintenance
    queued = False
    if policy.background:
        written = written_by(log.state(), done.seq) if done is not None else 0
        queued = _settler.trigger(log, written)
    if queued:
        _settler.throttle(log, lambda: l0_runs(log.state()), policy.stop_runs)
    else:
        auto(log, done)
    schedule(log)


def run_trigger(log: TableLog, written: int, commits: int, stop: Callable[[], bool] | None = None) -> None:
    """The commit-time trigger on the worker thread, for `commits` commits that wrote `written`
    (`run.written_by`) since it last ran: what `run.auto` runs after each commit in the writer's thread (the
    moves, a rewrite within the commits' budget), at most once per commit, until a pass rewrites
    nothing. Losing to a concurrent compactor ends it: the next commit triggers it again."""
    policy = log.warehouse.maintenance
    for _ in range(max(commits, 1)):
        done = compact(log, policy, force=False, budget=commit_budget(written, policy), stop=stop)
        if done.tasks == 0 or (stop is not None and stop()):
            return


def l0_runs(state: TableState) -> int:
    """The L0 data runs of a table: what a scan merges beside its L1 (the stop trigger's count)."""
    return sum(1 for ks in state.key_spaces.values() if ks.lsm == 0 and ks.kind == "data")


def schedule(log: TableLog) -> None:
    """Settle the table after the policy's pause, if it has L0 runs left that the settle would
    fold (nothing when `Policy.settle_after` is None)."""
    policy = log.warehouse.maintenance
    if policy.settle_after is None or halted(log):
        return
    if _settler.pending(log) or _needs_settling(log):
        _settler.schedule(log, policy.settle_after)


def _needs_settling(log: TableLog) -> bool:
    state = log.state()
    return bool(settle_tasks(state, log.warehouse.maintenance, log.warehouse.memory_budget, partitions(log, state)))


def pending(log: TableLog) -> bool:
    """Whether this process has a settle of `log`'s table scheduled or running."""
    return _settler.pending(log)


def forget(warehouse: Warehouse) -> None:
    """`Catalog.close()`: no settle touches the warehouse's tables once this returns (module
    doc); the warehouse is marked closed first."""
    warehouse.closed = True
    _settler.forget(warehouse)


def wait(log: TableLog, timeout: float | None = None) -> bool:
    """`Table.wait_for_maintenance`: settle `log`'s table now and wait for it, whether this
    process's commits scheduled it or another process wrote the runs (a Spark job commits from a
    Python worker of its own); True when nothing is left pending. Nothing when the policy has
    automatic or background maintenance off."""
    policy = log.warehouse.maintenance
    if policy.auto and policy.settle_after is not None and not _settler.pending(log) and _needs_settling(log):
        _settler.schedule(log, 0.0)
    return _settler.wait(log, timeout)
