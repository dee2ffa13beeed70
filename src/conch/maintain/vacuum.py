"""Maintenance: vacuum (DESIGN §4, §6). Flushing snapshots is the table log's
(`TableLog.flush`); moving the time-travel horizon is `conch.maintain.expire`.

Vacuum removes two kinds of files:

- **Garbage**: files that no log entry or snapshot references, the leftovers of writers that
  died or lost before committing (temporary files included). A grace period protects files of
  writes still in flight in other processes: the vacuum first logs its cutoff through the same
  compare-and-swap as commits, so a transaction (a write, a Spark job, a flush registering a
  snapshot) that started before the cutoff and commits after it conflicts instead of
  referencing files that may be gone (`conch.log.wal.conflicts`).
- **Expired files**: files that only states before the horizon referenced (`conch.maintain.expire`), and
  snapshots no readable state loads (first forgotten by the metastore, then deleted). The same
  grace period applies, measured from the expire's commit: vacuum reclaims under the horizon of
  the expires committed before its cutoff, so a reader that loaded an old state before an expire
  has at least the grace period to finish. Files of states at or after the horizon stay.

Files referenced by log entries after the horizon stay, so time travel within it keeps working.
A table and its branches share one directory (`conch.log.branching`): a vacuum of any of these
lines keeps every file another line still needs (`conch.maintain.expire.line_needs`: its log,
snapshots, retained versions and tags) and logs its cutoff on every line, so the files of a
dropped branch are garbage to the next vacuum and nothing a live line reads is ever deleted.
Files that vanish while vacuum lists or deletes them are skipped. Top-level names starting with `_`
under the table's directory are the metastore's (the object-store WAL keeps `_log/` and
`_snapshots/` there) and are never vacuum's to delete.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass

from conch.errors import InvalidArgumentError, TableNotFoundError, TimeTravelError
from conch.log.branches import lines
from conch.log.tablelog import TableLog
from conch.log.wal import CLOCK_SLACK_US, Transaction, VacuumCutoff
from conch.maintain.expire import horizon_in_force, line_files, other_lines_need, reclaim_plan, referenced_files
from conch.model.progress import human_bytes
from conch.model.time import to_cutoff


@dataclass(frozen=True)
class VacuumResult:
    """What a vacuum removed (or, `dry_run`, would remove).

    `files_removed` / `bytes_removed`: everything reclaimed; of which `expired_files` /
    `expired_bytes` only states before the horizon referenced (`Table.expire`), and
    `snapshots_removed` snapshots the metastore forgot; `files_kept`: files still referenced or
    too young; `horizon`: the horizon reclaimed under (µs; 0: none in force yet).

    What the grace period (`grace_seconds`) held back: `files_held`, unreferenced files younger
    than it (a write in flight, or the leftovers of one that just failed), and `expired_held`,
    files only expired states use whose expire committed less than the grace period ago (a
    reader may still be reading them). A later vacuum (or `older_than_seconds=0`) removes them.
    """

    files_removed: int
    bytes_removed: int
    files_kept: int
    expired_files: int = 0
    expired_bytes: int = 0
    snapshots_removed: int = 0
    horizon: int = 0
    files_held: int = 0
    expired_held: int = 0
    grace_seconds: float = 0.0
    dry_run: bool = False

    def __str__(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        text = (
            f"{verb} {self.files_removed} files, {human_bytes(self.bytes_removed)} reclaimed (of which "
            f"{self.expired_files} files, {human_bytes(self.expired_bytes)} only expired versions used, "
            f"{self.snapshots_removed} snapshots); kept {self.files_kept}"
        )
        held = []
        if self.files_held:
            held.append(f"{self.files_held} unreferenced files younger than it")
        if self.expired_held:
            held.append(f"{self.expired_held} files of versions expired less than it ago")
        if held:
            text += (
                f"; the grace period of {format_seconds(self.grace_seconds)} held back {' and '.join(held)}: "
                "a later vacuum removes them (or --older-than 0s, if no write or reader is in flight)"
            )
        return text


def format_seconds(seconds: float) -> str:
    """A grace period for messages: `1h`, `90s`, `2d`, `0.5s`."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def grace_seconds(older_than: object, now_us: int | None = None) -> float:
    """The grace period `conch vacuum --older-than` names, in seconds: an age (`"1h"`, `"0s"`,
    a `timedelta`) or a point in time before now (µs since the epoch, a datetime, an ISO time):
    the same forms as `expire(older_than=)` (`conch.model.time.to_cutoff`)."""
    now = time.time_ns() // 1000 if now_us is None else now_us
    try:
        cutoff = to_cutoff(older_than, "older_than", now)
    except TimeTravelError as e:
        raise InvalidArgumentError(f"vacuum: {e}") from None
    if cutoff > now:
        raise InvalidArgumentError(f"vacuum: older_than={older_than!r} is in the future")
    return (now - cutoff) / 1_000_000


def vacuum(log: TableLog, older_than_seconds: float = 3600.0, dry_run: bool = False) -> VacuumResult:
    """Delete garbage and expired files older than the grace period (see the module doc)."""
    if (
        isinstance(older_than_seconds, bool)
        or not isinstance(older_than_seconds, int | float)
        or math.isnan(older_than_seconds)
        or older_than_seconds < 0
    ):
        raise InvalidArgumentError(
            f"vacuum(older_than_seconds={older_than_seconds!r}): the grace period is a number of seconds >= 0"
        )
    cutoff = time.time() - older_than_seconds
    cutoff_us = int(cutoff * 1_000_000)
    if not dry_run:
        # Logged first: every commit before it is in the references read below, and a
        # transaction started before the cutoff that commits after it conflicts; on every line
        # sharing the directory (the table and its branches), whose writes land there too.
        log.commit(Transaction("vacuum", (VacuumCutoff(cutoff_us),), f"grace {older_than_seconds:g}s"))
        for other in lines(log):
            if other is not log:
                txn = Transaction(
                    "vacuum", (VacuumCutoff(cutoff_us),), f"grace {older_than_seconds:g}s (of {log.name})"
                )
                with contextlib.suppress(TableNotFoundError):  # a branch dropped meanwhile
                    other.commit(txn, flush=False)
    shared = other_lines_need(log, cutoff_us)  # after the cutoffs: their commits since are in it
    entries = list(log.entries())
    refs = referenced_files(log, entries)
    plan = reclaim_plan(log, [(s, e) for s, _, e in entries], horizon_in_force(entries, cutoff_us))
    ms = log.warehouse.metastore
    old_snapshots = [s for s, _ in ms.snapshots(log.id) if s < plan.snapshots_before]
    if old_snapshots and not dry_run:
        ms.remove_snapshots(log.id, plan.snapshots_before)  # forgotten before their files go
    pending: frozenset[str] = frozenset()
    newest_horizon = log.horizon()
    if newest_horizon > plan.horizon:  # an expire within the grace period: its files wait
        pending = reclaim_plan(log, [(s, e) for s, _, e in entries], newest_horizon).files - plan.files
    storage = log.warehouse.storage
    removed = kept = nbytes = expired = expired_bytes = held = held_expired = 0
    for f in list(line_files(log)):  # not the metastore's own objects (`conch.log.metastore.objectstore`)
        if f.path in shared:  # another line of the table (a branch, or the table) uses it
            kept += 1
            continue
        if f.path in plan.files:
            expired += 1
            expired_bytes += f.size
        # The slack keeps files a writer made just before our cutoff by the file system's
        # coarse clock, which the writer's conflict check (same slack) might not catch.
        elif f.path in refs or f.mtime > cutoff - CLOCK_SLACK_US / 1e6:
            kept += 1
            held += f.path not in refs
            held_expired += f.path in pending
            continue
        if not dry_run:
            storage.delete(f.path)
        removed += 1
        nbytes += f.size
    return VacuumResult(
        removed,
        nbytes,
        kept,
        expired,
        expired_bytes,
        len(old_snapshots),
        plan.horizon,
        files_held=held,
        expired_held=held_expired,
        grace_seconds=float(older_than_seconds),
        dry_run=dry_run,
    )
