"""The nested API's row filters as `conch.expr.tree` trees: one filter language for every `where=`.

`t["x"]` builds `conch.expr.tree.Col("x")`; `t.x` and `_.x` build a nested `Field` node (it carries
the level it lives on, which broadcasting and reductions need). A nested expression that only
compares one level's own columns and keys is a row filter, and lowers to exactly the nodes
`t["x"]` builds: `t.x > 1` and `t["x"] > 1` become the same `Cmp(">", Col("x"), Lit(1))`. That is
how `Table.scan(where=t.x > 1)` and `delete(where=_.x > 1)` work, and how nested `where()`s are
pushed into the core scan (where key terms become key ranges, `conch.scan.filter`).

>>> lower(t.x > 1).__repr__()  # doctest: +SKIP
'(x > 1)'
"""

from __future__ import annotations

from typing import Any

from conch.errors import ExpressionError
from conch.expr import tree as core
from conch.model.schema import join_path
from conch.nested.nodes import Binary, Domain, Field, Lit, Node, Unary, is_ancestor, render

_CMP = ("==", "!=", "<", "<=", ">", ">=")
_ARITH = ("+", "-", "*", "/")


def lower_at(e: Node, level: str) -> core.Expr | None:
    """`e` as a core tree on rows of `level` (a filter, or arithmetic of the level's own
    columns: `t.price * 2`), or None when it is not one (it reads another level, reduces)."""
    if isinstance(e, Field) and e.key and isinstance(e.domain, Domain) and is_ancestor(e.domain.level, level):
        return core.Col(e.path)  # a root key column: every level's scan carries it (a key range)
    if isinstance(e, Field) and isinstance(e.domain, Domain) and e.domain.level == level:
        return core.Col(join_path(level, e.path))
    if isinstance(e, Lit):
        return core.Lit(e.value)
    if isinstance(e, Binary) and e.op == "in" and isinstance(e.right, Lit):
        operand = lower_at(e.left, level)
        return None if operand is None else core.IsIn(operand, tuple(e.right.value))
    if isinstance(e, Binary) and e.op in (*_CMP, *_ARITH, "&", "|"):
        left, right = lower_at(e.left, level), lower_at(e.right, level)
        if left is None or right is None:
            return None
        if e.op in _ARITH:
            return None if isinstance(left, core.Lit) and isinstance(right, core.Lit) else core.Arith(e.op, left, right)
        if e.op == "&":
            return core.And(left, right)
        if e.op == "|":
            return core.Or(left, right)
        if isinstance(left, core.Lit) and isinstance(right, core.Lit):
            return None
        return core.Cmp(e.op, left, right)
    if isinstance(e, Unary) and e.op == "neg":
        inner = lower_at(e.operand, level)
        return None if inner is None or isinstance(inner, core.Lit) else core.Arith("-", core.Lit(0), inner)
    if isinstance(e, Unary) and e.op in ("not", "is_null"):
        inner = lower_at(e.operand, level)
        if inner is None:
            return None
        return core.Not(inner) if e.op == "not" else core.IsNull(inner)
    return None


def lower(e: Node) -> core.Expr:
    """`e` as a core filter on its own level; `ExpressionError` when it is not a row filter."""
    out = lower_at(e, e.level)
    if out is None or isinstance(out, core.Col | core.Lit | core.Arith):
        raise ExpressionError(
            f"{render(e)} is not a row filter of one level: where= takes comparisons of a level's own columns "
            "combined with & | ~ (for reductions, arithmetic or other levels use "
            "t.<level>.where(...).select(...))"
        )
    return out


def lower_value(e: Node, level: str) -> core.Expr:
    """`e` as a value of rows of `level` (an update's `set=`: `t.price * 2`, `t.x > 0`);
    `ExpressionError` when it reads another level or reduces."""
    out = lower_at(e, level)
    if out is None:
        raise ExpressionError(
            f"{render(e)} is not a value of a record of level {level or 'root'!r}: set= takes literals and "
            "arithmetic or comparisons of the level's own columns (or a callable over the matched records)"
        )
    return out


def lift(e: Any, at: Any) -> Any:
    """A core filter (`t["x"] > 1`, a `conch.Col` tree) as a nested expression at path `at`
    (a `conch.nested.api.Path`), so nested `where()` / `select()` take it too."""
    if isinstance(e, core.Col):
        level = at.level
        rel = e.path[len(level) + 1 :] if level and e.path.startswith(level + ".") else e.path
        return at.col(rel)
    if isinstance(e, core.Lit):
        return e.value
    if isinstance(e, core.Cmp):
        left, right = lift(e.left, at), lift(e.right, at)
        ops = {
            "==": lambda a, b: a == b,
            "!=": lambda a, b: a != b,
            "<": lambda a, b: a < b,
            "<=": lambda a, b: a <= b,
            ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b,
        }
        if not hasattr(left, "node"):  # `1 < t.x`: keep a nested expression on the left
            flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
            return ops[flip[e.op]](right, left)
        return ops[e.op](left, right)
    if isinstance(e, core.And):
        return lift(e.left, at) & lift(e.right, at)
    if isinstance(e, core.Or):
        return lift(e.left, at) | lift(e.right, at)
    if isinstance(e, core.Not):
        return ~lift(e.operand, at)
    if isinstance(e, core.IsNull):
        return lift(e.operand, at).is_null()
    if isinstance(e, core.IsIn):
        operand = lift(e.operand, at)
        if not e.values:
            raise ExpressionError(f"{e!r}: an empty isin() is not a nested filter")
        out = operand == e.values[0]
        for v in e.values[1:]:
            out = out | (operand == v)
        return out
    raise ExpressionError(f"cannot use {e!r} in a nested expression")
