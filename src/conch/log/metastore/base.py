"""The metastore interface: a catalog of tables and, per table, an append-only log with CAS.

The whole commit protocol rests on one primitive, `append(table_id, expected_seq, entry)`: it
adds entry number `expected_seq + 1` only if the log's last entry is still `expected_seq`, and
assigns the commit time (µs since the epoch, strictly increasing per table). Anything that can
do that atomically can be a metastore.

Contract (the behaviour suite `tests/log/test_metastore.py` runs it against every backend):
- reads never create anything: a metastore whose store does not exist yet lists no tables;
- `read_log`, `last_seq`, `seq_at_time` and `append` raise `TableNotFoundError` for a table id
  that was dropped (or never created), so a handle to a dropped table cannot write or read;
- commit times are strictly increasing per table.

Optional: `append_batch(table_id, expected_seq, entries) -> list[LogEntry]` appends several
consecutive entries all or none (SQLite, PostgreSQL); group commit (`conch.log.groupcommit`) uses
it where a backend has it and appends one entry at a time where not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class TableRecord:
    name: str
    id: str
    created_us: int
    props: str  # JSON: key schema, initial schema


@dataclass(frozen=True, slots=True)
class LogEntry:
    seq: int
    time: int  # commit time, µs since the epoch
    entry: str  # JSON document of operations


class Metastore(Protocol):
    @property
    def uri(self) -> str:
        """Where the metastore lives (`sqlite:///dir/_catalog.sqlite`, later `postgresql://...`)."""
        ...

    def create_table(self, record: TableRecord) -> None:
        """Register a table; raises `TableExistsError` if the name is taken."""

    def get_table(self, name: str) -> TableRecord:
        """Raises `TableNotFoundError`."""

    def list_tables(self) -> list[TableRecord]: ...

    def drop_table(self, name: str) -> TableRecord:
        """Forget a table and its log; raises `TableNotFoundError`."""

    def append(self, table_id: str, expected_seq: int, entry: str) -> LogEntry:
        """Append entry `expected_seq + 1`; raises `CommitConflictError` if the log moved on."""

    def read_log(self, table_id: str, after_seq: int = 0, upto_seq: int | None = None) -> list[LogEntry]: ...

    def last_seq(self, table_id: str) -> int: ...

    def seq_at_time(self, table_id: str, time_us: int) -> int:
        """The last sequence number committed at or before `time_us` (0 if none)."""

    def latest_snapshot(self, table_id: str, at_or_before_seq: int | None = None) -> tuple[int, str] | None:
        """The newest flushed snapshot (seq, path) at or before a sequence number."""

    def snapshots(self, table_id: str) -> list[tuple[int, str]]:
        """Every registered snapshot (seq, path), oldest first."""

    def add_snapshot(self, table_id: str, seq: int, path: str) -> None:
        """Index a snapshot already registered in the log (`RegisterSnapshot`); the first
        registration of a sequence number wins."""

    def remove_snapshots(self, table_id: str, before_seq: int) -> None:
        """Forget every snapshot registered at a sequence number below `before_seq` (vacuum,
        once the expire horizon is past them; their files are deleted afterwards)."""

    def check(self) -> list[str]:
        """Damage the backend finds in its own storage (`Table.check()`); [] if none."""

    def close(self) -> None:
        """Release connections; the metastore stays usable (it reconnects)."""
