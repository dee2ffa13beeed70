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

import functools
import operator
from collections.abc import Callable
from typing import Any

from conch.errors import ExpressionError
from conch.expr import tree as core
from conch.model.schema import join_path
from conch.nested.nodes import Binary, Domain, Field, Lit, Node, Unary, is_ancestor, render

_CMP = ("==", "!=", "<", "<=", ">", ">=")
_ARITH = ("+", "-", "*", "/")


# ----- nested -> core: one `functools.singledispatch` case per node class, as in `conch.expr.tree` ----
@functools.singledispatch
def lower_at(e: Node, level: str) -> core.Expr | None:
    """`e` as a core tree on rows of `level` (a filter, or arithmetic of the level's own
    columns: `t.price * 2`), or None when it is not one (it reads another level, reduces)."""
    return None


@lower_at.register
def _(e: Field, level: str) -> core.Expr | None:
    if not isinstance(e.domain, Domain):
        return None
    if e.key and is_ancestor(e.domain.level, level):
        return core.Col(e.path)  # a root key column: every level's scan carries it (a key range)
    return core.Col(join_path(level, e.path)) if e.domain.level == level else None


@lower_at.register
def _(e: Lit, level: str) -> core.Expr | None:
    return core.Lit(e.value)


@lower_at.register
def _(e: Binary, level: str) -> core.Expr | None:
    if e.op == "in":
        operand = lower_at(e.left, level) if isinstance(e.right, Lit) else None
        return None if operand is None else core.IsIn(operand, tuple(e.right.value))  # type: ignore[attr-defined]
    if e.op == "matches":
        operand = lower_at(e.left, level)
        return None if operand is None else core.Matches(operand, e.right.value)  # type: ignore[attr-defined]
    if e.op not in (*_CMP, *_ARITH, "&", "|"):
        return None
    left, right = lower_at(e.left, level), lower_at(e.right, level)
    if left is None or right is None:
        return None
    if e.op == "&":
        return core.And(left, right)
    if e.op == "|":
        return core.Or(left, right)
    if isinstance(left, core.Lit) and isinstance(right, core.Lit):  # a constant is not a row's value
        return None
    return core.Arith(e.op, left, right) if e.op in _ARITH else core.Cmp(e.op, left, right)


@lower_at.register
def _(e: Unary, level: str) -> core.Expr | None:
    if e.op not in ("neg", "not", "is_null"):
        return None
    inner = lower_at(e.operand, level)
    if inner is None or (e.op == "neg" and isinstance(inner, core.Lit)):
        return None
    if e.op == "neg":
        return core.Arith("-", core.Lit(0), inner)
    return core.Not(inner) if e.op == "not" else core.IsNull(inner)


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


# ----- core -> nested ------------------------------------------------------------------------------
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


@functools.singledispatch
def lift(e: Any, at: Any) -> Any:
    """A core filter (`t["x"] > 1`, a `conch.Col` tree) as a nested expression at path `at`
    (a `conch.nested.api.Path`), so nested `where()` / `select()` take it too."""
    raise ExpressionError(f"cannot use {e!r} in a nested expression")


@lift.register
def _(e: core.Col, at: Any) -> Any:
    level = at.level
    return at.col(e.path[len(level) + 1 :] if level and e.path.startswith(level + ".") else e.path)


@lift.register
def _(e: core.Lit, at: Any) -> Any:
    return e.value


@lift.register
def _(e: core.Cmp, at: Any) -> Any:
    left, right = lift(e.left, at), lift(e.right, at)
    if not hasattr(left, "node"):  # `1 < t.x`: keep a nested expression on the left
        return _COMPARE[_FLIP[e.op]](right, left)
    return _COMPARE[e.op](left, right)


@lift.register
def _(e: core.And, at: Any) -> Any:
    return lift(e.left, at) & lift(e.right, at)


@lift.register
def _(e: core.Or, at: Any) -> Any:
    return lift(e.left, at) | lift(e.right, at)


@lift.register
def _(e: core.Not, at: Any) -> Any:
    return ~lift(e.operand, at)


@lift.register
def _(e: core.IsNull, at: Any) -> Any:
    return lift(e.operand, at).is_null()


@lift.register
def _(e: core.Matches, at: Any) -> Any:
    return lift(e.operand, at).matches(e.query)


@lift.register
def _(e: core.IsIn, at: Any) -> Any:
    if not e.values:
        raise ExpressionError(f"{e!r}: an empty isin() is not a nested filter")
    operand = lift(e.operand, at)
    return functools.reduce(operator.or_, [operand == v for v in e.values])
