"""One input path: every form of the same rows writes the same table, and no value is dropped.

A list of dicts is the one form that can leave a field out of a row: it names no cell there
(tests/write/test_partial_upserts.py); here it is checked to read back every value it names.

Before the union rule, `t.write([{"id": 1}, {"id": 2, "x": 1.5}])` dropped `x` for every row
(`pa.Table.from_pylist` keeps only the first row's fields).
"""

from __future__ import annotations

import tempfile
from typing import Any

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch

SCHEMA = {
    "x": pa.float64(),
    "s": pa.string(),
    "g": pa.struct([("a", pa.int64()), ("b", pa.string())]),
    "kids": pa.list_(pa.struct([("$", pa.int64()), ("v", pa.float64())])),
}


def _kids() -> st.SearchStrategy[list[dict[str, Any]]]:
    kid = st.fixed_dictionaries({}, optional={"v": st.none() | st.floats(-10, 10, allow_nan=False)})
    return st.lists(kid, max_size=3).map(lambda ks: [{"$": i, **k} for i, k in enumerate(ks)])


ROW = st.fixed_dictionaries(
    {},
    optional={
        "x": st.none() | st.floats(-1e6, 1e6, allow_nan=False),
        "s": st.none() | st.text(max_size=5),
        "g": st.none()
        | st.fixed_dictionaries({}, optional={"a": st.none() | st.integers(-5, 5), "b": st.text(max_size=3)}),
        "kids": _kids(),
    },
)


def _typed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give every field some row has a typed value somewhere (an all-null field has no type in
    any form and is not written, inputs.py), keeping the rows' disjoint field sets and nulls."""
    fill = {"x": 1.0, "s": "s", "g": {"a": 1, "b": "b"}, "kids": [{"$": 0, "v": 1.0}]}
    for name, value in fill.items():
        having = [r for r in rows if name in r]
        if having and all(r[name] is None or r[name] in ([], {}) for r in having):
            having[0][name] = value
    gs = [r["g"] for r in rows if isinstance(r.get("g"), dict)]
    for r in rows:
        if r.get("g") == {}:
            r["g"] = None  # a struct without fields
    for sub, value in (("a", 1), ("b", "b")):
        with_sub = [g for g in gs if sub in g]
        if with_sub and all(g[sub] is None for g in with_sub):
            with_sub[0][sub] = value
    kids = [k for r in rows for k in r.get("kids") or []]
    with_v = [k for k in kids if "v" in k]
    if with_v and all(k["v"] is None for k in with_v):
        with_v[0]["v"] = 1.0
    return rows


def _arrow(rows: list[dict[str, Any]]) -> pa.Table:
    names = [n for n in SCHEMA if any(n in r for r in rows)]
    fields = [pa.field("id", pa.int64())]
    for n in names:
        t = SCHEMA[n]
        if n == "g":
            subs = [f for f in t if any(isinstance(r.get("g"), dict) and f.name in r["g"] for r in rows)]
            t = pa.struct(subs)
        if n == "kids":
            has_v = any("v" in k for r in rows for k in r.get("kids") or [])
            t = pa.list_(pa.struct([("$", pa.int64())] + ([("v", pa.float64())] if has_v else [])))
        fields.append(pa.field(n, t))
    schema = pa.schema(fields)
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)


def _forms(rows: list[dict[str, Any]]) -> dict[str, Any]:
    table = _arrow(rows)
    names = list(dict.fromkeys(k for r in rows for k in r))
    forms: dict[str, Any] = {
        "rows": rows,
        "columns": {n: [r.get(n) for r in rows] for n in names},
        "arrow": table,
        "batch": table.combine_chunks().to_batches()[0] if table.num_rows else table,
        "reader": pa.RecordBatchReader.from_batches(table.schema, table.to_batches()),
        "pandas": pd.DataFrame(rows),
        "polars": pl.from_arrow(table),
    }
    if len(rows) == 1 and "kids" not in rows[0]:  # a dict holding a list is refused as ambiguous
        forms["one dict"] = rows[0]
    return forms


def _read(t: conch.Table) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    levels = t.state().schema.levels
    kids = t.scan(level="kids").to_pylist() if "kids" in levels else []
    return t.scan().to_pylist(), kids


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ROW, min_size=1, max_size=6))
def test_every_input_form_writes_the_same_table(values: list[dict[str, Any]]) -> None:
    rows = _typed([{"id": i * 7, **v} for i, v in enumerate(values)])  # disjoint fields across rows, nulls
    with tempfile.TemporaryDirectory() as d:
        cat = conch.connect(d)
        seen: dict[str, Any] = {}
        # older cells under every key: a field a row lacks is a null cell in every table form
        old = [{"id": r["id"], "x": -1.0, "s": "old", "g": {"a": -1, "b": "old"}} for r in rows[::2]]
        for name, data in _forms(rows).items():
            t = cat.create_table(name.replace(" ", "_"), [("id", pa.int64())])
            t.write(old)
            t.write(data)
            seen[name] = _read(t)
        want = seen["arrow"]
        for name, got in seen.items():
            if name != "rows":  # the list of dicts keeps the older cells its rows leave out
                assert got == want, name
        for r in want[0]:  # the union's null fill replaced the older cells
            if r["id"] % 14 == 0:
                src = next(x for x in rows if x["id"] == r["id"])
                assert r["x"] == (src.get("x") if any("x" in x for x in rows) else -1.0)
        # no value is dropped: every top-level value of every row reads back, in both
        for by_id in ({r["id"]: r for r in want[0]}, {r["id"]: r for r in seen["rows"][0]}):
            _every_value_reads_back(rows, by_id)
        kids = {(k["id"], k["kids"]): k for k in want[1]}
        for r in rows:
            for kid in r.get("kids") or []:
                if "v" in kid:
                    assert kids[(r["id"], kid["$"])]["v"] == kid["v"], (kid, r)


def _every_value_reads_back(rows: list[dict[str, Any]], by_id: dict[Any, dict[str, Any]]) -> None:
    for r in rows:
        for k in ("x", "s"):
            if k in r:
                assert by_id[r["id"]][k] == r[k], (k, r)
        for k, v in (r.get("g") or {}).items():
            assert by_id[r["id"]]["g"][k] == v, ("g", k, r)


def test_list_of_dicts_takes_the_union_of_fields(tmp_path: Any) -> None:
    t = conch.connect(tmp_path).create_table("t", [("id", pa.uint64())])
    t.write([{"id": 1}, {"id": 2, "x": 1.5}])  # before: x was dropped for every row
    assert t.scan().to_pylist() == [{"id": 1, "x": None}, {"id": 2, "x": 1.5}]
    t.write([{"id": 3, "g": {"a": 1}}, {"id": 4, "g": {"b": "z"}}])  # union inside structs too
    assert t.scan(keys=[3, 4]).to_pylist() == [
        {"id": 3, "x": None, "g": {"a": 1, "b": None}},
        {"id": 4, "x": None, "g": {"a": None, "b": "z"}},
    ]
    t.write([{"id": 5, "kids": [{"$": 1}]}, {"id": 6, "kids": [{"$": 1, "v": 2.0}]}])  # and in child records
    assert t.scan(level="kids").to_pylist() == [{"id": 5, "kids": 1, "v": None}, {"id": 6, "kids": 1, "v": 2.0}]


def test_values_that_do_not_convert_are_refused_naming_the_field(tmp_path: Any) -> None:
    t = conch.connect(tmp_path).create_table("t", [("id", pa.uint64())])
    try:
        t.write([{"id": 1, "x": 1.5}, {"id": 2, "x": "a"}])
    except conch.SchemaError as e:
        assert "'x'" in str(e)
    else:
        raise AssertionError("mixed types were written")
    try:
        t.write(pd.DataFrame({"id": [1, 2], "y": [1.5, "a"]}))
    except conch.SchemaError as e:
        assert "'y'" in str(e)
    else:
        raise AssertionError("mixed types were written")
    try:
        t.write([{"id": 1}, 5])
    except conch.SchemaError as e:
        assert "row 1" in str(e)
    else:
        raise AssertionError("a non-dict row was written")
    assert t.history() == []


def test_a_column_given_twice_is_refused_in_every_form(tmp_path: Any) -> None:
    t = conch.connect(tmp_path).create_table("t", [("id", pa.uint64())])
    for data in (
        pd.DataFrame([[1, 2.0, 3.0]], columns=["id", "x", "x"]),  # before: an untyped ValueError
        pa.table([pa.array([1]), pa.array([2.0]), pa.array([3.0])], names=["id", "x", "x"]),
    ):
        try:
            t.write(data)
        except conch.SchemaError as e:
            assert "['x'] appear more than once" in str(e)
        else:
            raise AssertionError("a column given twice was written")
    with pytest.raises(conch.DuplicateKeyError):  # a key given twice: rows have no order, no winner
        t.write([{"id": 1, "x": 1.0}, {"id": 1, "x": 2.0}])
    assert t.history() == []
