"""The fixed costs a take no longer pays per query (issue 30's read shapes), each checked for the
answer it must keep: integer key sets built in numpy, identical key spaces decided once per pair
(`KeyCache.same_keys`), and the direct take's layout worked out once per version and columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings

import conch
from conch.errors import InexactKeyError
from conch.model.keys import KeySet, encode_keys, key_table, to_key_predicate
from conch.scan.keyspace import decode_numeric

INT_TYPES = [pa.uint64(), pa.int64(), pa.int32(), pa.uint8(), pa.int8()]


def _generic(keys: list[int], field: pa.Field) -> list[bytes]:
    """The key set as the Arrow key-table path builds it (validated, encoded, sorted, unique)."""
    enc = encode_keys(key_table(keys, [field]).columns)
    return pc.unique(pc.take(enc, pc.sort_indices(enc))).to_pylist()


@settings(max_examples=200)
@given(st.sampled_from(INT_TYPES), st.data())
def test_integer_key_sets_match_the_arrow_path(t: pa.DataType, data: Any) -> None:
    info = np.iinfo(t.to_pandas_dtype())
    wide = st.integers(int(info.min) - 3, int(info.max) + 3)  # a few keys out of the type's range
    keys = data.draw(st.lists(st.one_of(st.integers(int(info.min), int(info.max)), wide), min_size=1, max_size=30))
    field = pa.field("id", t)
    try:
        want = _generic(keys, field)
    except InexactKeyError:
        with pytest.raises(InexactKeyError):
            to_key_predicate(keys, [field])
        return
    got = to_key_predicate(keys, [field])
    assert isinstance(got, KeySet)
    assert got.encoded.to_pylist() == want
    assert got.numeric is not None and got.numeric.tolist() == sorted(set(keys))
    assert decode_numeric(got.encoded, t).tolist() == got.numeric.tolist()
    as_numpy = to_key_predicate(np.array(keys, dtype=t.to_pandas_dtype()), [field])
    assert isinstance(as_numpy, KeySet) and as_numpy.encoded.to_pylist() == want


def test_key_values_of_another_kind_still_get_typed_errors() -> None:
    field = pa.field("id", pa.uint64())
    for bad in ([1, True], [1.5], [-1], [2**64]):
        with pytest.raises(conch.ConchError):
            to_key_predicate(bad, [field])


def _values(n: int, seed: int) -> pa.Table:
    return pa.table({"id": pa.array(np.arange(n, dtype=np.uint64)), "x": pa.array(np.arange(n) * 1.0 + seed)})


def test_same_span_and_count_but_other_keys_is_not_a_zip(catalog: conch.Catalog) -> None:
    """Two key spaces with equal spans and counts but different keys: the direct take must not
    read one's rows as the other's (the identity decision is remembered per pair, so it must be
    right the first time)."""
    t = catalog.create_table("t", [("id", pa.uint64())])
    a = [0, *range(2, 101)]  # 100 keys, 0..100 without 1
    b = [k for k in range(101) if k != 50]  # 100 keys, 0..100 without 50: same span, same count
    t.write(pa.table({"id": pa.array(a, pa.uint64()), "m": pa.StructArray.from_arrays([pa.array(a) * 2], ["v"])}))
    t.write(pa.table({"id": pa.array(b, pa.uint64()), "n": pa.StructArray.from_arrays([pa.array(b) * 3], ["w"])}))
    for _ in range(2):  # the second take uses what the first remembered
        for keys in ([1, 50, 99, 100], [0, 2, 3], [1], [50]):
            scan = t.scan("m.v", "n.w", keys=keys)
            got = scan.to_pylist()
            assert got == scan.with_options(fast_paths=False).to_pylist()
            want = [
                {"id": k, "m": {"v": 2 * k if k in a else None}, "n": {"w": 3 * k if k in b else None}}
                for k in sorted(keys)
                if k in a or k in b
            ]
            assert got == want


def test_a_remembered_layout_never_outlives_its_version(catalog: conch.Catalog) -> None:
    """Takes of the same columns before and after commits (an upsert of every key, a new column
    in the group, a delete) each see their own version, and an older snapshot still its own."""
    t = catalog.create_table("t", [("id", pa.uint64())])
    t.write(_values(1000, 0))
    keys = [3, 500, 999]
    assert t.scan("x", keys=keys).to_pylist() == [{"id": k, "x": k * 1.0} for k in keys]
    old = t.snapshot()
    t.write(_values(1000, 7))  # every key again: an identical key set, a newer run
    assert t.scan("x", keys=keys).to_pylist() == [{"id": k, "x": k + 7.0} for k in keys]
    t.write(pa.table({"id": pa.array(keys, pa.uint64()), "y": pa.array([1.0, 2.0, 3.0])}))
    assert t.scan("x", "y", keys=keys).to_pylist() == [
        {"id": k, "x": k + 7.0, "y": y} for k, y in zip(keys, [1.0, 2.0, 3.0], strict=True)
    ]
    t.delete(keys[:1])
    assert t.scan("x", keys=keys).to_pylist() == [{"id": k, "x": k + 7.0} for k in keys[1:]]
    assert old.scan("x", keys=keys).to_pylist() == [{"id": k, "x": k * 1.0} for k in keys]


def test_same_keys_is_decided_per_pair(tmp_path: Path) -> None:
    catalog = conch.connect(tmp_path / "w", maintenance=conch.Policy(auto=False))  # the runs as written
    t = catalog.create_table("t", [("id", pa.uint64())])
    t.write(_values(100, 0))
    t.write(_values(100, 1))
    t.write(pa.table({"id": pa.array([0, 5, 99], pa.uint64()), "x": pa.array([1.0, 2.0, 3.0])}))
    snap = t.snapshot()
    kss = sorted(snap._state.key_spaces.values(), key=lambda k: k.seq)
    fields = snap._state.schema.key_fields("")
    cache = snap.key_cache
    for _ in range(2):
        assert cache.same_keys(kss[0], kss[1], fields)
        assert cache.same_keys(kss[1], kss[0], fields)
        assert not cache.same_keys(kss[0], kss[2], fields)


def test_uint64_keys_above_2_63_can_be_taken(catalog: conch.Catalog) -> None:
    """A uint64 key of 2**63 or more was refused by `scan(keys=...)` as "not exactly a value of
    uint64" (its Python int has no Arrow type of its own); both key-set paths take it."""
    t = catalog.create_table("t", [("id", pa.uint64())])
    big = [5, 2**63, 2**64 - 1]
    t.write(pa.table({"id": pa.array(big, pa.uint64()), "x": pa.array([1.0, 2.0, 3.0])}))
    assert t.scan("x", keys=[2**64 - 1, 2**63]).to_pylist() == [{"id": 2**63, "x": 2.0}, {"id": 2**64 - 1, "x": 3.0}]
    assert t.scan("x", keys=[(2**63,)]).to_pylist() == [{"id": 2**63, "x": 2.0}]  # the Arrow path
    with pytest.raises(InexactKeyError):
        t.scan("x", keys=[2**64])


def test_the_numeric_view_of_a_kept_key_table_is_kept_with_it(tmp_path: Path) -> None:
    """A numeric key column's numpy view of a cached key table is made once and weighed with
    the table (not again: it holds no bytes of its own). Made again on every call, it cost ~5 µs
    for each of the ~30 calls of a take over small runs."""
    catalog = conch.connect(tmp_path / "w", maintenance=conch.Policy(auto=False))
    t = catalog.create_table("t", [("id", pa.uint64())])
    t.write(_values(1000, 0))
    snap = t.snapshot()
    (ks,) = snap._state.key_spaces.values()
    fields = snap._state.schema.key_fields("")
    cache = snap.key_cache
    keys = cache.keys(ks, fields)
    first = cache.numeric(ks, fields)
    assert cache.numeric(ks, fields) is first  # kept: the same array again
    assert first.tolist() == keys.column(0).to_pylist()
    assert cache._lru.weight == keys.nbytes  # the view weighs nothing more


def test_a_take_considers_only_the_runs_holding_one_of_its_keys(tmp_path: Path) -> None:
    """A table being written: a base and small runs of upserts and deletes spread over every key
    (so no run's span rules it out). A take considers only the key spaces, and the tombstone
    sets of its level, holding one of its keys (found in their cached keys), and answers as the
    general path does, deleted keys and the newest cells included."""
    catalog = conch.connect(tmp_path / "w", maintenance=conch.Policy(auto=False))
    t = catalog.create_table("t", [("id", pa.uint64())])
    t.write(_values(1000, 0))
    for k in range(10):  # run k upserts the keys k mod 50; an odd run is followed by a delete of two
        ids = np.arange(k, 1000, 50, dtype=np.uint64)
        t.write(pa.table({"id": pa.array(ids), "x": pa.array(ids * 1.0 + 1000 * (k + 1))}))
        if k % 2:
            t.delete(pa.table({"id": pa.array(ids[:2])}))
    cases = {  # keys: (data key spaces, tombstone sets, the answer)
        (5, 305, 999): (2, 1, {305: 6305.0, 999: 999.0}),
        (500, 501, 502): (4, 0, {500: 1500.0, 501: 2501.0, 502: 3502.0}),
        (50, 950): (2, 0, {50: 1050.0, 950: 1950.0}),
        (51, 52): (3, 1, {52: 3052.0}),
        (998,): (1, 0, {998: 998.0}),
    }
    for keys, (runs, tombstones, want) in cases.items():
        scan = t.scan("x", keys=list(keys))
        got = scan.to_pylist()
        assert got == [{"id": k, "x": x} for k, x in want.items()]
        assert got == scan.with_options(fast_paths=False).to_pylist()
        m = scan.metrics()
        assert (m.key_spaces, m.tombstones) == (runs, tombstones), keys
        # by span at planning (998 is past every run's last key), else by the runs' keys
        assert m.pruned.get("key_spaces_keys", 0) + m.pruned["key_spaces_span"] == 11 - runs
        assert m.pruned.get("key_spaces_keys", 0) == (0 if keys == (998,) else 11 - runs)


def test_a_take_searches_each_key_space_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding which key spaces hold a take's keys, then the rows of those keys, is one binary
    search per key space (`CountedKeys.rows`): a take of 50,000 keys over a 1M-key run spent
    ~4 ms on each search, and the exact pruning would have searched every kept run twice."""
    import conch.scan.context as context

    searched: list[str] = []
    real = context.predicate_rows

    def counted(cache: Any, ks: Any, fields: Any, pred: Any) -> np.ndarray:
        searched.append(ks.path)
        return real(cache, ks, fields, pred)

    monkeypatch.setattr(context, "predicate_rows", counted)
    catalog = conch.connect(tmp_path / "w", maintenance=conch.Policy(auto=False))
    t = catalog.create_table("t", [("id", pa.uint64())])
    t.write(_values(1000, 0))
    for k in range(4):
        ids = np.arange(k, 1000, 7, dtype=np.uint64)
        t.write(pa.table({"id": pa.array(ids), "x": pa.array(ids * 2.0 + k)}))
    keys = list(range(0, 1000, 3))
    for fast in (True, False):
        searched.clear()
        scan = t.scan("x", keys=keys).with_options(fast_paths=fast)
        got = scan.to_pylist()
        assert len(searched) == len(set(searched)) == 5, searched
    newest = {k: k * 1.0 for k in range(1000)}
    for k in range(4):
        newest.update({i: i * 2.0 + k for i in range(k, 1000, 7)})
    assert got == [{"id": k, "x": newest[k]} for k in keys]
