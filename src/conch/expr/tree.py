"""Value-filter expressions over a table's columns (DESIGN §2).

`Table["audio.bytes"]` is a `Col`; comparisons, `& | ~`, `.is_null()` and `.isin()` build an
immutable tree; `+ - * /` build `Arith` values (`t["price"] * 2`: an update's new value, or an
operand of a comparison, which is then evaluated in Arrow, never pushed into files). Evaluation follows SQL three-valued logic: a comparison with null is null, and a
row passes a filter only where it is true.

`evaluate` runs the tree on assembled fresh records (as Arrow); `scan/pushdown.py` translates it
for Vortex and evaluates it on fragment statistics.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.errors import ConchError, ExpressionError
from conch.model.keys import key_array
from conch.model.schema import type_family


class Expr:
    """Base of every filter expression node. Operators build new nodes; nothing is evaluated."""

    __slots__ = ()

    def __and__(self, other: Expr) -> Expr:
        return And(self, _operand(other, "&"))

    def __or__(self, other: Expr) -> Expr:
        return Or(self, _operand(other, "|"))

    def __rand__(self, other: Any) -> Expr:  # `t.x < 0 & t["id"] > 1`: the nested side on the left
        return And(_operand(other, "&"), self)

    def __ror__(self, other: Any) -> Expr:
        return Or(_operand(other, "|"), self)

    def __invert__(self) -> Expr:
        return Not(self)

    def __eq__(self, other: object) -> Expr:  # type: ignore[override]
        return _cmp("==", self, other)

    def __ne__(self, other: object) -> Expr:  # type: ignore[override]
        return _cmp("!=", self, other)

    def __lt__(self, other: Any) -> Expr:
        return _cmp("<", self, other)

    def __le__(self, other: Any) -> Expr:
        return _cmp("<=", self, other)

    def __gt__(self, other: Any) -> Expr:
        return _cmp(">", self, other)

    def __ge__(self, other: Any) -> Expr:
        return _cmp(">=", self, other)

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        raise ExpressionError("a Conch expression has no truth value; use & | ~ instead of and/or/not")

    def __add__(self, other: Any) -> Expr:
        return Arith("+", self, _expr(other))

    def __radd__(self, other: Any) -> Expr:
        return Arith("+", _expr(other), self)

    def __sub__(self, other: Any) -> Expr:
        return Arith("-", self, _expr(other))

    def __rsub__(self, other: Any) -> Expr:
        return Arith("-", _expr(other), self)

    def __mul__(self, other: Any) -> Expr:
        return Arith("*", self, _expr(other))

    def __rmul__(self, other: Any) -> Expr:
        return Arith("*", _expr(other), self)

    def __truediv__(self, other: Any) -> Expr:
        return Arith("/", self, _expr(other))

    def __rtruediv__(self, other: Any) -> Expr:
        return Arith("/", _expr(other), self)

    def __neg__(self) -> Expr:
        return Arith("-", Lit(0), self)

    def is_null(self) -> Expr:
        """True where the value is null: `t['x'].is_null()`."""
        return IsNull(self)

    def is_not_null(self) -> Expr:
        """True where the value is not null."""
        return Not(IsNull(self))

    def matches(self, query: str) -> Expr:
        """True where the text matches a full-text `query` (`conch.expr.textmatch`): `t["caption"].matches("red car")`."""
        from conch.expr.textmatch import check_query

        e = Matches(self, check_query(query))
        check_types(e, lambda c: c.dtype())
        return e

    def isin(self, values: Iterable[Any]) -> Expr:
        """True where the value is one of `values` (null stays null, as in SQL)."""
        e = IsIn(self, tuple(values))
        check_types(e, lambda c: c.dtype())
        return e


@dataclass(frozen=True, slots=True, eq=False)
class Col(Expr):
    """A column, by its full dotted path."""

    path: str

    def __repr__(self) -> str:
        return self.path

    def dtype(self) -> pa.DataType | None:
        """The column's Arrow type when known (a column bound to a table), else None."""
        return None


@dataclass(frozen=True, slots=True, eq=False)
class Lit(Expr):
    value: Any

    def __repr__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True, slots=True, eq=False)
class Cmp(Expr):
    op: str
    left: Expr
    right: Expr

    def __repr__(self) -> str:
        return f"({self.left!r} {self.op} {self.right!r})"


@dataclass(frozen=True, slots=True, eq=False)
class Arith(Expr):
    """`left op right` for op in `+ - * /`: a value, not a filter (`/` is true division, as
    float64; the others are checked: an overflow is an `ExpressionError`)."""

    op: str
    left: Expr
    right: Expr

    def __repr__(self) -> str:
        return f"({self.left!r} {self.op} {self.right!r})"


@dataclass(frozen=True, slots=True, eq=False)
class And(Expr):
    left: Expr
    right: Expr

    def __repr__(self) -> str:
        return f"({self.left!r} & {self.right!r})"


@dataclass(frozen=True, slots=True, eq=False)
class Or(Expr):
    left: Expr
    right: Expr

    def __repr__(self) -> str:
        return f"({self.left!r} | {self.right!r})"


@dataclass(frozen=True, slots=True, eq=False)
class Not(Expr):
    operand: Expr

    def __repr__(self) -> str:
        return f"~{self.operand!r}"


@dataclass(frozen=True, slots=True, eq=False)
class IsNull(Expr):
    operand: Expr

    def __repr__(self) -> str:
        return f"{self.operand!r}.is_null()"


@dataclass(frozen=True, slots=True, eq=False)
class IsIn(Expr):
    operand: Expr
    values: tuple[Any, ...]

    def __repr__(self) -> str:
        return f"{self.operand!r}.isin({list(self.values)!r})"


@dataclass(frozen=True, slots=True, eq=False)
class Matches(Expr):
    """A full-text match of a string column (`conch.expr.textmatch`)."""

    operand: Expr
    query: str

    def __repr__(self) -> str:
        return f"{self.operand!r}.matches({self.query!r})"


def _expr(v: Any) -> Expr:
    return v if isinstance(v, Expr) else Lit(v)


def _operand(v: Any, op: str) -> Expr:
    """The other side of `&` / `|`: a filter of this tree, or a nested filter lowered to one
    (`t["id"] > 1 & t.x < 0`). Anything else is an `ExpressionError` now, not an Arrow error
    when the scan evaluates it."""
    v = as_expr(v)
    if isinstance(v, bool):
        return Lit(v)
    if not isinstance(v, Expr):
        raise ExpressionError(f"{op} combines filters; got {type(v).__name__} {v!r}")
    return v


def as_expr(v: Any) -> Any:
    """A filter in this tree: an `Expr` as it is, an object with `__conch_expr__()` (the nested
    API's `t.x > 1`) lowered to the same nodes `t["x"] > 1` builds; anything else unchanged."""
    if not isinstance(v, Expr) and hasattr(type(v), "__conch_expr__"):
        return v.__conch_expr__()
    return v


def _cmp(op: str, left: Expr, right: Any) -> Cmp:
    """A comparison; checked now when its column knows its type (`t["x"]`), else when planned."""
    e = Cmp(op, left, _expr(right))
    check_types(e, lambda c: c.dtype())
    return e


# ----- the passes: one `functools.singledispatch` visitor per pass, a case per node class ----------
@functools.singledispatch
def children(e: Expr) -> tuple[Expr, ...]:
    """The sub-expressions of a node (none for columns and literals)."""
    return ()


@children.register
def _(e: Cmp | Arith | And | Or) -> tuple[Expr, ...]:
    return (e.left, e.right)


@children.register
def _(e: Not | IsNull | IsIn | Matches) -> tuple[Expr, ...]:
    return (e.operand,)


@functools.singledispatch
def column_path(e: Expr) -> str | None:
    """The path of a column node, else None."""
    return None


@column_path.register
def _(e: Col) -> str | None:
    return e.path


@functools.singledispatch
def null_test_path(e: Expr) -> str | None:
    """The column `e` tests for null (`col.is_null()`), else None."""
    return None


@null_test_path.register
def _(e: IsNull) -> str | None:
    return column_path(e.operand)


def with_children(e: Expr, kids: Sequence[Expr]) -> Expr:
    """`e` with its sub-expressions replaced by `kids` (in `children` order)."""
    names = ("left", "right") if len(kids) == 2 else ("operand",)
    return dataclasses.replace(e, **dict(zip(names, kids, strict=True))) if kids else e  # type: ignore[type-var]


@functools.singledispatch
def check_types(e: Expr, type_of: Callable[[Col], pa.DataType | None]) -> None:
    """Raise `ExpressionError` where a comparison or `isin` pits a column against a literal (or
    column) of another kind: `t["x"] > "abc"` on a number, `t["s"] > 1` on a string.

    `type_of(col)` gives the column's Arrow type, or None when unknown (that term is not checked).
    """
    for k in children(e):
        check_types(k, type_of)


@check_types.register
def _(e: Cmp, type_of: Callable[[Col], pa.DataType | None]) -> None:
    if isinstance(e.left, Col) and isinstance(e.right, Col):
        lt, rt = type_of(e.left), type_of(e.right)
        if lt is not None and rt is not None and _kind(lt) != _kind(rt) and "other" not in (_kind(lt), _kind(rt)):
            raise ExpressionError(f"cannot compare {e.left.path!r} ({lt}) with {e.right.path!r} ({rt}): {e!r}")
        return
    norm = col_op_lit(e)
    if norm is not None:
        col = e.left if isinstance(e.left, Col) else e.right
        _check_literal(col, type_of(col), norm[2], e)  # type: ignore[arg-type]


@check_types.register
def _(e: IsIn, type_of: Callable[[Col], pa.DataType | None]) -> None:
    if isinstance(e.operand, Col):
        t = type_of(e.operand)
        for v in e.values:
            _check_literal(e.operand, t, v, e)


@check_types.register
def _(e: Matches, type_of: Callable[[Col], pa.DataType | None]) -> None:
    if not isinstance(e.operand, Col):
        raise ExpressionError(f"{e!r}: matches() applies to a string column")
    t = type_of(e.operand)
    if t is not None and not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise ExpressionError(f"{e!r}: column {e.operand.path!r} has type {t}; matches() needs a string column")


_NUMBERS = (int, float, np.integer, np.floating, Decimal)


def literal_fits(v: Any, t: pa.DataType) -> bool:
    """Whether literal `v` is exactly a value of type `t`: of the type's kind (a number for
    numbers, `str` for strings, `bytes` for binary, a date/datetime for dates and timestamps, a
    bool for bools) and unchanged by the conversion (`5.5` and `-1` do not fit `uint64`, `2**53 + 1`
    does not fit `float64`). None never fits; NaN fits only a float type."""
    if v is None:
        return False
    if isinstance(v, bool | np.bool_):
        return pa.types.is_boolean(t)
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        if not isinstance(v, _NUMBERS):
            return False
        if isinstance(v, float | np.floating) and math.isnan(v):
            return pa.types.is_floating(t)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        return isinstance(v, str)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return isinstance(v, bytes)
    elif pa.types.is_timestamp(t) or pa.types.is_date(t):
        if not isinstance(v, datetime.date) or (pa.types.is_date(t) and isinstance(v, datetime.datetime)):
            return False
    elif pa.types.is_boolean(t):
        return False
    try:
        return bool(key_array([v], pa.field("v", t))[0].as_py() == v)
    except (ConchError, pa.ArrowException, TypeError, ValueError, OverflowError):
        return False


def _kind(t: pa.DataType) -> str:
    """Numbers, strings and bools compare only within their family; anything else ("other") is
    checked by casting the literal."""
    f = type_family(t)
    return f if f in ("number", "string", "bool") else "other"


_LITERAL_KINDS: dict[str, tuple[type, ...]] = {
    "number": (int, float, np.integer, np.floating, Decimal),
    "string": (str,),
    "bool": (bool, np.bool_),
}


def _check_literal(col: Col, t: pa.DataType | None, value: Any, e: Expr) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        raise ExpressionError(f"literal {value!r} in {e!r} is outside every Arrow integer type")
    if t is None or value is None:
        return
    kind = _kind(t)
    if kind in _LITERAL_KINDS:
        ok = isinstance(value, _LITERAL_KINDS[kind]) and not (kind == "number" and isinstance(value, bool | np.bool_))
    else:
        try:
            pa.scalar(value).cast(t)
            ok = True
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError):
            ok = False
    if not ok:
        want = {"number": "a number", "string": "a str", "bool": "a bool"}.get(kind, f"a value castable to {t}")
        raise ExpressionError(
            f"cannot compare column {col.path!r} ({t}) with {value!r} ({type(value).__name__}) in {e!r}: use {want}"
        )


_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_ARROW = {
    "==": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def columns(e: Expr) -> list[str]:
    """The column paths an expression reads, in first-use order."""
    return list(dict.fromkeys(_paths(e)))


@functools.singledispatch
def _paths(e: Expr) -> list[str]:
    return [p for k in children(e) for p in _paths(k)]


@_paths.register
def _(e: Col) -> list[str]:
    return [e.path]


@functools.singledispatch
def conjuncts(e: Expr) -> list[Expr]:
    """Split a filter into its top-level AND terms."""
    return [e]


@conjuncts.register
def _(e: And) -> list[Expr]:
    return conjuncts(e.left) + conjuncts(e.right)


@functools.singledispatch
def evaluate(e: Expr, get: Callable[[str], pa.Array]) -> pa.Array:
    """Evaluate on Arrow columns (`get(path)`), with SQL three-valued logic."""
    raise ExpressionError(f"cannot evaluate {e!r}")


@evaluate.register
def _(e: Col, get: Callable[[str], pa.Array]) -> pa.Array:
    return get(e.path)


@evaluate.register
def _(e: Lit, get: Callable[[str], pa.Array]) -> pa.Array:
    try:
        return pa.scalar(e.value)
    except OverflowError as err:
        raise ExpressionError(f"literal {e.value!r} is outside every Arrow integer type") from err


@evaluate.register
def _(e: Cmp, get: Callable[[str], pa.Array]) -> pa.Array:
    left, right = align(evaluate(e.left, get), evaluate(e.right, get))
    return _ARROW[e.op](left, right)


@evaluate.register
def _(e: And, get: Callable[[str], pa.Array]) -> pa.Array:
    return pc.and_kleene(evaluate(e.left, get), evaluate(e.right, get))


@evaluate.register
def _(e: Or, get: Callable[[str], pa.Array]) -> pa.Array:
    return pc.or_kleene(evaluate(e.left, get), evaluate(e.right, get))


@evaluate.register
def _(e: Not, get: Callable[[str], pa.Array]) -> pa.Array:
    return pc.invert(evaluate(e.operand, get))


@evaluate.register
def _(e: IsNull, get: Callable[[str], pa.Array]) -> pa.Array:
    return pc.is_null(evaluate(e.operand, get))


@evaluate.register
def _(e: IsIn, get: Callable[[str], pa.Array]) -> pa.Array:
    arr = evaluate(e.operand, get)
    # a value that is not exactly of the column's type equals no value (2.5 is not 2)
    numeric = pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)
    vals = [v for v in e.values if not numeric or literal_fits(v, arr.type)]
    values = pa.array(vals, type=arr.type)
    res = pc.is_in(computable(arr), value_set=computable(values))
    # SQL: `null IN (...)` is null, not false.
    return pc.if_else(pc.is_null(arr), pa.scalar(None, pa.bool_()), res)


@evaluate.register
def _(e: Matches, get: Callable[[str], pa.Array]) -> pa.Array:
    from conch.expr.textmatch import match

    return match(evaluate(e.operand, get), e.query)


_ARITH = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}


@evaluate.register
def _(e: Arith, get: Callable[[str], pa.Array]) -> pa.Array:
    left, right = evaluate(e.left, get), evaluate(e.right, get)
    try:
        if e.op == "/":
            return pc.divide(pc.cast(left, pa.float64()), pc.cast(right, pa.float64()))
        return _ARITH[e.op](*align(left, right))
    except pa.ArrowInvalid as err:  # an overflow
        raise ExpressionError(f"{e!r}: {err}") from err
    except pa.ArrowNotImplementedError as err:
        raise ExpressionError(f"{e!r}: arithmetic needs numbers ({err})") from err


def align(left: Any, right: Any) -> tuple[Any, Any]:
    """Cast a literal to its column's type so comparisons are typed, not Python-coerced (0.8
    against a float32 column is 0.8f); a literal that does not cast exactly stays as it is and
    compares by value (`id < 2.5` on an integer column). The nested API compares the same way."""
    if isinstance(right, pa.Scalar) and isinstance(left, pa.Array | pa.ChunkedArray):
        right = _cast_scalar(right, left.type)
    elif isinstance(left, pa.Scalar) and isinstance(right, pa.Array | pa.ChunkedArray):
        left = _cast_scalar(left, right.type)
    return computable(left), computable(right)


def computable(v: Any) -> Any:
    """`v` with float16 widened to float32 (exactly): Arrow has no compute kernels for float16."""
    if isinstance(v, pa.Array | pa.ChunkedArray | pa.Scalar) and pa.types.is_float16(v.type):
        return v.cast(pa.float32())
    return v


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _cast_scalar(s: pa.Scalar, t: pa.DataType) -> pa.Scalar:
    """`s` as type `t` where that keeps its value. Between number types the cast must be exact
    (Arrow rounds 0.051 to the decimal 0.05, and `d < 0.051` would drop d = 0.05), except float to a
    narrower float, which is what the literal means there (0.8 on a float32 column is 0.8f)."""
    if s.type == t or not s.is_valid:
        return s
    try:
        cast = s.cast(t)
        if _numeric(s.type) and _numeric(t) and not (pa.types.is_floating(s.type) and pa.types.is_floating(t)):
            return cast if cast.cast(s.type).equals(s) else s
        return cast
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return s


def mask(e: Expr, get: Callable[[str], pa.Array]) -> np.ndarray:
    """Rows where the filter is true (null counts as false)."""
    res = evaluate(e, get)
    if isinstance(res, pa.ChunkedArray):
        res = res.combine_chunks()
    return np.asarray(pc.fill_null(res, False).to_numpy(zero_copy_only=False), dtype=bool)


def col_op_lit(e: Cmp) -> tuple[str, str, Any] | None:
    """`column op literal` with the column on the left (`1 < a` becomes `a > 1`), or None."""
    if isinstance(e.left, Col) and isinstance(e.right, Lit):
        return e.left.path, e.op, e.right.value
    if isinstance(e.right, Col) and isinstance(e.left, Lit):
        return e.right.path, _FLIP[e.op], e.left.value
    return None


@functools.singledispatch
def rename(e: Expr, f: Callable[[str], str]) -> Expr:
    """The same tree with every column path mapped through `f`."""
    return with_children(e, [rename(k, f) for k in children(e)])


@rename.register
def _(e: Col, f: Callable[[str], str]) -> Expr:
    return Col(f(e.path))
