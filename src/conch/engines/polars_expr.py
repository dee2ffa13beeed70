"""Polars predicates → Conch filters, for pushdown (`conch.engines.polars`, `conch.engines.duckdb` share the idea).

Polars hands an IO plugin its predicate as a `pl.Expr`; we read its serialized tree (JSON) and
translate what Conch can evaluate on fresh records. Correctness first: the plugin still applies
the whole Polars predicate to what the scan returns, so a translation only has to be **implied**
by the predicate (keep every row Polars keeps). Under `&` we push the terms we can translate and
drop the rest; under `|` and `not` a subtree is pushed only when it is translated exactly.

Polars orders NaN above every float, so `x > 1.0` is true for NaN, while Arrow's comparison is
false. For float columns `x > c` is therefore pushed as `~(x <= c)` and `x >= c` as `~(x < c)`,
which agree with Polars on NaN, null and numbers alike.

Terms on the first key column also become a key range (`KeyPrefix` for `==`, `KeyRange` for
bounds), so the scan prunes key spaces and fragments before it reads them.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from conch.expr.tree import And, Cmp, Col, Expr, IsIn, IsNull, Lit, Not, Or
from conch.scan.filter import and_all, literal_fits

_OPS = {"Lt": "<", "LtEq": "<=", "Gt": ">", "GtEq": ">=", "Eq": "==", "NotEq": "!="}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


@dataclass(frozen=True)
class Pushdown:
    """What of a Polars predicate the Conch scan evaluates itself."""

    where: Expr | None  # a filter implied by the predicate (key terms and value terms)
    exact: bool  # the translation is the whole predicate (no term was left to Polars)


class PolarsTranslator:
    """Translates Polars predicates for one scan: value column types and key fields by name."""

    def __init__(self, columns: dict[str, pa.DataType], key_fields: list[pa.Field]) -> None:
        self.columns = columns  # column path relative to the level → Arrow type
        self.key_fields = key_fields

    def translate(self, predicate: Any) -> Pushdown:
        """Translate a `pl.Expr` predicate."""
        tree = json.loads(predicate.meta.serialize(format="json"))
        terms = _conjuncts(tree)
        where: list[Expr] = []
        key_terms: list[Expr] = []
        exact = True
        for term in terms:
            key = self._key_term(term)
            if key is not None:
                key_terms.append(key)
                exact = False  # the key range is coarse; Polars still filters exactly
                continue
            e = self._exact(term)
            if e is None:
                exact = False
            else:
                where.append(e)
        # key terms become a key range in the scan's analysis (`conch.scan.filter`)
        return Pushdown(and_all(key_terms + where), exact)

    # ----- values ---------------------------------------------------------------------------
    def _exact(self, node: Any) -> Expr | None:
        """A Conch expression equal to `node` under SQL three-valued logic, or None."""
        if "BinaryExpr" in node:
            b = node["BinaryExpr"]
            op = b["op"]
            if op in ("And", "LogicalAnd", "Or", "LogicalOr"):
                left, right = self._exact(b["left"]), self._exact(b["right"])
                if left is None or right is None:
                    return None
                return And(left, right) if op in ("And", "LogicalAnd") else Or(left, right)
            if op in _OPS:
                return self._compare(b["left"], _OPS[op], b["right"])
            return None
        if "Function" in node:
            f = node["Function"]
            fn, args = f["function"], f["input"]
            if fn == {"Boolean": "Not"}:
                inner = self._exact(args[0])
                return None if inner is None else Not(inner)
            if fn in ({"Boolean": "IsNull"}, {"Boolean": "IsNotNull"}):
                path = self._column(args[0])
                if path is None:
                    return None
                return IsNull(Col(path)) if fn == {"Boolean": "IsNull"} else Not(IsNull(Col(path)))
            if isinstance(fn, dict) and fn.get("Boolean", {}) == {"IsIn": {"nulls_equal": False}}:
                path = self._column(args[0])
                values = _literal(args[1])
                if path is None or not isinstance(values, list) or not values:
                    return None
                if not all(literal_fits(v, self.columns[path]) for v in values):
                    return None
                return IsIn(Col(path), tuple(values))
            if isinstance(fn, dict) and isinstance(fn.get("Boolean"), dict) and "IsBetween" in fn["Boolean"]:
                closed = fn["Boolean"]["IsBetween"]["closed"]
                lo_op = ">=" if closed in ("Both", "Left") else ">"
                hi_op = "<=" if closed in ("Both", "Right") else "<"
                lo, hi = self._compare(args[0], lo_op, args[1]), self._compare(args[0], hi_op, args[2])
                return None if lo is None or hi is None else And(lo, hi)
        return None

    def _compare(self, left: Any, op: str, right: Any) -> Expr | None:
        path = self._column(left)
        if path is None:
            path, op, left, right = self._column(right), _FLIP[op], right, left
            if path is None:
                return None
        value = _literal(right)
        t = self.columns[path]
        if value is _NOT_LITERAL or value is None or not literal_fits(value, t):
            return None
        if pa.types.is_floating(t):
            if value != value:  # NaN literal: Polars' NaN equality is not SQL's
                return None
            if op in (">", ">="):  # Polars: NaN > everything; `~(x <= c)` says the same on NaN
                return Not(Cmp("<=" if op == ">" else "<", Col(path), Lit(value)))
        return Cmp(op, Col(path), Lit(value))

    def _column(self, node: Any) -> str | None:
        """The value-column path a node reads (`col("x")`, `col("g").struct.field("y")`)."""
        parts: list[str] = []
        while True:
            if "Column" in node:
                parts.append(node["Column"])
                break
            f = node.get("Function")
            if f is None or not isinstance(f["function"], dict) or "StructExpr" not in f["function"]:
                return None
            field = f["function"]["StructExpr"]
            if not isinstance(field, dict) or "FieldByName" not in field:
                return None
            parts.append(field["FieldByName"])
            node = f["input"][0]
        path = ".".join(reversed(parts))
        return path if path in self.columns else None

    # ----- keys -----------------------------------------------------------------------------
    def _key_term(self, node: Any) -> Expr | None:
        """A comparison of the first key column with a literal, as a Conch term, or None."""
        if not self.key_fields or "BinaryExpr" not in node:
            return None
        b = node["BinaryExpr"]
        if b["op"] not in _OPS:
            return None
        first = self.key_fields[0]
        op, left, right = _OPS[b["op"]], b["left"], b["right"]
        if left != {"Column": first.name}:
            op, left, right = _FLIP[op], right, left
        if left != {"Column": first.name}:
            return None
        value = _literal(right)
        if value is _NOT_LITERAL:
            return None
        return Cmp(op, Col(first.name), Lit(value))


_NOT_LITERAL = object()


def _conjuncts(node: Any) -> list[Any]:
    if "BinaryExpr" in node and node["BinaryExpr"]["op"] in ("And", "LogicalAnd"):
        return _conjuncts(node["BinaryExpr"]["left"]) + _conjuncts(node["BinaryExpr"]["right"])
    return [node]


def _literal(node: Any) -> Any:
    """The Python value of a literal node (lists for list literals), else `_NOT_LITERAL`."""
    if "Literal" not in node:
        return _NOT_LITERAL
    lit = node["Literal"]
    if "Dyn" in lit:
        (kind, value), *_ = lit["Dyn"].items()
        return value if kind in ("Int", "Float", "Str") else _NOT_LITERAL
    import polars as pl

    try:
        value = pl.select(pl.Expr.deserialize(io.StringIO(json.dumps(node)), format="json")).item()
    except Exception:  # an unknown literal: leave the term to Polars
        return _NOT_LITERAL
    return value.to_list() if isinstance(value, pl.Series) else value
