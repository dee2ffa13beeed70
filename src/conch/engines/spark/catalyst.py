"""Spark's filters as Conch filters: the Filter directly above each Conch scan of an optimized plan.

`conch.engines.spark.sql` cannot let Spark push filters into the source (PySpark 4.3 caches a
Python source's pushed filters on the DataFrame: `conch.engines.spark.filters`), so it reads them
from the optimized plan's JSON instead and fixes them into each view's `where` option. Spark keeps
its whole Filter above the scan, so a pushed filter only has to keep every row Spark's keeps:

- each **atom** is translated only where Conch (Arrow) gives it exactly Spark's truth value on
  every row, nulls included: a column compared with a literal of the column's own type (integers,
  float/double for `<`, `<=`, `=`: Spark orders NaN above every number, so `x > 1.0` holds for NaN
  in Spark and never in Arrow; decimal, string, date, timestamp, boolean), `IN` of literals,
  `IS [NOT] NULL`, `StartsWith` (a prefix `LIKE`) as a range;
- an `x IS NOT NULL` term of the Filter's top-level AND is left to Spark (see `Translator.terms`);
- `AND`, `OR`, `NOT` compose them (both three-valued, Kleene); an untranslatable part is dropped
  where dropping only weakens the filter (one side of an `AND`, or of an `OR` under a `NOT`), and
  otherwise takes its whole term with it.

Literal values come from the plan JSON's text: `'2020-01-01'` for a date, a decimal's digits, a
`timestamp` formatted in the session time zone (a local time that zone repeats or skips is not
pushed), a `timestamp_ntz` as microseconds since the epoch.
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
import zoneinfo
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from conch.expr.syntax import like_range
from conch.expr.tree import And, Cmp, Col, Expr, IsIn, IsNull, Lit, Not, Or

SCAN = "DataSourceV2ScanRelation"
Node = tuple[dict[str, Any], list[Any]]  # a JSON plan or expression node and its children

_CMP = {"EqualTo": "==", "LessThan": "<", "LessThanOrEqual": "<=", "GreaterThan": ">", "GreaterThanOrEqual": ">="}
_FLIP = {"==": "==", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_INTS = {"byte", "short", "integer", "long"}


def tree(flat: list[dict[str, Any]]) -> Node:
    """The tree of a plan's or expression's JSON (a pre-order list with `num-children`)."""
    nodes: Iterator[dict[str, Any]] = iter(flat)

    def build() -> Node:
        node = next(nodes)
        return node, [build() for _ in range(int(node.get("num-children", 0)))]

    return build()


def kind(node: dict[str, Any]) -> str:
    return str(node.get("class", "")).rpartition(".")[2]


def scan_filters(plan_json: list[dict[str, Any]]) -> dict[int, Node]:
    """The condition of each Filter directly above a scan, by the scan's first output expression
    id (which names that scan in the JVM plan too)."""
    out: dict[int, Node] = {}

    def walk(n: Node) -> None:
        node, children = n
        if kind(node) == "Filter" and children and kind(children[0][0]) == SCAN:
            outputs = children[0][0].get("output") or []
            if outputs and outputs[0]:
                out[int(outputs[0][0]["exprId"]["id"])] = tree(node["condition"])
        for c in children:
            walk(c)

    walk(tree(plan_json))
    return out


def conjuncts(cond: Node) -> list[Node]:
    node, children = cond
    if kind(node) == "And":
        return conjuncts(children[0]) + conjuncts(children[1])
    return [cond]


class Translator:
    """Catalyst expressions over one scan's attributes (`names`: expression id -> column) as Conch
    filters, for columns of the Arrow types `types`, in session time zone `tz`."""

    def __init__(self, names: dict[int, str], types: dict[str, pa.DataType], tz: str) -> None:
        self.names = names
        self.types = types
        self.zone = _zone(tz)

    def terms(self, cond: Node) -> list[Expr]:
        """The translatable AND terms of a Filter's condition (each implied by the condition)."""
        terms = [e for c in conjuncts(cond) if (e := self.expr(c, True)) is not None]
        # `x is not null` as a whole term: Spark infers one for every join key and compared column
        # (it cannot tell a user's from those), and on Conch it costs a pass over the column while
        # it seldom drops a row; inside OR/NOT it is pushed like any atom
        return [t for t in terms if not _not_null(t)]

    def expr(self, n: Node, positive: bool) -> Expr | None:
        """`n` as a Conch filter: exact, or where `positive` weaker (true wherever `n` is true) and
        otherwise stronger (false wherever `n` is false); None if there is no such filter."""
        node, children = n
        k = kind(node)
        if k in ("And", "Or"):
            left, right = self.expr(children[0], positive), self.expr(children[1], positive)
            if left is not None and right is not None:
                return And(left, right) if k == "And" else Or(left, right)
            may_drop = positive if k == "And" else not positive
            return (left if right is None else right) if may_drop else None
        if k == "Not":
            inner = self.expr(children[0], not positive)
            return None if inner is None else Not(inner)
        if k in ("IsNull", "IsNotNull"):
            col = self.column(children[0])
            if col is None:
                return None
            return IsNull(Col(col)) if k == "IsNull" else Not(IsNull(Col(col)))
        if k in _CMP:
            return self.compare(_CMP[k], children[0], children[1])
        if k == "In":
            return self.isin(children[0], children[1:])
        if k == "StartsWith":
            col, prefix = self.column(children[0]), self.literal(children[1], children[0][0])
            if col is None or not isinstance(prefix, str) or "%" in prefix or "_" in prefix:
                return None
            return like_range(Col(col), prefix + "%")
        if k == "AttributeReference" and node.get("dataType") == "boolean":
            col = self.column(n)
            return None if col is None else Cmp("==", Col(col), Lit(True))
        return None

    def compare(self, op: str, left: Node, right: Node) -> Expr | None:
        if kind(left[0]) != "AttributeReference":
            left, right, op = right, left, _FLIP[op]
        col = self.column(left)
        value = self.literal(right, left[0])
        if col is None or value is None:
            return None
        if isinstance(value, float) and op in (">", ">="):
            return None  # Spark: NaN > 1.0 is true; Arrow: false
        return Cmp(op, Col(col), Lit(value))

    def isin(self, attr: Node, items: list[Node]) -> Expr | None:
        col = self.column(attr)
        values = [self.literal(i, attr[0]) for i in items]
        if col is None or not values or any(v is None for v in values):
            return None
        if isinstance(values[0], float):  # Spark: -0.0 IN (0.0); Arrow's hashed `is_in`: no. `=` agrees
            out: Expr = Cmp("==", Col(col), Lit(values[0]))
            for v in values[1:]:
                out = Or(out, Cmp("==", Col(col), Lit(v)))
            return out
        return IsIn(Col(col), tuple(values))

    def column(self, n: Node) -> str | None:
        """The scan's column an AttributeReference names, if Spark reads it as exactly its Conch
        values (no widened float16, no coarsened nanoseconds, no checked uint64)."""
        node = n[0]
        if kind(node) != "AttributeReference":
            return None
        name = self.names.get(int(node["exprId"]["id"]))
        t = self.types.get(name) if name is not None else None
        if name is None or t is None or "." in name or _exact_type(str(node.get("dataType")), t) is None:
            return None
        return name

    def literal(self, n: Node, attr: dict[str, Any]) -> Any:
        """A Literal's value as the Python value Conch compares exactly as Spark does with `attr`'s
        column (a literal of the column's own Spark type), or None."""
        node = n[0]
        spark_type = str(node.get("dataType"))
        text = node.get("value")
        if kind(node) != "Literal" or text is None or spark_type != attr.get("dataType"):
            return None
        try:
            return _value(str(text), spark_type, self.zone)
        except (ValueError, ArithmeticError, OverflowError):
            return None


def _not_null(e: Expr) -> bool:
    return isinstance(e, Not) and isinstance(e.operand, IsNull)


def _exact_type(spark_type: str, t: pa.DataType) -> str | None:
    """`spark_type` if Spark reads a Conch column of type `t` value for value, else None."""
    ok = {
        "boolean": pa.types.is_boolean(t),
        "byte": t == pa.int8(),
        "short": t in (pa.int16(), pa.uint8()),
        "integer": t in (pa.int32(), pa.uint16()),
        "long": t in (pa.int64(), pa.uint32()),
        "float": t == pa.float32(),
        "double": t == pa.float64(),
        "string": pa.types.is_string(t) or pa.types.is_large_string(t),
        "date": t == pa.date32(),
        "timestamp": pa.types.is_timestamp(t) and t.unit == "us" and t.tz is not None,
        "timestamp_ntz": pa.types.is_timestamp(t) and t.unit == "us" and t.tz is None,
    }.get(spark_type)
    if ok is None and pa.types.is_decimal128(t):
        ok = spark_type == f"decimal({t.precision},{t.scale})"
    return spark_type if ok else None


_EPOCH = datetime.datetime(1970, 1, 1)


def _value(text: str, spark_type: str, zone: datetime.tzinfo | None) -> Any:
    if spark_type in _INTS:
        return int(text)
    if spark_type in ("float", "double"):
        v = float(text)
        return v if math.isfinite(v) else None
    if spark_type.startswith("decimal("):
        d = decimal.Decimal(text)
        return d if d.is_finite() else None
    if spark_type == "string":
        return text
    if spark_type == "boolean":
        return {"true": True, "false": False}.get(text)
    if spark_type == "date":
        return datetime.date.fromisoformat(text) if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text) else None
    if spark_type in ("timestamp", "timestamp_ntz"):
        if re.fullmatch(r"-?\d+", text):  # microseconds since the epoch
            local = _EPOCH + datetime.timedelta(microseconds=int(text))
            return local if spark_type == "timestamp_ntz" else local.replace(tzinfo=datetime.UTC)
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,6})?", text):
            return None
        local = datetime.datetime.fromisoformat(text)
        if spark_type == "timestamp_ntz":
            return local
        return _instant(local, zone)
    return None


def _instant(local: datetime.datetime, zone: datetime.tzinfo | None) -> datetime.datetime | None:
    """A local time of `zone` as a UTC instant; None where the zone repeats or skips it."""
    if zone is None:
        return None
    a, b = local.replace(tzinfo=zone, fold=0), local.replace(tzinfo=zone, fold=1)
    if a.utcoffset() != b.utcoffset():
        return None
    utc = a.astimezone(datetime.UTC)
    return utc if utc.astimezone(zone).replace(tzinfo=None) == local else None


def _zone(tz: str) -> datetime.tzinfo | None:
    """The session time zone (`spark.sql.session.timeZone`): a region id or a fixed offset."""
    m = re.fullmatch(r"(?:UTC|GMT)?([+-])(\d{1,2}):?(\d{2})?", tz)
    if m is not None:
        minutes = int(m[2]) * 60 + int(m[3] or 0)
        return datetime.timezone(datetime.timedelta(minutes=minutes if m[1] == "+" else -minutes))
    if tz in ("UTC", "GMT", "Z"):
        return datetime.UTC
    try:
        return zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None
