"""`Commit`: what a committed transaction reports (its log sequence number and commit time).

The commit protocol itself (compare-and-swap with retries) lives in `conch.log.tablelog`, and its
conflict rules in `conch.log.wal`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from conch.errors import InvalidArgumentError

# The kinds of commit in a table's history. Data: a write, a delete, an enrichment's columns, a
# schema change, a branch's first version and a fast-forward to a branch (`conch.log.branching`).
# Maintenance (the table's content is unchanged): a compaction (major or minor; automatic ones
# too), a WAL flush, a vacuum's cutoff, an expire's horizon. A tag names a version.
DATA_KINDS = ("write", "delete", "enrich", "schema", "branch", "fast_forward")
MAINTENANCE_KINDS = ("compact", "flush", "vacuum", "expire")
COMMIT_KINDS = (*DATA_KINDS, *MAINTENANCE_KINDS, "tag")


def kinds_filter(kind: str | Iterable[str] | None) -> frozenset[str] | None:
    """The commit kinds `history(kind=...)` keeps: one kind, several, or `"data"` /
    `"maintenance"` for the groups above; None keeps every commit. An unknown kind is an
    `InvalidArgumentError` (a typo would otherwise list nothing)."""
    if kind is None:
        return None
    names = [kind] if isinstance(kind, str) else list(kind)
    out: set[str] = set()
    for k in names:
        if k == "data":
            out.update(DATA_KINDS)
        elif k == "maintenance":
            out.update(MAINTENANCE_KINDS)
        elif k in COMMIT_KINDS:
            out.add(k)
        else:
            raise InvalidArgumentError(
                f"no commit kind {k!r}: use one of {', '.join(COMMIT_KINDS)}, or 'data' / 'maintenance'"
            )
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class Commit:
    """A committed transaction: its log sequence number (`version=` in scans), commit time (µs
    since the epoch, `asof=`), kind, summary and the columns it added to the schema."""

    seq: int
    time: int
    kind: str = "write"
    summary: str = ""
    added_columns: tuple[str, ...] = ()

    @property
    def datetime(self) -> datetime:
        """The commit time as an aware UTC datetime (usable as `asof=`)."""
        return datetime.fromtimestamp(self.time / 1_000_000, tz=UTC)
