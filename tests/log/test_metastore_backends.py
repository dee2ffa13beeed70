"""One behaviour suite for every metastore backend, and whole-stack tests over each warehouse kind.

Backends: SQLite (embedded default), the object-store WAL over a local directory, `memory://`,
S3 (moto) and Azure Blob (Azurite), PostgreSQL (a private server started by the tests), and the
HTTP reference server (`conch serve` in a subprocess). A new backend adds one entry to `WAREHOUSES` and one branch to
`warehouse`; every test below then runs on it.
"""

from __future__ import annotations

import itertools
import multiprocessing
import threading
import uuid
import warnings
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch
from conch.errors import (
    CommitConflictError,
    ConditionalWriteUnsupportedError,
    InvalidNameError,
    TableExistsError,
    TableNotFoundError,
)
from conch.files.storage import LocalStorage
from conch.log import groupcommit
from conch.log.metastore import Metastore, TableRecord
from conch.log.metastore.objectstore import ObjectStoreMetastore
from helpers import Warehouse
from services import Azurite, MotoS3, Postgres, ServerProcess

WAREHOUSES = ["sqlite", "storage-local", "memory", "s3", "azure", "postgres", "http", "http-s3", "http-inproc"]
CROSS_PROCESS = {
    "sqlite",
    "storage-local",
    "s3",
    "azure",
    "postgres",
    "http",
    "http-s3",
}  # memory:// lives in one process
TOKEN = "admin-token-1"  # memory:// lives in one process


@pytest.fixture(params=WAREHOUSES)
def warehouse(request: pytest.FixtureRequest, tmp_path: Path) -> Warehouse:
    kind = request.param
    if kind == "sqlite":
        return Warehouse(str(tmp_path / "wh"), kind=kind)
    if kind == "storage-local":
        return Warehouse(str(tmp_path / "wh"), metastore="storage", kind=kind)
    if kind == "memory":
        return Warehouse(f"memory://{uuid.uuid4().hex}/wh", kind=kind)
    if kind.startswith("http"):
        return _http_warehouse(request, tmp_path, kind)
    if kind == "postgres":
        pg: Postgres = request.getfixturevalue("postgres")
        return Warehouse(str(tmp_path / "wh"), metastore=pg.dsn(), kind=kind)
    if kind == "azure":
        az: Azurite = request.getfixturevalue("azurite")
        return Warehouse(az.uri(), storage_options=az.options, kind=kind)
    s3: MotoS3 = request.getfixturevalue("moto_s3")
    return Warehouse(s3.uri(), storage_options=s3.options, kind=kind)


def _http_warehouse(request: pytest.FixtureRequest, tmp_path: Path, kind: str) -> Warehouse:
    """`conch serve` over loopback (its warehouse a local directory, or S3), or in process."""
    if kind == "http-inproc":
        with warnings.catch_warnings():  # starlette's note about a future httpx fork
            warnings.simplefilter("ignore")
            from starlette.testclient import TestClient

        from conch.apps.server import create_app
        from conch.log.metastore.http import HttpMetastore
        from conch.log.metastore.sqlite import SqliteMetastore

        app = create_app(SqliteMetastore(tmp_path / "c.sqlite"), str(tmp_path / "wh"), {TOKEN: "admin"})
        return Warehouse(str(tmp_path / "wh"), HttpMetastore("http://inproc", TOKEN, client=TestClient(app)), kind=kind)
    if kind == "http-s3":
        s3: MotoS3 = request.getfixturevalue("moto_s3")
        server = ServerProcess(s3.uri(), {TOKEN: "admin"}, env=s3.env)
        storage_options = s3.options
    else:
        server = ServerProcess(str(tmp_path / "wh"), {TOKEN: "admin"})
        storage_options = {}
    request.addfinalizer(server.stop)
    server.start()
    return Warehouse(server.url, token=TOKEN, storage_options=storage_options, kind=kind)


@pytest.fixture
def metastore(warehouse: Warehouse) -> Metastore:
    return warehouse.connect().warehouse.metastore


def _record(name: str) -> TableRecord:
    return TableRecord(name, f"{name}-{uuid.uuid4().hex[:8]}", 1, '{"schema": {}}')


# --- the catalog ---------------------------------------------------------------------------


def test_catalog(metastore: Metastore) -> None:
    a, b = _record("alpha"), _record("beta")
    metastore.create_table(b)
    metastore.create_table(a)
    assert metastore.get_table("alpha") == a
    assert [r.name for r in metastore.list_tables()] == ["alpha", "beta"]
    with pytest.raises(TableExistsError):
        metastore.create_table(_record("alpha"))
    assert metastore.get_table("alpha") == a  # the failed create changed nothing
    with pytest.raises(TableNotFoundError):
        metastore.get_table("gamma")
    assert metastore.drop_table("alpha") == a
    with pytest.raises(TableNotFoundError):
        metastore.drop_table("alpha")
    assert [r.name for r in metastore.list_tables()] == ["beta"]
    again = _record("alpha")
    metastore.create_table(again)  # a dropped name can be reused; its log starts empty
    assert metastore.get_table("alpha") == again and metastore.last_seq(again.id) == 0


# --- the log -------------------------------------------------------------------------------


def test_append_is_compare_and_swap(metastore: Metastore) -> None:
    rec = _record("t")
    metastore.create_table(rec)
    assert metastore.last_seq(rec.id) == 0 and metastore.read_log(rec.id) == []
    e1 = metastore.append(rec.id, 0, '{"n": 1}')
    assert (e1.seq, e1.entry) == (1, '{"n": 1}')
    for stale in (0, 2, 7):  # behind, and ahead of, the log
        with pytest.raises(CommitConflictError):
            metastore.append(rec.id, stale, '{"n": "lost"}')
    e2 = metastore.append(rec.id, 1, '{"n": 2}')
    e3 = metastore.append(rec.id, 2, '{"n": 3}')
    assert e1.time < e2.time < e3.time
    assert metastore.last_seq(rec.id) == 3
    assert metastore.read_log(rec.id) == [e1, e2, e3]
    assert metastore.read_log(rec.id, 1) == [e2, e3]
    assert metastore.read_log(rec.id, 0, 2) == [e1, e2]
    assert metastore.read_log(rec.id, 3) == []
    assert metastore.seq_at_time(rec.id, e1.time - 1) == 0
    assert metastore.seq_at_time(rec.id, e1.time) == 1
    assert metastore.seq_at_time(rec.id, e3.time - 1) == 2
    assert metastore.seq_at_time(rec.id, e3.time + 10**9) == 3


def test_append_batch_is_all_or_none(warehouse: Warehouse) -> None:
    """Group commit's append (`conch.log.groupcommit`, through `TableLog._group_log`): a backend
    with `append_batch` takes a batch in one transaction, the others one entry per append (batches
    of one); either way consecutive numbers, strictly increasing times, and nothing on a lost
    compare-and-swap."""
    t = warehouse.connect().create_table("t", [("id", pa.int64())])
    metastore = t.log.warehouse.metastore
    log = t.log._group_log()
    assert log.batch == (groupcommit.MAX_BATCH if hasattr(metastore, "append_batch") else 1)
    s0 = metastore.last_seq(t.log.id)
    e1 = metastore.append(t.log.id, s0, '{"n": 1}')
    entries = ['{"n": 2}', '{"n": 3}', '{"n": 4}']
    got = [r for i in range(0, 3, log.batch) for r in log.append(s0 + 1 + i, entries[i : i + log.batch])]
    assert [(e.seq, e.entry) for e in got] == [(s0 + 2, '{"n": 2}'), (s0 + 3, '{"n": 3}'), (s0 + 4, '{"n": 4}')]
    assert e1.time < got[0].time < got[1].time < got[2].time
    with pytest.raises(CommitConflictError):
        log.append(s0 + 2, ['{"n": "lost"}', '{"n": "lost too"}'][: log.batch])
    assert metastore.read_log(t.log.id, s0) == [e1, *got]
    assert metastore.last_seq(t.log.id) == s0 + 4
    assert metastore.append(t.log.id, s0 + 4, '{"n": 5}').time > got[-1].time


def test_logs_are_per_table(metastore: Metastore) -> None:
    a, b = _record("a"), _record("b")
    metastore.create_table(a)
    metastore.create_table(b)
    metastore.append(a.id, 0, "{}")
    metastore.append(a.id, 1, "{}")
    assert metastore.last_seq(b.id) == 0
    assert metastore.append(b.id, 0, '{"b": 1}').seq == 1
    metastore.drop_table("a")
    assert metastore.read_log(b.id)[0].entry == '{"b": 1}'


def test_snapshots(metastore: Metastore) -> None:
    rec = _record("t")
    metastore.create_table(rec)
    assert metastore.latest_snapshot(rec.id) is None
    metastore.add_snapshot(rec.id, 3, f"{rec.id}/meta/3-a.json")
    metastore.add_snapshot(rec.id, 7, f"{rec.id}/meta/7-b.json")
    metastore.add_snapshot(rec.id, 7, f"{rec.id}/meta/7-other.json")  # the first registration stays
    assert metastore.latest_snapshot(rec.id) == (7, f"{rec.id}/meta/7-b.json")
    assert metastore.latest_snapshot(rec.id, 6) == (3, f"{rec.id}/meta/3-a.json")
    assert metastore.latest_snapshot(rec.id, 2) is None
    metastore.add_snapshot(rec.id, 9, f"{rec.id}/meta/9-c.json")
    metastore.remove_snapshots(rec.id, 7)  # vacuum under an expire horizon: those below 7 go
    assert metastore.snapshots(rec.id) == [(7, f"{rec.id}/meta/7-b.json"), (9, f"{rec.id}/meta/9-c.json")]
    assert metastore.latest_snapshot(rec.id, 6) is None
    metastore.remove_snapshots(rec.id, 7)  # idempotent
    assert metastore.latest_snapshot(rec.id, 8) == (7, f"{rec.id}/meta/7-b.json")
    assert metastore.check() == []


def test_concurrent_appends_lose_nothing(metastore: Metastore) -> None:
    """Threads racing with retry: every entry lands exactly once, in a gapless log."""
    rec = _record("t")
    metastore.create_table(rec)

    def writer(w: int) -> None:
        for i in range(6):
            while True:
                try:
                    metastore.append(rec.id, metastore.last_seq(rec.id), f'{{"w": {w}, "i": {i}}}')
                    break
                except CommitConflictError:
                    continue

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log = metastore.read_log(rec.id)
    assert [e.seq for e in log] == list(range(1, 25))
    assert sorted(e.entry for e in log) == sorted(f'{{"w": {w}, "i": {i}}}' for w in range(4) for i in range(6))
    assert all(a.time < b.time for a, b in itertools.pairwise(log))


@settings(deadline=None, max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["append", "stale", "snap", "forget", "read"]), st.integers(0, 5)), max_size=15
    )
)
def test_model(metastore: Metastore, ops: list[tuple[str, int]]) -> None:
    """Random appends (fresh and stale), snapshots registered and forgotten, and reads agree
    with a list model."""
    rec = _record(f"m{uuid.uuid4().hex[:6]}")
    metastore.create_table(rec)
    log: list[str] = []
    snaps: dict[int, str] = {}
    for op, n in ops:
        if op == "append":
            assert metastore.append(rec.id, len(log), f'"{len(log)}"').seq == len(log) + 1
            log.append(f'"{len(log)}"')
        elif op == "stale" and len(log) != n:
            with pytest.raises(CommitConflictError):
                metastore.append(rec.id, n, '"stale"')
        elif op == "snap" and log:
            seq = min(n, len(log))
            metastore.add_snapshot(rec.id, seq, f"{rec.id}/meta/{seq}-{len(snaps)}.json")
            snaps.setdefault(seq, f"{rec.id}/meta/{seq}-{len(snaps)}.json")
        elif op == "forget":
            metastore.remove_snapshots(rec.id, n)
            snaps = {s: p for s, p in snaps.items() if s >= n}
        elif op == "read":
            assert [e.entry for e in metastore.read_log(rec.id, min(n, len(log)))] == log[min(n, len(log)) :]
            assert metastore.last_seq(rec.id) == len(log)
            best = max((s for s in snaps if s <= n), default=None)
            assert metastore.latest_snapshot(rec.id, n) == (None if best is None else (best, snaps[best]))
            assert metastore.snapshots(rec.id) == sorted(snaps.items())


# --- whole stack ---------------------------------------------------------------------------


def test_tables_round_trip(warehouse: Warehouse) -> None:
    cat = warehouse.connect(conch.Policy(auto=False))  # the check counts WAL entries
    t = cat.create_table("audio", [("id", pa.uint64())])
    t.write([{"id": i, "x": float(i), "blob": bytes([i]) * 1000} for i in range(50)])
    t.write([{"id": 3, "x": -1.0}])
    t.delete([4])
    first = t.history()[0]
    again = warehouse.connect().table("audio")
    got = again.scan("x", where=again["x"] < 3).to_arrow()
    assert got.column("id").to_pylist() == [0, 1, 2, 3] and got.column("x").to_pylist() == [0, 1, 2, -1]
    assert again.scan("blob", keys=[7]).to_arrow().column("blob").to_pylist() == [bytes([7]) * 1000]
    assert again.scan(asof=first.time).to_arrow().num_rows == 50
    report = again.check()
    assert report.ok and report.entries_checked == 3, str(report)
    cat.drop_table("audio")
    assert warehouse.connect().list_tables() == []
    assert list(cat.warehouse.storage.list(t.id)) == []


def test_expire_and_vacuum_reclaim(warehouse: Warehouse) -> None:
    """Expire, then vacuum: old snapshots forgotten by the metastore and deleted, files only
    expired versions used deleted, every retained version read as before."""
    cat = warehouse.connect()
    t = cat.create_table("t", [("id", pa.int64())])
    for i in range(4):
        t.write([{"id": k, "v": i} for k in range(5)])
        t.flush()
    reads = {c.seq: t.scan(version=c.seq).to_pylist() for c in t.history()}
    r = t.expire(retain_last=2)
    vac = t.vacuum(older_than_seconds=0)
    ms = cat.warehouse.metastore
    assert vac.snapshots_removed >= 2 and ms.snapshots(t.id)[0][0] == ms.latest_snapshot(t.id, r.version)[0]
    again = warehouse.connect().table("t")
    assert all(again.scan(version=s).to_pylist() == rows for s, rows in reads.items() if s >= r.version)
    assert again.check().ok


def _writer_process(warehouse: Warehouse, w: int, commits: int) -> None:
    t = warehouse.connect().table("t")
    for i in range(commits):
        t.write([{"id": w * 1000 + i, "w": w}])


def test_writer_processes_lose_nothing(warehouse: Warehouse) -> None:
    """N writer processes × M commits each through `connect()`: all N·M commits are in the log
    and every key is read back."""
    if warehouse.kind not in CROSS_PROCESS:
        pytest.skip("in-process store")
    n, m = 3, 4
    warehouse.connect().create_table("t", [("id", pa.int64())], pa.schema([("w", pa.int64())]))
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer_process, args=(warehouse, w, m)) for w in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    t = warehouse.connect().table("t")
    # every write is in the log (automatic compactions of the default policy run between them)
    assert [c.kind for c in t.history()].count("write") == n * m
    assert sorted(t.scan().to_arrow().column("id").to_pylist()) == sorted(
        w * 1000 + i for w in range(n) for i in range(m)
    )


class _IgnoresConditions(LocalStorage):
    """A store whose put-if-absent silently overwrites, as some S3-compatible servers do."""

    def create(self, path: str, data: bytes | bytearray | memoryview) -> bool:
        self.write(path, data)
        return True


def test_store_without_conditional_writes_is_refused(tmp_path: Path) -> None:
    storage = _IgnoresConditions(tmp_path)
    with pytest.raises(ConditionalWriteUnsupportedError, match="ignores conditional writes"):
        conch.connect(tmp_path, metastore=ObjectStoreMetastore(storage))
    assert [f.path for f in storage.list()] == []  # the probe left nothing behind


def test_unsafe_table_names_are_refused(tmp_path: Path) -> None:
    ms = ObjectStoreMetastore(LocalStorage(tmp_path))
    for bad in ("../x", "a/b", "", ".hidden", "x" * 200):
        with pytest.raises(InvalidNameError):
            ms.get_table(bad)
        with pytest.raises(InvalidNameError):
            ms.read_log(bad)


def test_tags_and_changes(warehouse: Warehouse) -> None:
    """Tags are WAL entries, so every backend stores them: they survive a flush (snapshots carry
    them), a reopen, expire and vacuum; `changes` since a tag reads what changed after it."""
    cat = warehouse.connect(conch.Policy(settle_after=None))
    t = cat.create_table("t", [("id", pa.int64())])
    t.write([{"id": k, "v": 0} for k in range(5)])
    t.tag("base")
    pinned = t.scan(version="base").to_pylist()
    for i in range(1, 3):
        t.write([{"id": i, "v": i}])
        t.flush()
    t.delete([4])
    t.compact()
    t.expire(retain_last=1)
    t.vacuum(older_than_seconds=0)
    again = warehouse.connect().table("t")
    assert again.tags() == {"base": 1}
    assert again.scan(version="base").to_pylist() == pinned
    got = [(r["id"], r["_change"]) for r in again.changes("base", images="keys").to_pylist()]
    assert got == [(1, "update"), (2, "update"), (4, "delete")]


def test_branches(warehouse: Warehouse) -> None:
    """Branches are table logs with records of their own, so every backend stores them with no
    method of its own: a branch's writes stay off the table, a reopen finds it, fast-forward
    moves the table to it, a vacuum of the table keeps its files, and dropping it reclaims them."""
    cat = warehouse.connect(conch.Policy(settle_after=None))
    t = cat.create_table("t", [("id", pa.int64())])
    t.write([{"id": k, "v": 0} for k in range(4)])
    dev = t.branch("dev")
    dev.write([{"id": 1, "v": 1}])
    dev.delete([3])
    dev.flush()
    assert [r["v"] for r in t.to_arrow().to_pylist()] == [0, 0, 0, 0]
    again = warehouse.connect()
    assert again.list_tables() == ["t"]
    [b] = again.table("t").branches()
    assert (b.name, b.base_version, b.head_version) == ("dev", 1, dev.state().seq)
    want = [{"id": 0, "v": 0}, {"id": 1, "v": 1}, {"id": 2, "v": 0}]
    assert again.table("t@dev").to_arrow().to_pylist() == want
    t.expire(retain_last=1)
    t.vacuum(older_than_seconds=0)
    assert again.table("t", branch="dev").scan(version=1).to_arrow().num_rows == 4  # its base, still readable
    assert [(r["id"], r["_change"]) for r in dev.changes(1, images="keys").to_pylist()] == [
        (1, "update"),
        (3, "delete"),
    ]
    t.fast_forward("dev")
    assert t.to_arrow().to_pylist() == want
    t.write([{"id": 5, "v": 5}])
    dev.write([{"id": 6, "v": 6}])
    with pytest.raises(CommitConflictError, match="changed since the branch point"):
        t.fast_forward("dev")
    t.drop_branch("dev")
    with pytest.raises(TableNotFoundError, match="no branch 'dev'"):
        again.table("t@dev")
    t.vacuum(older_than_seconds=0)
    assert [r["id"] for r in again.table("t").to_arrow().to_pylist()] == [0, 1, 2, 5]
    cat.drop_table("t")
    assert cat.warehouse.metastore.list_tables() == []
