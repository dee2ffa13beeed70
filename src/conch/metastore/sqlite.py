"""The embedded default metastore: one SQLite file, safe for many processes on one machine.

SQLite serialises writers with `BEGIN IMMEDIATE`, so the CAS of `append` is a read of the last
sequence number and an insert inside one write transaction. WAL journal mode lets readers run
while a writer commits.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from pathlib import Path

from conch.errors import CommitConflictError, CommitStateUnknownError, TableExistsError, TableNotFoundError
from conch.integrity import sqlite_damage_named
from conch.metastore.base import LogEntry, TableRecord

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tables (
    name TEXT PRIMARY KEY, id TEXT UNIQUE NOT NULL, created_us INTEGER NOT NULL, props TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS wal (
    table_id TEXT NOT NULL, seq INTEGER NOT NULL, time_us INTEGER NOT NULL, entry TEXT NOT NULL,
    PRIMARY KEY (table_id, seq));
CREATE TABLE IF NOT EXISTS snapshots (
    table_id TEXT NOT NULL, seq INTEGER NOT NULL, path TEXT NOT NULL, PRIMARY KEY (table_id, seq));
"""


def now_us() -> int:
    return time.time_ns() // 1000


@sqlite_damage_named
class SqliteMetastore:
    """Metastore in a SQLite file (`<warehouse>/_catalog.sqlite`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._local = threading.local()
        with self._conn() as c:
            c.executescript(_SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            # FULL: a commit that returned survives a power loss (NORMAL may roll it back).
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA busy_timeout=60000")
            self._local.conn = conn
        return conn

    def create_table(self, record: TableRecord) -> None:
        try:
            self._conn().execute(
                "INSERT INTO tables (name, id, created_us, props) VALUES (?, ?, ?, ?)",
                (record.name, record.id, record.created_us, record.props),
            )
        except sqlite3.IntegrityError:
            raise TableExistsError(f"table {record.name!r} already exists") from None

    def get_table(self, name: str) -> TableRecord:
        row = self._conn().execute("SELECT name, id, created_us, props FROM tables WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise TableNotFoundError(f"no table {name!r} in {self.path}")
        return TableRecord(*row)

    def list_tables(self) -> list[TableRecord]:
        rows = self._conn().execute("SELECT name, id, created_us, props FROM tables ORDER BY name")
        return [TableRecord(*r) for r in rows]

    def drop_table(self, name: str) -> TableRecord:
        rec = self.get_table(name)
        c = self._conn()
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute("DELETE FROM tables WHERE name = ?", (name,))
            c.execute("DELETE FROM wal WHERE table_id = ?", (rec.id,))
            c.execute("DELETE FROM snapshots WHERE table_id = ?", (rec.id,))
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return rec

    def append(self, table_id: str, expected_seq: int, entry: str) -> LogEntry:
        c = self._conn()
        c.execute("BEGIN IMMEDIATE")
        try:
            last_seq, last_time = c.execute(
                "SELECT COALESCE(MAX(seq), 0), COALESCE(MAX(time_us), 0) FROM wal WHERE table_id = ?",
                (table_id,),
            ).fetchone()
            if last_seq != expected_seq:
                c.execute("ROLLBACK")
                raise CommitConflictError(f"log of table {table_id} is at {last_seq}, expected {expected_seq}")
            t = max(now_us(), last_time + 1)
            c.execute(
                "INSERT INTO wal (table_id, seq, time_us, entry) VALUES (?, ?, ?, ?)",
                (table_id, expected_seq + 1, t, entry),
            )
            c.execute("COMMIT")
        except CommitConflictError:
            raise
        except sqlite3.OperationalError as e:
            with contextlib.suppress(sqlite3.OperationalError):
                c.execute("ROLLBACK")
            raise CommitStateUnknownError(f"commit to {table_id} failed: {e}") from e
        return LogEntry(expected_seq + 1, t, entry)

    def read_log(self, table_id: str, after_seq: int = 0, upto_seq: int | None = None) -> list[LogEntry]:
        upto = upto_seq if upto_seq is not None else 2**62
        rows = self._conn().execute(
            "SELECT seq, time_us, entry FROM wal WHERE table_id = ? AND seq > ? AND seq <= ? ORDER BY seq",
            (table_id, after_seq, upto),
        )
        return [LogEntry(*r) for r in rows]

    def last_seq(self, table_id: str) -> int:
        row = self._conn().execute("SELECT COALESCE(MAX(seq), 0) FROM wal WHERE table_id = ?", (table_id,)).fetchone()
        return int(row[0])

    def seq_at_time(self, table_id: str, time_us: int) -> int:
        row = (
            self._conn()
            .execute("SELECT COALESCE(MAX(seq), 0) FROM wal WHERE table_id = ? AND time_us <= ?", (table_id, time_us))
            .fetchone()
        )
        return int(row[0])

    def latest_snapshot(self, table_id: str, at_or_before_seq: int | None = None) -> tuple[int, str] | None:
        upto = at_or_before_seq if at_or_before_seq is not None else 2**62
        row = (
            self._conn()
            .execute(
                "SELECT seq, path FROM snapshots WHERE table_id = ? AND seq <= ? ORDER BY seq DESC LIMIT 1",
                (table_id, upto),
            )
            .fetchone()
        )
        return (int(row[0]), str(row[1])) if row else None

    def add_snapshot(self, table_id: str, seq: int, path: str) -> None:
        self._conn().execute(
            "INSERT OR IGNORE INTO snapshots (table_id, seq, path) VALUES (?, ?, ?)", (table_id, seq, path)
        )

    def check(self) -> list[str]:
        """Damage SQLite finds in the database file (`PRAGMA integrity_check`); [] if none."""
        return [r[0] for r in self._conn().execute("PRAGMA integrity_check") if r[0] != "ok"]

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
