"""`TableLog`: one table's log below the `Table` facade (DESIGN §4).

It holds the table's replayed state and is the only place that commits: `state()` (the newest
committed state, refreshed from the log tail), `state_at()` (time travel by commit time or
version), `commit()` (compare-and-swap on the log sequence number with retries; the conflict
rules are `conch.log.wal.conflicts`), `flush()` and the flush policy. Writes, maintenance and scans
take a `TableLog` (and its `Warehouse` handles), never a `Table`.

Flush and vacuum: a snapshot file is registered through the log (a `RegisterSnapshot` entry), so
it follows the same cutoff rule as data files: a vacuum whose cutoff is later than the flush's
start makes the registration conflict, and a registered snapshot is referenced. Only then does
the flush index it in the metastore (readers find it there); a vacuum in between sees it in the
log only and keeps it while it may become the base of readable states (`TableLog._index_snapshot`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator

from conch.errors import (
    CommitConflictError,
    ConchError,
    CorruptFileError,
    InvalidArgumentError,
    TableNotFoundError,
    TimeTravelError,
)
from conch.files.format import FragmentFormat
from conch.files.integrity import SNAPSHOT_SUFFIX, open_json, pack_snapshot, read_snapshot, with_digest
from conch.files.keycache import KeyCache
from conch.files.layout import TableFiles
from conch.files.manifest import TableState
from conch.files.storage.base import Storage, new_id
from conch.log import groupcommit
from conch.log.branching import branch_info
from conch.log.metastore.base import LogEntry, TableRecord
from conch.log.sinceview import since_view
from conch.log.txn import Commit, kinds_filter
from conch.log.wal import (
    Entry,
    RegisterSnapshot,
    RemoveFragment,
    RemoveKeySpace,
    Transaction,
    decode,
    replay,
)
from conch.log.warehouse import Warehouse
from conch.model.budget import ScanOptions
from conch.model.schema import Schema
from conch.model.time import format_time, to_time

FLUSH_ATTEMPTS = 5
PAST_STATES = 8  # time-travel scans usually revisit a few commits
MAINTAINED_KINDS = ("write", "delete", "enrich")  # commits that add runs: automatic compaction follows


class TableLog:
    """The log, state and commits of one table (see the module doc)."""

    def __init__(self, warehouse: Warehouse, record: TableRecord) -> None:
        self.warehouse = warehouse
        self.record = record
        # a branch (`conch.log.branching`): its own log, in the directory of the table it branched from
        self.branch = branch_info(record)
        self.name = self.branch.display if self.branch else record.name
        self.id = record.id
        self.dir = self.branch.table_id if self.branch else record.id  # where its files are
        self.files = TableFiles(warehouse.storage, self.dir, warehouse.format, self.partition_keys)
        self._lock = threading.Lock()
        self._state: TableState | None = None
        self._past: dict[int, TableState] = {}
        self._first_time: int | None = None

    def __repr__(self) -> str:
        return f"TableLog({self.name!r}, id={self.id!r})"

    @property
    def partition_keys(self) -> int:
        """How many leading key columns form the partitioning key (spec/003; 0: none): no key
        space or fragment spans two partitions."""
        return int(
            open_json(self.record.props, f"the metastore record of table {self.name!r}").get("partition_keys", 0)
        )

    # handles a scan needs (`conch.scan.api.ScanSource`)
    @property
    def uri(self) -> str:
        """The warehouse's URI (`connect(uri)` reopens it)."""
        return self.warehouse.uri

    @property
    def storage(self) -> Storage:
        return self.warehouse.storage

    @property
    def format(self) -> FragmentFormat:
        return self.warehouse.format

    @property
    def key_cache(self) -> KeyCache:
        return self.warehouse.key_cache

    @property
    def scan_options(self) -> ScanOptions:
        """Scans' default options, sized from the warehouse's memory budget."""
        return self.warehouse.scan_options

    @property
    def properties(self) -> dict[str, str]:
        """Text fixed with the table at creation (`Catalog.create_table(properties=...)`)."""
        props = open_json(self.record.props, f"the metastore record of table {self.name!r}")
        return dict(props.get("properties", {}))

    # ----- state ------------------------------------------------------------------------
    def initial_state(self) -> TableState:
        props = open_json(self.record.props, f"the metastore record of table {self.name!r}")
        return TableState(Schema.from_json(props["schema"]))

    def load(self, seq: int | None = None) -> TableState:
        """The state at `seq` (default: the newest): nearest snapshot, then the WAL after it.
        No horizon check (maintenance reads the state at the horizon itself); readers use
        `state_at`."""
        ms = self.warehouse.metastore
        snap = ms.latest_snapshot(self.id, seq)
        if snap is not None:
            state = TableState.from_json(read_snapshot(self.warehouse.storage, snap[1]), snap[1])
        else:
            state = self.initial_state()
        return replay(state, ms.read_log(self.id, state.seq, seq))

    def state(self) -> TableState:
        """The latest committed state (reads only the log entries new since the last call).
        Raises `TableNotFoundError` if the table was dropped."""
        with self._lock:
            if self._state is None:
                self._state = self.load()
            new = self.warehouse.metastore.read_log(self.id, self._state.seq)
            if new:
                self._state = replay(self._state, new)
            return self._state

    def cached_state(self) -> TableState:
        """The state this handle read last (the latest, read now, if it read none): for what
        any recent state answers, such as a column's type while an expression is being built.
        No metastore read when warm; a scan reads the log once, when its snapshot is taken."""
        with self._lock:
            state = self._state
        return state if state is not None else self.state()

    def known_state(self, seq: int) -> TableState | None:
        """The state at `seq` if this handle holds it (the latest it read, or a cached past
        one), without a metastore read; else None."""
        with self._lock:
            if self._state is not None and self._state.seq == seq:
                return self._state
            return self._past.get(seq)

    def first_commit_time(self) -> int | None:
        """The commit time of version 1 (None: the table has no commits)."""
        if self._first_time is None:
            first = self.warehouse.metastore.read_log(self.id, 0, 1)
            self._first_time = first[0].time if first else None
        return self._first_time

    # ----- tags ---------------------------------------------------------------------------
    def tags(self) -> dict[str, int]:
        """Tag name → version (`Table.tag`)."""
        return dict(self.state().tags.items())

    def tag_version(self, name: str) -> int | None:
        """The version tag `name` names (None: no such tag)."""
        return self.state().tags.get(name)

    def version_of(self, version: int | str, latest: TableState | None = None) -> int:
        """A version number from a version or a tag name (`TimeTravelError` for an unknown tag):
        every `version=` resolves tags here once (`latest`: the newest state, when the caller
        has just read it)."""
        if isinstance(version, str):
            tags = (latest or self.state()).tags
            seq = tags.get(version)
            if seq is None:
                known = ", ".join(sorted(tags)) or "none"
                raise TimeTravelError(f"table {self.name!r} has no tag {version!r} (tags: {known}; see `tags()`)")
            return seq
        return version

    def time_of(self, version: int | str) -> int:
        """The commit time of a version (log sequence number) or a tag; `TimeTravelError` if none."""
        latest = self.state()
        return self._entry_time(_version(self.version_of(version, latest)), latest)

    def _entry_time(self, version: int, latest: TableState) -> int:
        if version == latest.seq:
            return latest.time
        entries = self.warehouse.metastore.read_log(self.id, version - 1, version) if 1 <= version < latest.seq else []
        if not entries:
            raise TimeTravelError(
                f"table {self.name!r} has no version {version}: versions are 1..{latest.seq} (see `conch history {self.name}` or `Table.history()`)"
            )
        return entries[0].time

    def state_at(self, asof: object = None, version: int | str | None = None, since: int | None = None) -> TableState:
        """The state as of a commit time (`asof`, see `conch.model.time`) or a version: the files
        live then. Raises `TimeTravelError` for a time before the table's first commit or before
        its time-travel horizon (`Table.expire`). `since` (µs): a scan's lower time bound;
        compactions whose window straddles it are undone, so the scan reads their retained
        originals (`conch.log.sinceview`), which the horizon also bounds."""
        state, _ = self.pinned(asof, version)
        return self.since_view(state, since)

    def since_view(self, state: TableState, since: int | None) -> TableState:
        """`state` as a scan with lower time bound `since` (µs) reads it (`state_at`); no
        metastore read for `since=None`."""
        if since is None:
            return state
        return since_view(state, since, self._provenance, horizon=max(state.horizon, self.cached_state().horizon))

    def _provenance(self, seq: int) -> tuple[TableState, set[str], set[str], int]:
        """The state before commit `seq`, the key spaces and fragments it removed, its time."""
        ((_, t, entry),) = list(self.entries(seq - 1, seq))
        if entry.kind in ("branch", "fast_forward"):  # records another line compacted (`conch.log.branching`)
            raise TimeTravelError(
                f"a since bound of table {self.name!r} falls inside the window of a compaction made on another line "
                f"(version {seq} is a {entry.kind}): this line's log cannot undo it; read that interval on the line "
                "where the compaction ran, or use a since outside the compacted window"
            )
        ks = {op.id for op in entry.ops if isinstance(op, RemoveKeySpace)}
        fr = {op.id for op in entry.ops if isinstance(op, RemoveFragment)}
        return self._past_state(seq - 1), ks, fr, t

    def _past_state(self, seq: int, t: int | None = None, what: str = "asof") -> TableState:
        """The state at `seq` (cached); `t`: its time, checked against the horizon when its
        snapshot is gone (an expire and a vacuum with grace 0 may remove it meanwhile)."""
        with self._lock:
            state = self._past.get(seq)
        if state is None:
            try:
                state = self.load(seq)
            except CorruptFileError:
                if t is not None:
                    self.check_retained(t, what)
                raise
            with self._lock:
                self._past[seq] = state
                if len(self._past) > PAST_STATES:
                    self._past.pop(next(iter(self._past)))
        return state

    def _state_at(self, asof: object = None, version: int | str | None = None) -> TableState:
        return self.pinned(asof, version)[0]

    def pinned(self, asof: object = None, version: int | str | None = None) -> tuple[TableState, int | None]:
        """The state a read as of `asof` (a commit time or a tag name, parsed once here) or
        `version` (a number or a tag name) sees, and the time it pins (µs; None: the latest).
        Validates both (`TimeTravelError`): one metastore read for the latest state or a
        version the handle has seen, one more for a time it has not. A tagged version outlives
        the horizon (`Table.tag`)."""
        if asof is not None and version is not None:
            raise InvalidArgumentError("give asof= or version=, not both")
        latest = self.state()
        tagged = latest.tags.get(asof) if isinstance(asof, str) else None
        if tagged is not None:  # a tag name given as asof=
            asof, version = None, tagged
        if version is not None:
            what = f"version {version}"
            seq = _version(self.version_of(version, latest))
            tagged = seq in latest.tags.values()
            if seq == latest.seq:
                return latest, latest.time
            with self._lock:
                state = self._past.get(seq)
            if state is None:
                t = self._entry_time(seq, latest)  # validates
                if not tagged:
                    self.check_retained(t, what, latest)
                state = self._past_state(seq, t, what)
            if not tagged:
                self.check_retained(state.time, what, latest)
            return state, state.time
        at = to_time(asof, "asof")
        if at is None or at >= latest.time:
            return latest, at
        first = self.first_commit_time()
        seq = self.warehouse.metastore.seq_at_time(self.id, at) if first is not None and at >= first else 0
        if seq not in latest.tags.values():
            self.check_retained(at, "asof", latest)
        if first is None or at < first:
            raise TimeTravelError(
                f"asof {format_time(at)} is before the first commit of table {self.name!r} at "
                f"{format_time(first or latest.time)} (time {first}); nothing existed then"
            )
        if seq == latest.seq:
            return latest, at
        return self._past_state(seq, at, "asof"), at

    # ----- the time-travel horizon ------------------------------------------------------
    def horizon(self) -> int:
        """The time-travel horizon: the commit time (µs) of the oldest state still readable
        (0: nothing expired). `Table.expire` moves it forward; a since-view that needs
        originals of a compaction older than it raises `TimeTravelError` (`check_retained`)."""
        return self.state().horizon

    def check_retained(self, t: int, what: str = "asof", latest: TableState | None = None) -> None:
        """Raise `TimeTravelError` naming the horizon (time and version) if time `t` (what the
        caller was asked: "asof", "since", "version 3") is before it (`latest`: the newest
        state, when the caller has just read it)."""
        h = latest.horizon if latest is not None else self.horizon()
        if t < h:
            v = self.warehouse.metastore.seq_at_time(self.id, h)
            raise TimeTravelError(
                f"{what} {format_time(t)} is before the time-travel horizon of table {self.name!r}: version {v} at "
                f"{format_time(h)} (time {h}); older history was expired (`Table.expire`): read at or after it"
            )

    def entries(self, after_seq: int = 0, upto_seq: int | None = None) -> Iterator[tuple[int, int, Entry]]:
        """Decoded log entries `(seq, time, entry)` in (after_seq, upto_seq]."""
        for e in self.warehouse.metastore.read_log(self.id, after_seq, upto_seq):
            yield e.seq, e.time, decode(e.entry, f"log entry {e.seq} of table {self.name!r}")

    def history(self, kind: str | Iterable[str] | None = None) -> list[Commit]:
        """Every commit, oldest first; only those of `kind` (see `conch.log.txn.kinds_filter`)."""
        keep = kinds_filter(kind)
        return [
            Commit(s, t, e.kind, e.summary, e.added_columns)
            for s, t, e in self.entries()
            if keep is None or e.kind in keep
        ]

    # ----- commits ----------------------------------------------------------------------
    @contextlib.contextmanager
    def staging(self) -> Iterator[None]:
        """Around writing a transaction's files, which are durable when it exits (one
        `Storage.batch`): a file that vanishes while being written (a vacuum with a shorter
        grace period than the write took) is a `CommitConflictError`, and a dropped table a
        `TableNotFoundError`."""
        try:
            with self.warehouse.storage.batch():  # the files become durable together, at the end
                yield
        except FileNotFoundError as e:
            self._check_exists()
            raise CommitConflictError(
                f"table {self.name!r}: a file of this write vanished while it was written ({e.filename}), most likely "
                "removed by a vacuum with a shorter grace period than the write took; nothing was committed, write again"
            ) from e

    def _check_exists(self) -> None:
        self.warehouse.metastore.last_seq(self.id)  # raises TableNotFoundError

    def transact(
        self, stage: Callable[[], Transaction], serial: bool = False, attempts: int = 1, what: str = ""
    ) -> Commit:
        """Stage a transaction, then commit it: the one sequence of every write, delete, update,
        delete-where and enrichment. `stage()` writes the files (inside `staging`: durable
        together when it returns) and returns the transaction. `serial`: the commit must follow
        the state `stage` read directly (`Transaction.serial`); on a lost race it is staged again
        on the new state, `attempts` times in all, then `CommitConflictError` naming `what`
        (nothing committed; retrying is safe)."""
        for attempt in range(attempts):
            with self.staging():
                txn = stage()
            if serial and not txn.serial:
                txn = dataclasses.replace(txn, serial=True)
            try:
                return self.commit(txn)
            except CommitConflictError as e:
                if attempt + 1 < attempts:
                    continue  # another commit landed after the state `stage` read: stage again
                if not serial:
                    raise
                raise CommitConflictError(
                    f"table {self.name!r}: {what or txn.kind} lost {attempts} races with concurrent commits; "
                    "nothing was committed, try again when writers are quieter"
                ) from e
        raise CommitConflictError(f"table {self.name!r}: {what}: no attempt")  # attempts < 1

    def commit(self, txn: Transaction, flush: bool = True, maintain: bool = True) -> Commit:
        """Append `txn` as one log entry: compare-and-swap on the sequence number, and on a lost
        race re-read the newer entries and retry unless `conch.log.wal.conflicts` says they clash.
        The files of a transaction that definitely failed are deleted. `maintain=False`: no
        automatic compaction after this commit, whatever the policy (a Spark job's
        `autoCompact=false`); the next maintained commit or `compact()` catches up."""
        storage = self.warehouse.storage
        try:
            missing = [f for f in txn.files if not storage.exists(f)]
            if missing:
                raise CommitConflictError(
                    f"table {self.name!r}: {len(missing)} staged file(s) are gone (e.g. {missing[0]}), most likely "
                    "removed by a vacuum with a shorter grace period than this write took; nothing was committed, "
                    "write again"
                )
            # group commit: concurrent writers of this process append together (`conch.log.groupcommit`)
            group = groupcommit.group(self.warehouse.metastore, self.id)
            entry, log = groupcommit.commit(group, self._group_log(), txn)
            done = Commit(log.seq, log.time, entry.kind, entry.summary, entry.added_columns)
        except CommitConflictError:
            for f in txn.files:
                storage.delete(f)
            raise
        except TableNotFoundError:
            storage.delete_prefix(self.id)  # files a handle to a dropped table wrote
            raise
        if flush and self.warehouse.flush_every and done.seq % self.warehouse.flush_every == 0:
            self._after_commit(done, "flush", self.flush)  # the next flush catches up
        hook = self.warehouse.after_commit
        if maintain and hook is not None and done.kind in MAINTAINED_KINDS and self.warehouse.maintenance.auto:
            # automatic compaction, bounded per commit (`conch.maintain.compaction.run.auto`)
            self._after_commit(done, "automatic compaction", lambda: hook(self, done))
        return done

    def _group_log(self) -> groupcommit.Log:
        """This log as a group commit's leader uses it: one batched append where the metastore
        offers one, else one entry per append."""
        ms = self.warehouse.metastore
        batch = getattr(ms, "append_batch", None)

        def append(seq: int, entries: list[str]) -> list[LogEntry]:
            if batch is not None:
                return list(batch(self.id, seq, entries))
            assert len(entries) == 1
            return [ms.append(self.id, seq, entries[0])]

        return groupcommit.Log(
            self.name,
            self.state,
            lambda after, upto: [(s, e) for s, _, e in self.entries(after, upto)],
            append,
            groupcommit.MAX_BATCH if batch is not None else 1,
        )

    def _after_commit(self, done: Commit, what: str, work: Callable[[], object]) -> None:
        """Work after a commit landed (a flush, automatic compaction) is never the commit's
        error: raising would tell the writer its commit failed (`MetastoreUnavailableError`
        promises nothing changed). A failure becomes a warning; the next commit's trigger, the
        background settle or `Table.compact()`/`flush()` do the work later."""
        try:
            work()
        except CommitConflictError:
            pass  # another process moved the log on: its own trigger does the work
        except (ConchError, OSError) as e:
            warnings.warn(
                f"table {self.name!r}: version {done.seq} is committed; the {what} after it failed and is "
                f"left for later: {e}",
                RuntimeWarning,
                stacklevel=4,
            )

    def flush(self) -> int:
        """Write the current state as a snapshot and register it through the log; readers then
        replay only the entries after it. Returns the snapshot's sequence number."""
        storage = self.warehouse.storage
        for _ in range(FLUSH_ATTEMPTS):
            state = self.state()
            data = pack_snapshot(state.to_json())
            # under the log's own id (a branch's too: a metastore checks a snapshot lies under its table's id)
            path = with_digest(f"{self.id}/meta/{state.seq:012d}-{new_id()}.json{SNAPSHOT_SUFFIX}", data)
            started_us = time.time_ns() // 1000
            txn = Transaction(
                "flush",
                (RegisterSnapshot(state.seq, path),),
                f"snapshot of version {state.seq}",
                base_seq=state.seq,
                files=(path,),
                started_us=started_us,
            )
            try:
                with self.staging():
                    storage.write(path, data)
                self.commit(txn, flush=False)
            except CommitConflictError:
                storage.delete(path)
                continue
            self._index_snapshot(state.seq, path)
            return state.seq
        raise CommitConflictError(
            f"table {self.name!r}: flush lost {FLUSH_ATTEMPTS} races against vacuums; nothing was registered, try again"
        )

    def _index_snapshot(self, seq: int, path: str) -> None:
        """Index the snapshot of version `seq` the log registers at `path` (after its
        `RegisterSnapshot` commit). A vacuum between the two may have deleted the file: only if a
        newer snapshot loads every readable state, so all up to `seq` are forgotten again, as
        that vacuum forgot the ones below its base (`conch.maintain.expire.unindexed_snapshots`)."""
        ms = self.warehouse.metastore
        ms.add_snapshot(self.id, seq, path)
        if ms.latest_snapshot(self.id, seq) == (seq, path) and not self.warehouse.storage.exists(path):
            ms.remove_snapshots(self.id, seq + 1)


def _version(version: object) -> int:
    """A version argument checked to be a commit number."""
    if isinstance(version, bool) or not isinstance(version, int):
        raise TimeTravelError(f"version must be a commit number (int), got {version!r}")
    return version
