"""Splits cut only where the filter may hold by fragment statistics (`conch.scan.candidates`):
together still exactly the scan on random tables and filters, and far fewer for a selective
filter over many runs (what a Spark read plans as tasks)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

import conch
from conch.expr.syntax import parse
from conch.scan.candidates import estimated_rows


def _catalog(path: Path) -> conch.Catalog:
    # small runs and fragments, no automatic compaction: many runs for statistics to prune
    opts = conch.WriteOptions(chunk_rows=40, fragment_bytes=1024)
    return conch.connect(path, write_options=opts, maintenance=conch.Policy(auto=False))


VALUES = pa.schema([("x", pa.float64()), ("g", pa.struct([("y", pa.int64()), ("s", pa.string())]))])

# a write: (first id, count, step, which columns, x offset, null every k-th x)
writes = st.tuples(
    st.integers(0, 300),
    st.integers(1, 60),
    st.sampled_from([1, 2, 7]),
    st.sampled_from(["all", "x", "g"]),
    st.sampled_from([0.0, 1000.0, -500.0]),
    st.sampled_from([0, 3]),
)
deletes = st.tuples(st.just("delete"), st.integers(0, 300), st.integers(1, 40))
# the first op a write: a split of a table with no commit yet cannot be reopened (no commit time)
ops = st.tuples(writes, st.lists(st.one_of(writes, deletes), max_size=6)).map(lambda o: [o[0], *o[1]])

TERMS = [
    "x < {v}",
    "x >= {v}",
    "x == {v}",
    "x != {v}",
    "g.y > {i}",
    "g.y <= {i}",
    "g.s == 's{i}'",
    "x is None",
    "x is not None",
    "not (x < {v})",
    "x < {v} or x > {w}",
    "x < {v} or g.y > {i}",
    "id >= {i}",
    "x in [{v}, {w}]",
]
filters = st.lists(
    st.tuples(st.sampled_from(TERMS), st.integers(0, 400), st.floats(-600, 1400).map(round)),
    min_size=1,
    max_size=3,
)


def _apply(t: conch.Table, op: tuple[Any, ...]) -> None:
    if op[0] == "delete":
        t.delete(list(range(op[1], op[1] + op[2])))
        return
    start, count, step, cols, offset, nulls = op
    ids = list(range(start, start + count * step, step))
    data: dict[str, Any] = {"id": ids}
    if cols in ("all", "x"):
        data["x"] = [None if nulls and i % nulls == 0 else float(i) + offset for i in ids]
    if cols in ("all", "g"):
        data["g"] = [{"y": i, "s": f"s{i % 50}"} for i in ids]
    t.write(data)


def _where(terms: list[tuple[str, int, float]]) -> str:
    return " and ".join(f"({text.format(i=i, v=v, w=v + 100)})" for text, i, v in terms)


@settings(deadline=None, max_examples=60)
@given(ops, filters, st.sampled_from([1, 3, None]))
def test_candidate_splits_are_exactly_the_scan(table_ops: list[Any], terms: Any, n: int | None) -> None:
    with tempfile.TemporaryDirectory() as d:
        t = _catalog(Path(d)).create_table("t", [("id", pa.int64())], VALUES)
        for op in table_ops:
            _apply(t, op)
        scan = t.scan(where=parse(_where(terms)))
        want = scan.to_pylist()
        splits = scan.splits(n)
        assert 1 <= len(splits) <= (n or len(splits))
        parts = [s.to_arrow().to_pylist() for s in splits]
        assert [r for p in parts for r in p] == want  # disjoint, ordered, complete
        # the general path agrees (splits reopen the table with the scan's options)
        slow = [r for s in scan.with_options(fast_paths=False).splits(n) for r in s.to_arrow().to_pylist()]
        assert slow == want


def test_a_selective_filter_plans_one_split_per_matching_stretch(tmp_path: Path) -> None:
    t = _catalog(tmp_path).create_table("t", [("id", pa.int64())], VALUES)
    for run in range(10):  # ten disjoint runs of 40 rows, x rising with id: tight statistics
        ids = list(range(run * 100, run * 100 + 40))
        t.write({"id": ids, "x": [float(i) for i in ids]})
    assert len(t.state().key_spaces) == 10
    assert len(t.scan().splits(10)) == 10
    one = t.scan(where=t["x"] < 30)
    assert len(one.splits()) == 1 and one.splits()[0].to_arrow().num_rows == 30
    # asked for ten: all of them cut from the one matching run, none reads another run
    assert all(len(s.open().plan.key_spaces) == 1 for s in one.splits(10))
    assert sum(s.to_arrow().num_rows for s in one.splits(10)) == 30
    # two matching runs far apart: with two splits one for each, none for the eight runs between;
    # by default (40 rows) one split, their hull
    two = t.scan(where=(t["x"] < 30) | (t["x"] >= 930))
    parts = [s.to_arrow().column("id").to_pylist() for s in two.splits(2)]
    assert parts == [list(range(30)), list(range(930, 940))]
    assert [len(s.open().plan.key_spaces) for s in two.splits(2)] == [1, 1]
    assert len(two.splits()) == 1 and two.splits()[0].to_arrow().num_rows == 40
    # neighbouring matching runs are one stretch; nothing matching: one split that reads nothing
    near = t.scan(where=(t["x"] >= 200) & (t["x"] < 439))
    assert [s.to_arrow().num_rows for s in near.splits()] == [119]
    none = t.scan(where=t["x"] > 5000).splits(10)
    assert len(none) == 1 and none[0].open().to_arrow().num_rows == 0
    assert none[0].open().plan.key_spaces == []
    # a term true on nulls bounds nothing: keys with no x cell pass `x is None`
    t.write({"id": [5000], "g": [{"y": 1, "s": "a"}]})
    nulls = t.scan(where=t["x"].is_null())
    assert [r["id"] for s in nulls.splits(4) for r in s.to_arrow().to_pylist()] == [5000]


def test_splits_are_sized_by_the_records_a_range_filter_may_return(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path, maintenance=conch.Policy(auto=False))
    t = cat.create_table("t", [("id", pa.int64())], VALUES)
    t.write({"id": list(range(1000)), "x": [float(i) for i in range(1000)]})  # one fragment, x in [0, 999]
    plan = t.scan(where=(t["x"] < 100) & (t["x"] >= 0)).plan
    assert 90 <= estimated_rows(plan, plan.key_spaces) <= 110  # the tighter of the two terms
    assert estimated_rows(t.scan().plan, t.scan().plan.key_spaces) == 1000
    assert estimated_rows(t.scan(where=t["x"] > 2000).plan, plan.key_spaces) == 0


def test_a_run_cut_in_fragments_plans_splits_by_its_matching_stretches(tmp_path: Path) -> None:
    """One run cut into many fragments, a filter whose statistics rule some of them out: the
    splits are cut at the matching fragments' end keys (`candidates._rows_spans`). Their pairs of
    rows went to the distinct-values kernel as a 2-D array, and planning failed with a NumPy
    `ValueError` (a Spark read of such a table too)."""
    cat = conch.connect(
        tmp_path,
        write_options=conch.WriteOptions(chunk_rows=4000, fragment_bytes=1024),
        maintenance=conch.Policy(auto=False),
    )
    t = cat.create_table("t", [("id", pa.int64())], VALUES)
    t.write({"id": list(range(400)), "x": [float(i) for i in range(400)]})
    assert len(t.state().key_spaces) == 1 and len(t.state().fragments) >= 4
    scan = t.scan(where=(t["x"] < 30) | ((t["x"] >= 200) & (t["x"] < 230)))
    want = scan.to_arrow().column("id").to_pylist()
    assert want == [*range(30), *range(200, 230)]
    for n in (1, 2, 4):
        got = [i for s in scan.splits(n) for i in s.to_arrow().column("id").to_pylist()]
        assert got == want, n
