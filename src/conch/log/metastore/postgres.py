"""The PostgreSQL metastore: many machines, one real database (`metastore="postgresql://..."`).

The CAS of `append` is one transaction: read the table's last entry, refuse if it is not
`expected_seq`, insert `expected_seq + 1`. The primary key `(table_id, seq)` makes the race
safe under READ COMMITTED: of two transactions inserting the same sequence number, the second
blocks on the index until the first commits and then fails with a unique violation, which is a
`CommitConflictError`. Commit times are `max(now, previous + 1)` inside the same transaction.

Connections come from a `psycopg_pool.ConnectionPool`; a forked child (a data-loader worker)
opens its own pool instead of sharing the parent's sockets. The pool checks each connection as
it hands it out (`ConnectionPool.check_connection`), so after a database restart a process's
next operation gets a fresh connection instead of failing on a dead one.

Errors are honest about commits: a failure before the COMMIT of an append was sent is
`MetastoreUnavailableError` (nothing changed); only a failure of the COMMIT itself is
`CommitStateUnknownError`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from conch.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    MetastoreUnavailableError,
    TableExistsError,
    TableNotFoundError,
)
from conch.log.metastore.base import LogEntry, TableRecord
from conch.model.deps import optional_import

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conch_tables (
    name TEXT PRIMARY KEY, id TEXT UNIQUE NOT NULL, created_us BIGINT NOT NULL, props TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS conch_wal (
    table_id TEXT NOT NULL, seq BIGINT NOT NULL, time_us BIGINT NOT NULL, entry TEXT NOT NULL,
    PRIMARY KEY (table_id, seq));
CREATE INDEX IF NOT EXISTS conch_wal_time ON conch_wal (table_id, time_us);
CREATE TABLE IF NOT EXISTS conch_snapshots (
    table_id TEXT NOT NULL, seq BIGINT NOT NULL, path TEXT NOT NULL, PRIMARY KEY (table_id, seq));
"""


class PostgresMetastore:
    """Catalog and WALs in PostgreSQL tables `conch_tables`, `conch_wal`, `conch_snapshots`
    (created on first use).

    >>> ms = PostgresMetastore("postgresql://user@db.example:5432/conch")  # doctest: +SKIP
    """

    def __init__(self, dsn: str, max_connections: int = 4) -> None:
        self.dsn = dsn
        self._max = max_connections
        self._pool: Any = None
        self._pid = -1
        self._lock = threading.Lock()
        with self._conn() as conn:
            # One creator at a time: concurrent CREATE TABLE IF NOT EXISTS can still collide.
            conn.execute("SELECT pg_advisory_xact_lock(7236521)")
            conn.execute(_SCHEMA)

    def __repr__(self) -> str:
        return f"PostgresMetastore({self._where()!r})"

    @property
    def uri(self) -> str:
        """The database, without its password."""
        return self._where()

    def _where(self) -> str:
        """The DSN without its password, for messages."""
        conninfo = optional_import("psycopg.conninfo")
        try:
            parts = conninfo.conninfo_to_dict(self.dsn)
        except Exception:
            return "postgresql://?"
        return f"postgresql://{parts.get('host', '')}:{parts.get('port', '')}/{parts.get('dbname', '')}"

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        """A pooled connection inside one transaction (committed on a clean exit)."""
        psycopg = optional_import("psycopg")
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                pool_mod = optional_import("psycopg_pool")
                self._pool = pool_mod.ConnectionPool(
                    self.dsn,
                    min_size=1,
                    max_size=self._max,
                    open=True,
                    timeout=30,
                    name="conch",
                    check=pool_mod.ConnectionPool.check_connection,
                )
                self._pid = os.getpid()
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.OperationalError as e:
            raise MetastoreUnavailableError(f"metastore {self._where()} failed: {e}") from e
        except optional_import("psycopg_pool").PoolTimeout as e:
            raise MetastoreUnavailableError(f"metastore {self._where()} is unreachable: {e}") from e

    def create_table(self, record: TableRecord) -> None:
        psycopg = optional_import("psycopg")
        try:
            with self._conn() as conn:
                conn.execute(
                    "INSERT INTO conch_tables (name, id, created_us, props) VALUES (%s, %s, %s, %s)",
                    (record.name, record.id, record.created_us, record.props),
                )
        except psycopg.errors.UniqueViolation:
            raise TableExistsError(f"table {record.name!r} already exists") from None

    def get_table(self, name: str) -> TableRecord:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT name, id, created_us, props FROM conch_tables WHERE name = %s", (name,)
            ).fetchone()
        if row is None:
            raise TableNotFoundError(f"no table {name!r} in {self._where()}")
        return TableRecord(*row)

    def list_tables(self) -> list[TableRecord]:
        with self._conn() as conn:
            rows = conn.execute("SELECT name, id, created_us, props FROM conch_tables ORDER BY name").fetchall()
        return [TableRecord(*r) for r in rows]

    def drop_table(self, name: str) -> TableRecord:
        with self._conn() as conn:
            row = conn.execute(
                "DELETE FROM conch_tables WHERE name = %s RETURNING name, id, created_us, props", (name,)
            ).fetchone()
            if row is None:
                raise TableNotFoundError(f"no table {name!r} in {self._where()}")
            conn.execute("DELETE FROM conch_wal WHERE table_id = %s", (row[1],))
            conn.execute("DELETE FROM conch_snapshots WHERE table_id = %s", (row[1],))
        return TableRecord(*row)

    def append(self, table_id: str, expected_seq: int, entry: str) -> LogEntry:
        return self.append_batch(table_id, expected_seq, [entry])[0]

    def append_batch(self, table_id: str, expected_seq: int, entries: list[str]) -> list[LogEntry]:
        """Append `entries` as numbers `expected_seq + 1 ...` in one transaction, all or none
        (group commit, `conch.log.groupcommit`); `CommitConflictError` if the log moved on."""
        psycopg = optional_import("psycopg")
        committing = False
        try:
            with self._conn() as conn:
                last = conn.execute(
                    "SELECT seq, time_us FROM conch_wal WHERE table_id = %s ORDER BY seq DESC LIMIT 1", (table_id,)
                ).fetchone()
                last_seq, last_time = last if last else (0, 0)
                if last_seq != expected_seq:
                    raise CommitConflictError(f"log of table {table_id} is at {last_seq}, expected {expected_seq}")
                t0 = max(time.time_ns() // 1000, last_time + 1)
                out = [LogEntry(expected_seq + 1 + i, t0 + i, e) for i, e in enumerate(entries)]
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO conch_wal (table_id, seq, time_us, entry) VALUES (%s, %s, %s, %s)",
                        [(table_id, e.seq, e.time, e.entry) for e in out],
                    )
                committing = True  # leaving the block sends COMMIT
        except psycopg.errors.UniqueViolation:
            raise CommitConflictError(f"log of table {table_id} moved past {expected_seq}") from None
        except MetastoreUnavailableError as e:
            if not committing:  # the transaction never committed: the server rolls it back
                raise MetastoreUnavailableError(
                    f"commit {expected_seq + 1} to table {table_id}: {e}; nothing was committed"
                ) from e
            # the COMMIT may or may not have reached the server
            raise CommitStateUnknownError(
                f"commit {expected_seq + 1} to table {table_id}: {e}; look at the table's history before writing again"
            ) from e
        return out

    def read_log(self, table_id: str, after_seq: int = 0, upto_seq: int | None = None) -> list[LogEntry]:
        upto = upto_seq if upto_seq is not None else 2**62
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT seq, time_us, entry FROM conch_wal WHERE table_id = %s AND seq > %s AND seq <= %s ORDER BY seq",
                (table_id, after_seq, upto),
            ).fetchall()
        return [LogEntry(*r) for r in rows]

    def last_seq(self, table_id: str) -> int:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM conch_wal WHERE table_id = %s", (table_id,)
            ).fetchone()
        return int(row[0])

    def seq_at_time(self, table_id: str, time_us: int) -> int:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM conch_wal WHERE table_id = %s AND time_us <= %s", (table_id, time_us)
            ).fetchone()
        return int(row[0])

    def latest_snapshot(self, table_id: str, at_or_before_seq: int | None = None) -> tuple[int, str] | None:
        upto = at_or_before_seq if at_or_before_seq is not None else 2**62
        with self._conn() as conn:
            row = conn.execute(
                "SELECT seq, path FROM conch_snapshots WHERE table_id = %s AND seq <= %s ORDER BY seq DESC LIMIT 1",
                (table_id, upto),
            ).fetchone()
        return (int(row[0]), str(row[1])) if row else None

    def snapshots(self, table_id: str) -> list[tuple[int, str]]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT seq, path FROM conch_snapshots WHERE table_id = %s ORDER BY seq", (table_id,)
            ).fetchall()
        return [(int(s), str(p)) for s, p in rows]

    def add_snapshot(self, table_id: str, seq: int, path: str) -> None:
        with self._conn() as conn:
            conn.execute(
                "INSERT INTO conch_snapshots (table_id, seq, path) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (table_id, seq, path),
            )

    def remove_snapshots(self, table_id: str, before_seq: int) -> None:
        with self._conn() as conn:
            conn.execute("DELETE FROM conch_snapshots WHERE table_id = %s AND seq < %s", (table_id, before_seq))

    def check(self) -> list[str]:
        """Logs with gaps or commit times that do not increase (the CAS rules out both)."""
        with self._conn() as conn:
            gaps = conn.execute(
                "SELECT table_id, COUNT(*), MAX(seq) FROM conch_wal GROUP BY table_id HAVING COUNT(*) <> MAX(seq)"
            ).fetchall()
            times = conn.execute(
                "SELECT table_id, seq FROM (SELECT table_id, seq, time_us, "
                "LAG(time_us) OVER (PARTITION BY table_id ORDER BY seq) AS prev FROM conch_wal) w "
                "WHERE prev >= time_us"
            ).fetchall()
        return [f"log of table {t}: {n} entries but last seq {m}" for t, n, m in gaps] + [
            f"log of table {t}: entry {seq} is not later than the one before" for t, seq in times
        ]

    def close(self) -> None:
        with self._lock:
            if self._pool is not None and self._pid == os.getpid():
                self._pool.close()
            self._pool = None
