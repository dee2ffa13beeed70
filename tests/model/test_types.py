"""Types of spec/004 round-trip exactly; types Conch cannot store are refused before any file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conch
from conch.errors import SchemaError

F16 = st.floats(width=16, allow_nan=False, allow_infinity=False).map(lambda x: x + 0.0)  # -0.0 is 0.0 as a key


def _f16(values: list[float | None]) -> pa.Array:
    return pa.array([None if v is None else np.float16(v) for v in values], pa.float16())


@settings(deadline=None, max_examples=25)
@given(
    st.lists(st.tuples(F16, st.one_of(st.none(), F16)), min_size=1, max_size=40, unique_by=lambda r: r[0]),
    st.lists(F16, max_size=5),
    F16,
)
def test_float16_keys_and_values_match_a_model(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[float, float | None]], deleted: list[float], pivot: float
) -> None:
    opts = conch.WriteOptions(chunk_rows=7, fragment_bytes=64, large_value_bytes=1 << 30)
    cat = conch.connect(tmp_path_factory.mktemp("w") / "w", write_options=opts)
    t = cat.create_table("h", [("k", pa.float16())])
    t.write(pa.table({"k": _f16([k for k, _ in rows]), "h": _f16([v for _, v in rows])}))  # unsorted, several runs
    model = dict(rows)
    if deleted:
        t.delete(deleted)
        for d in deleted:
            model.pop(d, None)
    out = t.scan().to_arrow()
    assert out.schema.field("k").type == pa.float16() and out.schema.field("h").type == pa.float16()
    assert out.to_pylist() == [{"k": k, "h": model[k]} for k in sorted(model)]
    want = [k for k in sorted(model) if model[k] is not None and model[k] > pivot]
    assert [r["k"] for r in t.scan(where=t["h"] > pivot).to_pylist()] == want
    assert [r["k"] for r in t.scan(keys=conch.KeyRange((pivot,), None)).to_pylist()] == [
        k for k in sorted(model) if k >= pivot
    ]
    present = [k for k in sorted(model) if model[k] in (pivot, 0.0)]
    assert [r["k"] for r in t.scan(where=t["h"].isin([pivot, 0.0])).to_pylist()] == present


def test_float16_stats_prune_fragments(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "w", write_options=conch.WriteOptions(fragment_bytes=512))
    t = cat.create_table("h", [("id", pa.int64())])
    t.write({"id": list(range(1000)), "h": _f16([i / 16 for i in range(1000)])})  # sorted: tight stats
    scan = t.scan(where=t["h"] >= 60.0)
    assert [r["id"] for r in scan.to_pylist()] == list(range(960, 1000))
    m = scan.metrics()
    assert m.fragments_considered > 2 and m.fragments_pruned_by_stats >= m.fragments_considered - 2


def test_float16_composite_key(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "w")
    t = cat.create_table("h", [("a", pa.float16()), ("b", pa.string())])
    t.write(pa.table({"a": _f16([2.5, 0.5, 2.5]), "b": ["x", "y", "a"], "v": [1, 2, 3]}))
    t.write(pa.table({"a": _f16([0.5]), "b": ["y"], "v": [20]}))
    t.delete([(2.5, "x")])
    assert t.scan().to_pylist() == [{"a": 0.5, "b": "y", "v": 20}, {"a": 2.5, "b": "a", "v": 3}]


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (pa.array([1, 2], pa.duration("us")), "durations are not storable; write them as int64"),
        (pa.array([pa.MonthDayNano([1, 2, 3])] * 2, pa.month_day_nano_interval()), "intervals are not storable"),
        (
            pa.UnionArray.from_sparse(
                pa.array([0, 1], pa.int8()), [pa.array([1, 2]), pa.array(["x", "y"])], ["i", "s"]
            ),
            "unions are not storable",
        ),
        (pa.array([b"ab", b"cd"], pa.binary(2)), "fixed-size binary is not storable"),
        (pa.array([[1], [2]], pa.list_(pa.duration("s"))), "durations are not storable"),
        (pa.array([{"d": 1}, {"d": 2}], pa.struct([("d", pa.duration("s"))])), "durations are not storable"),
    ],
)
def test_unstorable_types_are_refused_before_any_file(catalog: conch.Catalog, array: pa.Array, message: str) -> None:
    t = catalog.create_table("t", [("id", pa.int64())])
    t.write({"id": [1, 2], "x": [1.0, 2.0]})
    files = {f.path for f in catalog.warehouse.storage.list(t.id)}
    with pytest.raises(SchemaError, match=f"column 'v.*{message}"):
        t.write(pa.table({"id": [3, 4], "v": array}))
    assert {f.path for f in catalog.warehouse.storage.list(t.id)} == files  # refused before any file was written
    assert len(t.history()) == 1 and t.scan().to_pylist() == [{"id": 1, "x": 1.0}, {"id": 2, "x": 2.0}]
    with pytest.raises(SchemaError, match=message):
        catalog.create_table("u", [("id", pa.int64())], pa.schema([("v", array.type)]))


@pytest.mark.parametrize(
    "array",
    [
        pa.array([1, None], pa.date32()),
        pa.array([1, None], pa.time64("us")),
        pa.array([1, None], pa.decimal128(10, 2)),
        pa.array([1, None], pa.timestamp("ns", "UTC")),
        pa.array([[np.float16(1)], None], pa.list_(pa.float16())),
        pa.array([[("a", 1)], None], pa.map_(pa.string(), pa.int64())),
    ],
)
def test_storable_value_types_round_trip(catalog: conch.Catalog, array: pa.Array) -> None:
    t = catalog.create_table("t", [("id", pa.int64())])
    t.write(pa.table({"id": [1, 2], "v": array}))
    out = t.scan().to_arrow()
    assert out.column("v").to_pylist() == array.to_pylist()
