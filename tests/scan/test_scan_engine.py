"""Scan engine behaviours (DESIGN §5): pushdown never sees stale cells, the zip and run-merge
paths agree with the general sort merge, statistics pruning shows in the metrics, and takes of
out-of-line values read bytes in proportion to the rows taken. Counts and bytes, never times."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conch
from conch.scan import keyspace
from helpers import realign


def _ids(scan: conch.Scan) -> list[int]:
    return scan.to_arrow().column("id").to_pylist()


def test_pushdown_never_evaluates_stale_cells(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("id", pa.uint64())])
    # run 1: every key passes `x < 10`; run 2 (newer) overwrites x for even keys to fail it,
    # and for key 7 to null. Pushing `x < 10` into run 1 alone would wrongly pass them.
    t.write({"id": list(range(20)), "x": [1.0] * 20, "y": list(range(20))})
    t.write({"id": [i for i in range(20) if i % 2 == 0] + [7], "x": [50.0] * 10 + [None]})
    scan = t.scan("y", where=t["x"] < 10)
    assert _ids(scan) == [i for i in range(20) if i % 2 == 1 and i != 7]
    assert scan.metrics().groups["<root>"].fragments_filtered >= 1  # the filter ran in-file
    # and the reverse: an old failing cell, a newer passing one
    t.write({"id": [0, 2], "x": [3.0, 4.0]})
    assert _ids(t.scan("y", where=t["x"] < 10)) == [0, 1, 2, 3, 5, 9, 11, 13, 15, 17, 19]


def test_pushdown_is_null_and_keys_without_cells(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("id", pa.uint64())])
    t.write({"id": [1, 2, 3], "y": [1, 2, 3]})  # no x cells at all
    t.write({"id": [2], "x": [None]}, level="")
    t.write({"id": [3], "x": [5]})
    assert _ids(t.scan("y", where=t["x"].is_null())) == [1, 2]
    assert _ids(t.scan("y", where=~t["x"].is_null())) == [3]
    assert _ids(t.scan("y", where=t["x"] >= 5)) == [3]


def test_deleted_then_rewritten_keys(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("id", pa.uint64())])
    t.write({"id": [1, 2, 3], "x": [1, 1, 1], "y": [10, 20, 30]})
    t.delete([2, 3])
    t.write({"id": [3], "y": [33]})  # key 3 lives again, but its old x cell is deleted
    assert t.scan().to_pylist() == [{"id": 1, "x": 1, "y": 10}, {"id": 3, "x": None, "y": 33}]
    assert _ids(t.scan("y", where=t["x"] == 1)) == [1]


def test_untyped_literals_fall_back_to_arrow(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("id", pa.uint64())])
    t.write({"id": [1, 2, 3], "n": pa.array([1, 5, 9], pa.uint32()), "s": ["a", "b", "c"]})
    assert _ids(t.scan(where=t["n"] > -1)) == [1, 2, 3]  # -1 is not a u32: not pushed
    assert _ids(t.scan(where=t["n"] < 5.5)) == [1, 2]
    assert _ids(t.scan(where=(t["s"] == "b") | (t["n"] == 9))) == [2, 3]
    assert _ids(t.scan(where=t["s"].isin(["a", "c"]))) == [1, 3]


def test_zip_and_run_merge_equal_the_sort_merge(tmp_path: Path) -> None:
    catalog = conch.connect(tmp_path, maintenance=conch.Policy(auto=False))  # three runs: the merge's inputs
    t = catalog.create_table("t", [("id", pa.int64())])
    keys = list(range(0, 300, 3))
    t.write({"id": keys, "a": [float(k) for k in keys]})
    t.write({"id": keys, "b": [k * 2 for k in keys]})  # identical key set: zip
    t.write({"id": keys[::-1][:40], "a": [-1.0] * 40})  # identical? no: run merge
    scan = t.scan(where=t["a"] >= 0).with_options(fast_paths=False)
    got = scan.to_arrow()
    assert scan.metrics().merge == "numeric run merge"
    streamed = t.scan(where=t["a"] >= 0)  # the filter pushed into the base, the small run laid over
    assert streamed.to_arrow().equals(got) and streamed.metrics().merge == "zip (streamed)"
    want = {k: (float(k), k * 2) for k in keys if k not in keys[::-1][:40]}
    assert got.column("id").to_pylist() == sorted(want)
    assert got.column("b").to_pylist() == [want[k][1] for k in sorted(want)]
    # the general (Arrow sort) path gives the same rows
    fields = [pa.field("id", pa.int64())]
    parts = [pa.table({"id": pa.array(p, pa.int64())}) for p in ([1, 3, 5], [1, 2, 3], [3, 9])]
    rows = [np.arange(p.num_rows) for p in parts]
    times = np.array([1, 2, 3])
    nums = [p.column(0).to_numpy() for p in parts]
    fast = keyspace.merge_key_spaces(parts, rows, times, fields, nums)
    slow = keyspace.merge_key_spaces(parts, rows, times, fields, [None, None, None])
    assert fast[5] == "numeric run merge" and slow[5] == "sort merge"
    assert fast[0].equals(slow[0])
    for a, b in zip(fast[1:5], slow[1:5]):
        assert np.array_equal(a, b)
    same = [parts[1], parts[1].slice(0)]
    z = keyspace.merge_key_spaces(same, rows[1:2] * 2, np.array([1, 2]), fields, [None, None])
    assert z[5] == "zip" and z[1].tolist() == [1, 0, 1, 0, 1, 0]  # newest run first per key


def test_identical_key_sets_zip(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("id", pa.uint64())])
    t.write({"id": list(range(100)), "a": list(range(100))})
    t.write({"id": list(range(100)), "a": [-v for v in range(100)]})
    scan = t.scan()
    assert scan.to_arrow().column("a").to_pylist() == [-v for v in range(100)]
    assert scan.metrics().merge.startswith("zip")


def test_stats_pruning_shows_in_metrics(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "wh", write_options=conch.WriteOptions(fragment_bytes=800))
    t = cat.create_table("t", [("id", pa.uint64())])
    t.write({"id": list(range(1000)), "v": [float(i) for i in range(1000)]})  # v sorted: tight stats
    scan = t.scan(where=t["v"] < 50)
    assert _ids(scan) == list(range(50))
    g = scan.metrics().groups["<root>"]
    assert g.fragments_considered > 5
    assert g.fragments_pruned_by_stats >= g.fragments_considered - 2
    assert "pruned by stats" in scan.explain()


def test_blob_take_reads_bytes_in_proportion_to_rows(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("id", pa.uint64())])
    rng = np.random.default_rng(0)
    n, size = 2000, 4096
    blobs = [rng.bytes(size) for _ in range(n)]
    t.write({"id": list(range(n)), "score": [float(i % 100) for i in range(n)]})
    t.write(
        pa.table(
            {"id": pa.array(range(n), pa.uint64()), "audio": pa.StructArray.from_arrays([pa.array(blobs)], ["bytes"])}
        )
    )
    catalog.warehouse.format.clear_cache()
    scan = t.scan("audio.bytes", where=t["score"] < 1)  # 1 % of rows
    out = scan.to_arrow()
    assert out.num_rows == 20
    m = scan.metrics()
    audio = m.groups["audio"]
    assert audio.rows_read == 20
    payload = 20 * size
    # exactly the taken values plus the small offset/length index (not the 8 MB of values)
    assert payload <= audio.bytes_read <= payload + 64 * 1024
    assert m.total_bytes_read < 2 * payload + 200 * 1024


def test_many_overlapping_runs_full_scan(small_files_catalog: conch.Catalog) -> None:
    t = small_files_catalog.create_table("t", [("id", pa.uint64())])
    model: dict[int, dict[str, float | None]] = {}
    r = random.Random(1)
    for i in range(12):
        ks = r.sample(range(60), 15)
        col = r.choice(["a", "b"])
        vals = [float(r.randint(0, 9)) if r.random() > 0.1 else None for _ in ks]
        t.write({"id": ks, col: pa.array(vals, pa.float64())})
        for k, v in zip(ks, vals):
            model.setdefault(k, {"a": None, "b": None})[col] = v
        if i % 4 == 3:
            dead = r.sample(sorted(model), 3)
            t.delete(dead)
            for k in dead:
                model.pop(k)
    got = t.scan().to_pylist()
    assert got == [{"id": k, **model[k]} for k in sorted(model)]
    flt = t.scan(where=(t["a"] < 5) & (t["b"] >= 2)).to_pylist()
    want = [
        {"id": k, **model[k]}
        for k in sorted(model)
        if model[k]["a"] is not None and model[k]["a"] < 5 and model[k]["b"] is not None and model[k]["b"] >= 2
    ]
    assert flt == want


@pytest.mark.parametrize("keys", [[5, 17, 900, 18, 5000], list(range(10, 30))])
def test_key_predicates_by_binary_search(catalog: conch.Catalog, keys: list[int]) -> None:
    t = catalog.create_table("t", [("id", pa.uint64())])
    t.write({"id": list(range(0, 2000, 2)), "v": list(range(1000))})
    assert _ids(t.scan(keys=keys)) == sorted(k for k in keys if k < 2000 and k % 2 == 0)
    assert _ids(t.scan(keys=conch.KeyRange((11,), (21,)))) == [12, 14, 16, 18, 20]


# ----- fast paths agree with the general path ---------------------------------------------------
def _both(scan: conch.Scan) -> tuple[pa.Table, pa.Table, conch.ScanMetrics]:
    """(fast result, general-path result, metrics of the fast run), in batches of 256 rows.
    `fast_paths=False` is the documented debug option that forces the general path."""
    fast_scan = scan.with_options(batch_rows=256)
    fast = fast_scan.to_arrow()
    slow = scan.with_options(batch_rows=256, fast_paths=False).to_arrow()
    return fast, slow, fast_scan.metrics()


@pytest.mark.parametrize("seed", range(int(__import__("os").environ.get("CONCH_FAST_SEEDS", "12"))))
def test_fast_paths_match_general_path(tmp_path: Path, seed: int) -> None:
    """Random tables in the shapes the fast paths target (one write cut into many key spaces and
    fragments; group-by-group writes of identical key sets; blob columns; full rewrites), plus
    shapes they must refuse (overlapping runs, deletes); random projections, key ranges,
    filters and limits. Fast and general results must be identical."""
    rng = random.Random(seed)
    resident: list[bool] = []
    chunk_rows, fragment_bytes = rng.choice([7, 50, 1000]), rng.choice([64, 1 << 20])
    opts = conch.WriteOptions(chunk_rows=chunk_rows, fragment_bytes=fragment_bytes, large_value_bytes=8)
    # automatic compaction off: each shape must reach the scan as written (a compaction would
    # fold the overlapping runs and tombstones the general path is tested on)
    cat = conch.connect(tmp_path / "w", write_options=opts, maintenance=conch.Policy(auto=False))
    t = cat.create_table("t", [("id", pa.int64())])
    n = rng.randint(1, 120)
    ids = sorted(rng.sample(range(-50, 400), n))

    def vals(kind: str) -> list:
        out = []
        for _ in ids:
            if rng.random() < 0.15:
                out.append(None)
            elif kind == "f":
                out.append(rng.choice([rng.uniform(-5, 5), 0.0]))
            elif kind == "i":
                out.append(rng.randint(-3, 3))
            else:
                out.append("v" * rng.randint(0, 20))
        return out

    def g(**cols: list) -> pa.StructArray:
        return pa.StructArray.from_arrays([pa.array(v) for v in cols.values()], names=list(cols))

    shape = rng.choice(
        ["one", "groups", "rewrite", "overlap", "patches", "inserts", "lsm", "lsm_del", "delete", "masked"]
    )
    t.write(pa.table({"id": ids, "a": vals("f"), "b": vals("i"), "g": g(s=vals("s"), z=vals("i"))}))
    if shape == "groups":
        t.write(pa.table({"id": ids, "g": g(z=vals("i"))}))
        t.write({"id": ids, "a": vals("f")})
    elif shape == "rewrite":
        t.write({"id": ids, "a": vals("f"), "b": vals("i")})
    elif shape == "overlap":
        sub = sorted(rng.sample(ids, max(1, n // 3)))
        t.write({"id": sub, "a": [rng.uniform(-5, 5) for _ in sub]})
    elif shape == "patches":  # partial upserts of key subsets, one adding a column (null base)
        for _ in range(rng.randint(1, 3)):
            sub = sorted(rng.sample(ids, rng.randint(1, n)))
            col = rng.choice(["a", "b", "c"])
            t.write(
                {"id": sub, col: [rng.choice([None, rng.randint(-3, 3)]) for _ in sub]}
                if col != "a"
                else {"id": sub, "a": [rng.uniform(-5, 5) for _ in sub]}
            )
    elif shape == "inserts":  # one large run + small runs holding new keys and old (overlays)
        for _ in range(rng.randint(1, 4)):
            sub = sorted(rng.sample(range(-60, 420), rng.randint(1, 30)))
            col = rng.choice(["a", "b", "c"])
            if col == "a":
                t.write({"id": sub, "a": [rng.uniform(-5, 5) for _ in sub], "b": [rng.randint(-3, 3) for _ in sub]})
            else:
                t.write({"id": sub, col: [rng.choice([None, rng.randint(-3, 3)]) for _ in sub]})
    elif shape in ("lsm", "lsm_del"):  # many overlapping runs over > 256 keys: streamed overlay;
        for _ in range(rng.randint(8, 12)):  # with a delete, the general path's resident decode
            sub = sorted(rng.sample(range(-50, 700), 300))
            t.write({"id": sub, "a": [rng.uniform(-5, 5) for _ in sub], "b": [rng.randint(-3, 3) for _ in sub]})
        if shape == "lsm_del":  # a key deleted, then written again in part: the general path
            gone = rng.choice(sub)
            t.delete([gone])
            t.write({"id": [gone], "a": [1.5]})
    elif shape == "delete":
        t.delete([rng.choice(ids)])
    elif shape == "masked":  # overlapping runs and a partial upsert, realigned through mask files
        sub = sorted(rng.sample(range(-50, 400), max(1, n // 2)))
        t.write({"id": sub, "a": [rng.uniform(-5, 5) for _ in sub], "b": [rng.randint(-3, 3) for _ in sub]})
        realign(t, split_seed=seed if rng.random() < 0.5 else None)
    projections = [(), ("a",), ("g.s",), ("g",), ("b", "g.z"), ("a", "g.s")]
    if shape in ("patches", "inserts") and "c" in t.schema.columns:
        projections += [("c",), ("a", "c")]
    filters = [None, t["a"] < 0, t["b"] >= 1, (t["a"] > -1) & (t["b"] != 0), t["g.z"] == 2, t["a"].is_null()]
    used = set()
    for i in range(12):
        cols = rng.choice(projections) if i else ()
        where = rng.choice(filters) if i else None
        keys = None
        if i and rng.random() < 0.4:  # query 0 is a full scan
            lo = rng.randint(-60, 400)
            keys = conch.KeyRange((lo,), (lo + rng.randint(0, 200),))
        limit = rng.choice([None, None, 1, 17]) if i else None
        fast, slow, m = _both(t.scan(*cols, where=where, keys=keys, limit=limit))
        used.add(m.merge)
        resident.append(any(g.decoded_whole for g in m.groups.values()))
        assert fast.schema == slow.schema
        assert fast.to_pylist() == slow.to_pylist(), (shape, cols, where, keys, limit)
    if shape in ("one", "groups", "rewrite", "patches", "inserts", "lsm"):
        assert "zip (streamed)" in used  # overlapping runs: the streamed overlay
    if shape == "delete":  # a key deleted outright: left out of the streamed base
        assert "zip (streamed)" in used
    if shape == "lsm_del":  # the full scan reads `b`, which the re-written key has no cell of
        assert used - {"zip (streamed)"}
    if shape == "lsm_del" and chunk_rows == 1000 and fragment_bytes > 64:  # runs span every batch
        assert any(resident)


def test_repeated_blob_takes_match_cold_reads(tmp_path: Path) -> None:
    """The second take from a blob fragment uses the cached blob index: same values (and nulls)
    as a cold read and as written, for random key sets over several fragments (read together
    into one array), binary and string columns."""
    opts = conch.WriteOptions(chunk_rows=40, large_value_bytes=4)
    cat = conch.connect(tmp_path / "w", write_options=opts)
    t = cat.create_table("t", [("id", pa.uint64())])
    rng = random.Random(3)
    n = 200
    s = [None if rng.random() < 0.2 else "x" * rng.randint(0, 30) + str(i) for i in range(n)]
    b = [None if rng.random() < 0.2 else bytes([i % 256]) * rng.randint(0, 30) for i in range(n)]
    t.write({"id": list(range(n)), "s": s, "b": b, "v": list(range(n))})
    assert t.state().fragments and all(f.blob_columns for f in t.state().fragments.values())
    for _ in range(30):
        keys = sorted(rng.sample(range(n), rng.randint(1, 25)))
        cols = rng.choice([("s",), ("b", "v"), ()])
        warm = t.scan(*cols, keys=keys).to_pylist()
        cold = conch.connect(tmp_path / "w").table("t").scan(*cols, keys=keys).to_pylist()
        assert warm == cold
        assert [r["id"] for r in warm] == keys
        model = {"s": s, "b": b, "v": list(range(n))}  # values of many fragments read together
        for c in cols or ("s", "b", "v"):
            assert [r[c] for r in warm] == [model[c][k] for k in keys]


# ----- key masks: dense today, sparse next (issue 10) --------------------------------------------
@settings(deadline=None, max_examples=80)
@given(data=st.data())
def test_locate_through_dense_and_sparse_masks(data: st.DataObject) -> None:
    """Random key spaces whose rows are dealt to fragments either as contiguous runs (dense) or
    as arbitrary interleaved subsets (sparse): `locate` finds each row's fragment and the row
    within it, whichever implementation the masks are."""
    from conch.files.masks import RunsMask
    from conch.scan.keymask import DenseMask, locate

    masks: list = []
    ks_of: list[int] = []
    truth: dict[tuple[int, int], tuple[int, int]] = {}
    for ks in range(data.draw(st.integers(1, 3))):
        n = data.draw(st.integers(1, 40))
        if data.draw(st.booleans()):  # dense runs
            cuts = sorted(set(data.draw(st.lists(st.integers(1, n - 1), max_size=4)) if n > 1 else []))
            for a, b in zip([0, *cuts], [*cuts, n], strict=True):
                for r in range(a, b):
                    truth[(ks, r)] = (len(masks), r - a)
                masks.append(DenseMask(a, b - a))
                ks_of.append(ks)
        else:  # sparse: every row dealt to one of k fragments
            k = data.draw(st.integers(1, 4))
            owner = data.draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))
            for j in range(k):
                pos = np.array([r for r in range(n) if owner[r] == j], dtype=np.int64)
                if not len(pos):
                    continue
                for i, r in enumerate(pos):
                    truth[(ks, int(r))] = (len(masks), i)
                m = RunsMask.from_rows(pos)
                assert [r for a, b in m.ranges() for r in range(a, b)] == pos.tolist()
                masks.append(m)
                ks_of.append(ks)
    queries = data.draw(st.lists(st.sampled_from(sorted(truth)), min_size=1, max_size=30))
    ks_q = np.array([q[0] for q in queries], dtype=np.int64)
    rows_q = np.array([q[1] for q in queries], dtype=np.int64)
    which, frow = locate(masks, ks_of, ks_q, rows_q)
    assert list(zip(which.tolist(), frow.tolist(), strict=True)) == [truth[q] for q in queries]


@settings(max_examples=25, deadline=None)
@given(
    data=st.data(),
    chunk_rows=st.integers(3, 40),
    runs=st.lists(st.lists(st.integers(-40, 260), min_size=1, max_size=40, unique=True), min_size=1, max_size=4),
)
def test_small_runs_spanning_many_base_runs(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, chunk_rows: int, runs: list[list[int]]
) -> None:
    """One write cut into many disjoint base runs (a streamed write's chunks), then small runs whose
    keys fall anywhere: inside several bases, in the gaps between them, before the first and after
    the last. The streamed path cuts each small run among the bases' segments; its result must be
    the general path's for random projections, key ranges and limits."""
    cat = conch.connect(
        tmp_path_factory.mktemp("w"),
        write_options=conch.WriteOptions(chunk_rows=chunk_rows),
        maintenance=conch.Policy(auto=False),
    )
    t = cat.create_table("t", [("id", pa.int64())])
    ids = list(range(0, 220, 2))  # odd keys and keys outside [0, 220) are inserts
    t.write(pa.table({"id": ids, "a": [float(i) for i in ids], "b": [i % 7 for i in ids]}))
    for k, sub in enumerate(runs):
        sub = sorted(sub)
        if k % 2:
            t.write({"id": sub, "b": [-k] * len(sub)})  # partial: only b
        else:
            t.write({"id": sub, "a": [-float(k)] * len(sub), "b": [k] * len(sub)})
    for _ in range(4):
        cols = data.draw(st.sampled_from([(), ("a",), ("b",)]))
        keys = None
        if data.draw(st.booleans()):
            lo = data.draw(st.integers(-50, 270))
            keys = conch.KeyRange((lo,), (lo + data.draw(st.integers(0, 120)),))
        limit = data.draw(st.sampled_from([None, None, 1, 23]))
        fast, slow, m = _both(t.scan(*cols, keys=keys, limit=limit))
        assert fast.to_pylist() == slow.to_pylist(), (cols, keys, limit)
        if keys is None:
            assert m.merge == "zip (streamed)"


SPLICED_TYPES = {  # fixed-width types the overlay copies as raw integers, and some it takes
    "i8": (pa.int8(), lambda r: r.randint(-128, 127)),
    "u16": (pa.uint16(), lambda r: r.randint(0, 65535)),
    "f16": (pa.float16(), lambda r: np.float16(r.choice([0.5, -0.0, float("nan"), 1e4]))),
    "f32": (pa.float32(), lambda r: r.choice([1.5, -0.0, float("nan"), float("inf")])),
    "date": (pa.date32(), lambda r: __import__("datetime").date(2000, 1, 1 + r.randint(0, 27))),
    "ts": (pa.timestamp("us", tz="UTC"), lambda r: r.randint(-(10**15), 10**15)),
    "t64": (pa.time64("ns"), lambda r: r.randint(0, 86_399_999_999_999)),
    "d64": (pa.decimal64(12, 3), lambda r: __import__("decimal").Decimal(r.randint(-(10**9), 10**9)) / 1000),
    "d128": (pa.decimal128(30, 2), lambda r: __import__("decimal").Decimal(r.randint(-(10**20), 10**20)) / 100),
    "bool": (pa.bool_(), lambda r: r.random() < 0.5),
    "s": (pa.string(), lambda r: "x" * r.randint(0, 9)),
}


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    base_rows=st.integers(1, 700),
    runs=st.integers(1, 3),
    nulls=st.sampled_from([0.0, 0.0, 0.3]),
)
def test_overlay_splice_keeps_every_type_exact(
    tmp_path_factory: pytest.TempPathFactory, seed: int, base_rows: int, runs: int, nulls: float
) -> None:
    """The streamed overlay splices fixed-width cells as raw integers (NaN payloads, -0.0,
    decimals, dates and times must come out bit-identical) and takes the rest; small runs of
    replaced and inserted keys (some partial, some with nulls) over a base of `base_rows` keys,
    read in batches of 256: the fast path's result must equal the general path's."""
    r = random.Random(seed)
    cat = conch.connect(tmp_path_factory.mktemp("w"), maintenance=conch.Policy(auto=False))
    t = cat.create_table("t", [("id", pa.int64())])

    def rows(ids: list[int], names: list[str]) -> pa.Table:
        cols = {"id": pa.array(ids, pa.int64())}
        for nm in names:
            typ, gen = SPLICED_TYPES[nm]
            cols[nm] = pa.array([None if r.random() < nulls else gen(r) for _ in ids], typ)
        return pa.table(cols)

    t.write(rows(sorted(r.sample(range(0, 3 * base_rows), base_rows)), list(SPLICED_TYPES)))
    for _ in range(runs):
        sub = sorted(r.sample(range(-5, 3 * base_rows + 5), r.randint(1, max(1, base_rows // 3))))
        t.write(rows(sub, r.sample(list(SPLICED_TYPES), r.randint(1, len(SPLICED_TYPES)))))
    fast, slow, m = _both(t.scan())
    assert m.merge == "zip (streamed)"
    assert fast.schema == slow.schema
    for name in fast.column_names:  # bit-exact: compare the raw cells, not floats (NaN != NaN)
        a, b = fast.column(name).combine_chunks(), slow.column(name).combine_chunks()
        assert a.is_valid().equals(b.is_valid()), name
        if name not in ("id", "bool", "s"):
            width = a.type.bit_width // 8
            raw = [
                np.frombuffer(x.buffers()[1], dtype=np.uint8)[x.offset * width : (x.offset + len(x)) * width]
                for x in (a, b)
            ]
            valid = np.repeat(a.is_valid().to_numpy(zero_copy_only=False), width)
            assert np.array_equal(raw[0][valid], raw[1][valid]), name
        else:
            assert a.equals(b), name


@pytest.fixture(scope="module")
def large_key_spaces(tmp_path_factory: pytest.TempPathFactory) -> tuple[conch.Table, Path]:
    """Key tables larger than half the key cache of a 16 MiB budget (takes find keys through the
    key spaces' sparse indexes): two chunks of even keys, an overlapping upsert of some of them
    plus odd keys, a delete."""
    n = 140_000
    path = tmp_path_factory.mktemp("large")
    cat = conch.connect(
        path, write_options=conch.WriteOptions(chunk_rows=n // 2 + 1), maintenance=conch.Policy(auto=False)
    )
    t = cat.create_table("t", [("id", pa.int64())])
    ids = np.arange(0, 2 * n, 2, dtype=np.int64)
    t.write(pa.table({"id": ids, "a": ids.astype(np.float64)}))
    up = np.arange(-7, 2 * n + 9, 7, dtype=np.int64)
    t.write(pa.table({"id": up, "a": -up.astype(np.float64)}))
    t.delete([int(ids[5]), int(up[3]), 12_345 * 2])
    return t, path


@settings(max_examples=30, deadline=None)
@given(
    keys=st.lists(
        st.one_of(st.integers(-30, 280_030), st.sampled_from([0, 1022, 1024, 2046, 2048, 2 * 1024 * 64, -7, 2])),
        min_size=1,
        max_size=60,
    ),
    split=st.booleans(),
)
def test_takes_through_sparse_index_match_general_path(
    large_key_spaces: tuple[conch.Table, Path], keys: list[int], split: bool
) -> None:
    """Random key sets (present, absent, deleted, at index block edges, outside every run) over
    key tables too large to cache whole, alone and within key-range splits: the fast path's result
    is the general path's (which reads whole key tables), and a fast take whose key spaces do not
    fit half the key cache loaded none of them whole (it went through their sparse indexes)."""
    t, path = large_key_spaces
    scans = [s.open() for s in t.scan(keys=keys).splits(3)] if split else [t.scan(keys=keys)]
    for scan in scans:
        # a fresh 16 MiB catalog per scan: its key cache holds only what the fast path loaded
        fresh = conch.connect(path, maintenance=conch.Policy(auto=False), memory_budget=16 << 20)
        fast_scan = fresh.table("t").scan(keys=keys)
        if scan.plan.within is not None:
            fast_scan = fast_scan.within(scan.plan.within)
        assert fast_scan.to_pylist() == scan.with_options(fast_paths=False).to_pylist()
        cache = fresh.warehouse.key_cache
        if not cache.fits(fast_scan.plan.key_spaces, fast_scan.plan.key_fields):
            assert not any(cache.cached(ks) for ks in fast_scan.plan.key_spaces)
        fresh.close()
