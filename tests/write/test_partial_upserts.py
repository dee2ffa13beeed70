"""A list of dicts upserts only the cells each row names (issue 32, item 1).

A field a row leaves out names no cell (its older value stays); an explicit `None` names a null
cell; rows naming different fields in one write are still one commit. Checked against a naive
model of cells over random writes with mixed field sets, at the root, in a struct (column group)
and in child records.
"""

from __future__ import annotations

import tempfile
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conch

VALUE = {
    "x": st.none() | st.integers(-100, 100),
    "s": st.none() | st.text(max_size=3),
}
GROUP = st.fixed_dictionaries({}, optional={"a": st.none() | st.integers(-5, 5), "b": st.none() | st.text(max_size=2)})
KID = st.fixed_dictionaries({"$": st.integers(0, 3)}, optional={"v": st.none() | st.floats(-9, 9, allow_nan=False)})
ROW = st.fixed_dictionaries(
    {"id": st.integers(0, 6)},
    optional={**VALUE, "g": GROUP, "kids": st.lists(KID, max_size=3, unique_by=lambda k: k["$"])},
)
WRITE = st.lists(ROW, min_size=1, max_size=6, unique_by=lambda r: r["id"])
TYPES = {"x": pa.int64(), "s": pa.string(), "g.a": pa.int64(), "g.b": pa.string(), "v": pa.float64()}


def _schema_for(t: conch.Table) -> None:
    """Give every column its type first, so an all-null field is still a cell (inputs.py)."""
    t.write(
        pa.table(
            {
                "id": pa.array([100], pa.int64()),
                "x": pa.array([0], pa.int64()),
                "s": pa.array(["z"]),
                "g": pa.array([{"a": 0, "b": "z"}], pa.struct([("a", pa.int64()), ("b", pa.string())])),
                "kids": pa.array([[{"$": 0, "v": 0.0}]], pa.list_(pa.struct([("$", pa.int64()), ("v", pa.float64())]))),
            }
        )
    )
    t.delete([100])


def _writes(t: conch.Table) -> int:
    return sum(c.kind == "write" for c in t.history())  # compactions commit too


def _apply(model: dict[Any, dict[str, Any]], kids: dict[Any, dict[str, Any]], write: list[dict[str, Any]]) -> None:
    for row in write:
        cells = model.setdefault(row["id"], {})
        for name in ("x", "s"):
            if name in row:
                cells[name] = row[name]
        for sub, value in row.get("g", {}).items():
            cells["g." + sub] = value
        for kid in row.get("kids", []):
            kc = kids.setdefault((row["id"], kid["$"]), {})
            if "v" in kid:
                kc["v"] = kid["v"]


@settings(deadline=None, max_examples=40)
@given(st.lists(WRITE, min_size=1, max_size=4))
def test_a_list_of_dicts_upserts_only_the_cells_it_names(writes: list[list[dict[str, Any]]]) -> None:
    model: dict[Any, dict[str, Any]] = {}
    kids: dict[Any, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as d:
        t = conch.connect(d).create_table("t", [("id", pa.int64())])
        _schema_for(t)
        for w in writes:
            before = _writes(t)
            t.write(w)
            assert _writes(t) == before + 1  # one commit, whatever the field sets
            _apply(model, kids, w)
        got = {r["id"]: r for r in t.scan().to_pylist()}
        assert sorted(got) == sorted(model)
        for k, cells in model.items():
            row = got[k]
            flat = {"x": row["x"], "s": row["s"], "g.a": row["g"]["a"], "g.b": row["g"]["b"]}
            assert flat == {n: cells.get(n) for n in flat}, (k, row, cells)
        got_kids = {(r["id"], r["kids"]): r["v"] for r in t.scan(level="kids").to_pylist()}
        assert got_kids == {k: c.get("v") for k, c in kids.items()}


def test_the_issue_example(tmp_path: Any) -> None:
    t = conch.connect(tmp_path).create_table("t", [("id", pa.int64())])
    t.write([{"id": 10, "label": 1, "caption": "a"}, {"id": 11, "label": 2, "caption": "b"}])
    t.write([{"id": 10, "label": 99}, {"id": 11, "caption": "relabelled"}, {"id": 12, "label": None}])
    assert _writes(t) == 2
    assert t.scan().to_pylist() == [
        {"id": 10, "label": 99, "caption": "a"},
        {"id": 11, "label": 2, "caption": "relabelled"},
        {"id": 12, "label": None, "caption": None},
    ]


def test_a_key_in_two_field_sets_is_still_a_duplicate(tmp_path: Any) -> None:
    t = conch.connect(tmp_path).create_table("t", [("id", pa.int64())])
    with pytest.raises(conch.DuplicateKeyError):
        t.write([{"id": 1, "x": 1}, {"id": 1, "y": 2}])
    assert t.history() == []
