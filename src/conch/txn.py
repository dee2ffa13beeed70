"""Commits: one WAL entry per transaction, appended with compare-and-swap (DESIGN §4).

On a lost race the committer re-reads the table and tries again. Blind upserts and deletes
never conflict (commit time orders them); a write that changes the schema conflicts with a
concurrent schema change, because its files name columns by ids it allocated.
"""

from __future__ import annotations

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
        return datetime.fromtimestamp(self.time / 1_000_000, tz=UTC)


def commit(table: Table, staged: StagedWrite, kind: str, **extra: Any) -> Commit:
    """Append the staged operations as one WAL entry, retrying lost races."""
    summary = extra.pop("summary", "")
    for attempt in range(MAX_ATTEMPTS):
        state = table.state()
        if staged.added_columns and state.schema.next_column_id != staged.base_schema.next_column_id:
            raise CommitConflictError(
                f"table {table.name!r}: a concurrent commit changed the schema while this write added "
                f"{[c.full_path for c in staged.added_columns]}; nothing was committed, write again"
            )
        entry = entry_json(kind, staged.all_ops(), summary=summary, **extra)
        try:
            log = table.catalog.metastore.append(table.id, state.seq, entry)
        except CommitConflictError:
            time.sleep(random.uniform(0, 0.002 * (1 + attempt)))
            continue
        table.after_commit(log.seq)
        return Commit(log.seq, log.time, kind, summary)
    raise CommitConflictError(f"table {table.name!r}: gave up after {MAX_ATTEMPTS} lost commit races")
