"""`Table.compact()` leaves a table laid out as one write of its rows would be (issue 30): one L1
run per `max_l1_rows` piece of each partition, whatever L1 ranges its runs had, and a second
`compact()` finds nothing to do (a fixed point, partitioned tables included). Checked against a
dict model of the rows and against the runs a write of the same rows into an empty table makes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conch
from conch.maintain.compaction.plan import is_l1
from conch.model.keys import decode_key

OFF = conch.Policy(auto=False)
# sets up many disjoint L1 ranges: every append moves as it is (none is a small component or a
# fold unit); `CUT` then compacts them with its own piece size
SPREAD = conch.Policy(auto=False, small_rows=0, small_bytes=0, move_rows=1, move_bytes=0, max_l1_rows=1 << 20)
CUT = conch.Policy(auto=False, max_l1_rows=1000)


def key_of(i: int, kind: str) -> Any:
    return f"k{i:06d}" if kind == "string" else i


def root_runs(t: conch.Table) -> list[Any]:
    return sorted((k for k in t.state().key_spaces.values() if k.level == ""), key=lambda k: k.min_key)


@pytest.mark.parametrize("kind", ["uint64", "string"])
def test_many_disjoint_ranges_and_upserts_compact_to_one_run_per_piece(tmp_path: Path, kind: str) -> None:
    key_type = pa.uint64() if kind == "uint64" else pa.string()
    t = conch.connect(str(tmp_path), maintenance=OFF).create_table("t", [("id", key_type)])
    model: dict[Any, dict[str, Any]] = {}
    for i in range(30):  # sorted appends of 100 keys: 30 disjoint runs
        ids = [key_of(j, kind) for j in range(i * 100, i * 100 + 100)]
        t.write(pa.table({"id": pa.array(ids, key_type), "a": [float(i)] * 100, "b": [i] * 100}))
        model.update({k: {"id": k, "a": float(i), "b": i} for k in ids})
    t.compact(policy=SPREAD)
    assert t.maintenance_plan(CUT).l1_runs == 30  # 30 L1 ranges
    rng = np.random.default_rng(7)
    for _ in range(5):  # partial upserts of random keys over all of them, and new keys past the end
        ids = [key_of(int(j), kind) for j in np.sort(rng.choice(3200, 60, replace=False))]
        t.write(pa.table({"id": pa.array(ids, key_type), "a": [-1.0] * len(ids)}))
        for k in ids:
            model[k] = {"id": k, "a": -1.0, "b": model.get(k, {}).get("b")}
    assert t.maintenance_plan(CUT).l0_runs == 5

    t.compact(policy=CUT)
    p = t.maintenance_plan(CUT)
    pieces = math.ceil(len(model) / CUT.max_l1_rows)
    assert (p.l0_runs, p.l1_runs, p.tasks) == (0, pieces, ())  # was 30+ runs: the old ranges kept
    sizes = [k.rows for k in root_runs(t)]
    assert sum(sizes) == len(model) and max(sizes) - min(sizes) <= 1  # equal pieces, as one write
    assert t.scan().to_pylist() == [model[k] for k in sorted(model)]
    seen = len(t.history())
    assert t.compact(policy=CUT).tasks == 0 and len(t.history()) == seen  # a fixed point: nothing committed
    assert t.check().ok


def test_a_partitioned_table_reaches_a_fixed_point(tmp_path: Path) -> None:
    """Small runs of neighbouring partitions are not folded together: such a fold was cut at the
    partition change again, 2 runs → 2, at every `compact()` (and every settle)."""
    t = conch.connect(str(tmp_path), maintenance=OFF).create_table(
        "ev", [("day", pa.int32()), ("id", pa.uint64())], partition_by=["day"]
    )
    for i in range(3):
        t.write({"day": [1, 2, 3], "id": [i, i, i], "x": [float(i)] * 3})
    r = t.compact()
    assert (r.tasks, r.runs_out) == (1, 3)  # one run per partition
    seen = len(t.history())
    assert t.maintenance_plan().tasks == ()
    assert t.compact().tasks == 0 and len(t.history()) == seen


def test_partitioned_upserts_compact_to_pieces_per_partition(tmp_path: Path) -> None:
    t = conch.connect(str(tmp_path), maintenance=OFF).create_table(
        "ev", [("day", pa.int32()), ("id", pa.uint64())], partition_by=["day"]
    )
    model: dict[tuple[int, int], float] = {}
    rows = {1: 1500, 2: 400, 3: 2600}  # per day: 2, 1 and 3 pieces of at most 1,000 rows
    for day, n in rows.items():
        for start in range(0, n, 100):  # appends of 100 keys: many disjoint L1 ranges
            ids = np.arange(start, min(n, start + 100), dtype=np.uint64)
            t.write({"day": pa.array([day] * len(ids), pa.int32()), "id": ids, "x": np.full(len(ids), 1.0)})
            model.update({(day, int(i)): 1.0 for i in ids})
    t.compact(policy=SPREAD)
    rng = np.random.default_rng(3)
    for _ in range(4):  # upserts over every day at once
        days = rng.choice([1, 2, 3], 90)
        ids = np.array([rng.integers(0, rows[d]) for d in days], dtype=np.uint64)
        up = pa.table({"day": pa.array(days, pa.int32()), "id": ids, "x": rng.random(90)})
        up = pa.table({c: up.column(c) for c in up.column_names}).group_by(["day", "id"]).aggregate([("x", "max")])
        up = up.rename_columns(["day", "id", "x"])
        t.write(up)
        model.update(
            {(d, i): x for d, i, x in zip(*(up.column(c).to_pylist() for c in ("day", "id", "x")), strict=True)}
        )
    assert t.maintenance_plan(CUT).l1_runs > 40
    t.compact(policy=CUT)
    fields = t.state().schema.key_fields("")
    by_day: dict[int, list[int]] = {}
    for k in root_runs(t):
        lo, hi = decode_key(bytes.fromhex(k.min_key), fields)[0], decode_key(bytes.fromhex(k.max_key), fields)[0]
        assert lo == hi and is_l1(k)  # no run spans two partitions
        by_day.setdefault(lo, []).append(k.rows)
    assert {d: len(v) for d, v in by_day.items()} == {1: 2, 2: 1, 3: 3}
    assert {d: sum(v) for d, v in by_day.items()} == rows
    got = {(r["day"], r["id"]): r["x"] for r in t.scan().to_pylist()}
    assert got == model
    seen = len(t.history())
    assert t.maintenance_plan(CUT).tasks == () and t.compact(policy=CUT).tasks == 0 and len(t.history()) == seen


ops = st.lists(
    st.tuples(st.sampled_from(["append", "upsert", "delete"]), st.integers(1, 3), st.integers(0, 2**31)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=15)
@given(history=ops, partitioned=st.booleans(), max_rows=st.sampled_from([40, 100, 1000]))
def test_compact_is_a_fixed_point_over_any_history(
    tmp_path_factory: pytest.TempPathFactory, history: list[tuple[str, int, int]], partitioned: bool, max_rows: int
) -> None:
    """Any history of appends, upserts and deletes (spread over L1 ranges first): after
    `compact()` the rows are the model's, every partition holds at most one run per `max_rows`
    piece of the keys ever written to it (deletes can leave pieces short) and no run above it,
    and a second `compact()` commits nothing."""
    cut = conch.Policy(auto=False, max_l1_rows=max_rows)
    kw = {"partition_by": ["day"]} if partitioned else {}
    t = conch.connect(str(tmp_path_factory.mktemp("w")), maintenance=OFF).create_table(
        "t", [("day", pa.int32()), ("id", pa.uint64())], **kw
    )
    model: dict[tuple[int, int], float] = {}
    written: set[tuple[int, int]] = set()
    nxt = {1: 0, 2: 0, 3: 0}
    for i, (op, day, seed) in enumerate(history):
        rng = np.random.default_rng(seed)
        if op == "append":
            n = int(rng.integers(1, 80))
            keys = [(day, nxt[day] + j) for j in range(n)]
            nxt[day] += n
        else:
            pool = sorted(k for k in model if k[0] == day)
            keys = sorted(pool[j] for j in set(rng.integers(0, len(pool), 20).tolist())) if pool else []
        if not keys:
            continue
        if op == "delete":
            t.delete([{"day": d, "id": k} for d, k in keys])
            for k in keys:
                model.pop(k, None)
            continue
        days, ids = zip(*keys, strict=True)
        t.write({"day": pa.array(days, pa.int32()), "id": pa.array(ids, pa.uint64()), "x": [float(i)] * len(keys)})
        model.update({k: float(i) for k in keys})
        written |= set(keys)
        if i % 3 == 0:
            t.compact(policy=SPREAD)
    untouched = set(t.state().key_spaces)
    t.compact(policy=cut)
    assert {(r["day"], r["id"]): r["x"] for r in t.scan().to_pylist()} == model
    p = t.maintenance_plan(cut)
    assert p.l0_runs == 0 and p.tasks == ()
    seen = len(t.history())
    assert t.compact(policy=cut).tasks == 0 and len(t.history()) == seen
    runs = root_runs(t)
    assert all(k.rows <= max_rows or k.id in untouched for k in runs)  # one write's run is not cut either
    fields = t.state().schema.key_fields("")
    for day in (1, 2, 3):
        mine = [k for k in runs if decode_key(bytes.fromhex(k.min_key), fields)[0] == day]
        ever = sum(1 for k in written if k[0] == day)
        if partitioned:
            assert len(mine) <= max(1, math.ceil(ever / max_rows)), (day, [k.rows for k in mine])
    if not partitioned:
        assert len(runs) <= max(1, math.ceil(len(written) / max_rows))
    assert t.check().ok


def test_compact_joins_l1_runs_below_max_rows_as_one_write_would_and_the_settle_leaves_them(tmp_path: Path) -> None:
    """L1 runs too many rows to be fold units of the triggers (`move_rows`) but below
    `max_l1_rows` and `move_bytes` (sorted appends the commit-time trigger folded): `compact()`
    lays them out as one write of their rows, `ceil(rows / max_l1_rows)` runs; the settle, which
    runs unasked, rewrites none. (Runs of `move_bytes` or more, a bulk load's, stay as they are:
    `test_trivial_move`.)"""
    from conch.maintain.compaction.background import settle_tasks

    t = conch.connect(str(tmp_path), maintenance=OFF).create_table("t", [("id", pa.uint64())])
    model = {}
    for i in range(7):  # 7 disjoint runs of 700 keys
        ids = list(range(i * 700, i * 700 + 700))
        t.write({"id": pa.array(ids, pa.uint64()), "x": [float(i)] * 700})
        model.update(dict.fromkeys(ids, float(i)))
    t.compact(policy=conch.Policy(auto=False, max_l1_rows=700, move_rows=1))  # moved: 7 L1 ranges
    policy = conch.Policy(auto=False, max_l1_rows=1000, move_rows=100)
    assert t.maintenance_plan(policy).l1_runs == 7
    assert settle_tasks(t.state(), policy) == []

    t.compact(policy=policy)
    assert sorted(k.rows for k in root_runs(t)) == [980] * 5  # was 7 runs of 700: left as they were
    assert {r["id"]: r["x"] for r in t.scan().to_pylist()} == model
    seen = len(t.history())
    assert t.compact(policy=policy).tasks == 0 and len(t.history()) == seen
