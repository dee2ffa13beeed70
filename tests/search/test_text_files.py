"""Persisted text index files (issue 31): a tantivy index per run, searched as one index over the
segments of every run's file so BM25 statistics are global. Over runs no other run hides, BM25
from the files equals tantivy's own ranking of the same corpus indexed at once (with a run that
has no file yet, indexed at query time); once runs overlap, the exact path answers and still
equals it on the fresh corpus. The files are checksummed, verified, rebuilt by compaction and
removed by vacuum."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import struct
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import tantivy
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import conch
from conch.errors import CorruptFileError
from conch.files.integrity import digest
from conch.files.manifest import IndexFile
from conch.files.storage import new_id
from conch.log.wal import AddIndexFile
from conch.search import build, runs
from conch.search import text as text_search

WORDS = ["red", "car", "blue", "tree", "bike", "road", "sky", "green", "fast", "slow"]
QUERIES = ["red car", "sky", "+red +car", "tree -blue", '"red car"', "green OR bike"]


def tantivy_ranking(corpus: dict[int, str], query: str, k: int, passing: Any = None) -> list[tuple[float, set[int]]]:
    """tantivy's own BM25 top-k over `corpus` indexed at once: (score, keys at that score); of the
    keys `passing` selects (scored over the whole corpus) when given."""
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("text", stored=False)
    sb.add_unsigned_field("id", stored=True)
    index = tantivy.Index(sb.build())
    w = index.writer(heap_size=15_000_000, num_threads=1)
    for key, text in corpus.items():
        w.add_document(tantivy.Document(text=text, id=key))
    w.commit()
    index.reload()
    s = index.searcher()
    hits = s.search(index.parse_query(query, ["text"]), max(1, len(corpus))).hits
    ranked = [(score, s.doc(addr)["id"][0]) for score, addr in hits]
    return _grouped([(score, key) for score, key in ranked if passing is None or passing(key)][:k])


def _grouped(pairs: list[tuple[float, int]]) -> list[tuple[float, set[int]]]:
    """Ties grouped (two indexes may order equal scores differently); the last group is cut by
    k, so only its score is compared."""
    out: list[tuple[float, set[int]]] = []
    for score, key in pairs:
        if out and abs(out[-1][0] - score) < 1e-5:
            out[-1][1].add(key)
        else:
            out.append((score, {key}))
    return [(round(s, 4), keys) for s, keys in out]


def conch_ranking(t: Any, query: str, k: int, where: Any = None) -> list[tuple[float, set[int]]]:
    got = t.search_text(query, k=k, where=where).to_arrow()
    return _grouped(list(zip(got["_score"].to_pylist(), got["id"].to_pylist())))


def same(a: list[tuple[float, set[int]]], b: list[tuple[float, set[int]]]) -> bool:
    return [s for s, _ in a] == [s for s, _ in b] and a[:-1] == b[:-1]


def captions(rng: np.random.Generator, n: int) -> list[str | None]:
    return [None if rng.random() < 0.05 else " ".join(rng.choice(WORDS, rng.integers(0, 9))) for _ in range(n)]


@settings(max_examples=12)
@given(seed=st.integers(0, 2**16), runs_n=st.integers(1, 4), k=st.sampled_from([1, 5, 30]))
def test_bm25_from_files_equals_tantivy_on_the_corpus(tmp_path_factory: Any, seed: int, runs_n: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    with conch.connect(tmp_path_factory.mktemp("w"), maintenance=conch.Policy(auto=False)) as cat:
        t = cat.create_table("c", [("id", pa.int64())])
        corpus: dict[int, str] = {}
        for r in range(runs_n):  # disjoint key ranges: no run hides another
            ids = list(range(r * 1000, r * 1000 + int(rng.integers(30, 120))))
            caps = captions(rng, len(ids))
            t.write(pa.table({"id": ids, "cap": pa.array(caps, pa.string())}))
            corpus.update({i: c for i, c in zip(ids, caps) if c is not None})
        t.create_index("cap", kind="text")
        t.build_indexes(min_rows=0)
        t.write(pa.table({"id": [90_000, 90_001], "cap": ["red red car sky", ""]}))  # no file: indexed now
        corpus.update({90_000: "red red car sky", 90_001: ""})
        for query in QUERIES:
            result = t.search_text(query, k=k)
            assert f"segments of {runs_n} index files and 1 runs indexed now" in result.explain()
            assert same(conch_ranking(t, query, k), tantivy_ranking(corpus, query, k)), query


def test_overlapping_runs_rank_the_fresh_records(tmp_path: Path) -> None:
    catalog = conch.connect(tmp_path, maintenance=conch.Policy(auto=False))  # runs stay as written
    t = catalog.create_table("c", [("id", pa.int64())])
    rng = np.random.default_rng(1)
    caps = captions(rng, 400)
    t.write(pa.table({"id": np.arange(200), "cap": pa.array(caps[:200], pa.string())}))
    t.write(pa.table({"id": np.arange(1000, 1200), "cap": pa.array(caps[200:], pa.string())}))
    t.create_index("cap", kind="text")
    t.build_indexes(min_rows=0)
    corpus = {i if i < 200 else i + 800: c for i, c in enumerate(caps) if c is not None}
    new = ["red car red car"] * 20
    t.write(pa.table({"id": np.arange(1000, 1200, 10), "cap": new}))  # hides 20 cells of the second run
    corpus.update(dict(zip(range(1000, 1200, 10), new)))
    plan = t.search_text("red car").explain()
    assert "1 index files and 1 runs indexed now, and the fresh records of the 1 runs" in plan, plan
    for query in QUERIES:
        assert same(conch_ranking(t, query, 15), tantivy_ranking(corpus, query, 15)), query
    t.delete([1, 2, 1010])  # a delete may hide any older run's cell
    del corpus[1], corpus[2], corpus[1010]
    assert "0 index files and 0 runs indexed now, and the fresh records of the 3 runs" in t.search_text("sky").explain()
    for query in QUERIES:
        assert same(conch_ranking(t, query, 15), tantivy_ranking(corpus, query, 15)), query
    t.compact()  # one run again; with its own file: only files, same ranking
    t.build_indexes(min_rows=0)
    assert "segments of 1 index files and 0 runs indexed now, " in t.search_text("red").explain()
    for query in QUERIES:
        assert same(conch_ranking(t, query, 15), tantivy_ranking(corpus, query, 15)), query
    catalog.close()


def test_text_files_are_checked_damage_named_and_vacuumed(
    catalog: conch.Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs, "MIN_ROWS", 50)  # writes and compactions build files for runs of 50
    t = catalog.create_table("c", [("id", pa.int64())])
    t.write(pa.table({"id": np.arange(100), "cap": ["red car"] * 100}))
    t.create_index("cap", kind="text")
    t.write(pa.table({"id": np.arange(100, 200), "cap": ["blue car"] * 100}))  # built on write or compaction
    st = t.state()
    files = list(st.index_files.values())
    assert {x.key_space for x in files} == {ks.id for ks in st.key_spaces.values() if ks.kind == "data"}
    assert sum(x.rows for x in files) == 200 and t.build_indexes() is None and t.check().ok
    f = files[0]
    assert f.path.endswith(".ctx2") and f.checksum.startswith("xxh3-")
    path = tmp_path / "warehouse" / f.path
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match=f.id):
        t.search_text("car")
    assert not t.check().ok
    t.drop_index("cap_text")
    t.expire(retain_last=1)
    t.vacuum(older_than_seconds=0)
    assert not list((tmp_path / "warehouse").rglob("*.ctx*"))


def write_v1_files(t: Any, index: str) -> int:
    """Text index files of format 1 (`CONCHTX1`, `.ctx`: `row` and `run` stored, the text not),
    as an older Conch wrote them, for the runs without a current file; how many."""
    log, state = t.log, t.log.state()
    d = state.indexes[index]
    added = []
    for ks, files in runs.runs_of(state, d):
        if files:
            continue
        sb = tantivy.SchemaBuilder()
        sb.add_text_field("text", stored=False)
        sb.add_unsigned_field("row", stored=True)
        sb.add_text_field("run", stored=True, tokenizer_name="raw")
        keys, row = [], 0
        with tempfile.TemporaryDirectory() as tmp:
            w = tantivy.Index(sb.build(), path=tmp).writer(heap_size=15_000_000, num_threads=1)
            for key_table, texts in runs.run_cells(runs.LogVersion(log, state), state, d, ks.id):
                for i, value in enumerate(texts.to_pylist()):
                    w.add_document(tantivy.Document(text=value, row=row + i, run=ks.id))
                row += key_table.num_rows
                keys.append(key_table)
            w.commit()
            w.wait_merging_threads()
            archive = io.BytesIO()
            with tarfile.open(fileobj=archive, mode="w") as tar:
                for name in sorted(os.listdir(tmp)):
                    if name == "meta.json" or not name.startswith("."):
                        tar.add(os.path.join(tmp, name), arcname=name)
        if not row:
            continue
        sink = pa.BufferOutputStream()
        key_table = pa.concat_tables(keys)
        with pa.ipc.new_stream(sink, key_table.schema) as ipc:
            ipc.write_table(key_table)
        tar_bytes = archive.getvalue()
        data = b"CONCHTX1" + struct.pack("<Q", len(tar_bytes)) + tar_bytes + sink.getvalue().to_pybytes()
        fid = new_id()
        path = f"{log.files.table_id}/idx/{fid}.ctx"
        log.files.storage.write(path, data)
        frs = runs.run_fragments(state, ks.id, d.column_id)
        added.append(AddIndexFile(IndexFile(fid, d.name, ks.id, path, row, frs, len(data), digest(data))))
    build.commit_files(log, state, added, time.time())
    return len(added)


def test_format_1_files_are_rebuilt_by_the_next_build(tmp_path: Path) -> None:
    with conch.connect(tmp_path, maintenance=conch.Policy(auto=False)) as cat:
        t = cat.create_table("c", [("id", pa.int64())])
        caps = captions(np.random.default_rng(3), 300)
        t.write(pa.table({"id": np.arange(300), "cap": pa.array(caps, pa.string())}))
        t.create_index("cap", kind="text")
        assert write_v1_files(t, "cap_text") == 1
        (old,) = t.state().index_files.values()
        corpus = {i: c for i, c in enumerate(caps) if c is not None}
        assert "0 index files and 1 runs indexed now" in t.search_text("red").explain()  # not read
        for query in QUERIES:
            assert same(conch_ranking(t, query, 10), tantivy_ranking(corpus, query, 10)), query
        t.build_indexes(min_rows=0)
        (new,) = t.state().index_files.values()  # the old file left the manifest
        assert new.path.endswith(".ctx2") and t.check().ok
        assert "segments of 1 index files and 0 runs indexed now" in t.search_text("red").explain()
        for query in QUERIES:
            assert same(conch_ranking(t, query, 10), tantivy_ranking(corpus, query, 10)), query
        t.expire(retain_last=1)
        t.vacuum(older_than_seconds=0)
        names = {p.name for p in tmp_path.rglob("*.ctx*")}
        assert names == {new.path.rpartition("/")[2]} and old.path.rpartition("/")[2] not in names


def test_a_selective_where_reads_its_rows_once_per_version(tmp_path: Path) -> None:
    with conch.connect(tmp_path, maintenance=conch.Policy(auto=False)) as cat:
        t = cat.create_table("c", [("id", pa.int64())])
        n = 20_000  # 20 pass: checking hits best first would take 20 000 of them
        t.write(pa.table({"id": np.arange(n), "grp": np.arange(n) % 1000, "cap": ["red car"] * n}))
        t.create_index("cap", kind="text")
        t.build_indexes(min_rows=0)
        snap = t.snapshot()
        text_search._passing_kept.clear()  # other tests in this process kept theirs
        plan = snap.search_text("car", where=t["grp"] == 7).explain()
        assert "20 keys pass (20 of the parts' rows), filtered by tantivy" in plan, plan
        got = snap.search_text("car", k=30, where=t["grp"] == 7, columns=["cap", "grp"]).to_arrow()
        assert sorted(got["id"].to_pylist()) == list(range(7, n, 1000)) and set(got["cap"].to_pylist()) == {"red car"}
        assert len(text_search._passing_kept) == 1  # one predicate, one version: read once
        t.write(pa.table({"id": [7], "grp": [8]}))
        got = t.search_text("car", k=30, where=t["grp"] == 7).to_arrow()
        assert sorted(got["id"].to_pylist()) == list(range(1007, n, 1000))  # a new version: read again


KEYS = st.integers(0, 40)
CAPTION = st.one_of(st.none(), st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join))


WHERE_MODES = ("rows", "tantivy filter", "scans")


@contextlib.contextmanager
def where_mode(mode: str) -> Iterator[None]:
    """`search_text`'s `where` path forced: the passing rows read once and hits checked against
    them (the default at these sizes), tantivy filtering by them, or hits checked by scans (more
    keys pass than `PREFILTER_ROWS`); the kept passing rows are forgotten before and after."""
    saved = text_search.PUSHDOWN_HITS, text_search.PREFILTER_ROWS
    text_search.PUSHDOWN_HITS = 0 if mode == "tantivy filter" else saved[0]
    text_search.PREFILTER_ROWS = -1 if mode == "scans" else saved[1]
    text_search._passing_kept.clear()
    try:
        yield
    finally:
        text_search.PUSHDOWN_HITS, text_search.PREFILTER_ROWS = saved
        text_search._passing_kept.clear()


class TextSearchMachine(RuleBasedStateMachine):
    """Writes of captions over overlapping keys, partial upserts that leave the caption alone,
    deletes, compactions and index builds; after every step `search_text` (with and without a
    `where`, and at an earlier version) equals tantivy's ranking of the model's fresh corpus. The
    kept unions (one per corpus) must never answer for another version."""

    @initialize()
    def setup(self) -> None:
        self.dir = tempfile.mkdtemp()
        self.cat = conch.connect(self.dir, maintenance=conch.Policy(auto=False))
        self.t = self.cat.create_table("t", [("id", pa.int64())])
        self.model: dict[int, tuple[str | None, int]] = {}  # key → (caption, grp), fresh
        self.versions: list[tuple[int, dict[int, tuple[str | None, int]]]] = []
        self.t.write(pa.table({"id": pa.array([1000], pa.int64()), "cap": ["sky"], "grp": [0]}))
        self.model[1000] = ("sky", 0)
        self.t.create_index("cap", kind="text")

    def teardown(self) -> None:
        self.cat.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(rows=st.dictionaries(KEYS, st.tuples(CAPTION, st.integers(0, 3)), min_size=1, max_size=10))
    def write(self, rows: dict[int, tuple[str | None, int]]) -> None:
        ids = sorted(rows)
        c = self.t.write(
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "cap": pa.array([rows[i][0] for i in ids], pa.string()),
                    "grp": pa.array([rows[i][1] for i in ids], pa.int64()),
                }
            )
        )
        self.model.update(rows)
        self.versions.append((c.seq, dict(self.model)))

    @rule(rows=st.dictionaries(KEYS, st.integers(0, 3), min_size=1, max_size=6))
    def upsert_grp(self, rows: dict[int, int]) -> None:
        ids = sorted(rows)
        self.t.write(pa.table({"id": pa.array(ids, pa.int64()), "grp": pa.array([rows[i] for i in ids], pa.int64())}))
        for i in ids:
            self.model[i] = (self.model.get(i, (None, 0))[0], rows[i])

    @rule(keys=st.lists(KEYS, min_size=1, max_size=5, unique=True))
    def delete(self, keys: list[int]) -> None:
        self.t.delete(keys)
        for key in keys:
            self.model.pop(key, None)

    @rule()
    def compact(self) -> None:
        self.t.compact()

    @rule()
    def build(self) -> None:
        self.t.build_indexes(min_rows=0)
        state = self.t.state()
        built = {f.key_space for f in state.index_files.values() if f.path.endswith(".ctx2")}
        assert not [f for f in state.index_files.values() if f.key_space in built and f.path.endswith(".ctx")]

    @rule()
    def files_of_format_1(self) -> None:
        """Runs without a file get one of the older format (a table an older Conch indexed)."""
        write_v1_files(self.t, "cap_text")

    @invariant()
    def ranks_the_fresh_corpus(self) -> None:
        corpus = {key: cap for key, (cap, _) in self.model.items() if cap is not None}
        grp = {key: g for key, (_, g) in self.model.items()}
        for query in ("red car", "sky -tree", '"red car"'):
            for k in (1, 6):
                assert same(conch_ranking(self.t, query, k), tantivy_ranking(corpus, query, k)), query
                for where, passing in (
                    (self.t["grp"] == 2, lambda key: grp[key] == 2),
                    (self.t["cap"].matches("blue"), lambda key: "blue" in corpus[key].split()),
                ):
                    want = tantivy_ranking(corpus, query, k, passing)
                    for mode in WHERE_MODES:  # hits checked by rows, tantivy's filter, or scans
                        with where_mode(mode):
                            assert same(conch_ranking(self.t, query, k, where), want), (query, str(where), mode)
        got = self.t.search_text("red", k=8, columns=["cap"]).to_arrow()  # read from the index
        assert got["cap"].to_pylist() == [corpus[key] for key in got["id"].to_pylist()]
        got = self.t.search_text("red", k=8, where=self.t["grp"] < 2).to_arrow()  # read by a scan
        assert got["cap"].to_pylist() == [corpus[key] for key in got["id"].to_pylist()]
        assert got["grp"].to_pylist() == [grp[key] for key in got["id"].to_pylist()]
        if self.versions:
            seq, old = self.versions[len(self.versions) // 2]
            old_corpus = {key: cap for key, (cap, _) in old.items() if cap is not None}
            at = self.t.snapshot(version=seq)
            assert same(conch_ranking(at, "red car", 5), tantivy_ranking(old_corpus, "red car", 5))


TestTextSearchModel = TextSearchMachine.TestCase
TestTextSearchModel.settings = settings(max_examples=20, stateful_step_count=10)


@pytest.mark.parametrize("mode", WHERE_MODES)
def test_a_child_levels_where_on_its_full_key(tmp_path: Path, mode: str) -> None:
    """A child level's key has two columns (the passing rows come from a join, not a hash set)."""
    items = pa.list_(pa.struct([("$", pa.uint8()), ("note", pa.string()), ("grp", pa.int64())]))
    schema = pa.schema([("id", pa.int64()), ("items", items)])
    note = {
        (i, j): "red car" if (i + j) % 3 else "blue sky red" if j == 2 else "sky" for i in range(40) for j in range(3)
    }
    grp = {(i, j): (i * 7 + j) % 4 for i, j in note}
    rows = [{"id": i, "items": [{"$": j, "note": note[i, j], "grp": grp[i, j]} for j in range(3)]} for i in range(40)]
    with conch.connect(tmp_path, maintenance=conch.Policy(auto=False)) as cat:
        t = cat.create_table("n", [("id", pa.int64())], pa.schema([schema.field("items")]))
        t.write(pa.Table.from_pylist(rows, schema=schema))
        t.create_index("items.note", kind="text")
        t.build_indexes(min_rows=0)
        with where_mode(mode):
            got = t.search_text("red", k=200, where=t["items.grp"] == 1, columns=["note", "grp"]).to_arrow()
        keys = list(zip(got["id"].to_pylist(), got["items"].to_pylist()))
        assert sorted(keys) == sorted(kt for kt in note if grp[kt] == 1 and "red" in note[kt].split())
        assert got["note"].to_pylist() == [note[kt] for kt in keys] and set(got["grp"].to_pylist()) == {1}
        scores = got["_score"].to_pylist()
        assert scores == sorted(scores, reverse=True)
        best = t.search_text("red", k=3, where=t["items.grp"] == 1, columns=["note"]).to_arrow()
        assert best["note"].to_pylist() == [note[kt] for kt in zip(best["id"].to_pylist(), best["items"].to_pylist())]
