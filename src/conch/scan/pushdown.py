"""Filter pushdown helpers: Conch expressions as Vortex expressions, and vectorised pruning of
fragments by their statistics (DESIGN §3 "keep manifests as Arrow tables", §5).

Vortex 0.90 compares only values of exactly the same dtype (`u64 < i64` raises), so literals are
typed from the column's Arrow type, and a literal that does not fit that type exactly (2.5
against an int column, -1 against a u64) is not pushed: the caller evaluates that term on the
assembled fresh records instead. `~` is only pushed as `is_not_null`: three-valued `NOT` is
left to Arrow, whose semantics are the reference.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch._deps import LazyModule
from conch.expr import And, Cmp, Col, Expr, IsIn, IsNull, Not, Or, col_op_lit, computable
from conch.fragments import decode_stats
from conch.manifest import Fragment

vx: Any = LazyModule("vortex")
ve: Any = LazyModule("vortex.expr")
_VX_CMP = {"==": "eq", "!=": "not_eq", "<": "lt", "<=": "lt_eq", ">": "gt", ">=": "gt_eq"}


def _vx_dtype(t: pa.DataType) -> Any | None:
    if pa.types.is_signed_integer(t):
        return vx.int_(t.bit_width, nullable=True)
    if pa.types.is_unsigned_integer(t):
        return vx.uint(t.bit_width, nullable=True)
    if pa.types.is_floating(t) and t.bit_width in (32, 64):
        return vx.float_(t.bit_width, nullable=True)
    return None


def _literal(value: Any, t: pa.DataType) -> Any | None:
    """A Vortex literal of exactly `t`, or None if `value` is not exactly representable."""
    if value is None or isinstance(value, bool):
        return None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return ve.literal(vx.utf8(nullable=True), value) if isinstance(value, str) else None
    dt = _vx_dtype(t)
    if dt is None:
        return None
    if pa.types.is_integer(t):
        if not isinstance(value, int | np.integer):
            return None
        info = np.iinfo(t.to_pandas_dtype())
        return ve.literal(dt, int(value)) if info.min <= int(value) <= info.max else None
    if isinstance(value, int | float | np.integer | np.floating):
        as_float = float(value)
        if t.bit_width == 32 and float(np.float32(as_float)) != as_float:
            return None
        if isinstance(value, int | np.integer) and int(as_float) != int(value):
            return None
        return ve.literal(dt, as_float)
    return None


def to_vortex(e: Expr, column_name: Callable[[str], str | None], types: Callable[[str], pa.DataType]) -> Any | None:
    """`e` as a Vortex expression over file column names, or None if any part cannot be pushed.

    `column_name(path)` gives the file's column for a path (None if it is not stored inline).
    """
    if isinstance(e, And | Or):
        left = to_vortex(e.left, column_name, types)
        right = to_vortex(e.right, column_name, types)
        if left is None or right is None:
            return None
        return ve.and_(left, right) if isinstance(e, And) else ve.or_(left, right)
    if isinstance(e, IsNull) and isinstance(e.operand, Col):
        name = column_name(e.operand.path)
        return ve.is_null(ve.column(name)) if name else None
    if isinstance(e, Not) and isinstance(e.operand, IsNull) and isinstance(e.operand.operand, Col):
        name = column_name(e.operand.operand.path)
        return ve.is_not_null(ve.column(name)) if name else None
    if isinstance(e, Cmp):
        norm = col_op_lit(e)
        if norm is None:
            return None
        path, op, value = norm
        name = column_name(path)
        lit = _literal(value, types(path))
        if name is None or lit is None:
            return None
        return getattr(ve, _VX_CMP[op])(ve.column(name), lit)
    return None


# ----- statistics pruning over Arrow arrays ------------------------------------------------------
class StatsCache:
    """Decoded per-fragment statistics, by fragment id (fragments are immutable)."""

    def __init__(self, max_entries: int = 65536) -> None:
        self._d: OrderedDict[str, pa.RecordBatch] = OrderedDict()
        self._max = max_entries

    def get(self, fr: Fragment) -> pa.RecordBatch:
        b = self._d.get(fr.id)
        if b is None:
            b = decode_stats(fr.stats)
            self._d[fr.id] = b
            if len(self._d) > self._max:
                self._d.popitem(last=False)
        return b

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


def may_match_many(
    e: Expr, frs: Sequence[Fragment], stats: StatsCache, column: Callable[[str], tuple[int, pa.DataType]]
) -> np.ndarray:
    """Per fragment: False only where its statistics prove no row satisfies `e` (vectorised
    `column(path)` gives (column id, type)."""
    n = len(frs)
    # A masked fragment's statistics may be those of its whole data file (minor compaction does
    # not re-read data): bounds still hold for its rows, null counts do not; an unreachable row
    # count makes "all null" and "no non-null" unprovable for it.
    rows = np.array([f.rows if not f.mask else np.iinfo(np.int64).max for f in frs], dtype=np.int64)
    if isinstance(e, And):
        return may_match_many(e.left, frs, stats, column) & may_match_many(e.right, frs, stats, column)
    if isinstance(e, Or):
        return may_match_many(e.left, frs, stats, column) | may_match_many(e.right, frs, stats, column)
    if isinstance(e, IsNull) and isinstance(e.operand, Col):
        _, _, nulls = stats.column(frs, *column(e.operand.path))
        return (nulls != 0) | (nulls < 0)
    if isinstance(e, Not) and isinstance(e.operand, IsNull) and isinstance(e.operand.operand, Col):
        _, _, nulls = stats.column(frs, *column(e.operand.operand.path))
        return (nulls < 0) | (nulls < rows)
    if isinstance(e, Cmp):
        norm = col_op_lit(e)
        if norm is None:
            return np.ones(n, dtype=bool)
        path, op, value = norm
        cid, t = column(path)
        lo, hi, nulls = stats.column(frs, cid, t)
        all_null = (nulls >= 0) & (nulls == rows)
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
    if isinstance(e, IsIn) and isinstance(e.operand, Col):
        cid, t = column(e.operand.path)
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
        return out & ~((nulls >= 0) & (nulls == rows))
    return np.ones(n, dtype=bool)
