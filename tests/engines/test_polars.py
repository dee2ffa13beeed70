"""`conch.engines.polars.scan`: results equal Polars over a materialised scan; pushed work shows in the scan.

The property test builds random predicates (comparisons on floats with NaN and null, strings,
struct fields, the key, `is_in`, `is_between`, `is_null`, `~`, `|`, `&` and terms Conch cannot
evaluate) and checks the plugin against `DataFrame.filter` on the whole table: the translation
must never drop a row Polars keeps, nor keep one it drops.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

import conch
import conch.engines.polars as cpl
from helpers import engine_table


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> conch.Table:
    return engine_table(tmp_path_factory.mktemp("wh"), lambda i: b"\x00" * (i % 3))


def _lit_float() -> st.SearchStrategy[float]:
    return st.sampled_from([-5.0, 0.0, 1.5, 3.25, 9.9, 100.0])


def _atoms() -> st.SearchStrategy[Any]:
    x, s, a, k = pl.col("x"), pl.col("s"), pl.col("g").struct.field("a"), pl.col("id")
    cmp = st.sampled_from(["lt", "le", "gt", "ge", "eq", "ne"])

    def compare(e: Any, op: str, v: Any, flip: bool) -> Any:
        lit = pl.lit(v)
        left, right = (lit, e) if flip else (e, lit)
        return {
            "lt": left < right,
            "le": left <= right,
            "gt": left > right,
            "ge": left >= right,
            "eq": left == right,
            "ne": left != right,
        }[op]

    return st.one_of(
        st.builds(compare, st.just(x), cmp, _lit_float(), st.booleans()),
        st.builds(compare, st.just(k), cmp, st.integers(-10, 420), st.booleans()),
        st.builds(compare, st.just(a), cmp, st.integers(-1, 4), st.booleans()),
        st.builds(compare, st.just(s), cmp, st.sampled_from(["s0", "s3", "zz"]), st.booleans()),
        st.builds(lambda v: x.is_between(v, v + 3), _lit_float()),
        st.builds(lambda vs: s.is_in(vs), st.lists(st.sampled_from(["s1", "s2", "s6"]), min_size=1, max_size=3)),
        st.builds(lambda vs: k.is_in(vs), st.lists(st.integers(0, 399), min_size=1, max_size=4)),
        st.sampled_from([x.is_null(), s.is_not_null(), x.is_nan(), s.str.starts_with("s1"), (x * 2) > 3]),
    )


def _predicates() -> st.SearchStrategy[Any]:
    return st.recursive(
        _atoms(),
        lambda inner: st.one_of(
            st.builds(lambda a, b: a & b, inner, inner),
            st.builds(lambda a, b: a | b, inner, inner),
            st.builds(lambda a: ~a, inner),
        ),
        max_leaves=4,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pred=_predicates(), cols=st.sampled_from([None, ["id", "x"], ["s"], ["g", "id"]]))
def test_filter_and_project_equal_polars_over_the_whole_table(table: conch.Table, pred: Any, cols: Any) -> None:
    whole = table.scan().to_polars()
    want = whole.filter(pred)
    got = cpl.scan(table).filter(pred)
    if cols is not None:
        want, got = want.select(cols), got.select(cols)
    assert got.collect().equals(want)


def test_pushed_filter_and_key_range_show_in_the_scan(table: conch.Table) -> None:
    scans: list[conch.Scan] = []
    lf = cpl.scan(table, on_scan=scans.append)
    out = lf.filter((pl.col("x") < 0) & (pl.col("id") >= 200) & pl.col("s").str.ends_with("3")).select("id").collect()
    (sc,) = scans
    assert repr(sc.plan.filter) == "(x < 0.0)"
    assert sc.plan.key_predicate == conch.KeyRange((200,), None)
    # Conch returned only rows passing its part of the filter: x < 0 holds for no id >= 200.
    assert sc.metrics().rows_out == 0 and out.height == 0
    assert [c.path for c in sc.plan.columns] == ["s", "x"]  # `g` is never read


def test_projection_reads_only_named_groups_and_n_rows_becomes_a_limit(table: conch.Table) -> None:
    scans: list[conch.Scan] = []
    lf = cpl.scan(table, on_scan=scans.append)
    out = lf.select("id", "g").head(7).collect()
    assert out.columns == ["id", "g"] and out["id"].to_list() == list(range(7))
    assert [c.path for c in scans[-1].plan.columns] == ["g.a", "g.b"]
    assert scans[-1].metrics().rows_out == 7
    keys_only = lf.select("id").collect()
    assert keys_only["id"].to_list() == table.scan("x").to_arrow().column("id").to_pylist()


def test_uri_asof_and_a_version_pinned_at_scan(table: conch.Table, tmp_path_factory: pytest.TempPathFactory) -> None:
    first = table.history()[0]
    uri = f"{table.log.uri}/{table.name}"
    old = cpl.scan(uri, asof=first.time).select("id", "x").collect()
    assert old.equals(pl.from_arrow(table.scan("x", asof=first.time).to_arrow()))
    lf = cpl.scan(table)
    before = lf.collect()
    table.write({"id": [1000], "x": [0.5]})
    try:
        assert lf.collect().equals(before)  # the frame reads the version of `scan`
        assert cpl.scan(table).collect().height == before.height + 1
    finally:
        table.delete([1000])


def test_bad_source_is_a_typed_error() -> None:
    with pytest.raises(conch.ConchError, match="warehouse"):
        cpl.scan("no-slash")
    with pytest.raises(conch.ConchError, match=r"conch\.Table"):
        cpl.scan(42)  # type: ignore[arg-type]


def test_child_level(tmp_path: Any) -> None:
    cat = conch.connect(tmp_path / "wh")
    t = cat.create_table("r", [("scene", pa.utf8())])
    clips = pa.list_(pa.struct([("$", pa.utf8()), ("duration", pa.float64())]))
    t.write(
        pa.table(
            {
                "scene": ["a", "b"],
                "clips": pa.array(
                    [[{"$": "c1", "duration": 1.0}, {"$": "c2", "duration": 4.0}], [{"$": "c1", "duration": 9.0}]],
                    clips,
                ),
            }
        )
    )
    got = cpl.scan(t, level="clips").filter(pl.col("duration") > 2).collect()
    assert got.to_dicts() == [
        {"scene": "a", "clips": "c2", "duration": 4.0},
        {"scene": "b", "clips": "c1", "duration": 9.0},
    ]
