"""Filter pushdown helpers: Conch expressions as Vortex expressions, and vectorised pruning of
fragments by their statistics (DESIGN §3 "keep manifests as Arrow tables", §5).

Arrow's evaluation (`conch.expr.tree.evaluate`) is the reference; a term goes into the Vortex scan
only where Vortex computes exactly the same rows. Vortex 0.90 compares only values of exactly
the same dtype (`u64 < i64`, `decimal(15,2) < decimal(38,2)` raise), so literals are typed from
the column's Arrow type, and a literal that does not fit that type exactly (2.5 against an int
column, -1 against a u64, 0.051 against a decimal(15,2)) is not pushed: the caller evaluates that
term on the assembled fresh records instead. Vortex orders floats totally (NaN above inf, -NaN
below -inf, -0.0 below 0.0) where Arrow follows IEEE: float comparisons are rewritten to agree
(`_float_cmp`). `AND` and `OR` are three-valued (Kleene) in both; Vortex's `NOT` of a float
comparison over an all-null column is not, so `NOT` is pushed to its terms and each negated term
is kept to rows whose column is not null.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.expr.tree import (
    And,
    Cmp,
    Expr,
    IsIn,
    IsNull,
    Not,
    Or,
    col_op_lit,
    column_path,
    computable,
    literal_fits,
    null_test_path,
)
from conch.files.format import column_name, decode_stats
from conch.files.manifest import Fragment
from conch.model.deps import LazyModule
from conch.model.lru import Lru
from conch.model.schema import Schema

vx: Any = LazyModule("vortex")
ve: Any = LazyModule("vortex.expr")
_VX_CMP = {"==": "eq", "!=": "not_eq", "<": "lt", "<=": "lt_eq", ">": "gt", ">=": "gt_eq"}
MAX_IN = 256  # longer IN lists stay in Arrow (one `==` term per value in Vortex)


def _vx_dtype(t: pa.DataType) -> Any | None:
    """The nullable Vortex dtype Conch's fragments store an Arrow column of type `t` as (None:
    not pushed)."""
    if pa.types.is_signed_integer(t):
        return vx.int_(t.bit_width, nullable=True)
    if pa.types.is_unsigned_integer(t):
        return vx.uint(t.bit_width, nullable=True)
    if pa.types.is_floating(t) and t.bit_width in (32, 64):
        return vx.float_(t.bit_width, nullable=True)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return vx.utf8(nullable=True)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return vx.binary(nullable=True)
    if pa.types.is_boolean(t):
        return vx.bool_(nullable=True)
    if pa.types.is_date32(t):
        return vx.date("days", nullable=True)
    if pa.types.is_timestamp(t) and t.unit in ("s", "ms", "us"):
        return vx.timestamp(t.unit, tz=t.tz, nullable=True)
    if pa.types.is_decimal128(t):
        return vx.decimal(precision=t.precision, scale=t.scale, nullable=True)
    return None


def _exact_value(value: Any, t: pa.DataType) -> Any | None:
    """`value` as a Python value of exactly type `t`, as Arrow compares it (the reference,
    `conch.expr.tree.evaluate` casts the literal to the column's type), or None where that cast is
    not exact (2.5 against an int column, 0.051 against decimal(15,2), -1 against a u64, a
    datetime with microseconds against a ms column): such a term is evaluated in Arrow."""
    if value is None or isinstance(value, bool | np.bool_) != pa.types.is_boolean(t):
        return None
    if isinstance(value, float | np.floating) and value != value:
        return None  # NaN: Vortex orders NaN as a value (total order), Arrow never matches it
    if pa.types.is_integer(t) and not isinstance(value, int | np.integer):
        return None  # Arrow would compare a float literal as a float, not truncated
    try:
        cast = pa.scalar(value).cast(t)
        back = cast.cast(pa.scalar(value).type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, OverflowError):
        return None
    if not cast.is_valid or back.as_py() != pa.scalar(value).as_py():
        return None  # the cast rounded: not the value the user wrote
    return cast.as_py()


def _literal(value: Any, t: pa.DataType) -> Any | None:
    """A Vortex literal of exactly `t`, or None if `value` is not exactly representable."""
    dt = _vx_dtype(t)
    exact = None if dt is None else _exact_value(value, t)
    return None if exact is None else ve.literal(dt, exact)


def _float_cmp(column: Any, op: str, value: float, t: pa.DataType) -> Any | None:
    """A float comparison as Arrow evaluates it (IEEE: NaN matches nothing but `!=`, -0.0 ==
    0.0), in Vortex, which compares floats by total order (-NaN < -inf < ... < -0.0 < 0.0 < ...
    < inf < NaN): bounded by the infinities so that no NaN passes, zero taken from the side
    that keeps both zeros on the same side as Arrow."""
    lo_inf, hi_inf = _literal(float("-inf"), t), _literal(float("inf"), t)
    zero = value == 0
    neg0, pos0 = (_literal(-0.0, t), _literal(0.0, t)) if zero else (None, None)
    lit = _literal(value, t)
    if lit is None:
        return None
    if op == "<":
        return ve.and_(ve.gt_eq(column, lo_inf), ve.lt(column, neg0 if zero else lit))
    if op == "<=":
        return ve.and_(ve.gt_eq(column, lo_inf), ve.lt_eq(column, pos0 if zero else lit))
    if op == ">":
        return ve.and_(ve.gt(column, pos0 if zero else lit), ve.lt_eq(column, hi_inf))
    if op == ">=":
        return ve.and_(ve.gt_eq(column, neg0 if zero else lit), ve.lt_eq(column, hi_inf))
    if op == "==":
        return ve.and_(ve.gt_eq(column, neg0), ve.lt_eq(column, pos0)) if zero else ve.eq(column, lit)
    if zero:  # "!=": true for NaN in Arrow as in Vortex; false for both zeros
        return ve.not_(ve.and_(ve.gt_eq(column, neg0), ve.lt_eq(column, pos0)))
    return ve.not_eq(column, lit)


def _cmp(name: str, op: str, value: Any, t: pa.DataType) -> Any | None:
    column = ve.column(name)
    if pa.types.is_floating(t):
        if not isinstance(value, int | float | np.integer | np.floating) or isinstance(value, bool | np.bool_):
            return None
        exact = _exact_value(value, t)
        return None if exact is None else _float_cmp(column, op, float(exact), t)
    lit = _literal(value, t)
    return None if lit is None else getattr(ve, _VX_CMP[op])(column, lit)


Names = Callable[[str], str | None]
Types = Callable[[str], pa.DataType]


@functools.singledispatch
def to_vortex(e: Expr, column_name: Names, types: Types) -> Any | None:
    """`e` as a Vortex expression over file column names, or None if any part cannot be pushed
    (the caller then evaluates it on the assembled fresh records, in Arrow).

    Pushed: comparisons of a column with a literal of its type, exactly as Arrow casts it
    (integers, floats, strings, binary, bools, dates, timestamps in s/ms/µs with or without a
    zone, decimal128), `IS [NOT] NULL`, `IN` (as `==` terms), and `AND`/`OR`/`NOT` of those:
    Vortex's are three-valued like Arrow's (Kleene), so a pushed term keeps exactly the rows
    Arrow would. `column_name(path)` gives the file's column for a path (None if it is not
    stored inline). One case per node class (`functools.singledispatch`); anything else: None.
    """
    return None


@to_vortex.register
def _(e: And | Or, column_name: Names, types: Types) -> Any | None:
    left = to_vortex(e.left, column_name, types)
    right = to_vortex(e.right, column_name, types)
    if left is None or right is None:
        return None
    return (ve.and_ if type(e) is And else ve.or_)(left, right)


@to_vortex.register
def _(e: IsNull, column_name: Names, types: Types) -> Any | None:
    path = column_path(e.operand)
    name = column_name(path) if path is not None else None
    return ve.is_null(ve.column(name)) if name else None


@to_vortex.register
def _(e: Not, column_name: Names, types: Types) -> Any | None:
    """NOT pushed down to the terms (De Morgan's laws hold in Kleene logic), each negated term
    kept to rows whose column is not null: Vortex 0.90's NOT of a float comparison (an AND of
    two bounds, `_float_cmp`) over an all-null column is true, not null (`NOT (x < 0)` kept the
    rows where x is null, where Arrow keeps none), so a negated term never relies on Vortex's
    nulls: NOT of a term over one column is null exactly where that column is."""
    op = e.operand
    path = null_test_path(op)
    if path is not None:
        name = column_name(path)
        return ve.is_not_null(ve.column(name)) if name else None
    if isinstance(op, Not):
        return to_vortex(op.operand, column_name, types)
    if isinstance(op, And | Or):
        flipped = (Or if isinstance(op, And) else And)(Not(op.left), Not(op.right))
        return to_vortex(flipped, column_name, types)
    norm = col_op_lit(op) if isinstance(op, Cmp) else None
    path = norm[0] if norm is not None else column_path(op.operand) if isinstance(op, IsIn) else None
    name = column_name(path) if path is not None else None
    inner = to_vortex(op, column_name, types)
    if inner is None or name is None:
        return None
    return ve.and_(ve.not_(inner), ve.is_not_null(ve.column(name)))


@to_vortex.register
def _(e: Cmp, column_name: Names, types: Types) -> Any | None:
    norm = col_op_lit(e)
    if norm is None:
        return None
    path, op, value = norm
    name = column_name(path)
    return None if name is None else _cmp(name, op, value, types(path))


@to_vortex.register
def _(e: IsIn, column_name: Names, types: Types) -> Any | None:
    path = column_path(e.operand)
    if path is None:
        return None
    # Arrow's `is_in` (nulled for a null operand): a null in the list matches nothing else
    name, t = column_name(path), types(path)
    if name is None or pa.types.is_floating(t):
        return None  # Arrow's `is_in` matches floats by hash: -0.0 is not 0.0 there, unlike `==`
    # a number not exactly of the column's type equals no value (`conch.expr.tree.evaluate`)
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t)
    values = [v for v in e.values if v is not None and (not numeric or literal_fits(v, t))]
    if not values or len(values) > MAX_IN:
        return None
    out = None
    for v in values:
        term = _cmp(name, "==", v, t)
        if term is None:
            return None
        out = term if out is None else ve.or_(out, term)
    return out


def schema_vortex_expr(schema: Schema, e: Expr, fragments: Sequence[Fragment]) -> Any | None:
    """`e` as a Vortex expression over these fragments' files; None if a column is out of
    line (a blob column), is a key column, or a term cannot be pushed exactly (`to_vortex`)."""
    blob_ids = {i for f in fragments for i in f.blob_columns}

    def name(p: str) -> str | None:
        if not schema.has_column(p):
            return None  # a key column: not stored in fragments
        cid = schema.column(p).id
        return None if cid in blob_ids else column_name(cid)

    def type_of(p: str) -> pa.DataType:
        return schema.column(p).type if schema.has_column(p) else pa.null()

    return to_vortex(e, name, type_of)


# ----- statistics pruning over Arrow arrays ------------------------------------------------------
class StatsCache:
    """Decoded per-fragment statistics, by fragment id (fragments are immutable)."""

    def __init__(self, max_entries: int = 65536) -> None:
        self._lru: Lru[str, pa.RecordBatch] = Lru(max_entries=max_entries)

    def get(self, fr: Fragment) -> pa.RecordBatch:
        return self._lru.get_or_make(fr.id, lambda: decode_stats(fr.stats))

    def column(self, frs: Sequence[Fragment], cid: int, t: pa.DataType) -> tuple[pa.Array, pa.Array, np.ndarray]:
        """(min, max, null count) of column `cid` across `frs`, as arrays (null = unknown)."""
        lo: list[Any] = []
        hi: list[Any] = []
        nulls = np.full(len(frs), -1, dtype=np.int64)
        for i, fr in enumerate(frs):
            b = self.get(fr)
            if f"min.{cid}" in b.schema.names:
                lo.append(b.column(f"min.{cid}")[0].as_py())
                hi.append(b.column(f"max.{cid}")[0].as_py())
                nulls[i] = b.column(f"nulls.{cid}")[0].as_py()
            else:
                lo.append(None)
                hi.append(None)
        try:
            return computable(pa.array(lo, t)), computable(pa.array(hi, t)), nulls
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            n = len(frs)
            return pa.nulls(n, t), pa.nulls(n, t), nulls


Columns = Callable[[str], tuple[int, pa.DataType]]


@functools.singledispatch
def may_match_many(e: Expr, frs: Sequence[Fragment], stats: StatsCache, column: Columns) -> np.ndarray:
    """Per fragment: False only where its statistics prove no row satisfies `e` (vectorised
    `column(path)` gives (column id, type). One case per node class; anything else may match."""
    return np.ones(len(frs), dtype=bool)


def _rows(frs: Sequence[Fragment]) -> np.ndarray:
    # A masked fragment's statistics may be those of its whole data file (minor compaction does
    # not re-read data): bounds still hold for its rows, null counts do not; an unreachable row
    # count makes "all null" and "no non-null" unprovable for it.
    return np.array([f.rows if not f.mask else np.iinfo(np.int64).max for f in frs], dtype=np.int64)


@may_match_many.register
def _(e: And | Or, frs: Sequence[Fragment], stats: StatsCache, column: Columns) -> np.ndarray:
    both = np.logical_and if type(e) is And else np.logical_or
    return both(may_match_many(e.left, frs, stats, column), may_match_many(e.right, frs, stats, column))


@may_match_many.register
def _(e: IsNull, frs: Sequence[Fragment], stats: StatsCache, column: Columns) -> np.ndarray:
    path = column_path(e.operand)
    if path is None:
        return np.ones(len(frs), dtype=bool)
    _, _, nulls = stats.column(frs, *column(path))
    return (nulls != 0) | (nulls < 0)


@may_match_many.register
def _(e: Not, frs: Sequence[Fragment], stats: StatsCache, column: Columns) -> np.ndarray:
    path = null_test_path(e.operand)
    if path is None:
        return np.ones(len(frs), dtype=bool)
    _, _, nulls = stats.column(frs, *column(path))
    return (nulls < 0) | (nulls < _rows(frs))


@may_match_many.register
def _(e: Cmp, frs: Sequence[Fragment], stats: StatsCache, column: Columns) -> np.ndarray:
    n = len(frs)
    norm = col_op_lit(e)
    if norm is None:
        return np.ones(n, dtype=bool)
    path, op, value = norm
    cid, t = column(path)
    lo, hi, nulls = stats.column(frs, cid, t)
    all_null = (nulls >= 0) & (nulls == _rows(frs))
    if value is None:
        return np.zeros(n, dtype=bool)  # every comparison with null is null
    try:
        lit = computable(pa.scalar(value).cast(t))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return np.ones(n, dtype=bool)
    if op == "<":
        res = pc.less(lo, lit)
    elif op == "<=":
        res = pc.less_equal(lo, lit)
    elif op == ">":
        res = pc.greater(hi, lit)
    elif op == ">=":
        res = pc.greater_equal(hi, lit)
    elif op == "==":
        res = pc.and_kleene(pc.less_equal(lo, lit), pc.greater_equal(hi, lit))
    else:  # "!=": false only if every value equals the literal
        res = pc.invert(pc.and_kleene(pc.equal(lo, lit), pc.equal(hi, lit)))
    # unknown bounds (null) may match
    ok = np.asarray(pc.fill_null(res, True).to_numpy(zero_copy_only=False), dtype=bool)
    return ok & ~all_null


@may_match_many.register
def _(e: IsIn, frs: Sequence[Fragment], stats: StatsCache, column: Columns) -> np.ndarray:
    n = len(frs)
    path = column_path(e.operand)
    if path is None:
        return np.ones(n, dtype=bool)
    cid, t = column(path)
    lo, hi, nulls = stats.column(frs, cid, t)
    out = np.zeros(n, dtype=bool)
    for v in e.values:
        if v is None:
            continue
        try:
            lit = computable(pa.scalar(v).cast(t))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return np.ones(n, dtype=bool)
        res = pc.and_kleene(pc.less_equal(lo, lit), pc.greater_equal(hi, lit))
        out |= np.asarray(pc.fill_null(res, True).to_numpy(zero_copy_only=False), dtype=bool)
    return out & ~((nulls >= 0) & (nulls == _rows(frs)))


def prune(e: Expr, frs: Sequence[Sequence[Fragment]], stats: StatsCache, schema: Schema) -> list[list[Fragment]]:
    """Each list of `frs` without the fragments whose statistics prove `e` false, in one
    vectorised `may_match_many` over them all."""
    flat = [f for part in frs for f in part]
    may = may_match_many(e, flat, stats, lambda p: (schema.column(p).id, schema.column(p).type))
    out, at = [], 0
    for part in frs:
        ok = may[at : at + len(part)]
        at += len(part)
        out.append([f for f, keep in zip(part, ok, strict=True) if keep])
    return out
