"""Persisted text index files (issue 31): a tantivy index per run, searched as one index over the
segments of every run's file so BM25 statistics are global. Over runs no other run hides, BM25
from the files equals tantivy's own ranking of the same corpus indexed at once (with a run that
has no file yet, indexed at query time); once runs overlap, the exact path answers and still
equals it on the fresh corpus. The files are checksummed, verified, rebuilt by compaction and
removed by vacuum."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import tantivy
from hypothesis import given, settings
from hypothesis import strategies as st

import conch
from conch.errors import CorruptFileError
from conch.search import runs

WORDS = ["red", "car", "blue", "tree", "bike", "road", "sky", "green", "fast", "slow"]
QUERIES = ["red car", "sky", "+red +car", "tree -blue", '"red car"', "green OR bike"]


def tantivy_ranking(corpus: dict[int, str], query: str, k: int) -> list[tuple[float, set[int]]]:
    """tantivy's own BM25 top-k over `corpus` indexed at once: (score, keys at that score)."""
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
    hits = s.search(index.parse_query(query, ["text"]), k).hits
    return _grouped([(score, s.doc(addr)["id"][0]) for score, addr in hits])


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


def conch_ranking(t: conch.Table, query: str, k: int) -> list[tuple[float, set[int]]]:
    got = t.search_text(query, k=k).to_arrow()
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


def test_overlapping_runs_take_the_exact_path(catalog: conch.Catalog) -> None:
    t = catalog.create_table("c", [("id", pa.int64())])
    rng = np.random.default_rng(1)
    caps = captions(rng, 200)
    t.write(pa.table({"id": np.arange(200), "cap": pa.array(caps, pa.string())}))
    t.create_index("cap", kind="text")
    t.build_indexes(min_rows=0)
    new = ["red car red car"] * 20
    t.write(pa.table({"id": np.arange(0, 200, 10), "cap": new}))  # hides 20 cells of the indexed run
    t.delete([1, 2])
    corpus = {i: c for i, c in enumerate(caps) if c is not None}
    corpus.update(dict(zip(range(0, 200, 10), new)))
    del corpus[1], corpus[2]
    assert "fresh records" in t.search_text("red car").explain()
    for query in QUERIES:
        assert same(conch_ranking(t, query, 15), tantivy_ranking(corpus, query, 15)), query
    t.compact()  # one run again; with its own file: back to the files, same ranking
    t.build_indexes(min_rows=0)
    assert t.state().index_files and "index files" in t.search_text("red").explain()
    for query in QUERIES:
        assert same(conch_ranking(t, query, 15), tantivy_ranking(corpus, query, 15)), query


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
    assert f.path.endswith(".ctx") and f.checksum.startswith("xxh3-")
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
    assert not list((tmp_path / "warehouse").rglob("*.ctx"))
