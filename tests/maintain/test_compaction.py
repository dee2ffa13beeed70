"""Compaction: key ranges and cuts (pure), the policy's plans, major and merge compaction against
the table's own reads before it (time travel across it included), displacement maps, tombstones,
the automatic policy, partitioning, and the CLI."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conch
from conch.files.integrity import digest
from conch.files.ipc import table_bytes
from conch.files.manifest import KeySpace, TableState
from conch.log.sinceview import since_view
from conch.log.wal import AddDisplacementMap, RemoveFragment, RemoveKeySpace
from conch.maintain.compaction.displacement import MAP_SCHEMA, STORED_MAP_SCHEMA, dest_ids, displace, map_runs, read_map
from conch.maintain.compaction.plan import plan, read_trigger
from conch.maintain.compaction.ranges import Ranges, cut_rows, partition_boundaries, split_boundaries
from conch.model.keys import decode_key, encode_keys

OFF = conch.Policy(auto=False)


def enc(values: list[int]) -> pa.BinaryArray:
    return encode_keys([pa.array(values, pa.uint64())])


def test_ranges_place_keys_and_subtrees_in_one_range() -> None:
    r = Ranges((enc([10])[0].as_py(), enc([20])[0].as_py()))
    assert len(r) == 3
    assert [r.index(enc([k])[0].as_py()) for k in (0, 9, 10, 19, 20, 99)] == [0, 0, 1, 1, 2, 2]
    child = encode_keys([pa.array([19], pa.uint64()), pa.array([255], pa.uint8())])[0].as_py()
    assert r.index(child) == 1  # a child key sorts with its root key
    assert r.bounds(1) == (enc([10])[0].as_py(), enc([20])[0].as_py())
    assert r.bounds(0, 2) == (b"", None)
    with pytest.raises(ValueError):
        Ranges((b"b", b"a"))


@settings(deadline=None, max_examples=60)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=200), st.integers(1, 40))
def test_split_boundaries_cut_only_at_prefix_changes_and_bound_pieces(values: list[int], max_rows: int) -> None:
    prefixes = enc(sorted(values))  # duplicates: child rows sharing a root key
    cuts = split_boundaries(prefixes, max_rows)
    assert cuts == sorted(set(cuts))
    pieces = cut_rows(prefixes, cuts)
    assert sum(b - a for a, b in pieces) == len(values)
    for (_, stop), (start, _) in itertools.pairwise(pieces):
        assert stop == start and prefixes[start - 1] != prefixes[start]  # never inside one prefix
    if len(set(values)) == len(values):  # distinct prefixes: balanced pieces within the bound x 2
        assert all(b - a <= 2 * max_rows for a, b in pieces)


def test_partition_boundaries_at_every_partition_change() -> None:
    p = encode_keys([pa.array([1, 1, 2, 5, 5], pa.uint64())])
    assert partition_boundaries(p) == [p[2].as_py(), p[3].as_py()]


def ks(i: int, lo: int, hi: int, time: int, lsm: int = 0, kind: str = "data", b: int = 100) -> KeySpace:
    return KeySpace(
        f"k{i}", "", f"p{i}", 10, enc([lo])[0].as_py().hex(), enc([hi])[0].as_py().hex(), kind, time, i, lsm, bytes=b
    )


def test_policy_waits_for_the_trigger_then_majors_without_l1() -> None:
    large = conch.Policy(l0_trigger=4, small_bytes=0)  # components above small_bytes wait for l0_trigger runs
    runs = {k.id: k for k in [ks(i, 0, 100, 10 + i) for i in range(3)]}
    assert plan(runs, {}, large).tasks == ()
    runs["k3"] = ks(3, 0, 100, 20)
    (task,) = plan(runs, {}, large).tasks
    assert task.kind == "major" and set(task.inputs) == set(runs) and (task.min_time, task.max_time) == (10, 20)


def test_small_components_compact_after_every_run() -> None:
    eager = conch.Policy(read_overhead=0.2)  # reads of a small component stay one run (docs/compaction.md)
    one = {"k0": ks(0, 0, 100, 10)}
    assert plan(one, {}, eager).tasks == ()  # a lone run: nothing to merge it with
    (task,) = plan({**one, "k1": ks(1, 0, 100, 11)}, {}, eager).tasks
    assert task.kind == "major" and "small component" in task.reason
    (again,) = plan({"k0": ks(0, 0, 100, 10, lsm=1), "k1": ks(1, 5, 6, 11)}, {}, eager).tasks
    assert set(again.inputs) == {"k0", "k1"}  # one L0 run over an L1 run: folded right away


def test_read_trigger_waits_longer_as_the_component_grows() -> None:
    policy = conch.Policy(read_overhead=0.2)  # l0_read_bytes 512 KB, small_bytes 4 MB, l0_trigger 4
    mb = 1 << 20
    assert [read_trigger(b, policy) for b in (0, 100_000, mb, 3 * mb, 4 * mb)] == [1, 1, 1, 2, 2]
    # the default (read_overhead 1: the settle folds what is left): every 2nd run below 0.5 MB, 3rd below 1 MB
    sizes = (0, 100_000, mb // 2, mb, 4 * mb)
    assert [read_trigger(b, conch.Policy()) for b in sizes] == [2, 2, 3, 4, 4]
    assert read_trigger(1 << 40, policy) == policy.l0_trigger  # never later than l0_trigger
    assert read_trigger(0, conch.Policy(l0_read_bytes=0)) == policy.l0_trigger  # runs free to read: count only
    # planned: an L1 run of 3 MB waits for a second L0 run; one of 1 MB folds the first in
    # (8 MB: not small, so its L0 runs wait for l0_stop, here 4; `test_sorted_runs.py`)
    for l1_bytes, runs_needed in ((mb, 1), (3 * mb, 2), (8 * mb, 4)):
        runs = [ks(0, 0, 1000, 1, lsm=1, b=l1_bytes)]
        for i in range(1, 5):
            runs.append(ks(i, 5, 6, 1 + i))
            tasks = plan({k.id: k for k in runs}, {}, dataclasses.replace(policy, l0_stop=4)).tasks
            assert len(tasks) == (i >= runs_needed), (l1_bytes, i)


def test_default_policy_keeps_a_table_of_one_row_commits_at_one_run(tmp_path: Path) -> None:
    t = _table(tmp_path, conch.Policy())  # automatic compaction, default policy: nobody runs a command
    for i in range(12):
        t.write(pa.table({"id": pa.array([(i * 7) % 10], pa.uint64()), "a": [float(i)]}))
        p = t.maintenance_plan()
        assert p.l0_runs <= 1 and p.l1_runs == (i > 0), i  # a tiny table: folded at every second run
        assert p.tasks == ()
    assert t.wait_for_maintenance(timeout=60)  # and the settle folds the last one
    p = t.maintenance_plan()
    assert (p.l0_runs, p.l1_runs) == (0, 1)
    assert t.scan().to_arrow().column("a").to_pylist() == [10.0, 3.0, 6.0, 9.0, 2.0, 5.0, 8.0, 11.0, 4.0, 7.0]


def test_maintenance_plan_of_a_real_table_follows_its_read_cost(tmp_path: Path) -> None:
    t = _table(tmp_path)  # automatic compaction off: the plans below are only looked at
    t.write(pa.table({"id": np.arange(0, 2000, 2, dtype=np.uint64), "a": np.arange(1000.0)}))
    t.compact()
    t.write(pa.table({"id": pa.array([1], pa.uint64()), "a": [0.5]}))
    eager = conch.Policy(read_overhead=0.2)
    (task,) = t.maintenance_plan(eager).tasks  # small: one L0 run is folded in right away
    assert task.kind == "major" and task.l0_runs == 1 and "small component" in task.reason
    assert t.maintenance_plan(conch.Policy()).tasks == ()  # the default waits for a second run
    b = task.input_bytes
    assert t.maintenance_plan(conch.Policy(read_overhead=0.2, small_bytes=b - 1)).tasks == ()  # large: l0_trigger
    cheap_runs = conch.Policy(read_overhead=0.2, l0_read_bytes=b // 10)  # runs cheap beside it: wait for 3
    assert t.maintenance_plan(cheap_runs).tasks == ()
    t.write(pa.table({"id": pa.array([3], pa.uint64()), "a": [1.5]}))
    assert t.maintenance_plan(cheap_runs).tasks == ()
    t.write(pa.table({"id": pa.array([5], pa.uint64()), "a": [2.5]}))
    (task,) = t.maintenance_plan(cheap_runs).tasks
    assert task.kind == "major" and task.l0_runs == 3 and "3 L0 run(s) >= 3" in task.reason


def test_policy_merges_newest_similar_runs_and_leaves_big_old_ones() -> None:
    # L1, an older large L0 run, six small runs and a tombstone run: at the stop trigger (8 sorted
    # runs) the newest of similar sizes merge, tombstones tiered like data
    runs = [ks(0, 0, 1000, 1, lsm=1, b=100_000), dataclasses.replace(ks(1, 0, 100, 2, b=5000), rows=5000)]
    runs += [ks(i, 0, 100, 10 + i, b=100) for i in range(2, 8)]
    runs.append(ks(8, 5, 6, 30, kind="tombstone", b=100))
    policy = conch.Policy(l0_trigger=4, l0_stop=8, l1_ratio=0.5, small_bytes=0)
    assert plan({k.id: k for k in runs[:-1]}, {}, policy).tasks == ()  # 7 sorted runs: below the stop trigger
    (task,) = plan({k.id: k for k in runs}, {}, policy).tasks
    assert task.kind == "merge"
    assert set(task.inputs) == {f"k{i}" for i in range(2, 9)}  # not the 5,000-row run, not L1; the tombstone too
    assert task.min_time == 12 and task.max_time == 30
    # a small component is rewritten whole instead (cheaper than reading extra runs)
    (small,) = plan({k.id: k for k in runs}, {}, conch.Policy(l0_trigger=4)).tasks
    assert small.kind == "major" and len(small.inputs) == len(runs)


def test_disjoint_l1_ranges_are_separate_components() -> None:
    runs = [ks(0, 0, 9, 1, lsm=1), ks(1, 10, 19, 1, lsm=1)] + [ks(i, 12, 15, 10 + i) for i in range(2, 5)]
    (task,) = plan({k.id: k for k in runs}, {}, conch.Policy(l0_trigger=3, small_bytes=0)).tasks
    assert set(task.inputs) == {"k1", "k2", "k3", "k4"}  # range [10, ..) only
    assert task.lo == enc([10])[0].as_py() and task.hi is None


def _table(path: Path, policy: conch.Policy = OFF, name: str = "t") -> conch.Table:
    cat = conch.connect(str(path), write_options=conch.WriteOptions(fragment_bytes=256), maintenance=policy)
    return cat.create_table(name, [("id", pa.uint64())])


def test_major_compaction_keeps_every_read_and_time_travel(tmp_path: Path) -> None:
    t = _table(tmp_path)  # explicit compaction only: this test controls when it happens
    rng = np.random.default_rng(1)
    for i in range(12):
        keys = np.sort(rng.choice(80, 20, replace=False)).astype(np.uint64)
        t.write(pa.table({"id": keys, "a": rng.random(20)}))
        if i % 3 == 0:
            t.write(pa.table({"id": keys[:6], "g": pa.array([{"s": str(x)} for x in range(6)])}))
        if i % 4 == 1:
            t.delete([int(x) for x in keys[6:9]])
    times = [c.time for c in t.history()]
    before = {(a, s): t.scan(asof=a, since=s).to_arrow() for a in times[::3] for s in times[::4] if s <= a}
    latest = {s: t.scan(since=s).to_arrow() for s in times[::2]}
    res = t.compact(policy=conch.Policy(max_l1_rows=16))
    assert res.tasks == 1 and res.runs_out >= 3  # cut into ranges of <= ~16 root keys
    state = t.state()
    assert all(k.lsm == 1 and k.kind == "data" and k.compacted_at for k in state.key_spaces.values())
    assert {k.time for k in state.key_spaces.values()} == {max(c.time for c in t.history() if c.kind != "compact")}
    assert t.maintenance_plan().l0_runs == 0
    t2 = conch.connect(str(tmp_path)).table("t")
    for (a, s), want in before.items():
        assert t2.scan(asof=a, since=s).to_arrow().equals(want), (a, s)
    for s, want in latest.items():
        assert t2.scan(since=s).to_arrow().equals(want), s
    # later writes respect the new boundaries: a second compaction keeps the ranges
    t2.write(pa.table({"id": pa.array([3, 70], pa.uint64()), "a": [0.5, 0.25]}))
    n_ranges = t2.maintenance_plan().ranges
    t2.compact(policy=conch.Policy(max_l1_rows=16))
    assert t2.maintenance_plan().ranges == n_ranges and t2.maintenance_plan().l0_runs == 0


def test_merge_keeps_missing_columns_as_no_cell(tmp_path: Path) -> None:
    """An L0 merge must not turn "column not written" into a null that hides an older value."""
    t = _table(tmp_path)
    t.write(pa.table({"id": pa.array([1, 2, 3], pa.uint64()), "a": [1.0, 2.0, 3.0], "b": [1, 2, 3]}))
    t.compact()  # L1 holds a and b
    t.write(pa.table({"id": pa.array([1, 2], pa.uint64()), "a": [10.0, 20.0]}))
    t.write(pa.table({"id": pa.array([2, 3], pa.uint64()), "b": [200, None]}))
    t.delete([1])
    t.write(pa.table({"id": pa.array([1], pa.uint64()), "b": [100]}))
    want = t.scan().to_pylist()
    res = t.compact(force=False, policy=conch.Policy(l0_trigger=2, l0_stop=2, l1_ratio=1e9, small_bytes=0))
    assert res.tasks == 1 and t.maintenance_plan().l1_runs == 1  # merged within L0
    assert t.scan().to_pylist() == want
    assert want == [{"id": 1, "a": None, "b": 100}, {"id": 2, "a": 20.0, "b": 200}, {"id": 3, "a": 3.0, "b": None}]


def test_merge_folds_tombstone_runs_and_they_still_hide_older_rows(tmp_path: Path) -> None:
    """Delete-heavy histories: the window's tombstones become one run (at the window's oldest
    time), which still hides the L1 rows they deleted and never the window's own rewrites."""
    t = _table(tmp_path)
    t.write(pa.table({"id": pa.array(range(20), pa.uint64()), "a": [float(i) for i in range(20)]}))
    t.compact()
    for i in range(8):
        t.delete([i])
        t.write(pa.table({"id": pa.array([i + 100], pa.uint64()), "a": [1.0]}))
    t.write(pa.table({"id": pa.array([3], pa.uint64()), "a": [33.0]}))  # rewritten after its delete
    want = t.scan().to_pylist()
    times = [c.time for c in t.history()]
    before = {s: t.scan(since=s).to_pylist() for s in times}
    policy = conch.Policy(l0_trigger=2, l0_stop=2, l1_ratio=1e9, small_bytes=0, size_ratio=100)
    assert t.compact(force=False, policy=policy).tasks == 1
    kinds = [k.kind for k in t.state().key_spaces.values() if k.lsm == 0]
    assert kinds.count("tombstone") == 1 and t.scan().to_pylist() == want
    assert {s: t.scan(since=s).to_pylist() for s in times} == before
    # a major drops it: nothing older is left below it (keys 100-107 moved: a run of their own,
    # which the next round folds in: one run, as one write of these rows)
    t.compact()
    assert [k.kind for k in t.state().key_spaces.values()] == ["data"] and t.scan().to_pylist() == want


def test_root_tombstone_hides_child_rows_through_compaction(tmp_path: Path) -> None:
    cat = conch.connect(str(tmp_path), maintenance=OFF)
    schema = pa.schema([("a", pa.int64()), ("items", pa.list_(pa.struct([("$", pa.uint8()), ("v", pa.float64())])))])
    t = cat.create_table("n", [("k", pa.int64())], schema)
    t.write(pa.table({"k": [1, 2], "a": [1, 2]}))
    t.write(pa.table({"k": [1, 1, 2], "items": pa.array([0, 1, 0], pa.uint8()), "v": [0.5, 1.5, 2.5]}), level="items")
    t.compact()
    t.delete([1])  # the root tombstone hides 1's children in L1
    t.write(pa.table({"k": [2], "a": [3]}))  # over the L1 run (a disjoint key would wait to move)
    want = t.scan(level="items").to_pylist()
    assert t.compact(force=False, policy=conch.Policy(l0_trigger=2, l0_stop=2, l1_ratio=1e9, small_bytes=0)).tasks == 1
    assert t.scan(level="items").to_pylist() == want == [{"k": 2, "items": 0, "v": 2.5}]
    t.compact()
    assert t.scan(level="items").to_pylist() == want and t.scan().to_pylist() == [
        {"k": 2, "a": 3},
    ]


def test_a_second_forced_compaction_of_a_table_with_child_levels_rewrites_nothing(tmp_path: Path) -> None:
    """A settled range holds one L1 run per level: `compact()` must leave it, not rewrite every
    range with a child level on every call."""
    cat = conch.connect(str(tmp_path), maintenance=conch.Policy(auto=False, settle_after=None, max_l1_rows=100))
    schema = pa.schema([("a", pa.int64()), ("items", pa.list_(pa.struct([("$", pa.uint8()), ("v", pa.float64())])))])
    t = cat.create_table("n", [("k", pa.int64())], schema)
    for i in range(4):
        ks = list(range(i, 1200, 4))
        t.write(pa.table({"k": ks, "a": ks}))
        kk = [k for k in ks for _ in range(2)]
        t.write(
            pa.table({"k": kk, "items": pa.array([j % 2 for j in range(len(kk))], pa.uint8()), "v": [0.5] * len(kk)}),
            level="items",
        )
    want = t.scan(level="items").to_pylist()
    first = t.compact()
    l1 = {k.id for k in t.state().key_spaces.values()}
    assert first.tasks >= 1 and first.runs_out > 2  # split into several ranges, each with both levels
    assert t.compact().tasks == 0 and {k.id for k in t.state().key_spaces.values()} == l1
    assert t.scan(level="items").to_pylist() == want


@pytest.mark.parametrize("key_type", [pa.uint64(), pa.string()])
def test_an_upsert_of_existing_keys_compacts_into_as_few_runs_as_the_rows_need(
    tmp_path: Path, key_type: pa.DataType
) -> None:
    """Cuts follow the output's keys, not the inputs' rows: 100 keys and an upsert of 30 of
    them are 100 rows, one run at `max_l1_rows=100` (as the rows written once), not two of 65."""
    cat = conch.connect(str(tmp_path), maintenance=conch.Policy(auto=False, settle_after=None, max_l1_rows=100))
    t = cat.create_table("t", [("id", key_type)])
    ids = pa.array([f"{i:03}" if key_type == pa.string() else i for i in range(100)], key_type)
    t.write(pa.table({"id": ids, "a": [1.0] * 100}))
    t.write(pa.table({"id": ids.take(pa.array(range(0, 90, 3))), "a": [2.0] * 30}))
    t.write(pa.table({"id": ids.take(pa.array(range(1, 90, 3))), "b": [3.0] * 30}))
    want = t.scan().to_pylist()
    t.compact()
    assert [k.rows for k in t.state().key_spaces.values()] == [100]
    assert t.scan().to_pylist() == want
    t.write(pa.table({"id": pa.array(["x"] if key_type == pa.string() else [1000], key_type), "a": [4.0]}))
    t.compact()  # 101 keys: now two runs
    assert sorted(k.rows for k in t.state().key_spaces.values()) == [50, 51]


def test_displacement_map_records_where_rows_went_as_runs(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.write(pa.table({"id": pa.array(range(0, 1000, 2), pa.uint64()), "a": [1.0] * 500}))  # even keys
    t.write(pa.table({"id": pa.array([1, 501], pa.uint64()), "a": [2.0, 2.0]}))  # two odd keys
    t.delete([10])
    before = {k.id: k for k in t.state().key_spaces.values() if k.kind == "data"}
    t.compact()
    (entry,) = [e for _, _, e in t.log.entries() if e.kind == "compact"]
    (op,) = [o for o in entry.ops if isinstance(o, AddDisplacementMap)]
    runs = read_map(t.log.storage, op.path, op.checksum)
    assert op.runs == runs.num_rows <= 6  # runs, not one entry per key: 500 rows → a few runs
    (out,) = t.state().key_spaces.values()
    out_keys = t.log.key_cache.keys(out, t.state().schema.key_fields("")).column(0).to_pylist()
    for k in before.values():
        keys = t.log.key_cache.keys(k, t.state().schema.key_fields("")).column(0).to_pylist()
        _, rows = displace(runs, k.id, np.arange(len(keys)))
        for key, row in zip(keys, rows, strict=True):
            assert (row == -1) if key == 10 else (out_keys[row] == key)  # the deleted key was dropped


def test_displacement_maps_store_their_ids_dictionary_encoded_and_read_either_form(tmp_path: Path) -> None:
    """A merge of runs of random keys maps a run per key: the ids are stored dictionary-encoded
    (`STORED_MAP_SCHEMA`) and read back as strings; a map stored with plain strings (before)
    reads the same; any other columns are a `CorruptFileError` naming the map."""
    t = _table(tmp_path)
    rng = np.random.default_rng(4)
    t.write(pa.table({"id": pa.array(np.arange(0, 4000, 2), pa.uint64()), "a": np.zeros(2000)}))
    for c in range(3):
        keys = np.sort(rng.choice(4000, 300, replace=False))
        t.write(pa.table({"id": pa.array(keys, pa.uint64()), "a": np.full(300, float(c))}))
    want = t.scan().to_pylist()
    t.compact()
    assert t.scan().to_pylist() == want
    (entry,) = [e for _, _, e in t.log.entries() if e.kind == "compact"]
    (op,) = [o for o in entry.ops if isinstance(o, AddDisplacementMap)]
    storage = t.log.storage
    stored = pa.ipc.open_stream(pa.py_buffer(storage.read(op.path))).read_all()
    assert stored.schema == STORED_MAP_SCHEMA
    runs = read_map(storage, op.path, op.checksum)
    assert runs.schema == MAP_SCHEMA and runs.num_rows == op.runs > 300  # a run per random key, about
    assert set(runs.column("dest").to_pylist()) <= set(t.state().key_spaces)
    plain = table_bytes(runs)  # the form maps had before
    storage.write(op.path, plain)
    assert read_map(storage, op.path, digest(plain)).equals(runs)
    other = table_bytes(runs.drop_columns(["length"]))
    storage.write(op.path, other)
    with pytest.raises(conch.CorruptFileError, match=op.path):
        read_map(storage, op.path, digest(other))


def test_a_merge_split_by_column_presence_maps_every_row(tmp_path: Path) -> None:
    """A merge window of full-row and one-column writes writes one output run per column set,
    their key ranges interleaved; the displacement map still sends every origin row to the
    output row of its key (before: searched as one sorted array, keys of the second went missing)."""
    t = conch.connect(str(tmp_path), maintenance=OFF).create_table(
        "t", [("id", pa.uint64())], pa.schema([("a", pa.float64()), ("b", pa.float64())])
    )
    t.write(pa.table({"id": pa.array(range(100, 200), pa.uint64()), "a": [0.0] * 100, "b": [0.0] * 100}))
    t.compact()
    t.write(pa.table({"id": pa.array([101, 103, 105, 107], pa.uint64()), "a": [1.0] * 4, "b": [1.0] * 4}))
    t.write(pa.table({"id": pa.array([102, 104, 106], pa.uint64()), "a": [2.0] * 3}))
    t.write(pa.table({"id": pa.array([108, 109], pa.uint64()), "a": [3.0] * 2, "b": [3.0] * 2}))
    origins = [k for k in t.state().key_spaces.values() if k.lsm == 0]
    want = t.scan().to_pylist()
    policy = conch.Policy(auto=False, l0_trigger=2, l0_stop=2, l1_ratio=1e9, small_bytes=0, small_rows=0)
    assert t.compact(force=False, policy=policy).runs_out == 2  # one output per column set
    assert t.scan().to_pylist() == want
    entry = [e for _, _, e in t.log.entries() if e.kind == "compact"][-1]
    (op,) = [o for o in entry.ops if isinstance(o, AddDisplacementMap)]
    runs = read_map(t.log.storage, op.path, op.checksum)
    fields = t.state().schema.key_fields("")
    out = {k.id: t.log.key_cache.keys(k, fields).column(0).to_pylist() for k in t.state().key_spaces.values()}
    ids = dest_ids(runs).to_pylist()
    for k in origins:
        keys = t.log.key_cache.keys(k, fields).column(0).to_pylist()
        dest, rows = displace(runs, k.id, np.arange(len(keys)))
        assert [out[ids[d]][r] if r >= 0 else None for d, r in zip(dest, rows, strict=True)] == keys


@settings(deadline=None, max_examples=60)
@given(
    st.sampled_from([pa.uint64(), pa.int32(), pa.int8(), pa.float64(), pa.string()]),
    st.lists(st.integers(-120, 120), max_size=60, unique=True),
    st.lists(st.integers(-120, 120), min_size=1, max_size=60, unique=True),
    st.integers(1, 4),
    st.booleans(),
)
def test_displacement_runs_map_every_surviving_row_to_its_destination(
    key_type: pa.DataType, origin: list[int], dest: list[int], n_dest: int, interleaved: bool
) -> None:
    """`map_runs` (a binary search over fixed-width keys, hashing otherwise) against a
    dictionary of where each key went, for every key type width: unsigned, signed, float, string;
    destinations one after another in key order (a major's pieces) or dealt round-robin, their
    ranges interleaved (a merge's outputs split by column presence)."""
    if pa.types.is_unsigned_integer(key_type):
        origin, dest = [abs(k) for k in origin], sorted({abs(k) for k in dest})
    else:
        dest = sorted(dest)
    if pa.types.is_string(key_type):
        origin_vals, dest_vals = [f"k{k}" for k in origin], sorted(f"k{k}" for k in dest)
    else:
        origin_vals, dest_vals = origin, dest
    origin_arr = pa.array(origin_vals, key_type)
    idx = np.arange(len(dest_vals))
    cut = [idx[i::n_dest] for i in range(n_dest)] if interleaved else np.array_split(idx, n_dest)
    dest_ids = [f"d{i}" for i in range(n_dest)]
    dest_encs = [encode_keys([pa.array([dest_vals[j] for j in part], key_type)]) for part in cut]
    where = {dest_vals[j]: (dest_ids[i], r) for i, part in enumerate(cut) for r, j in enumerate(part)}
    runs = map_runs("o", encode_keys([origin_arr]), dest_ids, dest_encs)
    got: dict[int, tuple[str, int]] = {}
    for r in runs.to_pylist():
        for i in range(r["length"]):
            got[r["origin_start"] + i] = (r["dest"], r["dest_start"] + i)
    assert got == {i: where[v] for i, v in enumerate(origin_vals) if v in where}
    if pa.types.is_integer(key_type):  # a single integer key is mapped as numbers, the same runs
        nums = [np.array([dest_vals[j] for j in part], key_type.to_pandas_dtype()) for part in cut]
        as_numbers = map_runs("o", np.array(origin_vals, key_type.to_pandas_dtype()), dest_ids, nums)
        assert as_numbers.equals(runs)


def test_automatic_policy_bounds_l0_and_can_be_turned_off(tmp_path: Path) -> None:
    t = _table(tmp_path / "on", conch.Policy(l0_trigger=4))
    off = _table(tmp_path / "off")
    for i in range(20):
        rows = pa.table({"id": pa.array([i, i + 1, 50], pa.uint64()), "a": [float(i)] * 3})
        t.write(rows)
        off.write(rows)
        assert t.maintenance_plan().l0_runs < 4  # compacted right after the commit that reached it
    assert off.maintenance_plan().l0_runs == 20 and len(off.maintenance_plan(conch.Policy()).tasks) == 1
    assert t.scan().to_arrow().equals(off.scan().to_arrow())
    assert any(c.kind == "compact" for c in t.history()) and not any(c.kind == "compact" for c in off.history())


def test_default_policy_is_on(tmp_path: Path) -> None:
    t = conch.connect(str(tmp_path)).create_table("t", [("id", pa.uint64())])
    for i in range(10):
        t.write(pa.table({"id": pa.array([i], pa.uint64()), "a": [1.0]}))
    assert any(c.kind == "compact" for c in t.history())
    assert t.maintenance_plan().l0_runs < conch.Policy().l0_trigger


def test_partition_by_keeps_every_run_inside_one_partition(tmp_path: Path) -> None:
    cat = conch.connect(str(tmp_path), maintenance=conch.Policy(l0_trigger=2))
    with pytest.raises(conch.SchemaError, match="prefix of the key columns"):
        cat.create_table("bad", [("day", pa.int32()), ("id", pa.uint64())], partition_by=["id"])
    t = cat.create_table("p", [("day", pa.int32()), ("id", pa.uint64())], partition_by=["day"])
    rng = np.random.default_rng(3)
    for _ in range(6):
        n = 30
        days = rng.integers(0, 4, n).astype(np.int32)
        t.write(pa.table({"day": days, "id": rng.permutation(1000)[:n].astype(np.uint64), "a": rng.random(n)}))
    t.delete([(1, 5), (2, 7)])
    want = t.scan().to_arrow()
    t.compact()
    assert t.scan().to_arrow().equals(want)
    fields = t.state().schema.key_fields("")
    for k in t.state().key_spaces.values():  # runs of every kind: writes, tombstones, compacted
        first, last = (decode_key(bytes.fromhex(b), fields)[0] for b in (k.min_key, k.max_key))
        assert first == last, k
    assert len({k.min_key[:10] for k in t.state().key_spaces.values()}) == 4  # one run per day


def test_since_inside_a_compacted_window_reads_originals_until_the_horizon(tmp_path: Path) -> None:
    t = _table(tmp_path)
    commits = [t.write(pa.table({"id": pa.array([i, 50], pa.uint64()), "a": [float(i)] * 2})) for i in range(4)]
    want = t.scan(since=commits[2].time).to_pylist()
    assert want == [{"id": 2, "a": 2.0}, {"id": 3, "a": 3.0}, {"id": 50, "a": 3.0}]
    t.compact()
    (out,) = t.state().key_spaces.values()
    assert (out.min_time, out.time) == (commits[0].time, commits[3].time)  # the window, not the commit time
    assert t.scan(since=commits[2].time).to_pylist() == want  # straddles the window: the originals

    def provenance(seq: int) -> tuple[TableState, set[str], set[str], int]:
        ((_, at, entry),) = list(t.log.entries(seq - 1, seq))
        ks = {op.id for op in entry.ops if isinstance(op, RemoveKeySpace)}
        fr = {op.id for op in entry.ops if isinstance(op, RemoveFragment)}
        return t.state_at(version=seq - 1), ks, fr, at

    compacted_at = t.history()[-1].time
    view = since_view(t.state(), commits[2].time, provenance, horizon=compacted_at - 1)
    assert {k.time for k in view.key_spaces.values()} == {c.time for c in commits}
    with pytest.raises(conch.TimeTravelError, match=f"horizon {compacted_at}"):
        since_view(t.state(), commits[2].time, provenance, horizon=compacted_at)
    assert since_view(t.state(), commits[0].time, provenance, horizon=compacted_at) is t.state()  # not inside


def test_merge_windows_stay_within_the_automatic_budget() -> None:
    """Runs of geometric sizes: the window stops before the budget, so automatic compaction
    keeps merging the newest runs instead of planning one task too big to run."""
    sizes = [64_000, 32_000, 16_000, 8_000, 4_000, 2_000, 1_000, 1_000]
    runs = [ks(0, 0, 1000, 1, lsm=1, b=10_000_000)] + [ks(i + 1, 0, 100, 10 + i, b=b) for i, b in enumerate(sizes)]
    policy = conch.Policy(l0_trigger=4, l0_stop=4, small_bytes=0, auto_budget_bytes=10_000)
    (task,) = plan({k.id: k for k in runs}, {}, policy).tasks
    assert task.kind == "merge" and task.input_bytes <= 10_000 and len(task.inputs) == 4
