"""Search over fresh records against a naive model (issue 31, DESIGN §6a).

A hypothesis state machine writes vectors (some null), partial upserts that leave the vector
alone, deletes, compactions and index builds (so index files cover some runs and not others,
and go stale when their run is compacted away), and checks after every step:

- with the exact (flat) index, `search` equals the brute-force top-k over the model's fresh
  vectors, with the `where` filter too, and at an earlier version (time travel);
- with an approximate (HNSW) index, every result is a live key with its fresh vector's distance
  (never a stale or deleted vector), each key once.

Both run again with index parts of a few rows (`PartedSearchMachine`): a run's index in several
files, searched as one.

Vectors hold small integers and the metric is l2, so every distance is exact in float32 and ties
are broken by key on both sides.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pyarrow as pa
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import conch
from conch.search import build

DIM = 3
KEYS = st.integers(min_value=0, max_value=30)
VEC = st.one_of(st.none(), st.lists(st.integers(-3, 3), min_size=DIM, max_size=DIM))
VTYPE = pa.list_(pa.float32(), DIM)


def brute(
    model: dict[int, tuple[Any, Any]], q: np.ndarray, k: int, tag_above: int | None = None
) -> list[tuple[int, float]]:
    rows = [
        (float(((np.asarray(v, np.float32) - q) ** 2).sum()), key)
        for key, (v, tag) in model.items()
        if v is not None and (tag_above is None or (tag is not None and tag > tag_above))
    ]
    return [(key, d) for d, key in sorted(rows)[:k]]


class SearchMachine(RuleBasedStateMachine):
    structure = "flat"
    part_bytes: int | None = None  # set: index parts this small (a few rows), several per run

    @initialize()
    def setup(self) -> None:
        if self.part_bytes is not None:
            self.patched = build.part_budget
            build.part_budget = lambda log: self.part_bytes
        self.dir = tempfile.mkdtemp()
        self.cat = conch.connect(self.dir)
        self.t = self.cat.create_table("t", [("id", pa.int64())])
        self.model: dict[int, tuple[Any, Any]] = {}  # key → (vector, tag) fresh
        self.versions: list[tuple[int, dict[int, tuple[Any, Any]]]] = []
        self.indexed = False

    def teardown(self) -> None:
        if self.part_bytes is not None:
            build.part_budget = self.patched
        self.cat.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _commit(self, c: Any) -> None:
        if self.indexed:
            self.versions.append((c.seq, dict(self.model)))

    @rule(rows=st.dictionaries(KEYS, st.tuples(VEC, st.integers(0, 3)), min_size=1, max_size=8))
    def write(self, rows: dict[int, tuple[Any, int]]) -> None:
        ids = sorted(rows)
        c = self.t.write(
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "emb": pa.array([rows[i][0] for i in ids], VTYPE),
                    "tag": pa.array([rows[i][1] for i in ids], pa.int64()),
                }
            )
        )
        for i in ids:
            self.model[i] = rows[i]
        self._commit(c)
        if not self.indexed:
            self.t.create_index(
                "emb", metric="l2", index=self.structure, **({"m": 4} if self.structure == "hnsw" else {})
            )
            self.indexed = True

    @rule(rows=st.dictionaries(KEYS, st.integers(0, 3), min_size=1, max_size=6))
    def upsert_tag(self, rows: dict[int, int]) -> None:
        ids = sorted(rows)
        c = self.t.write(
            pa.table({"id": pa.array(ids, pa.int64()), "tag": pa.array([rows[i] for i in ids], pa.int64())})
        )
        for i in ids:
            v = self.model.get(i, (None, None))[0]
            self.model[i] = (v, rows[i])
        self._commit(c)

    @rule(keys=st.lists(KEYS, min_size=1, max_size=5, unique=True))
    def delete(self, keys: list[int]) -> None:
        c = self.t.delete(keys)
        for k in keys:
            self.model.pop(k, None)
        self._commit(c)

    @rule()
    def compact(self) -> None:
        self.t.compact()

    @rule()
    def build(self) -> None:
        if self.indexed:
            self.t.build_indexes(min_rows=0)
            if self.part_bytes is not None:  # every part within its budget: three rows of ~36 bytes
                assert all(f.rows <= 3 for f in self.t.state().index_files.values())

    @invariant()
    def search_is_fresh(self) -> None:
        if not self.indexed:
            return
        rng = np.random.default_rng(len(self.versions))
        q = rng.integers(-3, 4, DIM).astype(np.float32)
        for k in (1, 4):
            self.check(self.t.search(q, k=k, columns=["tag"]).to_pylist(), brute(self.model, q, k), k, self.model)
            got = self.t.search(q, k=k, where=self.t["tag"] > 1, columns=["tag"]).to_pylist()
            self.check(got, brute(self.model, q, k, tag_above=1), k, self.model)
        if self.versions:
            seq, old = self.versions[len(self.versions) // 2]
            self.check(self.t.search(q, k=3, version=seq).to_pylist(), brute(old, q, 3), 3, old)
        many = self.t.search(np.stack([q, -q]), k=2).to_pylist()
        assert [r["_query"] for r in many] == sorted(r["_query"] for r in many)

    def check(
        self, got: list[dict[str, Any]], want: list[tuple[int, float]], k: int, model: dict[int, tuple[Any, Any]]
    ) -> None:
        keys = [r["id"] for r in got]
        assert len(keys) == len(set(keys)), got
        if self.structure == "flat":
            assert [(r["id"], r["_distance"]) for r in got] == want
            return
        q = np.zeros(DIM, np.float32)  # the live keys with vectors, and their fresh vectors' distances
        fresh = {key: (d, model[key][0]) for key, d in brute(model, q, len(model))}
        assert set(keys) <= set(fresh), (keys, fresh)
        assert len(got) <= k


class HnswSearchMachine(SearchMachine):
    structure = "hnsw"


class PartedSearchMachine(SearchMachine):
    """The flat model with a part budget of about three rows (3 dims + a key: ~36 bytes a row):
    every run's index is cut into parts, and the answers stay exact."""

    part_bytes = 110


class PartedHnswSearchMachine(HnswSearchMachine):
    part_bytes = 110


TestSearchModel = SearchMachine.TestCase
TestSearchModel.settings = settings(max_examples=25, stateful_step_count=12)
TestHnswSearchModel = HnswSearchMachine.TestCase
TestHnswSearchModel.settings = settings(max_examples=10, stateful_step_count=10)
TestPartedSearchModel = PartedSearchMachine.TestCase
TestPartedSearchModel.settings = settings(max_examples=25, stateful_step_count=12)
TestPartedHnswSearchModel = PartedHnswSearchMachine.TestCase
TestPartedHnswSearchModel.settings = settings(max_examples=10, stateful_step_count=10)


def test_hnsw_distance_is_the_fresh_vectors(catalog: conch.Catalog) -> None:
    t = catalog.create_table("h", [("id", pa.int64())])
    rng = np.random.default_rng(1)
    vecs = rng.random((300, 8), dtype=np.float32)
    t.write(pa.table({"id": np.arange(300), "emb": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), 8)}))
    t.create_index("emb", metric="cosine", index="hnsw")
    t.build_indexes(min_rows=0)
    t.write(pa.table({"id": [5], "emb": pa.FixedSizeListArray.from_arrays(pa.array(-vecs[5]), 8)}))  # overwritten
    got = t.search(vecs[5], k=10).to_pylist()
    assert 5 not in [r["id"] for r in got]  # its fresh vector points the other way
    dist = [r["_distance"] for r in got]
    assert dist == sorted(dist) and dist[0] > 1e-4  # nothing holds row 5's old vector any more
    assert t.search(-vecs[5], k=1).to_pylist()[0]["id"] == 5
