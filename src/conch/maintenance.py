"""Maintenance: vacuum (DESIGN §4, §6). Flushing snapshots is the table log's
(`TableLog.flush`); moving the time-travel horizon is `conch.expire`.

Vacuum removes two kinds of files:

- **Garbage**: files that no log entry or snapshot references, the leftovers of writers that
  died or lost before committing (temporary files included). A grace period protects files of
  writes still in flight in other processes: the vacuum first logs its cutoff through the same
  compare-and-swap as commits, so a transaction (a write, a Spark job, a flush registering a
  snapshot) that started before the cutoff and commits after it conflicts instead of
  referencing files that may be gone (`conch.wal.conflicts`).
- **Expired files**: files that only states before the horizon referenced (`conch.expire`), and
  snapshots no readable state loads (first forgotten by the metastore, then deleted). The same
  grace period applies, measured from the expire's commit: vacuum reclaims under the horizon of
  the expires committed before its cutoff, so a reader that loaded an old state before an expire
  has at least the grace period to finish. Files of states at or after the horizon stay.

Files referenced by log entries after the horizon stay, so time travel within it keeps working.
Files that vanish while vacuum lists or deletes them are skipped. Top-level names starting with `_`
under the table's directory are the metastore's (the object-store WAL keeps `_log/` and
`_snapshots/` there) and are never vacuum's to delete.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from conch.errors import InvalidArgumentError
from conch.expire import horizon_in_force, reclaim_plan
from conch.fragments import BLOB_SUFFIX
from conch.tablelog import TableLog
from conch.wal import CLOCK_SLACK_US, Entry, Transaction, VacuumCutoff, referenced_paths


@dataclass(frozen=True)
class VacuumResult:
    """What a vacuum removed (or, `dry_run`, would remove).

    `files_removed` / `bytes_removed`: everything reclaimed; of which `expired_files` /
    `expired_bytes` only states before the horizon referenced (`Table.expire`), and
    `snapshots_removed` snapshots the metastore forgot; `files_kept`: files still referenced or
    too young; `horizon`: the horizon reclaimed under (µs; 0: none in force yet).
    """

    files_removed: int
    bytes_removed: int
    files_kept: int
    expired_files: int = 0
    expired_bytes: int = 0
    snapshots_removed: int = 0
    horizon: int = 0


def referenced_files(log: TableLog, entries: list[tuple[int, int, Entry]] | None = None) -> set[str]:
    """Every file a log entry or a registered snapshot references."""
    refs: set[str] = set()
    for _, _, entry in log.entries() if entries is None else entries:
        refs.update(referenced_paths(entry, BLOB_SUFFIX))
    refs.update(path for _, path in log.warehouse.metastore.snapshots(log.id))
    return refs


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
        # transaction started before the cutoff that commits after it conflicts.
        log.commit(Transaction("vacuum", (VacuumCutoff(cutoff_us),), f"grace {older_than_seconds:g}s"))
    entries = list(log.entries())
    refs = referenced_files(log, entries)
    plan = reclaim_plan(log, [(s, e) for s, _, e in entries], horizon_in_force(entries, cutoff_us))
    ms = log.warehouse.metastore
    old_snapshots = [s for s, _ in ms.snapshots(log.id) if s < plan.snapshots_before]
    if old_snapshots and not dry_run:
        ms.remove_snapshots(log.id, plan.snapshots_before)  # forgotten before their files go
    storage = log.warehouse.storage
    removed = kept = nbytes = expired = expired_bytes = 0
    for f in list(storage.list(log.id)):
        if f.path.startswith(f"{log.id}/_"):
            continue  # the metastore's own objects (`conch.metastore.objectstore`): its WAL, not files
        if f.path in plan.files:
            expired += 1
            expired_bytes += f.size
        # The slack keeps files a writer made just before our cutoff by the file system's
        # coarse clock, which the writer's conflict check (same slack) might not catch.
        elif f.path in refs or f.mtime > cutoff - CLOCK_SLACK_US / 1e6:
            kept += 1
            continue
        if not dry_run:
            storage.delete(f.path)
        removed += 1
        nbytes += f.size
    return VacuumResult(removed, nbytes, kept, expired, expired_bytes, len(old_snapshots), plan.horizon)
