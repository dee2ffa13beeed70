"""Maintenance: flush the WAL into snapshot files, and vacuum unreferenced files (DESIGN §4, §6).

Vacuum removes files that no WAL entry or snapshot references: the leftovers of writers that
died or lost before committing. Files referenced by old log entries stay, so time travel keeps
working. A grace period protects files of writes still in flight in other processes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from conch.fragments import BLOB_SUFFIX
from conch.integrity import with_digest
from conch.storage import new_id
from conch.txn import commit
from conch.write import StagedWrite

if TYPE_CHECKING:
    from conch.table import Table


def flush(table: Table) -> int:
    """Write the current state as a snapshot file; readers then replay only the WAL after it."""
    state = table.state()
    data = state.to_json().encode()
    rel = with_digest(f"{table.id}/meta/{state.seq:012d}-{new_id()}.json", data)  # verified on read
    table.catalog.storage.write(rel, data)
    table.catalog.metastore.add_snapshot(table.id, state.seq, rel)
    return state.seq


@dataclass(frozen=True)
class VacuumResult:
    files_removed: int
    bytes_removed: int
    files_kept: int


def referenced_files(table: Table) -> set[str]:
    refs: set[str] = set()
    ms = table.catalog.metastore
    for e in ms.read_log(table.id):
        for op in json.loads(e.entry)["ops"]:
            if "path" in op:
                refs.add(op["path"])
                if op.get("blob_columns"):
                    refs.add(op["path"] + BLOB_SUFFIX)
    snap = ms.latest_snapshot(table.id)
    seq = None
    while snap is not None:
        refs.add(snap[1])
        seq = snap[0] - 1
        snap = ms.latest_snapshot(table.id, seq) if seq >= 0 else None
    return refs


def vacuum(table: Table, older_than_seconds: float = 3600.0, dry_run: bool = False) -> VacuumResult:
    """Delete files under the table's directory that nothing references and that are older
    than the grace period (so in-flight writes of other processes are safe)."""
    cutoff = time.time() - older_than_seconds
    if not dry_run:
        # Logged first, through the same CAS as commits: a write staged before the cutoff that
        # commits after this entry sees it and fails instead of referencing deleted files, and
        # every commit before it is in the references read below.
        schema = table.state().schema
        staged = StagedWrite(schema, schema, [])
        commit(table, staged, "vacuum", summary=f"grace {older_than_seconds:g}s", cutoff_us=int(cutoff * 1_000_000))
    refs = referenced_files(table)
    storage = table.catalog.storage
    removed = kept = nbytes = 0
    for f in list(storage.list(table.id)):
        if f.path in refs or f.mtime > cutoff:
            kept += 1
            continue
        if not dry_run:
            storage.delete(f.path)
        removed += 1
        nbytes += f.size
    return VacuumResult(removed, nbytes, kept)
