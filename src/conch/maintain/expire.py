"""Expire (spec/003, DESIGN §6): the time-travel horizon, and which files only expired states
referenced.

`Table.expire(older_than=..., retain_last=N)` moves the table's **horizon** forward, never back:
the horizon is the commit time of the oldest version still readable. States as of any time at or
after it stay exact; `asof`/`version` before it (and a `since` that needs originals a compaction
removed before it) raise `TimeTravelError` naming it. It is a commit of its own (kind
`"expire"`, op `SetHorizon`), so every process and snapshot sees it, and replay keeps the
maximum, so concurrent expires commute and never conflict with anything.

`reclaim_plan` says what `conch.maintain.vacuum.vacuum` may then delete: every file some log entry
or registered snapshot names (`wal.referenced_paths`) that no readable state needs, i.e. that is
neither live in the state at the horizon nor named by a commit after it (compaction inputs,
runs an overwrite replaced, displacement-map and mask files of removed fragments) nor live in a
tagged version's state (`Table.tag`: tagged versions stay readable under the horizon), plus the
snapshots older than the one that loads the horizon's state (a reader at or after the horizon
never loads them).

**Readers pinned before an expire.** A scan that loaded an old state before the expire committed
keeps reading its files: vacuum only reclaims under the horizon that was in force a grace period
ago (`VacuumCutoff`'s time, the same grace period that protects in-flight writes), so such a
reader has at least the grace period to finish. A state at or after the horizon is never touched.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from conch.errors import InvalidArgumentError, TableNotFoundError, TimeTravelError
from conch.files.blobs import BLOB_SUFFIX
from conch.files.manifest import TableState
from conch.files.storage.base import FileInfo
from conch.log.branches import lines
from conch.log.tablelog import TableLog
from conch.log.txn import Commit
from conch.log.wal import (
    AddFragment,
    AddIndexFile,
    AddKeySpace,
    Entry,
    Op,
    RegisterSnapshot,
    SetHorizon,
    Transaction,
    referenced_paths,
)
from conch.model.time import AgeOrTime, format_time, to_cutoff

OlderThan = AgeOrTime  # an age ('7d', a timedelta) or a point in time (µs since the epoch, a datetime, ISO)


@dataclass(frozen=True, slots=True)
class ExpireResult:
    """What `Table.expire` did.

    `horizon`: the commit time (µs) of the oldest readable version after it (0: none expired);
    `version`: that version; `commit`: the expire commit (None if the horizon did not move);
    `reclaimable_files` / `reclaimable_bytes`: what `vacuum` can delete because of the horizon
    once its grace period has passed since the expire (`vacuum(older_than_seconds=0)`: now).
    """

    horizon: int
    version: int
    commit: Commit | None
    reclaimable_files: int
    reclaimable_bytes: int

    def __str__(self) -> str:
        if not self.horizon:
            return "nothing expired"
        moved = "moved to" if self.commit else "stays at"
        return (
            f"horizon {moved} version {self.version} ({format_time(self.horizon)}); "
            f"{self.reclaimable_files} files ({self.reclaimable_bytes} bytes) reclaimable by vacuum"
        )


def horizon_for(log: TableLog, older_than: OlderThan | None, retain_last: int | None) -> int:
    """The horizon asked for, snapped to a commit time: the newest version committed at or
    before `older_than` and/or the oldest of the newest `retain_last` versions (both given: the
    earlier, so both promises hold). 0 if no version is old enough."""
    if older_than is None and retain_last is None:
        raise InvalidArgumentError(
            "expire needs older_than= (an age such as '7d' or a timedelta, or a point in time) and/or retain_last=N"
        )
    ms = log.warehouse.metastore
    last = log.state().seq
    seqs = []
    if older_than is not None:
        try:
            at = to_cutoff(older_than, "older_than")
        except TimeTravelError as e:
            raise InvalidArgumentError(f"expire: {e}") from None
        seqs.append(ms.seq_at_time(log.id, at))
    if retain_last is not None:
        if isinstance(retain_last, bool) or not isinstance(retain_last, int) or retain_last < 1:
            raise InvalidArgumentError(f"expire(retain_last={retain_last!r}): a number of versions >= 1")
        seqs.append(max(last - retain_last + 1, 0))
    seq = min(seqs)
    return log.time_of(seq) if seq >= 1 else 0


def expire_table(log: TableLog, older_than: OlderThan | None = None, retain_last: int | None = None) -> ExpireResult:
    """Move the horizon forward (see the module doc); a horizon not later than the current one
    changes nothing."""
    wanted = horizon_for(log, older_than, retain_last)
    commit = None
    if wanted > log.horizon():
        ms = log.warehouse.metastore
        v = ms.seq_at_time(log.id, wanted)
        txn = Transaction("expire", (SetHorizon(wanted),), f"horizon at version {v} ({format_time(wanted)})")
        commit = log.commit(txn)
    horizon = log.horizon()
    entries = [(s, e) for s, _, e in log.entries()]
    plan = reclaim_plan(log, entries, horizon)
    sizes = {f.path: f.size for f in line_files(log)}
    shared = other_lines_need(log, time.time_ns() // 1000)  # files a branch (or the table) still uses
    found = [p for p in plan.files if p in sizes and p not in shared]
    version = log.warehouse.metastore.seq_at_time(log.id, horizon) if horizon else 0
    return ExpireResult(horizon, version, commit, len(found), sum(sizes[p] for p in found))


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """Under `horizon`: `files` only expired states referenced; snapshots registered at a
    sequence number below `snapshots_before` are no longer loaded by any readable state."""

    horizon: int
    files: frozenset[str]
    snapshots_before: int


def state_paths(state: TableState) -> Iterable[str]:
    """Every file a state's live records reference (the same rule as the log's entries)."""
    ops: list[Op] = [AddKeySpace(k) for k in state.key_spaces.values()]
    ops += [AddFragment(f) for f in state.fragments.values()]
    ops += [AddIndexFile(f) for f in state.index_files.values()]
    return referenced_paths(Entry("state", tuple(ops)), BLOB_SUFFIX)


def reclaim_plan(log: TableLog, entries: Sequence[tuple[int, Entry]], horizon: int) -> ReclaimPlan:
    """What vacuum may delete under `horizon` (`entries`: the whole log, `(seq, entry)`)."""
    if not horizon:
        return ReclaimPlan(0, frozenset(), 0)
    ms = log.warehouse.metastore
    seq_h = ms.seq_at_time(log.id, horizon)
    named: set[str] = set()
    keep: set[str] = set(state_paths(log.load(seq_h)))
    for tagged in set(log.state().tags.values()):  # a tagged version outlives the horizon (`Table.tag`)
        if tagged < seq_h:
            keep.update(state_paths(log.load(tagged)))
    for seq, entry in entries:
        (keep if seq > seq_h else named).update(referenced_paths(entry, BLOB_SUFFIX))
    base = ms.latest_snapshot(log.id, seq_h)
    base_seq = base[0] if base else 0
    indexed = ms.snapshots(log.id)
    for s, path in indexed:
        (named if s < base_seq else keep).add(path)
    keep.update(unindexed_snapshots(entries, {s for s, _ in indexed}, base_seq))
    return ReclaimPlan(horizon, frozenset(named - keep), base_seq)


def unindexed_snapshots(entries: Sequence[tuple[int, Entry]], indexed: set[int], base_seq: int) -> Iterable[str]:
    """Snapshots the log registers that the metastore may still index as the base of readable
    states: a flush registers its snapshot in the log first and indexes it after
    (`TableLog.flush`), so a vacuum in between sees it only in the log. Deleting it would leave
    it indexed without its file. Not these: one at a sequence number some indexed snapshot
    already holds (the first one indexed wins) or below the base (readable states load the base
    or a newer one)."""
    for _, entry in entries:
        for op in entry.ops:
            if isinstance(op, RegisterSnapshot) and op.seq >= base_seq and op.seq not in indexed:
                yield op.path


def line_files(log: TableLog) -> Iterator[FileInfo]:
    """The files of line `log` in storage: its table's directory (shared by the table and its
    branches) and, for a branch, its own prefix (its snapshots); not the metastore's own objects
    (`_log/`, `_snapshots/` of the object-store WAL)."""
    for prefix in dict.fromkeys((log.dir, log.id)):
        for f in log.storage.list(prefix):
            if not f.path.startswith(f"{prefix}/_"):
                yield f


def referenced_files(log: TableLog, entries: list[tuple[int, int, Entry]] | None = None) -> set[str]:
    """Every file a log entry or a registered snapshot references."""
    refs: set[str] = set()
    for _, _, entry in log.entries() if entries is None else entries:
        refs.update(referenced_paths(entry, BLOB_SUFFIX))
    refs.update(path for _, path in log.warehouse.metastore.snapshots(log.id))
    return refs


def line_needs(log: TableLog, cutoff_us: int) -> set[str]:
    """The files line `log` (a table or a branch) still needs, as a vacuum with grace cutoff
    `cutoff_us` run on it would keep them: everything its log and snapshots reference except
    what only its states expired before the horizon in force at the cutoff used; its indexed
    snapshots stay (only a vacuum of the line itself forgets them first)."""
    entries = list(log.entries())
    refs = referenced_files(log, entries)
    plan = reclaim_plan(log, [(s, e) for s, _, e in entries], horizon_in_force(entries, cutoff_us))
    indexed = {path for _, path in log.warehouse.metastore.snapshots(log.id)}
    return refs - (plan.files - indexed)


def other_lines_need(log: TableLog, cutoff_us: int) -> set[str]:
    """The files the other lines sharing `log`'s directory (its table and the table's branches,
    `conch.log.branches.lines`) still need: vacuum and expire of one line never count them."""
    need: set[str] = set()
    for other in lines(log):
        if other is log:
            continue
        try:
            need |= line_needs(other, cutoff_us)
        except TableNotFoundError:  # dropped meanwhile: its files are garbage
            continue
    return need


def horizon_in_force(entries: Iterable[tuple[int, int, Entry]], cutoff_us: int) -> int:
    """The horizon of the expires committed at or before `cutoff_us` (vacuum's grace cutoff)."""
    return max(
        (op.horizon_us for _, t, e in entries if t <= cutoff_us for op in e.ops if isinstance(op, SetHorizon)),
        default=0,
    )
