"""The SQL-like filter syntax (`conch.expr.syntax`, used by `conch.expr.syntax.parse`, the CLI's
`--where` and the Spark `where` option): every form against a Python model of the same rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conch
from conch.expr.syntax import like_range, parse

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
    from conch.engines.spark.filters import split_where

    pushed = split_where(parse("id between 1 and 3 and name like 'al%'"), [pa.field("id", pa.uint64())])
    assert pushed.key_range is not None and pushed.where is not None
