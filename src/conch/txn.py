"""`Commit`: what a committed transaction reports (its log sequence number and commit time).

The commit protocol itself (compare-and-swap with retries) lives in `conch.tablelog`, and its
conflict rules in `conch.wal`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime


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
