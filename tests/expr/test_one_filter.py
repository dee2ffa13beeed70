"""One filter tree, one key rule: `t["x"]`, `t.x` and `_.x` build the same filter; key values
convert only exactly; the core scan, Spark, Polars and DuckDB agree on the keys a filter allows."""

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
from conch.errors import InexactKeyError, InvalidKeyError, KeyTypeError, SchemaError
from conch.expr.tree import And, Cmp, Col, IsIn, Lit, mask
from conch.model.keys import KeyPrefix, KeyRange
from conch.nested import _
from conch.nested.api import NoSuchName
from conch.scan.filter import extract


@pytest.fixture
def table(tmp_path: Any) -> conch.Table:
    t = conch.connect(tmp_path).create_table("t", [("id", pa.uint64())])
    t.write([{"id": i, "x": float(i)} for i in range(10)])
    return t


# ----- exact key casting --------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [5.5, -1, 2**64, float("nan")])
def test_a_key_that_does_not_convert_exactly_is_refused(table: conch.Table, bad: Any) -> None:
    # before: scan(keys=[5.5]) on a uint64 key returned key 5
    for call in (
        lambda: table.scan(keys=[bad]).to_pylist(),
        lambda: table.scan(keys=KeyRange(bad, None)).to_pylist(),
        lambda: table.scan(keys=KeyPrefix((bad,))).to_pylist(),
        lambda: table.delete([bad]),
    ):
        with pytest.raises(InvalidKeyError, match="'id'") as e:
            call()
        assert isinstance(e.value, KeyTypeError | InvalidKeyError)
    assert [c.kind for c in table.history()] == ["write"]
    assert issubclass(InexactKeyError, InvalidKeyError) and issubclass(InexactKeyError, KeyTypeError)


def test_a_whole_float_is_the_key_it_equals(table: conch.Table) -> None:
    assert table.scan(keys=[5.0]).to_pylist() == [{"id": 5, "x": 5.0}]
    with pytest.raises(KeyTypeError, match="'id'"):
        table.scan(keys=["5"])
    with pytest.raises(KeyTypeError, match="'id'"):
        table.scan(keys=[True])


@pytest.mark.parametrize("keys", [["id"], "id", [("id",)], [("id", pa.int64(), 1)], [(1, pa.int64())]])
def test_a_key_schema_must_be_name_type_pairs(tmp_path: Any, keys: Any) -> None:
    cat = conch.connect(tmp_path)
    with pytest.raises((SchemaError, KeyTypeError)):  # before: ["id"] made a float64 key named "i"
        cat.create_table("k", keys)
    assert cat.list_tables() == []


# ----- one filter tree -----------------------------------------------------------------------------
def test_where_takes_t_attr_t_item_and_underscore_as_one_tree(table: conch.Table) -> None:
    want = [{"id": i, "x": float(i)} for i in range(7, 10)]
    assert repr((table.x > 6).__conch_expr__()) == repr(table["x"] > 6)
    for where in (table["x"] > 6, table.x > 6, _.x > 6, ~(table.x <= 6)):  # before: t.x > 6 was refused
        assert table.scan(where=where).to_pylist() == want
    assert table.scan(where=(table.col("id") >= 7) & (table.x < 100)).to_pylist() == want  # t.id is the table id
    with pytest.raises(conch.ExpressionError, match="not a row filter"):
        table.scan(where=table.x + 1)
    table.delete(where=_.x > 6)
    assert [r["id"] for r in table.scan().to_pylist()] == list(range(7))


def test_core_and_nested_filters_combine_either_way_round(table: conch.Table) -> None:
    # before: t["id"] < 5 & t.x > 2 wrapped the nested side as a literal: ArrowInvalid or IndexError at scan
    want = [{"id": i, "x": float(i)} for i in (3, 4)]
    for where in ((table["id"] < 5) & (table.x > 2), (table.x > 2) & (table["id"] < 5), (_.x > 2) & (table["id"] < 5)):
        assert table.scan(where=where).to_pylist() == want
    assert len(table.scan(where=(table["id"] < 1) | (table.x > 8)).to_pylist()) == 2
    assert len(table.scan(where=(table.x > 8) | (table["id"] < 1)).to_pylist()) == 2
    with pytest.raises(conch.ExpressionError, match="not a row filter"):
        (table["id"] < 5) & (table.x + 1)
    with pytest.raises(conch.ExpressionError, match="combines filters; got int"):
        (table["id"] < 5) & 5


def test_nested_where_takes_core_filters(table: conch.Table) -> None:
    assert table.where(table["x"] > 7).select(y=_.x).scan().to_arrow().column("y").to_pylist() == [8.0, 9.0]
    assert table.where(table["id"].isin([1, 3])).select(y=_.x).scan().to_arrow().column("y").to_pylist() == [1.0, 3.0]


def test_the_root_key_is_addressable_and_the_root_level_selects(tmp_path: Any) -> None:
    t = conch.connect(tmp_path).create_table("grapes", [("cultivar", pa.string())])
    t.write(
        [{"cultivar": "merlot", "w": 1.0, "vines": [{"$": 1, "h": 2.0}, {"$": 2, "h": 3.0}]}, {"cultivar": "syrah"}]
    )
    # before: t.cultivar raised NoSuchName and t.select did not exist
    out = t.select(c=t.cultivar, n=t.vines.count()).scan().to_arrow()
    assert out.select(["c", "n"]).to_pylist() == [{"c": "merlot", "n": 2}, {"c": "syrah", "n": 0}]
    assert t.vines.select(c=t.cultivar, h=_.h).scan().to_arrow().column("c").to_pylist() == ["merlot", "merlot"]
    assert t.scan(where=t.cultivar == "syrah").to_pylist() == [{"cultivar": "syrah", "w": None}]
    scan = t.scan(where=t.cultivar == "syrah")
    assert scan.plan.filter is None  # the key term became a key range
    assert t.where(_.cultivar == "merlot").select(w=_.w).scan().to_arrow().column("w").to_pylist() == [1.0]
    with pytest.raises(NoSuchName, match="cultivar"):
        t.nope  # noqa: B018 - the message lists the key too


# ----- one key rule, four engines -------------------------------------------------------------------
LITERALS = [5, 5.0, 5.5, -1, 2**64, float("nan"), None, "5", True, b"5"]
OPS = ["<", "<=", ">", ">=", "=="]
TYPES = [pa.uint64(), pa.int8(), pa.float64(), pa.string()]


def _polars_range(field: pa.Field, op: str, v: Any) -> Any:
    import polars as pl

    from conch.engines.polars_expr import PolarsTranslator

    col = pl.col(field.name)
    try:
        lit = pl.lit(v)
    except Exception:  # a literal Polars cannot build: nothing to push
        return None
    pred = {"<": col < lit, "<=": col <= lit, ">": col > lit, ">=": col >= lit, "==": col == lit}[op]
    where = PolarsTranslator({}, [field]).translate(pred).where
    return extract(where, [field]).predicate([field]) if where is not None else None


@pytest.mark.parametrize("t", TYPES, ids=str)
def test_core_spark_and_polars_take_the_same_key_range(t: pa.DataType) -> None:
    field = pa.field("id", t)
    for op in OPS:
        for v in LITERALS:
            term = Cmp(op, Col("id"), Lit(v))
            core = extract(term, [field]).range
            if isinstance(v, int | float) and not isinstance(v, bool) and not (isinstance(v, int) and v >= 2**63):
                assert _polars_range(field, op, v) == core, (t, op, v)
            bad = v is None or isinstance(v, bool) or (isinstance(v, float) and math.isnan(v))
            if bad or (pa.types.is_integer(t) and v in (5.5, -1, 2**64) and not (v == -1 and t == pa.int8())):
                assert core is None, (t, op, v)


def test_duckdb_returns_what_the_filter_says(table: conch.Table) -> None:
    import duckdb

    import conch.engines.duckdb as cdb

    scans: list[Any] = []
    src = cdb.source(table, on_scan=scans.append)  # noqa: F841 - found by name by DuckDB
    for where, want in [
        ("id > 5.5", [6, 7, 8, 9]),
        ("id >= 5.0 and id < 7", [5, 6]),
        ("id = 5.5", []),
        ("id > -1", list(range(10))),
        ("id in (3, 5.5, 7)", [3, 7]),
        ("id <= 18446744073709551615", list(range(10))),
    ]:
        got = [r[0] for r in duckdb.sql(f"select id from src where {where} order by id").fetchall()]
        assert got == want, where


def test_where_compares_by_value_and_isin_never_rounds(table: conch.Table) -> None:
    ids = lambda where: [r["id"] for r in table.scan(where=where).to_pylist()]  # noqa: E731
    assert ids(table["id"].isin([1, 2.5, 3])) == [1, 3]  # before: 2.5 was cast to 2 and matched
    table.write([{"id": 2, "n": 2}])
    assert ids(table["n"].isin([2.5])) == [] and ids(table["n"].isin([2.0])) == [2]
    assert ids(table["id"] < 2.5) == [0, 1, 2] and ids(table["id"] > -1) == list(range(10))
    with pytest.raises(conch.ExpressionError, match="outside every Arrow integer type"):
        ids(table["x"] < 2**64)  # before: an untyped OverflowError


def test_isin_and_root_keys_push_down_from_every_spelling(tmp_path: Any) -> None:
    t = conch.connect(tmp_path).create_table("grapes", [("cultivar", pa.string())])
    t.write([{"cultivar": c, "w": float(i), "vines": [{"$": 1, "h": float(i)}]} for i, c in enumerate("abcd")])
    assert repr(t.cultivar.isin(["a", "c"]).__conch_expr__()) == repr(t["cultivar"].isin(["a", "c"]))
    scan = t.scan(where=t.cultivar.isin(["a", "c"]))
    assert [r["cultivar"] for r in scan.to_pylist()] == ["a", "c"] and scan.plan.filter is None  # exact keys
    q = t.vines.where(t.cultivar == "b").select(h=_.h)  # a root key read from a child level
    assert q.scan().to_arrow().column("h").to_pylist() == [1.0]
    assert "pushed into scan" in q.explain()
    assert t.vines.where(_.h.isin([2, 3.5])).select(h=_.h).scan().to_arrow().column("h").to_pylist() == [2.0]


def test_nested_row_selection_converts_keys_exactly(tmp_path: Any) -> None:
    t = conch.connect(tmp_path).create_table("t", [("id", pa.uint64())])
    t.write([{"id": 1, "kids": [{"$": 1, "v": 2.0}]}])
    assert t.kids[1.0].scan().to_arrow().num_rows == t.kids[[1.0]].scan().to_arrow().num_rows == 1
    for key in (1.5, [1.5], [-1]):
        with pytest.raises(InexactKeyError, match="'id'"):
            t.kids[key].scan().to_arrow()


LIT = st.one_of(st.integers(-3, 260), st.floats(-3, 260), st.just(float("nan")), st.none(), st.just("7"))


@settings(deadline=None, max_examples=300)
@given(
    st.lists(st.tuples(st.sampled_from([*OPS, "!="]), LIT), min_size=1, max_size=3),
    st.none() | st.lists(st.integers(-2, 258) | st.sampled_from([2.5, 7.0]), min_size=1, max_size=4),
)
def test_extract_is_exactly_the_filter(terms: list[tuple[str, Any]], members: list[Any] | None) -> None:
    """The range (or keys) plus the residual select exactly the keys the whole filter selects,
    and the range alone holds every one of them (what Spark and Polars rely on)."""
    field = pa.field("id", pa.uint8())
    filt: Any = None
    for op, v in terms:
        term = Cmp(op, Col("id"), Lit(v))
        filt = term if filt is None else And(filt, term)
    if members is not None:
        filt = And(filt, IsIn(Col("id"), tuple(members)))
    ids = pa.array(range(256), pa.uint8())
    try:
        want = set(np.flatnonzero(mask(filt, lambda _: ids)).tolist())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return  # a comparison Arrow has no kernel for ("7" with uint8): not a key question
    f = extract(filt, [field])
    in_range = {
        k
        for k in range(256)
        if (
            f.range is None
            or ((f.range.start is None or (k,) >= f.range.start) and (f.range.end is None or (k,) < f.range.end))
        )
    }
    admitted = in_range if f.keys is None else {k for (k,) in f.keys} & in_range
    assert want <= in_range and want <= admitted, (filt, f)
    rest = set(range(256)) if f.residual is None else set(np.flatnonzero(mask(f.residual, lambda _: ids)).tolist())
    assert admitted & rest == want, (filt, f)


def test_a_float_literal_compares_with_a_decimal_column_by_value(tmp_path: Path) -> None:
    """Arrow's cast rounds 0.051 to the decimal 0.05; comparing with the rounded literal dropped
    the row holding 0.05 from `d < 0.051` (and kept it in `d > 0.049` only by luck)."""
    from decimal import Decimal

    t = conch.connect(tmp_path / "w").create_table("d", [("id", pa.int64())])
    values = [Decimal("0.04"), Decimal("0.05"), Decimal("0.06")]
    t.write(pa.table({"id": [1, 2, 3], "d": pa.array(values, pa.decimal128(12, 2))}))
    assert t.scan("d", where=t["d"] < 0.051).to_arrow().to_pydict()["id"] == [1, 2]
    assert t.scan("d", where=t["d"] <= 0.05).to_arrow().to_pydict()["id"] == [1, 2]
    assert t.scan("d", where=t["d"] > 0.051).to_arrow().to_pydict()["id"] == [3]
    assert t.scan("d", where=t["d"] == 0.051).to_arrow().to_pydict()["id"] == []
