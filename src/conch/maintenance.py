"""Maintenance: vacuum unreferenced files (DESIGN §4, §6). Flushing snapshots is the table log's
(`TableLog.flush`).

Vacuum removes files that no log entry or snapshot references: the leftovers of writers that
died or lost before committing (temporary files included). Files referenced by old log entries
stay, so time travel keeps working. A grace period protects files of writes still in flight in
other processes: the vacuum first logs its cutoff through the same compare-and-swap as commits,
so a transaction (a write, a Spark job, a flush registering a snapshot) that started before the
cutoff and commits after it conflicts instead of referencing files that may be gone
(`conch.wal.conflicts`). Files that vanish while vacuum lists or deletes them are skipped.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from conch.errors import InvalidArgumentError
from conch.fragments import BLOB_SUFFIX
from conch.tablelog import TableLog
from conch.wal import CLOCK_SLACK_US, Transaction, VacuumCutoff, referenced_paths


@dataclass(frozen=True)
class VacuumResult:
    files_removed: int
    bytes_removed: int
    files_kept: int


def referenced_files(log: TableLog) -> set[str]:
    """Every file a log entry or a registered snapshot references."""
    refs: set[str] = set()
    for _, _, entry in log.entries():
        refs.update(referenced_paths(entry, BLOB_SUFFIX))
    refs.update(path for _, path in log.warehouse.metastore.snapshots(log.id))
    return refs


def vacuum(log: TableLog, older_than_seconds: float = 3600.0, dry_run: bool = False) -> VacuumResult:
    """Delete files under the table's directory that nothing references and that are older
    than the grace period (so in-flight writes of other processes are safe)."""
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
    if not dry_run:
        # Logged first: every commit before it is in the references read below, and a
        # transaction started before the cutoff that commits after it conflicts.
        cutoff_us = int(cutoff * 1_000_000)
        log.commit(Transaction("vacuum", (VacuumCutoff(cutoff_us),), f"grace {older_than_seconds:g}s"))
    refs = referenced_files(log)
    storage = log.warehouse.storage
    removed = kept = nbytes = 0
    for f in list(storage.list(log.id)):
        # The slack keeps files a writer made just before our cutoff by the file system's
        # coarse clock, which the writer's conflict check (same slack) might not catch.
        if f.path in refs or f.mtime > cutoff - CLOCK_SLACK_US / 1e6:
            kept += 1
            continue
        if not dry_run:
            storage.delete(f.path)
        removed += 1
        nbytes += f.size
    return VacuumResult(removed, nbytes, kept)
