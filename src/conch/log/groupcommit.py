"""Group commit: concurrent writers of one table in one process append their entries together.

Without it, every writer thread runs its own compare-and-swap on the log sequence number
(`Metastore.append`), and N threads committing at once lose N-1 races, re-read the log, rebase
and retry: a retry storm, one durable append (an fsync) per attempt. With it (`commit`), a
writer queues its transaction; one of the waiting writers, the *leader*, takes the queue (at
most `MAX_BATCH`), rebases each transaction in queue order on the newest state plus the
transactions before it in the batch (`conch.log.wal.rebase`: the same conflict rules as one at a
time, so a transaction that clashes with an earlier one of the batch is refused exactly as if
that one had committed first), and appends the accepted entries with one
`append_batch(table_id, expected_seq, entries)` call: consecutive sequence numbers, strictly
increasing times, one metastore transaction (SQLite: one `BEGIN IMMEDIATE` … `COMMIT`, one
fsync). Each writer gets its own version, its own `CommitConflictError` if refused, and does
its own after-commit work (flush, automatic compaction) in its own thread. Then the next waiting
writer leads the next batch: commits that arrive while a batch is being appended form the next
one, so the batch size adapts to the load and a lone writer pays nothing.

A metastore without `append_batch` (the HTTP and object-store backends) gets batches of one: the
leader appends its queue one entry at a time, so writers of one process still never race each
other (no retry storm), but there is one durable append per transaction. Writers in other
processes (or other hosts) still meet at the metastore's compare-and-swap: a batch that loses
that race is rebased and retried whole, with backoff, at most `MAX_ATTEMPTS` times.

Groups are per metastore handle (the object a `connect()` opened) and table log id: the leader
appends with its own handle, so writers share a group only when they share its credentials (two
`connect()` calls with other tokens or storage options never append for each other; they meet
at the compare-and-swap, as writers of two processes do). A forked child starts with none.
"""

from __future__ import annotations

import copy
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from conch.errors import CommitConflictError
from conch.files.manifest import TableState
from conch.log.metastore.base import LogEntry
from conch.log.wal import Entry, Transaction, apply, encode, rebase

MAX_ATTEMPTS = 200  # lost compare-and-swap races (against other processes) before giving up
MAX_BATCH = 64  # transactions one append takes at most


@dataclass
class Pending:
    """One writer's transaction in the queue, and what became of it."""

    txn: Transaction
    checked: int  # the log sequence the transaction was checked against (-1: not yet)
    result: tuple[Entry, LogEntry] | None = None
    error: BaseException | None = None
    done: bool = False


@dataclass
class Group:
    """The queue of one table's pending commits in this process."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    queue: list[Pending] = field(default_factory=list)
    leading: bool = False


_groups: weakref.WeakKeyDictionary[object, dict[str, Group]] = weakref.WeakKeyDictionary()
_groups_lock = threading.Lock()


def _reset_after_fork() -> None:
    global _groups, _groups_lock
    _groups = weakref.WeakKeyDictionary()  # a child's writers never wait on its parent's leader
    _groups_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def group(metastore: object, table_id: str) -> Group:
    """The group of commits to table log `table_id` through the handle `metastore`."""
    with _groups_lock:
        tables = _groups.get(metastore)
        if tables is None:
            tables = _groups[metastore] = {}
        g = tables.get(table_id)
        if g is None:
            g = tables[table_id] = Group()
        return g


@dataclass(frozen=True, slots=True)
class Log:
    """What a leader needs of the table's log (`TableLog` passes its own)."""

    name: str
    state: Callable[[], TableState]  # the newest committed state
    entries: Callable[[int, int], list[tuple[int, Entry]]]  # decoded entries in (after, upto]
    append: Callable[[int, list[str]], list[LogEntry]]  # consecutive entries after a sequence number
    batch: int  # the most entries one `append` takes (1: the metastore cannot batch)


def commit(g: Group, log: Log, txn: Transaction) -> tuple[Entry, LogEntry]:
    """Commit `txn` (rebased) through the table's group `g` (module doc): its entry and log
    record. Raises `CommitConflictError` if the conflict rules refuse it, and whatever the
    metastore raised for the append that carried it."""
    mine = Pending(txn, txn.base_seq)
    with g.cond:
        g.queue.append(mine)
        while True:
            while g.leading and not mine.done:
                g.cond.wait()
            if mine.done:
                break
            g.leading = True
            batch, g.queue = g.queue[: log.batch], g.queue[log.batch :]
            g.cond.release()
            interrupted = True
            try:
                lead(log, batch)
                interrupted = False
            except Exception:
                if mine.done:
                    raise
                # another writer's batch failed (each member holds its error): lead on for mine
                interrupted = False
            finally:
                g.cond.acquire()
                g.leading = False
                if interrupted and not mine.done:
                    g.queue.remove(mine)  # never sent, and the interrupted caller will not wait for it
                g.cond.notify_all()
    if mine.error is not None:
        raise mine.error
    assert mine.result is not None
    return mine.result


def lead(log: Log, batch: Sequence[Pending]) -> None:
    """Commit `batch` in order as one append, retrying it whole after a lost race; every member
    ends done, with a result or an error."""
    try:
        for attempt in range(MAX_ATTEMPTS):
            state = log.state()
            for p in batch:
                if p.checked < 0:
                    p.checked = state.seq  # base unknown: only entries after the first attempt's state
            lo = min(p.checked for p in batch)
            logged = log.entries(lo, state.seq) if lo < state.seq else []
            accepted, refused = _rebase_all(log.name, batch, state, logged)
            if accepted:
                try:
                    records = log.append(state.seq, [encode(e) for _, e in accepted])
                except CommitConflictError:  # another process appended first: rebase the batch again
                    time.sleep(random.uniform(0, 0.002 * (1 + attempt)))
                    continue
                for (p, e), rec in zip(accepted, records, strict=True):
                    p.result, p.done = (e, rec), True
            for p, err in refused:
                p.error, p.done = err, True
            return
        _fail(batch, CommitConflictError(f"table {log.name!r}: gave up after {MAX_ATTEMPTS} lost commit races"))
    except BaseException as e:  # the metastore's error (or an interrupt) is every unfinished member's
        _fail(batch, e)
        raise


def _rebase_all(
    name: str, batch: Sequence[Pending], state: TableState, logged: list[tuple[int, Entry]]
) -> tuple[list[tuple[Pending, Entry]], list[tuple[Pending, CommitConflictError]]]:
    """Each member rebased on `state` plus the members accepted before it (their entries count as
    newer commits, and the state they lead to is the one it is checked against)."""
    accepted: list[tuple[Pending, Entry]] = []
    refused: list[tuple[Pending, CommitConflictError]] = []
    current = state
    ahead: list[Entry] = []  # entries of this batch accepted so far
    for p in batch:
        newer = [e for s, e in logged if s > p.checked] + ahead
        try:
            entry = rebase(p.txn, current, newer, name)
        except CommitConflictError as e:
            refused.append((p, e))
            continue
        accepted.append((p, entry))
        if len(batch) > 1:
            ahead.append(entry)
            current = apply(current, entry, current.seq + 1, current.time + 1)
    return accepted, refused


def _fail(batch: Sequence[Pending], error: BaseException) -> None:
    """Every unfinished member fails with `error` (each its own copy: one exception object must
    not be raised in several threads at once)."""
    for p in batch:
        if not p.done:
            p.error, p.done = _own(error), True


def _own(error: BaseException) -> BaseException:
    try:
        mine = copy.copy(error)
    except Exception:  # an exception type that cannot be copied: raised as it is
        return error
    mine.__cause__ = error
    return mine
