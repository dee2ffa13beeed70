"""Snapshots (issue 20 item 1, DESIGN §5a): one table version, read from the metastore once, that
every reader carries, and that reopens in any process with exactly `connect()`'s options.

- a nested select, and Polars / DuckDB / Torch reads of one snapshot, under a concurrent writer
  that commits a parent and its children with the same value `v` in each commit: every result
  shows one `v` on both sides;
- every reader on a warehouse opened with a non-default metastore (SQLite elsewhere; the HTTP
  server with a token over S3 with explicit `storage_options`): splits in other processes, a
  Torch DataLoader with 2 spawned workers, Polars, DuckDB (Spark `local-cluster`:
  `test_snapshot_spark.py`);
- one metastore read per query build on every metastore backend (counted);
- a snapshot pickles as plain data and reads the same in another process.
"""

from __future__ import annotations

import multiprocessing
import pickle
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import conch
from conch import _
from conch.errors import TableNotFoundError, WarehouseError
from conch.log.metastore.sqlite import SqliteMetastore
from conch.scan import Split
from helpers import CountingMetastore, Warehouse
from services import MotoS3, Postgres, ServerProcess

TOKEN = "snap-token-1"
KID = pa.struct([("$", pa.uint64()), ("v", pa.int64())])
SCHEMA = pa.schema([("v", pa.int64()), ("a", pa.int64()), ("b", pa.int64()), ("kids", pa.list_(KID))])
PARENTS, KIDS = 6, 3
NO_SETTLE = conch.Policy(settle_after=None)  # no background commit between the counted calls


def _commit(t: conch.Table, v: int) -> None:
    """One commit: every parent and each of its children carry `v`."""
    t.write(
        [{"id": p, "v": v, "a": v, "b": p, "kids": [{"$": c, "v": v} for c in range(KIDS)]} for p in range(PARENTS)]
    )


def _table(cat: conch.Catalog, commits: int = 2) -> conch.Table:
    t = cat.create_table("t", [("id", pa.uint64())], schema=SCHEMA)
    for v in range(1, commits + 1):
        _commit(t, v)
    return t


def _spawn_pool() -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))


def _rows(snapshot: conch.Snapshot, level: str = "") -> pa.Table:
    """A snapshot's rows, read where it was unpickled."""
    return snapshot.scan(level=level or None).to_arrow()


# ----- the bug: workers lost the connection ------------------------------------------------------
def test_splits_read_on_a_non_default_metastore(tmp_path: Path) -> None:
    """`connect(d, metastore="sqlite:///...")` then a split read raised `TableNotFoundError`
    (the split reopened `connect(uri)`, the default metastore, which has no such table)."""
    cat = conch.connect(tmp_path / "wh", metastore=f"sqlite:///{tmp_path}/other.sqlite")
    t = _table(cat)
    assert not (tmp_path / "wh" / "_catalog.sqlite").exists()  # nothing in the default metastore
    splits = t.scan().splits(2)
    assert len(splits) == 2
    whole = t.scan().to_arrow()
    assert pa.concat_tables([s.to_arrow() for s in splits]).equals(whole)
    with _spawn_pool() as pool:
        parts = list(pool.map(Split.to_arrow, splits))
    assert pa.concat_tables(parts).equals(whole)


# ----- pickling ------------------------------------------------------------------------------------
def test_snapshot_pickles_as_plain_data_and_reads_the_same_anywhere(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh", metastore=f"sqlite:///{tmp_path}/other.sqlite", token=None)
    t = _table(cat)
    snap = t.snapshot()
    _commit(t, 3)  # newer than the snapshot
    data = pickle.dumps(snap)
    assert b"TableLog" not in data and b"TableState" not in data  # plain data, no handles or state
    back = pickle.loads(data)
    assert (back.name, back.table_id, back.seq, back.time, back.asof) == (
        snap.name,
        snap.table_id,
        snap.seq,
        snap.time,
        snap.asof,
    )
    assert back == snap and back.connection == snap.connection
    assert back.scan().to_arrow().equals(snap.scan().to_arrow())
    assert set(snap.scan("v").to_arrow().column("v").to_pylist()) == {2}
    old = t.snapshot(version=1)
    with _spawn_pool() as pool:
        got = pool.submit(_rows, snap, "kids").result()
        got_old = pool.submit(_rows, old).result()
    assert got.equals(snap.scan(level="kids").to_arrow())
    assert got_old.equals(t.scan(version=1).to_arrow()) and set(got_old.column("v").to_pylist()) == {1}
    # a snapshot pinned by time pickles its asof too
    by_time = t.snapshot(asof=old.time)
    assert pickle.loads(pickle.dumps(by_time)).asof == old.time == by_time.asof


def test_a_snapshot_of_a_metastore_object_is_not_picklable(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh", metastore=SqliteMetastore(tmp_path / "m.sqlite", create=True))
    t = _table(cat, 1)
    assert t.scan().splits(2)[0].to_arrow().num_rows > 0  # in-process reads work
    with pytest.raises(WarehouseError, match="Metastore object"):
        pickle.dumps(t.snapshot())


def test_a_snapshot_of_a_dropped_table_does_not_reopen_onto_a_new_one(tmp_path: Path) -> None:
    where = Warehouse(str(tmp_path / "wh"), metastore=f"sqlite:///{tmp_path}/other.sqlite")
    cat = where.connect(NO_SETTLE)
    data = pickle.dumps(_table(cat).snapshot())
    cat.drop_table("t")
    _table(cat, 3)  # another table, the same name
    with _spawn_pool() as pool, pytest.raises(TableNotFoundError, match="dropped"):
        pool.submit(pickle.loads, data).result()


# ----- one version under a concurrent writer ----------------------------------------------------------
@pytest.fixture
def busy(tmp_path: Path) -> Iterator[conch.Table]:
    """A table on a non-default metastore and a writer thread committing parents + children with
    one value per commit (through its own connection) until the test ends."""
    where = Warehouse(str(tmp_path / "wh"), metastore=f"sqlite:///{tmp_path}/other.sqlite")
    t = _table(where.connect(NO_SETTLE))
    writer = where.connect(NO_SETTLE).table("t")
    stop = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        v = 3
        try:
            while not stop.is_set():
                _commit(writer, v)
                v += 1
        except BaseException as e:  # reported by the test
            errors.append(e)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        yield t
    finally:
        stop.set()
        thread.join(120)
    assert not errors, errors
    assert writer.state().seq > 5  # the writer did commit meanwhile


def _one_value(*columns: list[Any]) -> int:
    """The one value every column holds (the test fails if two appear)."""
    values = {x for col in columns for x in col}
    assert len(values) == 1, f"one snapshot saw values {sorted(values)}: a read mixed versions"
    return values.pop()


def test_a_nested_select_reads_every_level_from_one_version(busy: conch.Table) -> None:
    t = busy
    seen: set[int] = set()
    for _i in range(400):  # until the writer has moved on a few times between queries
        if len(seen) >= 3:
            break
        r = t.kids.select(v=_.v, pv=t.v, s=t.kids.v.sum()).scan().to_arrow()
        assert r.num_rows == PARENTS * KIDS
        v = _one_value(r.column("v").to_pylist(), r.column("pv").to_pylist())
        assert r.column("s").to_pylist() == [v * KIDS] * (PARENTS * KIDS)  # summed at the same version
        seen.add(v)
    assert len(seen) > 1  # the writer moved on between queries


def test_engines_read_one_version_of_several_levels(busy: conch.Table) -> None:
    import duckdb
    import polars as pl
    import torch.utils.data

    import conch.engines.duckdb as cdb
    import conch.engines.polars as cpl
    import conch.engines.torch as ctorch

    t = busy
    for _i in range(6):
        snap = t.snapshot()
        parents = cpl.scan(snap).select("id", "v")
        kids = cpl.scan(snap, level="kids").select("id", pl.col("v").alias("kv"))
        j = parents.join(kids, on="id").collect()
        assert j.height == PARENTS * KIDS
        v = _one_value(j["v"].to_list(), j["kv"].to_list())
        assert v == snap.scan("v").to_arrow().column("v")[0].as_py()

        con = duckdb.connect()
        cdb.register(con, "p", cdb.source(snap))
        cdb.register(con, "k", cdb.source(snap, level="kids"))
        rows = con.sql("SELECT p.v, k.v FROM p JOIN k ON p.id = k.id").fetchall()
        assert len(rows) == PARENTS * KIDS and _one_value([a for a, _b in rows], [b for _a, b in rows]) == v

        ds = ctorch.dataset(snap.scan("v", level="kids"), batch_size=4, splits=3)
        got = [int(x) for b in torch.utils.data.DataLoader(ds, batch_size=None) for x in b["v"]]
        assert len(got) == PARENTS * KIDS and _one_value(got) == v


# ----- every reader on a non-default metastore, a token and storage options -------------------------------
@pytest.fixture(params=["sqlite-other", "http-s3"])
def remote(request: pytest.FixtureRequest, tmp_path: Path) -> Warehouse:
    if request.param == "sqlite-other":
        return Warehouse(str(tmp_path / "wh"), metastore=f"sqlite:///{tmp_path}/other.sqlite")
    s3: MotoS3 = request.getfixturevalue("moto_s3")
    server = ServerProcess(s3.uri(), {TOKEN: "admin"}, env=s3.env)  # the server's own S3 access
    request.addfinalizer(server.stop)
    server.start()
    return Warehouse(server.url, token=TOKEN, storage_options=dict(s3.options))  # the client's: options only


def test_every_reader_works_with_the_connection_options(remote: Warehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    import duckdb
    import polars as pl
    import torch.utils.data

    import conch.engines.duckdb as cdb
    import conch.engines.polars as cpl
    import conch.engines.torch as ctorch

    for k in [k for k in list(__import__("os").environ) if k.startswith("AWS_")]:
        monkeypatch.delenv(k)  # only the options reach S3
    t = _table(remote.connect(NO_SETTLE))
    whole = t.scan().to_arrow()
    assert whole.num_rows == PARENTS
    splits = t.scan("v", level="kids").splits(2)
    with _spawn_pool() as pool:
        parts = list(pool.map(Split.to_arrow, splits))
    assert pa.concat_tables(parts).equals(t.scan("v", level="kids").to_arrow())

    ds = ctorch.dataset(t.scan("v"), batch_size=2, splits=4)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    assert sorted(int(i) for b in loader for i in b["id"]) == list(range(PARENTS))

    lf = cpl.scan(t).filter(pl.col("b") >= 3).select("id", "v")
    assert lf.collect()["id"].to_list() == [3, 4, 5]
    src = cdb.source(t, level="kids")  # noqa: F841 - found by name by DuckDB
    assert duckdb.sql("SELECT count(*), sum(v) FROM src").fetchall() == [(PARENTS * KIDS, 2 * PARENTS * KIDS)]


# ----- metastore reads per query build ---------------------------------------------------------------
BACKENDS = ["sqlite-other", "storage-local", "memory", "postgres", "http"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Warehouse:
    kind = request.param
    if kind == "sqlite-other":
        return Warehouse(str(tmp_path / "wh"), metastore=f"sqlite:///{tmp_path}/other.sqlite")
    if kind == "storage-local":
        return Warehouse(str(tmp_path / "wh"), metastore="storage")
    if kind == "memory":
        return Warehouse(f"memory://{tmp_path.name}/wh")
    if kind == "postgres":
        pg: Postgres = request.getfixturevalue("postgres")
        return Warehouse(str(tmp_path / "wh"), metastore=pg.dsn())
    server = ServerProcess(str(tmp_path / "wh"), {TOKEN: "admin"})
    request.addfinalizer(server.stop)
    server.start()
    return Warehouse(server.url, token=TOKEN)


def test_one_metastore_read_per_query_build(backend: Warehouse) -> None:
    cat = backend.connect(NO_SETTLE)
    t = _table(cat)
    counting = CountingMetastore(cat.warehouse.metastore)
    cat.warehouse.metastore = counting  # type: ignore[assignment]
    t.scan().to_arrow()  # the handle has read the table once
    counting.take()

    q = t.scan("a", where=(t["a"] > 0) & (t["b"] < 5))  # was 6 reads
    assert counting.take() == 1
    assert q.to_arrow().num_rows == 5
    assert counting.take() == 0  # running it reads no metastore

    snap = t.snapshot()
    assert counting.take() == 1
    for level in ("", "kids"):
        snap.scan(level=level or None).to_arrow()
    snap.scan("v", where=t["v"] > 0).splits(2)
    assert counting.take() == 0  # a snapshot's scans read it no more

    t.scan(version=1)  # a version: the log's tail, then its state (once, cached after)
    assert counting.take() <= 4
    t.scan(version=1)
    assert counting.take() == 1


# ----- the nested API and delete/enrich through one snapshot -------------------------------------------
def test_delete_where_and_enrich_read_one_snapshot(tmp_path: Path) -> None:
    cat = Warehouse(str(tmp_path / "wh"), metastore=f"sqlite:///{tmp_path}/other.sqlite").connect(NO_SETTLE)
    t = _table(cat)
    t.delete(where=t["b"] >= 4)
    assert t.scan().to_arrow().column("id").to_pylist() == [0, 1, 2, 3]

    def double(batch: pa.RecordBatch) -> dict[str, Any]:
        return {"w": [2 * x for x in batch.column("v").to_pylist()]}

    res = t.enrich(double, inputs=["v"], into="d", workers=0)
    assert res.keys == 4
    got = t.scan("d.w").to_arrow().column("d").to_pylist()
    assert got == [{"w": 4}] * 4
