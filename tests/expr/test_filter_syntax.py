"""The SQL-like filter syntax (`conch.expr.syntax`, used by `conch.expr.syntax.parse`, the CLI's
`--where` and the Spark `where` option): every form against a Python model of the same rows."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conch
from conch.expr.syntax import like_range, parse, to_text
from conch.expr.tree import And, Cmp, IsIn, IsNull, Lit, Not, Or

ROWS: list[dict[str, Any]] = [
    {"id": 0, "x": 0.5, "name": "alpha", "n": 1, "g": {"odd name": 3}},
    {"id": 1, "x": 1.5, "name": "alps", "n": None, "g": {"odd name": 4}},
    {"id": 2, "x": None, "name": "beta", "n": 3, "g": {"odd name": None}},
    {"id": 3, "x": 3.0, "name": None, "n": 4, "g": {"odd name": 5}},
    {"id": 4, "x": 4.5, "name": "al", "n": 5, "g": {"odd name": 6}},
]


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> conch.Table:
    t = conch.connect(str(tmp_path_factory.mktemp("f") / "w")).create_table("t", [("id", pa.uint64())])
    t.write(ROWS)
    return t


def ids(t: conch.Table, text: str) -> list[int]:
    return [r["id"] for r in t.scan("x", where=parse(text)).to_pylist()]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x = 1.5", [1]),
        ("x == 1.5", [1]),
        ("x != 1.5", [0, 3, 4]),  # null x is not != 1.5 (three-valued logic)
        ("x <> 1.5", [0, 3, 4]),
        ("x > 1 and n >= 4", [3, 4]),
        ("x < 1 or n = 3", [0, 2]),
        ("not x > 1", [0]),
        ("not (x > 1 or n = 1)", []),
        ("x between 1.5 and 3", [1, 3]),
        ("x not between 1.5 and 3", [0, 4]),
        ("n in (1, 3, 5)", [0, 2, 4]),
        ("n not in [1, 3]", [3, 4]),
        ("name is null", [3]),
        ("name is not null and x is None", [2]),
        ("name like 'al%'", [0, 1, 4]),
        ("name like 'alp%'", [0, 1]),
        ("name not like 'al%'", [2]),
        ("name like 'beta'", [2]),
        ("name like '%'", [0, 1, 2, 4]),
        ("0 < x <= 3", [0, 1, 3]),
        ("`g`.`odd name` > 4", [3, 4]),
        ("g.`odd name` = 3 | x > 4 & n = 5", [0, 4]),
        ("(x > 1) and (name = \"alps\" or name = 'al')", [1, 4]),
        ("NAME_IS_A_COLUMN_NOT_A_KEYWORD is null", None),
    ],
)
def test_forms_match_the_model(table: conch.Table, text: str, expected: list[int] | None) -> None:
    if expected is None:
        with pytest.raises(conch.ColumnNotFoundError):
            ids(table, text)
        return
    assert ids(table, text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x >", "expected a column or a literal at the end"),
        ("", "empty filter"),
        ("x = null", "using `is null`"),
        ("name like '%a'", "prefix patterns"),
        ("name like 'a_c'", "prefix patterns"),
        ("x between 1", "`and` of `between"),
        ("x > 1 y", "expected `and`, `or`"),
        ("x @ 1", "unexpected '@'"),
        ("n in 1", "expected `(`"),
        ("(x > 1) = true", "parenthesised condition"),
        ("x is 3", "`null` after `is`"),
    ],
)
def test_syntax_errors_are_typed_and_located(text: str, message: str) -> None:
    with pytest.raises(conch.FilterSyntaxError, match="cannot parse filter") as e:
        parse(text)
    assert message in str(e.value)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="ab'\"\\%_ \u00e9\U0010ffff", max_size=6), st.text(alphabet="ab\u00e9\U0010ffffz", max_size=4))
def test_string_literals_and_like_prefixes(value: str, prefix: str) -> None:
    quoted = "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"
    lit = parse(f"s = {quoted}")
    assert lit.right.value == value  # type: ignore[attr-defined]
    # `like 'prefix%'` is a range that holds exactly the strings starting with the prefix
    if "%" in prefix or "_" in prefix:
        return
    expr = like_range(conch.Col("s"), prefix + "%")
    from conch.expr.tree import evaluate

    words = [prefix, prefix + "a", prefix + "\U0010ffff", value, prefix[:-1], prefix[:-1] + "z", "", "\U0010ffff"]
    got = evaluate(expr, lambda _c: pa.array(words, pa.string())).to_pylist()
    assert got == [w.startswith(prefix) for w in words]


def test_spark_where_option_uses_the_same_parser(tmp_path: Path) -> None:
    # Spark's `where` option goes to the scan as this tree: a key range and a value filter
    t = conch.connect(tmp_path).create_table("t", [("id", pa.uint64())])
    t.write([{"id": 2, "name": "alice"}, {"id": 3, "name": "bob"}, {"id": 7, "name": "al"}])
    scan = t.snapshot().scan(where=parse("id between 1 and 3 and name like 'al%'"))
    assert scan.plan.key_predicate is not None and scan.request.value_terms
    assert scan.to_pylist() == [{"id": 2, "name": "alice"}]


_LITERALS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet="ab'\"\\%_ \n\u00e9\U0010ffff`", max_size=5),
    st.dates(),
    st.datetimes(timezones=st.sampled_from([None, datetime.UTC])).map(lambda d: d.replace(fold=0)),
    st.decimals(allow_nan=False, allow_infinity=False, places=4),
)
_COLS = st.sampled_from(["x", "date", "timestamp", "odd `name`", "Adj Close*", "in"]).map(conch.Col)


def _exprs() -> st.SearchStrategy[Any]:
    atoms = st.one_of(
        st.builds(Cmp, st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), _COLS, _LITERALS.map(Lit)),
        st.builds(Cmp, st.sampled_from(["<", "=="]), _LITERALS.map(Lit), _COLS),
        st.builds(IsNull, _COLS),
        st.builds(IsIn, _COLS, st.lists(_LITERALS, max_size=3).map(tuple)),
    )
    return st.recursive(
        atoms,
        lambda inner: st.one_of(st.builds(And, inner, inner), st.builds(Or, inner, inner), st.builds(Not, inner)),
        max_leaves=6,
    )


@settings(max_examples=150, deadline=None)
@given(_exprs())
def test_to_text_writes_what_parse_reads(e: Any) -> None:
    """`to_text` (what `conch.engines.spark.sql` writes into the `where` option) round-trips every
    literal type exactly: ints, floats (repr), strings with quotes and backslashes, typed date,
    timestamp (local or UTC) and decimal literals, and column names that need backticks."""
    back = parse(to_text(e))
    assert repr(back) == repr(e)
    assert [type(v) for v in _values(back)] == [type(v) for v in _values(e)]


def _values(e: Any) -> list[Any]:
    if isinstance(e, Lit):
        return [e.value]
    if isinstance(e, IsIn):
        return list(e.values)
    return [v for c in ("left", "right", "operand") if hasattr(e, c) for v in _values(getattr(e, c))]


def test_typed_literals_compare_by_value(tmp_path: Path) -> None:
    t = conch.connect(str(tmp_path / "w")).create_table("t", [("id", pa.int64())])
    t.write(pa.table({"id": [1, 2, 3], "d": [datetime.date(2020, 1, i) for i in (1, 2, 3)],
                      "ts": pa.array([datetime.datetime(2020, 1, 1, i, tzinfo=datetime.UTC) for i in (1, 2, 3)], pa.timestamp("us", "UTC")),
                      "m": pa.array([decimal.Decimal("0.05"), decimal.Decimal("0.06"), None], pa.decimal128(15, 2))}))  # fmt: skip

    def got(text: str) -> list[int]:
        return sorted(r["id"] for r in t.scan("d", where=parse(text)).to_pylist())

    assert got("d >= date '2020-01-02'") == [2, 3]
    assert got("ts < timestamp '2020-01-01 02:00:00+00:00'") == [1]
    assert got("ts <= timestamp '2020-01-01 04:30:00+02:30'") == [1, 2]
    assert got("m = decimal '0.05' or m > decimal '0.0501'") == [1, 2]
    assert got("date '2020-01-03' = d") == [3]
    with pytest.raises(conch.FilterSyntaxError, match="not a valid date literal"):
        parse("d = date '2020-13-01'")
