"""The embedded default metastore: one SQLite file, safe for many processes on one machine.

SQLite serialises writers with `BEGIN IMMEDIATE`, so the CAS of `append` is a read of the last
sequence number and an insert inside one write transaction. WAL journal mode lets readers run
while a writer commits.

The `heads` table keeps each table's last sequence number and time beside the log, written in
the same transaction as the entry. SQLite has no page checksums, so damage to the `wal` table's
primary-key index can hide rows from an indexed read; the head is what lets `read_log` tell a
short log from a hidden entry (a `CorruptFileError`, never a silently older table). Files written
before the table existed get their heads on their next commit (until then: `MAX(seq)`).

The file is created by the first `create_table` (or `create=True`), never by a read: looking
into a mistyped warehouse must not leave one behind. Connections are per thread and per process:
a child created by `fork()` (a data-loader worker) opens its own instead of sharing its parent's
socket-like handle, which SQLite forbids.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from pathlib import Path

from conch.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    CorruptFileError,
    TableExistsError,
    TableNotFoundError,
)
from conch.files.integrity import sqlite_damage_named
from conch.log.metastore.base import LogEntry, TableRecord

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tables (
    name TEXT PRIMARY KEY, id TEXT UNIQUE NOT NULL, created_us INTEGER NOT NULL, props TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS wal (
    table_id TEXT NOT NULL, seq INTEGER NOT NULL, time_us INTEGER NOT NULL, entry TEXT NOT NULL,
    PRIMARY KEY (table_id, seq));
CREATE TABLE IF NOT EXISTS heads (
    table_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, time_us INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS snapshots (
    table_id TEXT NOT NULL, seq INTEGER NOT NULL, path TEXT NOT NULL, PRIMARY KEY (table_id, seq));
"""

# Connections a forked child inherited: kept referenced so the child never closes (and thereby
# disturbs the locks of) its parent's connections.
_inherited: list[object] = []


@sqlite_damage_named
class SqliteMetastore:
    """Metastore in a SQLite file (by default `<warehouse>/_catalog.sqlite`)."""

    def __init__(self, path: str | os.PathLike[str], create: bool = False) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        if create:
            self._conn(create=True)

    def __repr__(self) -> str:
        return f"SqliteMetastore({self.path!r})"

    @property
    def uri(self) -> str:
        return f"sqlite://{self.path}"

    def _conn(self, create: bool = False) -> sqlite3.Connection | None:
        """This thread's connection; None while the file does not exist and `create` is False."""
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    _inherited.append((self._local, self._conns))
                    self._local, self._conns, self._pid = threading.local(), [], os.getpid()
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if not os.path.exists(self.path):
            if not create:
                return None
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # A damaged file raises sqlite3.DatabaseError here: `sqlite_damage_named` makes it a
        # CorruptFileError naming the file.
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        # FULL: a commit that returned survives a power loss (NORMAL may roll it back).
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA busy_timeout=60000")
        conn.executescript(_SCHEMA)
        self._local.conn = conn
        with self._lock:
            self._conns.append(conn)
        return conn

    def _reader(self) -> sqlite3.Connection | None:
        return self._conn()

    def _writer(self) -> sqlite3.Connection:
        conn = self._conn(create=True)
        assert conn is not None
        return conn

    def create_table(self, record: TableRecord) -> None:
        try:
            self._writer().execute(
                "INSERT INTO tables (name, id, created_us, props) VALUES (?, ?, ?, ?)",
                (record.name, record.id, record.created_us, record.props),
            )
        except sqlite3.IntegrityError:
            raise TableExistsError(f"table {record.name!r} already exists") from None

    def get_table(self, name: str) -> TableRecord:
        c = self._reader()
        row = None
        if c is not None:
            row = c.execute("SELECT name, id, created_us, props FROM tables WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise TableNotFoundError(f"no table {name!r} in {self.path}")
        return TableRecord(*row)

    def list_tables(self) -> list[TableRecord]:
        c = self._reader()
        if c is None:
            return []
        rows = c.execute("SELECT name, id, created_us, props FROM tables ORDER BY name")
        return [TableRecord(*r) for r in rows]

    def drop_table(self, name: str) -> TableRecord:
        rec = self.get_table(name)
        c = self._writer()
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute("DELETE FROM tables WHERE name = ?", (name,))
            c.execute("DELETE FROM wal WHERE table_id = ?", (rec.id,))
            c.execute("DELETE FROM heads WHERE table_id = ?", (rec.id,))
            c.execute("DELETE FROM snapshots WHERE table_id = ?", (rec.id,))
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return rec

    def _check_table(self, c: sqlite3.Connection | None, table_id: str) -> sqlite3.Connection:
        if c is None or c.execute("SELECT 1 FROM tables WHERE id = ?", (table_id,)).fetchone() is None:
            raise TableNotFoundError(f"table {table_id} was dropped (or never existed) in {self.path}")
        return c

    def append(self, table_id: str, expected_seq: int, entry: str) -> LogEntry:
        return self.append_batch(table_id, expected_seq, [entry])[0]

    def append_batch(self, table_id: str, expected_seq: int, entries: list[str]) -> list[LogEntry]:
        """Append `entries` as numbers `expected_seq + 1 ...` in one write transaction (one
        fsync), all or none; `CommitConflictError` if the log moved on (group commit,
        `conch.log.groupcommit`). Times are strictly increasing, as for `append`."""
        c = self._reader()
        if c is None:
            raise TableNotFoundError(f"table {table_id} does not exist in {self.path}")
        c.execute("BEGIN IMMEDIATE")
        try:
            if c.execute("SELECT 1 FROM tables WHERE id = ?", (table_id,)).fetchone() is None:
                c.execute("ROLLBACK")
                raise TableNotFoundError(f"table {table_id} was dropped in {self.path}; nothing was committed")
            last_seq, last_time = self._head(c, table_id)
            if last_seq != expected_seq:
                c.execute("ROLLBACK")
                raise CommitConflictError(f"log of table {table_id} is at {last_seq}, expected {expected_seq}")
            t0 = max(time.time_ns() // 1000, last_time + 1)
            out = [LogEntry(expected_seq + 1 + i, t0 + i, e) for i, e in enumerate(entries)]
            c.executemany(
                "INSERT INTO wal (table_id, seq, time_us, entry) VALUES (?, ?, ?, ?)",
                [(table_id, e.seq, e.time, e.entry) for e in out],
            )
            if out:
                c.execute(
                    "INSERT INTO heads (table_id, seq, time_us) VALUES (?, ?, ?) "
                    "ON CONFLICT (table_id) DO UPDATE SET seq = excluded.seq, time_us = excluded.time_us",
                    (table_id, out[-1].seq, out[-1].time),
                )
            c.execute("COMMIT")
        except (CommitConflictError, TableNotFoundError):
            raise
        except sqlite3.OperationalError as e:
            with contextlib.suppress(sqlite3.OperationalError):
                c.execute("ROLLBACK")
            raise CommitStateUnknownError(f"commit to {table_id} failed: {e}") from e
        return out

    def read_log(self, table_id: str, after_seq: int = 0, upto_seq: int | None = None) -> list[LogEntry]:
        c = self._check_table(self._reader(), table_id)
        upto = upto_seq if upto_seq is not None else 2**62
        # one statement, so the head and the rows come from one snapshot of the file
        rows = c.execute(
            "SELECT 0, seq, time_us, entry FROM wal WHERE table_id = ? AND seq > ? AND seq <= ? "
            "UNION ALL SELECT 1, seq, time_us, NULL FROM heads WHERE table_id = ? ORDER BY 1, 2",
            (table_id, after_seq, upto, table_id),
        ).fetchall()
        head = rows.pop()[1:] if rows and rows[-1][0] == 1 else None
        entries = [LogEntry(*r[1:]) for r in rows]
        last = min(upto, int(head[0])) if head is not None else (entries[-1].seq if entries else after_seq)
        if [e.seq for e in entries] != list(range(after_seq + 1, last + 1)):
            found = {e.seq for e in entries}
            missing = [s for s in range(after_seq + 1, last + 1) if s not in found]
            raise CorruptFileError(
                f"the metastore {self.path} is damaged: the log of table {table_id} ends at entry {last} but "
                f"entries {missing[:5]}{' ...' if len(missing) > 5 else ''} cannot be read (a damaged index or "
                "row); `conch check` reports it; restore the file from a backup"
            )
        return entries

    def last_seq(self, table_id: str) -> int:
        return self._head(self._check_table(self._reader(), table_id), table_id)[0]

    @staticmethod
    def _head(c: sqlite3.Connection, table_id: str) -> tuple[int, int]:
        """(last seq, last time) of a table's log: its head row, or the log's maximum for files
        written before heads were kept."""
        row = c.execute("SELECT seq, time_us FROM heads WHERE table_id = ?", (table_id,)).fetchone()
        if row is None:
            row = c.execute(
                "SELECT COALESCE(MAX(seq), 0), COALESCE(MAX(time_us), 0) FROM wal WHERE table_id = ?", (table_id,)
            ).fetchone()
        return int(row[0]), int(row[1])

    def seq_at_time(self, table_id: str, time_us: int) -> int:
        c = self._check_table(self._reader(), table_id)
        row = c.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM wal WHERE table_id = ? AND time_us <= ?", (table_id, time_us)
        ).fetchone()
        return int(row[0])

    def latest_snapshot(self, table_id: str, at_or_before_seq: int | None = None) -> tuple[int, str] | None:
        c = self._reader()
        if c is None:
            return None
        upto = at_or_before_seq if at_or_before_seq is not None else 2**62
        row = c.execute(
            "SELECT seq, path FROM snapshots WHERE table_id = ? AND seq <= ? ORDER BY seq DESC LIMIT 1",
            (table_id, upto),
        ).fetchone()
        return (int(row[0]), str(row[1])) if row else None

    def snapshots(self, table_id: str) -> list[tuple[int, str]]:
        c = self._reader()
        if c is None:
            return []
        rows = c.execute("SELECT seq, path FROM snapshots WHERE table_id = ? ORDER BY seq", (table_id,))
        return [(int(s), str(p)) for s, p in rows]

    def add_snapshot(self, table_id: str, seq: int, path: str) -> None:
        self._writer().execute(
            "INSERT OR IGNORE INTO snapshots (table_id, seq, path) VALUES (?, ?, ?)", (table_id, seq, path)
        )

    def remove_snapshots(self, table_id: str, before_seq: int) -> None:
        self._writer().execute("DELETE FROM snapshots WHERE table_id = ? AND seq < ?", (table_id, before_seq))

    def check(self) -> list[str]:
        """Damage SQLite finds in the database file (`PRAGMA integrity_check`); [] if none."""
        c = self._reader()
        return [] if c is None else [r[0] for r in c.execute("PRAGMA integrity_check") if r[0] != "ok"]

    def close(self) -> None:
        """Close every connection this process opened (a later call reopens)."""
        if self._pid != os.getpid():
            return
        with self._lock:
            conns, self._conns = self._conns, []
            self._local = threading.local()
        for conn in conns:
            conn.close()
