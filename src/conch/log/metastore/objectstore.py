"""A metastore with no service: the catalog and every table's WAL as objects in a `Storage`.

Layout (under the warehouse's storage root, beside the data):

    _catalog/tables/<name>.json           one table record (put-if-absent: names are unique)
    <table-id>/_log/<seq:020d>.json       WAL entry `seq`: {"seq", "time", "writer", "entry"}
    <table-id>/_snapshots/<seq:020d>.json a flushed snapshot: {"seq", "path"}

The compare-and-swap of `append(table, expected, entry)` is a conditional create of object
`expected + 1` (`If-None-Match: *` on S3/GCS/Azure, `link()` locally), as Delta Lake and Lance
commit on object storage: of two writers racing for the same sequence number exactly one object
is created. Entries are contiguous (entry n+1 is only written after entry n was read), so the
newest sequence number is found by galloping from the last one this process saw: O(log n)
existence checks, no listing. Commit times are `max(now, previous + 1)`: strictly increasing
per table even when clocks disagree.

Every entry carries a random writer id. When a conditional create reports "exists" (which on
S3 also happens when a put whose response was lost is retried) the entry is read back: if it is
ours the commit happened; if not, it is a conflict. A store that ignores conditional writes is
detected when the metastore is opened and refused (`ConditionalWriteUnsupportedError`): it
would let two commits overwrite each other.

Entries and snapshots are immutable, so they are cached in memory (bounded by bytes).
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

from conch.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    ConditionalWriteUnsupportedError,
    CorruptFileError,
    TableExistsError,
    TableNotFoundError,
)
from conch.files.storage.base import Storage, new_id
from conch.log.metastore.base import LogEntry, TableRecord
from conch.log.metastore.names import check_name
from conch.model.lru import Lru

CATALOG = "_catalog"
_CACHE_BYTES = 64 * 1024 * 1024
_verified: set[str] = set()  # storage URIs whose conditional writes were checked in this process
_verified_lock = threading.Lock()


def check_conditional_writes(storage: Storage) -> None:
    """Refuse a store whose put-if-absent is not honoured (a second create of the same object
    must fail): committing on it could silently replace another writer's commit."""
    with _verified_lock:
        if storage.uri in _verified:
            return
    probe = f"{CATALOG}/_probe/{new_id()}"
    try:
        first = storage.create(probe, b"1")
        second = storage.create(probe, b"2")
    finally:
        storage.delete(probe)
    if not first or second:
        raise ConditionalWriteUnsupportedError(
            f"{storage.uri} ignores conditional writes (a second put-if-absent of one object succeeded), so "
            "concurrent commits could overwrite each other: use a store that honours If-None-Match, or another "
            "metastore (connect(..., metastore='postgresql://...' or 'http://...'))"
        )
    with _verified_lock:
        _verified.add(storage.uri)


def _entry_cache(budget: int) -> Lru[tuple[str, int], LogEntry]:
    """Immutable log entries by (table id, seq), least recently used out past a byte budget."""
    return Lru(max_weight=budget, weight=lambda e: len(e.entry) + 100)


class ObjectStoreMetastore:
    """The catalog and WAL as put-if-absent objects in `storage` (`connect("s3://...")`).

    >>> ms = ObjectStoreMetastore(ObjectStorage("memory://demo"))  # doctest: +SKIP
    """

    def __init__(self, storage: Storage, cache_bytes: int = _CACHE_BYTES) -> None:
        self.storage = storage
        check_conditional_writes(storage)
        self._cache = _entry_cache(cache_bytes)
        self._last: dict[str, int] = {}  # table id -> a sequence number known to exist
        self._pool_pid = -1
        self._pool_obj: ThreadPoolExecutor | None = None

    def __repr__(self) -> str:
        return f"ObjectStoreMetastore({self.storage.uri!r})"

    @property
    def uri(self) -> str:
        """The storage the WAL objects live in."""
        return self.storage.uri

    @property
    def _pool(self) -> ThreadPoolExecutor:
        """Threads for concurrent object reads; a forked child (a data-loader worker) gets its
        own, since the parent's threads do not survive `fork()`."""
        if self._pool_obj is None or self._pool_pid != os.getpid():
            self._pool_obj = ThreadPoolExecutor(8, thread_name_prefix="conch-log")
            self._pool_pid = os.getpid()
        return self._pool_obj

    # --- catalog -------------------------------------------------------------------------

    def _record_path(self, name: str) -> str:
        return f"{CATALOG}/tables/{check_name(name)}.json"

    def create_table(self, record: TableRecord) -> None:
        check_name(record.id, "table id")
        if not self.storage.create(self._record_path(record.name), json.dumps(asdict(record)).encode()):
            raise TableExistsError(f"table {record.name!r} already exists")

    def get_table(self, name: str) -> TableRecord:
        path = self._record_path(name)
        try:
            return TableRecord(**json.loads(self.storage.read(path)))
        except FileNotFoundError:
            raise TableNotFoundError(f"no table {name!r} in {self.storage.uri}") from None
        except (ValueError, TypeError) as e:
            raise CorruptFileError(f"table record {self.storage.uri}/{path} is damaged: {e}") from e

    def list_tables(self) -> list[TableRecord]:
        names = sorted(
            f.path.removeprefix(f"{CATALOG}/tables/").removesuffix(".json")
            for f in self.storage.list(f"{CATALOG}/tables")
            if f.path.endswith(".json")
        )

        def get(name: str) -> TableRecord | None:
            try:
                return self.get_table(name)
            except TableNotFoundError:  # dropped while listing
                return None

        return [r for r in self._pool.map(get, names) if r is not None]

    def drop_table(self, name: str) -> TableRecord:
        rec = self.get_table(name)
        self.storage.delete(self._record_path(name))  # the table is gone from here on
        for part in ("_log", "_snapshots"):
            self.storage.delete_prefix(f"{rec.id}/{part}")
        self._cache.remove_if(lambda key: key[0] == rec.id)
        self._last.pop(rec.id, None)
        return rec

    # --- the log -------------------------------------------------------------------------

    @staticmethod
    def _entry_path(table_id: str, seq: int) -> str:
        return f"{check_name(table_id, 'table id')}/_log/{seq:020d}.json"

    def _decode(self, table_id: str, seq: int, raw: bytes) -> tuple[LogEntry, str]:
        try:
            doc = json.loads(raw)
            if doc["seq"] != seq:
                raise ValueError(f"holds seq {doc['seq']}")
            return LogEntry(seq, int(doc["time"]), str(doc["entry"])), str(doc.get("writer", ""))
        except (ValueError, KeyError, TypeError) as e:
            where = f"{self.storage.uri}/{self._entry_path(table_id, seq)}"
            raise CorruptFileError(f"log entry {where} is damaged: {e}") from e

    def _read_entry(self, table_id: str, seq: int) -> LogEntry:
        """Entry `seq`; raises `FileNotFoundError` if there is none."""
        hit = self._cache.get((table_id, seq))
        if hit is not None:
            return hit
        entry, _ = self._decode(table_id, seq, self.storage.read(self._entry_path(table_id, seq)))
        self._cache.put((table_id, seq), entry)
        return entry

    def _exists(self, table_id: str, seq: int) -> bool:
        return self._cache.get((table_id, seq)) is not None or self.storage.exists(self._entry_path(table_id, seq))

    def append(self, table_id: str, expected_seq: int, entry: str) -> LogEntry:
        seq = expected_seq + 1
        prev_time = 0
        if expected_seq > 0:
            try:
                prev_time = self._read_entry(table_id, expected_seq).time
            except FileNotFoundError:
                raise CommitConflictError(
                    f"log of table {table_id} has no entry {expected_seq} yet, expected to append after it"
                ) from None
        elif expected_seq < 0:
            raise CommitConflictError(f"log of table {table_id}: no entry follows sequence {expected_seq}")
        writer = new_id()
        mine = LogEntry(seq, max(time.time_ns() // 1000, prev_time + 1), entry)
        doc = json.dumps({"seq": seq, "time": mine.time, "writer": writer, "entry": entry}).encode()
        path = self._entry_path(table_id, seq)
        try:
            created = self.storage.create(path, doc)
        except ConditionalWriteUnsupportedError:
            raise
        except OSError as e:  # StorageError: the put may or may not have happened
            if self._landed(table_id, seq, writer) is True:
                return mine
            raise CommitStateUnknownError(
                f"commit {seq} to table {table_id}: the store failed ({e}) and the entry could not be "
                "confirmed; look at the table's history before writing again"
            ) from e
        if not created:  # another writer's entry, or ours from a retried put whose answer was lost
            landed = self._landed(table_id, seq, writer)
            if landed is None:
                raise CommitStateUnknownError(
                    f"commit {seq} to table {table_id}: entry {seq} exists but could not be read back to tell "
                    "whose it is; look at the table's history before writing again"
                )
            if not landed:
                raise CommitConflictError(f"log of table {table_id} already has entry {seq}")
        self._cache.put((table_id, seq), mine)
        self._last[table_id] = max(self._last.get(table_id, 0), seq)
        return mine

    def _landed(self, table_id: str, seq: int, writer: str) -> bool | None:
        """Whether entry `seq` is this writer's (True), another's (False), or unknown (None)."""
        try:
            _, who = self._decode(table_id, seq, self.storage.read(self._entry_path(table_id, seq)))
        except FileNotFoundError:
            return False
        except OSError:
            return None
        return who == writer

    def last_seq(self, table_id: str) -> int:
        lo = self._last.get(table_id, 0)  # known to exist (or 0)
        step, hi = 1, lo + 1
        while self._exists(table_id, hi):  # gallop past the end...
            lo, step = hi, step * 2
            hi = lo + step
        while hi - lo > 1:  # ...then bisect: entries are contiguous
            mid = (lo + hi) // 2
            if self._exists(table_id, mid):
                lo = mid
            else:
                hi = mid
        if lo:
            self._last[table_id] = lo
        return lo

    def read_log(self, table_id: str, after_seq: int = 0, upto_seq: int | None = None) -> list[LogEntry]:
        last = self.last_seq(table_id)
        upto = last if upto_seq is None else min(upto_seq, last)
        seqs = range(max(after_seq, 0) + 1, upto + 1)

        def get(seq: int) -> LogEntry | None:
            try:
                return self._read_entry(table_id, seq)
            except FileNotFoundError:  # the table was dropped meanwhile
                return None

        out: list[LogEntry] = []
        for e in self._pool.map(get, seqs) if len(seqs) > 1 else map(get, seqs):
            if e is None:
                break
            out.append(e)
        return out

    def seq_at_time(self, table_id: str, time_us: int) -> int:
        lo, hi = 0, self.last_seq(table_id)  # invariant: time(lo) <= time_us (seq 0: -inf)
        while lo < hi:  # commit times increase with seq: bisect
            mid = (lo + hi + 1) // 2
            if self._read_entry(table_id, mid).time <= time_us:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # --- snapshots -----------------------------------------------------------------------

    def _snapshot_seqs(self, table_id: str) -> list[int]:
        prefix = f"{check_name(table_id, 'table id')}/_snapshots"
        return sorted(int(f.path.rsplit("/", 1)[1].removesuffix(".json")) for f in self.storage.list(prefix))

    def _snapshot(self, table_id: str, seq: int) -> tuple[int, str] | None:
        path = f"{table_id}/_snapshots/{seq:020d}.json"
        try:
            doc: dict[str, Any] = json.loads(self.storage.read(path))
            return int(doc["seq"]), str(doc["path"])
        except FileNotFoundError:
            return None  # dropped meanwhile
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptFileError(f"snapshot record {self.storage.uri}/{path} is damaged: {e}") from e

    def latest_snapshot(self, table_id: str, at_or_before_seq: int | None = None) -> tuple[int, str] | None:
        bound = at_or_before_seq if at_or_before_seq is not None else 2**62
        for seq in reversed(self._snapshot_seqs(table_id)):
            if seq <= bound and (got := self._snapshot(table_id, seq)) is not None:  # None: removed meanwhile
                return got
        return None

    def snapshots(self, table_id: str) -> list[tuple[int, str]]:
        found = (self._snapshot(table_id, seq) for seq in self._snapshot_seqs(table_id))
        return [s for s in found if s is not None]

    def add_snapshot(self, table_id: str, seq: int, path: str) -> None:
        doc = json.dumps({"seq": seq, "path": path}).encode()
        self.storage.create(f"{check_name(table_id, 'table id')}/_snapshots/{seq:020d}.json", doc)

    def remove_snapshots(self, table_id: str, before_seq: int) -> None:
        for seq in self._snapshot_seqs(table_id):
            if seq < before_seq:
                self.storage.delete(f"{table_id}/_snapshots/{seq:020d}.json")

    def check(self) -> list[str]:
        """Table records that cannot be read back (damaged JSON); log entries and snapshot
        records are verified as `Table.check()` reads them."""
        problems = []
        for f in self.storage.list(f"{CATALOG}/tables"):
            try:
                TableRecord(**json.loads(self.storage.read(f.path)))
            except FileNotFoundError:
                continue  # dropped while checking
            except (ValueError, TypeError) as e:
                problems.append(f"table record {self.storage.uri}/{f.path} is damaged: {e}")
        return problems

    def close(self) -> None:
        if self._pool_obj is not None and self._pool_pid == os.getpid():
            self._pool_obj.shutdown(wait=False)
        self._pool_obj = None
