"""Commits: one WAL entry per transaction, appended with compare-and-swap (DESIGN §4).

On a lost race the committer re-reads the table and tries again. Blind upserts and deletes
never conflict (commit time orders them); a write that changes the schema conflicts with a
concurrent schema change, because its files name columns by ids it allocated.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from conch.errors import CommitConflictError
from conch.manifest import entry_json

if TYPE_CHECKING:
    from conch.table import Table
    from conch.write import StagedWrite

MAX_ATTEMPTS = 200


@dataclass(frozen=True, slots=True)
class Commit:
    """A committed transaction: its log sequence number and commit time (µs since the epoch)."""

    seq: int
    time: int
    kind: str = "write"
    summary: str = ""

    @property
    def datetime(self) -> datetime:
        """The commit time as an aware UTC datetime (usable as `asof=`)."""
        return datetime.fromtimestamp(self.time / 1_000_000, tz=UTC)


def commit(table: Table, staged: StagedWrite, kind: str, **extra: Any) -> Commit:
    """Append the staged operations as one WAL entry, retrying lost races."""
    summary = extra.pop("summary", "")
    missing = [f for f in staged.files if not table.catalog.storage.exists(f)]
    if missing:
        raise CommitConflictError(
            f"table {table.name!r}: {len(missing)} staged file(s) are gone (e.g. {missing[0]}), most "
            "likely removed by a vacuum with a shorter grace period than this write took; nothing "
            "was committed, write again"
        )
    checked = staged.base_seq  # log entries up to here are known to hold no conflicting vacuum
    for attempt in range(MAX_ATTEMPTS):
        state = table.state()
        # `add_columns` carries the whole new schema, so it is only valid on the schema it was
        # derived from: any schema change in between (columns or levels) is a conflict.
        if staged.schema is not staged.base_schema and state.schema != staged.base_schema:
            raise CommitConflictError(
                f"table {table.name!r}: a concurrent commit changed the schema while this write changed it "
                f"too (adding {[c.full_path for c in staged.added_columns] or 'levels'}); nothing was "
                "committed, write again"
            )
        if staged.files and 0 <= checked < state.seq:
            _check_vacuums(table, staged, checked, state.seq)
            checked = state.seq
        entry = entry_json(kind, staged.all_ops(), summary=summary, **extra)
        try:
            log = table.catalog.metastore.append(table.id, state.seq, entry)
        except CommitConflictError:
            time.sleep(random.uniform(0, 0.002 * (1 + attempt)))
            continue
        table._after_commit(log.seq)
        return Commit(log.seq, log.time, kind, summary)
    raise CommitConflictError(f"table {table.name!r}: gave up after {MAX_ATTEMPTS} lost commit races")


def _check_vacuums(table: Table, staged: StagedWrite, after: int, upto: int) -> None:
    """A vacuum committed after this write was staged may have deleted its files (it removes
    unreferenced files older than its cutoff): if its cutoff is later than the write's start,
    committing would reference files that may be gone. Reads log entries (after, upto]."""
    started_us = int(staged.started * 1_000_000)
    for e in table.catalog.metastore.read_log(table.id, after, upto):
        cutoff = json.loads(e.entry).get("cutoff_us")
        if cutoff is not None and cutoff > started_us:
            raise CommitConflictError(
                f"table {table.name!r}: vacuum (commit {e.seq}) ran with a grace period shorter than "
                "this write took and may have removed its files; nothing was committed, write again"
            )
