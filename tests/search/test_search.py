"""Search indexes as table metadata and files (issue 31): definitions through the WAL and time
travel, index files per run (checksummed, dropped with their run, vacuumed), typed errors, the
matrix form, BM25 ranking equal to tantivy's own, writes searchable at once, and a run's index
in parts answering as one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import conch
from conch.errors import CorruptFileError, InvalidArgumentError, SchemaError
from conch.search import build, runs


def vectors(a: np.ndarray) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(a.astype(np.float32).ravel()), a.shape[1])


@pytest.fixture
def table(catalog: conch.Catalog) -> conch.Table:
    t = catalog.create_table("t", [("id", pa.int64())])
    rng = np.random.default_rng(7)
    caps = ["a red car", "a blue car", "red red roses", "a boat", "the red sea"] * 40
    t.write(pa.table({"id": np.arange(200), "emb": vectors(rng.random((200, 16))), "cap": caps}))
    return t


def test_definitions_are_committed_and_time_travel(table: conch.Table) -> None:
    c = table.create_index("emb", metric="l2", index="hnsw", m=8)
    table.create_index("cap", kind="text")
    assert set(table.indexes()) == {"emb_vector", "cap_text"}
    assert table.indexes(version=c.seq - 1) == {}
    assert "emb_vector: vector on emb (l2, 16 dims" in table.describe()
    table.drop_index("cap_text")
    assert set(table.indexes()) == {"emb_vector"}
    assert set(table.indexes(version=c.seq + 1)) == {"emb_vector", "cap_text"}
    assert [h.kind for h in table.history()][-3:] == ["index", "index", "index"]


def test_bad_definitions_are_typed_errors(table: conch.Table) -> None:
    with pytest.raises(SchemaError, match="fixed_size_list"):
        table.create_index("cap", kind="vector")
    with pytest.raises(SchemaError, match="string column"):
        table.create_index("emb", kind="text")
    with pytest.raises(InvalidArgumentError, match="metric"):
        table.create_index("emb", metric="manhattan")
    with pytest.raises(InvalidArgumentError, match="options"):
        table.create_index("emb", index="hnsw", nlist=4)
    table.create_index("emb")
    with pytest.raises(InvalidArgumentError, match="already has"):
        table.create_index("emb", name="again")
    with pytest.raises(InvalidArgumentError, match="dimensions"):
        table.search(np.zeros(3), k=1)
    with pytest.raises(InvalidArgumentError, match="no text index"):
        table.search_text("red")
    with pytest.raises(InvalidArgumentError, match="no index named"):
        table.drop_index("nope")


def test_index_files_belong_to_runs_and_are_vacuumed(table: conch.Table, tmp_path: Path) -> None:
    table.create_index("emb", metric="cosine")
    commit = table.build_indexes(min_rows=0)
    assert commit is not None and table.build_indexes(min_rows=0) is None  # nothing missing
    (f,) = table.state().index_files.values()
    path = tmp_path / "warehouse" / f.path
    assert path.stat().st_size == f.bytes and f.rows == 200 and f.checksum.startswith("xxh3-")
    q = np.random.default_rng(3).random(16)
    assert table.search(q, k=5).explain().count("index file") == 1
    before = table.search(q, k=5).to_pylist()
    table.write(pa.table({"id": [500], "emb": vectors(q[None, :])}))  # searchable at once, exactly
    got = table.search(q, k=5).to_pylist()
    assert got[0]["id"] == 500 and got[0]["_distance"] == pytest.approx(0, abs=1e-6)
    assert [r["id"] for r in got[1:]] == [r["id"] for r in before[:4]]
    table.drop_index("emb_vector")
    assert table.state().index_files == {}
    table.expire(retain_last=1)
    table.vacuum(older_than_seconds=0)
    assert not path.exists()


def test_damaged_index_file_is_named(table: conch.Table, tmp_path: Path) -> None:
    table.create_index("emb")
    table.build_indexes(min_rows=0)
    (f,) = table.state().index_files.values()
    p = tmp_path / "warehouse" / f.path
    data = bytearray(p.read_bytes())
    data[40] ^= 0xFF
    p.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match=f.id):
        table.search(np.ones(16), k=3)


def test_matrix_of_queries_gives_k_each(table: conch.Table) -> None:
    table.create_index("emb", metric="dot")
    qs = np.random.default_rng(5).random((4, 16))
    got = table.search(qs, k=3, columns=[]).to_arrow()
    assert got.column_names == ["_query", "id", "_distance"] and got.num_rows == 12
    for i in range(4):
        one = table.search(qs[i], k=3, columns=[]).to_pylist()
        assert [r["id"] for r in got.to_pylist() if r["_query"] == i] == [r["id"] for r in one]


def test_bm25_equals_tantivys_own_ranking(table: conch.Table) -> None:
    import tantivy

    table.create_index("cap", kind="text")
    table.delete(list(range(0, 200, 7)))
    got = table.search_text("red car", k=10, columns=["cap"]).to_pylist()
    fresh = table.scan("cap").to_pylist()
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("text", stored=False)
    sb.add_unsigned_field("id", stored=True)
    index = tantivy.Index(sb.build())
    w = index.writer(heap_size=15_000_000, num_threads=1)
    for r in fresh:
        w.add_document(tantivy.Document(text=r["cap"], id=r["id"]))
    w.commit()
    index.reload()
    s = index.searcher()
    hits = s.search(index.parse_query("red car", ["text"]), 10).hits
    assert [round(r["_score"], 4) for r in got] == [round(score, 4) for score, _ in hits]
    assert all(r["id"] % 7 for r in got)  # deleted records are never ranked


def test_writes_and_compactions_build_index_files(catalog: conch.Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    from conch.search import runs

    monkeypatch.setattr(runs, "MIN_ROWS", 50)  # runs of 50 rows or more get index files
    t = catalog.create_table("m", [("id", pa.int64())], pa.schema([("emb", pa.list_(pa.float32(), 4))]))
    t.create_index("emb", metric="l2")  # before any row: the schema declares the column
    rng = np.random.default_rng(11)

    def indexed() -> bool:
        state = t.state()
        current = {ks.id for ks, files in runs.runs_of(state, state.indexes["emb_vector"]) if files}
        return {ks.id for ks in state.key_spaces.values() if ks.kind == "data" and ks.rows >= 50} <= current

    t.write(pa.table({"id": np.arange(100), "emb": vectors(rng.random((100, 4)))}))
    assert len(t.state().index_files) == 1 and indexed()  # built when the run was written
    t.write(pa.table({"id": np.arange(100, 110), "emb": vectors(rng.random((10, 4)))}))
    assert indexed()  # the automatic compaction's output got its own
    t.write(pa.table({"id": np.arange(50, 150), "emb": vectors(rng.random((100, 4)))}))
    t.compact()
    assert indexed()
    q = rng.random(4)
    want = sorted(((np.asarray(r["emb"]) - q) ** 2).sum() for r in t.scan("emb").to_pylist())[:5]
    assert [r["_distance"] for r in t.search(q, k=5).to_pylist()] == pytest.approx(want, rel=1e-5)


def test_a_move_keeps_the_runs_index_file_a_removal_drops_it() -> None:
    from conch.files.manifest import IndexDef, IndexFile, KeySpace, TableState
    from conch.log import wal
    from conch.model.schema import Schema

    ks = KeySpace("k1", "", "k1.vortex", 10, "00", "ff")
    state = wal.apply(
        TableState(Schema.empty(pa.schema([pa.field("id", pa.int64(), nullable=False)]))),
        wal.Entry("write", (wal.AddKeySpace(ks), wal.AddIndex(IndexDef("i", "", "emb", 1, "vector")))),
        1,
        10,
    )
    state = wal.apply(
        state, wal.Entry("index", (wal.AddIndexFile(IndexFile("f1", "i", "k1", "f1.cix", 10, ())),)), 2, 20
    )
    moved = wal.apply(state, wal.Entry("compact", (wal.RemoveKeySpace("k1"), wal.AddKeySpace(ks))), 3, 30)
    assert set(moved.index_files) == {"f1"}
    gone = wal.apply(state, wal.Entry("compact", (wal.RemoveKeySpace("k1"),)), 3, 30)
    assert not gone.index_files
    dropped = wal.apply(state, wal.Entry("index", (wal.DropIndex("i"),)), 3, 30)
    assert not dropped.index_files and not dropped.indexes
    text = wal.encode(wal.Entry("index", (wal.AddIndexFile(IndexFile("f1", "i", "k1", "f1.cix", 10, ("a",))),)))
    assert wal.decode(text).ops[0] == wal.AddIndexFile(IndexFile("f1", "i", "k1", "f1.cix", 10, ("a",)))


def test_object_storage_and_branches() -> None:
    """Index files on object storage (obstore's memory store); a branch shares the table's index
    files and searches its own writes, the table does not see them."""
    with conch.connect("memory://search-test") as cat:
        t = cat.create_table("b", [("id", pa.int64())])
        v = np.random.default_rng(4).random((120, 8))
        t.write(pa.table({"id": np.arange(120), "emb": vectors(v)}))
        t.create_index("emb", metric="l2", index="hnsw")
        t.build_indexes(min_rows=0)
        dev = t.branch("dev")
        assert {f.path for f in dev.state().index_files.values()} == {f.path for f in t.state().index_files.values()}
        dev.write(pa.table({"id": [7], "emb": vectors(-v[7:8])}))
        assert dev.search(-v[7], k=1).to_pylist()[0]["id"] == 7
        assert dev.search(v[7], k=1).to_pylist()[0]["id"] != 7  # its old vector is stale on the branch
        assert t.search(v[7], k=1).to_pylist()[0]["id"] == 7


def test_check_verifies_index_files(table: conch.Table, tmp_path: Path) -> None:
    table.create_index("emb")
    table.build_indexes(min_rows=0)
    assert table.check().ok
    (f,) = table.state().index_files.values()
    p = tmp_path / "warehouse" / f.path
    data = bytearray(p.read_bytes())
    data[-5] ^= 0xFF
    p.write_bytes(bytes(data))
    report = table.check()
    assert not report.ok and f.path in str(report)


def test_child_level_index_and_a_parents_delete(catalog: conch.Catalog) -> None:
    items = pa.list_(pa.struct([("$", pa.uint8()), ("emb", pa.list_(pa.float32(), 2))]))
    schema = pa.schema([("id", pa.int64()), ("items", items)])
    t = catalog.create_table("n", [("id", pa.int64())], pa.schema([schema.field("items")]))
    rows = [
        {"id": 1, "items": [{"$": 1, "emb": [0.0, 1.0]}, {"$": 2, "emb": [1.0, 0.0]}]},
        {"id": 2, "items": [{"$": 1, "emb": [0.9, 0.1]}]},
    ]
    t.write(pa.Table.from_pylist(rows, schema=schema))
    t.create_index("items.emb", metric="l2")
    t.build_indexes(min_rows=0)
    got = t.search(np.array([1.0, 0.1]), k=2).to_pylist()
    assert [(r["id"], r["items"]) for r in got] == [(1, 2), (2, 1)]
    t.delete([2])  # the parent's tombstone hides its child records
    got = t.search(np.array([1.0, 0.1]), k=2).to_pylist()
    assert [(r["id"], r["items"]) for r in got] == [(1, 2), (1, 1)]


def test_a_search_keeps_every_part_it_asks_loaded(table: conch.Table, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's index in more parts than the loaded-index cache's floor holds: a search holds all
    of them at once, so the cache keeps them all, and the next search reads no index file. Before,
    each part loaded evicted the one loaded longest ago, the next search's first: every search
    re-read every part (1M x 128: 2 s a query)."""
    q = np.random.default_rng(11).random(16)
    table.create_index("emb", metric="l2", index="hnsw")
    monkeypatch.setattr(build, "part_budget", lambda log: 50 * (16 * 4 + 16 + 8))  # 50 rows a part
    table.build_indexes(min_rows=0)
    files = list(table.state().index_files.values())
    assert len(files) >= 4  # the fixture's runs, each in parts
    floor = max(f.bytes for f in files)  # the cache's floor: one part
    monkeypatch.setattr(runs, "CACHE_BYTES", floor)
    monkeypatch.setattr(runs._cache, "max_weight", floor)
    runs._cache.clear()
    first = table.search(q, k=5).to_pylist()
    assert all(f.id in runs._cache for f in files)  # before: only the last part loaded
    loaded = [runs._cache.get(f.id) for f in files]
    assert table.search(q, k=5).to_pylist() == first
    assert [runs._cache.get(f.id) for f in files] == loaded  # the same objects: nothing re-read


def test_unindexed_runs_are_read_once_and_stay_fresh(table: conch.Table, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs no index file covers are searched exactly; their vectors are read once per process
    (named by the run's files), not at every search, and a run written later is read and found
    by the next search."""
    reads: list[str] = []
    real = runs._read_run

    def spy(source, key_space, definition):  # type: ignore[no-untyped-def]  # counts, reads for real
        reads.append(key_space.id)
        return real(source, key_space, definition)

    monkeypatch.setattr(runs, "_read_run", spy)
    runs._run_vectors.clear()
    table.create_index("emb", metric="l2", index="flat")  # no build: every run is searched exactly
    q = np.random.default_rng(12).random(16)
    first = table.search(q, k=5).to_pylist()
    n = len(reads)
    assert n >= 1
    assert table.search(q, k=5).to_pylist() == first and len(reads) == n  # nothing re-read
    table.write(pa.table({"id": [10_000], "emb": vectors(q[None, :])}))
    got = table.search(q, k=1).to_pylist()
    assert got[0]["id"] == 10_000 and len(reads) == n + 1  # only the new run read


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_a_run_in_parts_answers_as_one_index(
    table: conch.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, metric: str
) -> None:
    q = np.random.default_rng(11).random((3, 16))
    table.create_index("emb", metric=metric)
    table.build_indexes(min_rows=0)
    whole = table.search(q, k=7).to_pylist()
    table.drop_index("emb_vector")
    table.create_index("emb", metric=metric)
    monkeypatch.setattr(build, "part_budget", lambda log: 50 * (16 * 4 + 16 + 8))  # 50 rows a part
    table.build_indexes(min_rows=0)
    files = sorted(table.state().index_files.values(), key=lambda f: f.rows)
    assert [f.rows for f in files] == [50, 50, 50, 50] and len({f.key_space for f in files}) == 1
    got = table.search(q, k=7)
    assert got.explain().count(", ") >= 3  # four files of one run
    assert got.to_pylist() == whole  # the same keys and distances as one flat index over the run
    assert table.check().ok and table.check().files_checked >= 4
    table.compact()  # a new run: its parts are built again and the old ones vacuumed
    table.build_indexes(min_rows=0)
    assert table.search(q, k=7).to_pylist() == whole
    table.expire(retain_last=1)
    table.vacuum(older_than_seconds=0)
    assert all(not (tmp_path / "warehouse" / f.path).exists() for f in files)


def test_faiss_threads_count_other_busy_threads_now() -> None:
    """The build's thread count reads the run queue now, not the one-minute average (which still
    counts this process's previous build): two spinning processes are counted while they spin."""
    import subprocess
    import sys
    import time

    from conch.search import vectors as v

    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        seen, until = 0, time.monotonic() + 30  # each spinner is runnable from its start on
        while seen < 2 and time.monotonic() < until:
            seen = max(seen, v.busy_cores())
            time.sleep(0.01)
    finally:
        for p in spin:
            p.kill()
            p.wait()
    assert seen >= 2
