"""Every filter type runs inside the Vortex scan or is declined, and pushing never changes a row
(issue 25).

The reference is Arrow's evaluation of the filter (`conch.expr.tree.mask`) on the whole table read
without a filter. For every type a DuckDB or Conch filter can compare (ints, floats with NaN,
-NaN, ±0.0 and ±inf, strings, binary, bools, dates, timestamps with and without a zone, decimals)
and every form (comparisons, `IN`, `BETWEEN`, prefix `LIKE`, `IS [NOT] NULL`, `NOT`, `AND`,
`OR`):

- the scan returns exactly the reference rows;
- `explain()` names where each term ran ("in the Vortex scan" / "in Arrow"), and a term with an
  exact literal always runs in the Vortex scan;
- a filter pushed whole keeps the scan on the streamed path the unfiltered scan takes ("zip
  (streamed)", each fragment filtered in-file): accepting a filter never drops a scan onto the
  general merge path (before issue 25, a date, decimal, IN or NOT term did).

Before this change: dates, timestamps, decimals, binary, bools, IN, NOT and any float
comparison with 0 (-0.0 vs 0.0: Vortex orders floats totally) were either not pushed (streamed
path lost) or, for floats, pushed with different answers for -0.0 and -NaN.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from decimal import Decimal
from pathlib import Path

import duckdb
import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

import conch
import conch.engines.duckdb as cdb
from conch.expr.syntax import parse
from conch.expr.tree import And, Cmp, Col, Expr, IsIn, IsNull, Lit, Not, Or
from conch.expr.tree import mask as filter_mask

N = 240
NEG_NAN = struct.unpack("d", struct.pack("Q", 0xFFF8000000000000))[0]
FLOATS = [math.nan, NEG_NAN, -0.0, 0.0, math.inf, -math.inf, None, 1.5, -2.25, 3.0]
DAY0 = dt.date(1995, 1, 1)
TS0 = dt.datetime(2020, 3, 1, 12, 0, 0)


def _data() -> pa.Table:
    def nulls(i: int, v: object) -> object:
        return None if i % 13 == 5 else v

    return pa.table(
        {
            "id": pa.array(range(N), pa.int64()),
            "i": pa.array([nulls(i, (i * 7) % 50 - 10) for i in range(N)], pa.int32()),
            "f": pa.array([FLOATS[i % len(FLOATS)] for i in range(N)], pa.float64()),
            "s": pa.array([nulls(i, f"k{(i * 3) % 40:02d}") for i in range(N)], pa.string()),
            "b": pa.array([nulls(i, bytes([i % 5, 65])) for i in range(N)], pa.binary()),
            "ok": pa.array([nulls(i, i % 3 == 0) for i in range(N)], pa.bool_()),
            "d": pa.array([nulls(i, DAY0 + dt.timedelta(days=(i * 11) % 90)) for i in range(N)], pa.date32()),
            "ts": pa.array(
                [nulls(i, TS0 + dt.timedelta(minutes=(i * 17) % 300)) for i in range(N)], pa.timestamp("us")
            ),
            "tz": pa.array(
                [nulls(i, (TS0 + dt.timedelta(hours=i % 48)).replace(tzinfo=dt.UTC)) for i in range(N)],
                pa.timestamp("us", tz="UTC"),
            ),
            "dec": pa.array([nulls(i, Decimal((i * 37) % 1000) / 100) for i in range(N)], pa.decimal128(15, 2)),
        }
    )


@pytest.fixture(scope="module")
def typed(tmp_path_factory: pytest.TempPathFactory) -> tuple[conch.Table, pa.Table]:
    path: Path = tmp_path_factory.mktemp("wh")
    cat = conch.connect(path)
    t = cat.create_table("typed", [("id", pa.int64())])
    t.write(_data())
    t.wait_for_maintenance()
    return t, t.scan().to_arrow()


# exact literals of each column's type (values present in the data and between them)
_LITERALS: dict[str, st.SearchStrategy[object]] = {
    "i": st.integers(-12, 42),
    "f": st.sampled_from([-0.0, 0.0, 1.5, -2.25, 2.0, math.inf, -math.inf, 3]),
    "s": st.sampled_from(["k00", "k07", "k2", "k39", "zz", ""]),
    "b": st.sampled_from([b"\x00A", b"\x02A", b"\x04", b""]),
    "ok": st.booleans(),
    "d": st.integers(-5, 95).map(lambda n: DAY0 + dt.timedelta(days=n)),
    "ts": st.integers(-10, 310).map(lambda n: TS0 + dt.timedelta(minutes=n)),
    "tz": st.integers(-2, 50).map(lambda n: (TS0 + dt.timedelta(hours=n)).replace(tzinfo=dt.UTC)),
    "dec": st.integers(-5, 1005).map(lambda n: Decimal(n) / 100),
}
_OPS = st.sampled_from(["<", "<=", ">", ">=", "==", "!="])


def _atom(column: str) -> st.SearchStrategy[Expr]:
    lit = _LITERALS[column]
    c = Col(column)
    return st.one_of(
        st.builds(lambda op, v: Cmp(op, c, Lit(v)), _OPS, lit),
        st.builds(lambda v: Cmp(">", Lit(v), c), lit),  # literal on the left
        st.builds(lambda vs: IsIn(c, tuple(vs)), st.lists(lit, min_size=1, max_size=4))
        if column != "f"  # float IN is declined (below)
        else st.nothing(),
        st.builds(lambda a, b: And(Cmp(">=", c, Lit(a)), Cmp("<=", c, Lit(b))), lit, lit),  # BETWEEN
        st.just(IsNull(c)),
        st.just(Not(IsNull(c))),
    )


_ATOMS = st.one_of(
    *[_atom(c) for c in _LITERALS],
    st.sampled_from(["k0", "k1", "k3", "z"]).map(lambda p: parse(f"s like '{p}%'")),  # prefix LIKE
)


def _filters() -> st.SearchStrategy[Expr]:
    return st.recursive(
        _ATOMS,
        lambda inner: st.one_of(st.builds(And, inner, inner), st.builds(Or, inner, inner), st.builds(Not, inner)),
        max_leaves=4,
    )


def _reference(whole: pa.Table, e: Expr) -> list[int]:
    keep = filter_mask(e, lambda p: whole.column(p).combine_chunks())
    return whole.column("id").filter(pa.array(keep)).to_pylist()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=_filters())
def test_every_filter_type_runs_in_the_vortex_scan_with_the_reference_rows(
    typed: tuple[conch.Table, pa.Table], where: Expr
) -> None:
    t, whole = typed
    scan = t.scan("i", where=where)
    got = scan.to_arrow().column("id").to_pylist()
    assert got == _reference(whole, where), repr(where)
    text = scan.explain()
    assert "in Arrow: -" in text, text  # every term was pushed (exact literals of each type)
    m = scan.metrics()
    assert m.merge == "zip (streamed)", text  # the unfiltered scan's path, not the general merge
    g = m.groups["<root>"]
    assert g.fragments_filtered + g.fragments_pruned_by_stats == 1  # filtered in-file, or pruned by stats


@pytest.mark.parametrize(
    ("where", "in_arrow"),
    [
        (Cmp("<", Col("dec"), Lit(0.051)), "(dec < 0.051)"),  # Arrow would round the literal: not exact
        (Cmp("==", Col("f"), Lit(math.nan)), "(f == nan)"),  # Vortex orders NaN as a value
        (Cmp("<", Col("i"), Lit(2.5)), "(i < 2.5)"),  # a float against an int column
        (Or(Cmp("<", Col("id"), Lit(7)), Cmp("<", Col("i"), Lit(3))), "((id < 7) | (i < 3))"),  # keys and values
        (IsIn(Col("f"), (0.0, 1.5)), "f.isin([0.0, 1.5])"),  # Arrow's is_in tells -0.0 from 0.0, `==` does not
    ],
)
def test_inexact_terms_are_declined_and_named(typed: tuple[conch.Table, pa.Table], where: Expr, in_arrow: str) -> None:
    t, whole = typed
    scan = t.scan("i", where=And(where, Cmp(">=", Col("d"), Lit(DAY0))))
    got = scan.to_arrow().column("id").to_pylist()
    assert got == _reference(whole, And(where, Cmp(">=", Col("d"), Lit(DAY0))))
    text = scan.explain()
    assert f"in the Vortex scan: (d >= {DAY0!r}); in Arrow: {in_arrow}" in text, text


def _sql_atoms() -> st.SearchStrategy[str]:
    op = st.sampled_from(["<", "<=", ">", ">=", "=", "<>"])
    return st.one_of(
        st.builds(lambda o, v: f"i {o} {v}", op, st.integers(-12, 42)),
        st.builds(lambda o, v: f"f {o} {v}", op, st.sampled_from(["0.0", "-0.0", "1.5", "'inf'::double", "3"])),
        st.builds(lambda o, v: f"s {o} '{v}'", op, st.sampled_from(["k00", "k07", "k39", "zz"])),
        st.builds(lambda o, v: f"d {o} date '{DAY0 + dt.timedelta(days=v)}'", op, st.integers(-5, 95)),
        st.builds(lambda o, v: f"ts {o} timestamp '{TS0 + dt.timedelta(minutes=v)}'", op, st.integers(-10, 310)),
        st.builds(lambda o, v: f"tz {o} timestamptz '{TS0 + dt.timedelta(hours=v)}+00'", op, st.integers(-2, 50)),
        st.builds(lambda o, v: f"dec {o} {v}", op, st.sampled_from(["0.25", "3.70", "9.99", "5", "-1"])),
        st.builds(
            lambda a, b: f"dec between {a} and {b}", st.sampled_from(["0.5", "2"]), st.sampled_from(["4.25", "9"])
        ),
        st.builds(
            lambda a, b: f"d between date '{DAY0 + dt.timedelta(days=a)}' and date '{DAY0 + dt.timedelta(days=b)}'",
            st.integers(0, 40),
            st.integers(20, 90),
        ),
        st.builds(
            lambda vs: f"i in ({', '.join(map(str, vs))})", st.lists(st.integers(-10, 40), min_size=1, max_size=4)
        ),
        st.builds(
            lambda vs: f"s in ({', '.join(repr(v) for v in vs)})", st.lists(st.sampled_from(["k03", "k06"]), min_size=1)
        ),
        st.sampled_from(["ok", "not ok", "dec is null", "d is not null", "s like 'k1%'"]),
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    where=st.recursive(
        _sql_atoms(),
        lambda inner: st.one_of(
            st.builds(lambda a, b: f"({a}) and ({b})", inner, inner),
            st.builds(lambda a, b: f"({a}) or ({b})", inner, inner),
            st.builds(lambda a: f"not ({a})", inner),
        ),
        max_leaves=3,
    )
)
def test_duckdb_accepted_filters_stay_on_the_streamed_path(typed: tuple[conch.Table, pa.Table], where: str) -> None:
    t, whole = typed[0], typed[1]  # noqa: F841 - `whole` is read by DuckDB's replacement scan
    scans: list[conch.Scan] = []
    src = cdb.source(t, on_scan=scans.append, push_filters=True)  # noqa: F841
    want = duckdb.sql(f"select id, i from whole where {where} order by id").fetchall()
    got = duckdb.sql(f"select id, i from src where {where} order by id").fetchall()
    assert got == want
    for sc in scans:  # none where DuckDB proved the filter empty
        if sc.plan.filter is None:
            continue
        # DuckDB's accepted predicates: all of them in the Vortex scan
        assert "in Arrow: -" in sc.explain() and sc.metrics().merge == "zip (streamed)", sc.explain()


def test_duckdb_gets_the_row_count(typed: tuple[conch.Table, pa.Table]) -> None:
    t, _ = typed
    src = cdb.source(t)
    assert src.rows() == N
    plan = duckdb.sql("explain select * from src").fetchall()[0][1]
    assert f"~{N} rows" in plan, plan


@pytest.mark.parametrize(
    "where",
    [
        "not (x < 0)",
        "not (x == 1.5)",
        "not (x < 0 and x > -5)",
        "not (x < 0 or x > 5)",
        "not (not (x < 0))",
        "not (x in [1.5, 2.0])",
        "not (s == 'a')",
    ],
)
@pytest.mark.parametrize("fast", [True, False])
def test_not_over_all_null_columns_keeps_no_null_row(tmp_path: Path, where: str, fast: bool) -> None:
    """Vortex 0.90's NOT of a float comparison over an all-null column is true, not null: `NOT (x
    < 0)` returned the rows where x is null (found by `test_scan_candidates`' hypothesis test).
    Arrow's answer (Kleene: NOT of null is null) on both paths, with and without nulls."""
    t = conch.connect(tmp_path, maintenance=conch.Policy(auto=False)).create_table("t", [("id", pa.int64())])
    t.write(
        pa.table({"id": [0, 1, 2], "x": pa.array([None] * 3, pa.float64()), "s": pa.array([None] * 3, pa.string())})
    )
    t.write(pa.table({"id": [10, 11, 12], "x": [-1.0, 1.5, None], "s": ["a", None, "b"]}))
    expr = parse(where)
    whole = t.scan().to_arrow()
    want = whole.filter(pa.array(filter_mask(expr, lambda p: whole.column(p)))).column("id").to_pylist()
    got = t.scan(where=expr).with_options(fast_paths=fast).to_arrow().column("id").to_pylist()
    assert got == want
    assert not {0, 1, 2} & set(got)
