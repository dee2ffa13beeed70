"""Spark filters → Conch predicates (what `ConchReader.pushFilters` accepts).

Spark hands a data source a list of filters that are implicitly AND-ed. Each is translated, or
rejected (returned to Spark, which then keeps evaluating it in a `Filter` node):

- a filter on a **value column** becomes a term of the scan's `where=` expression. Conch
  evaluates it on fresh records (DESIGN §2), which are exactly the rows Spark would filter, so
  the result is the same and Spark may drop the filter from its plan;
- a filter on a **key column** becomes (a) a coarse `KeyRange` on the first key column, so the
  scan skips key spaces and fragments outside it, and (b) an exact predicate evaluated on the
  key columns of each output batch (keys are never stale, so this is exact);
- string matching (`LIKE`: StartsWith / EndsWith / Contains) and anything on a column Conch
  does not know are rejected.

Comparisons follow SQL three-valued logic on both sides: `NOT (x = 1)` is null, not true, where
`x` is null, so the row is dropped either way.

>>> from pyspark.sql.datasource import GreaterThan, IsNotNull
>>> t = FilterTranslator(["id"], {"silence_ratio": pa.float64()}, {"id": pa.uint64()})
>>> t.translate(GreaterThan(("silence_ratio",), 0.5))  # doctest: +SKIP
(silence_ratio > 0.5)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql import datasource as ds

from conch.expr import And, Cmp, Col, Expr, IsIn, IsNull, Lit, Not
from conch.keys import KeyRange
from conch.spark.types import family

_CMP: dict[type, str] = {
    ds.EqualTo: "==",
    ds.GreaterThan: ">",
    ds.GreaterThanOrEqual: ">=",
    ds.LessThan: "<",
    ds.LessThanOrEqual: "<=",
}


@dataclass
class Pushed:
    """What the accepted filters add up to."""

    where: Expr | None = None  # value filter, evaluated by the scan on fresh records
    key_filter: Expr | None = None  # exact filter on key columns, evaluated per output batch
    key_range: KeyRange | None = None  # coarse range on the first key column, for pruning
    accepted: list[str] = field(default_factory=list)


def and_all(terms: list[Expr]) -> Expr | None:
    out: Expr | None = None
    for t in terms:
        out = t if out is None else And(out, t)
    return out


class FilterTranslator:
    """Translates Spark filters for one scan: its key names and its value columns' types."""

    def __init__(self, key_names: list[str], columns: dict[str, pa.DataType], key_types: dict[str, pa.DataType]):
        self.key_names = key_names
        self.columns = columns  # column path relative to the scan level -> Arrow type
        self.key_types = key_types

    def _path(self, attribute: tuple[str, ...]) -> tuple[str, bool] | None:
        """(path, is_key) of a filter's column, or None if Conch cannot evaluate it."""
        if len(attribute) == 1 and attribute[0] in self.key_types:
            return attribute[0], True
        path = ".".join(attribute)
        return (path, False) if path in self.columns else None

    def _lit(self, value: Any, t: pa.DataType) -> Lit | None:
        """A literal checked to convert exactly to the column's type (else the filter is rejected)."""
        if isinstance(value, bytearray):
            value = bytes(value)
        if value is None:
            return Lit(None)
        try:
            s = pa.scalar(value)
            if family(s.type) != family(t):
                return None  # e.g. a number against a string column: Spark's cast, not ours
            if s.type != t:
                s.cast(t, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError):
            # Mixed numeric types still compare correctly in Arrow (e.g. 0.5 against an int column).
            if not (_numeric(t) and isinstance(value, int | float)):
                return None
        return Lit(value)

    def translate(self, f: ds.Filter) -> tuple[Expr, bool] | None:
        """(Conch expression, is-a-key-filter) for one Spark filter, or None to reject it."""
        if isinstance(f, ds.Not):
            inner = self.translate(f.child)
            return None if inner is None else (Not(inner[0]), inner[1])
        found = self._path(f.attribute) if hasattr(f, "attribute") else None
        if found is None:
            return None
        path, is_key = found
        t = self.key_types[path] if is_key else self.columns[path]
        col = Col(path)
        if isinstance(f, ds.IsNull):
            return IsNull(col), is_key
        if isinstance(f, ds.IsNotNull):
            return Not(IsNull(col)), is_key
        value: Any = getattr(f, "value", None)
        if type(f) in _CMP or isinstance(f, ds.EqualNullSafe):
            if value is None:
                # `x = null` is never true; `x <=> null` is `x is null`.
                return (IsNull(col), is_key) if isinstance(f, ds.EqualNullSafe) else None
            lit = self._lit(value, t)
            if lit is None:
                return None
            return Cmp(_CMP.get(type(f), "=="), col, lit), is_key
        if isinstance(f, ds.In):
            lits = [self._lit(v, t) for v in value]
            if any(lit is None for lit in lits):
                return None
            return IsIn(col, tuple(lit.value for lit in lits if lit is not None)), is_key
        return None

    def push(self, filters: list[ds.Filter]) -> tuple[Pushed, list[ds.Filter]]:
        """Split `filters` into what Conch guarantees and the (same objects) Spark must keep."""
        where: list[Expr] = []
        keys: list[Expr] = []
        rejected: list[ds.Filter] = []
        pushed = Pushed()
        for f in filters:
            got = self.translate(f)
            if got is None:
                rejected.append(f)
                continue
            (keys if got[1] else where).append(got[0])
            pushed.accepted.append(repr(f))
        pushed.where = and_all(where)
        pushed.key_filter = and_all(keys)
        pushed.key_range = self._key_range(filters, rejected)
        return pushed, rejected

    def _key_range(self, filters: list[ds.Filter], rejected: list[ds.Filter]) -> KeyRange | None:
        """Bounds on the first key column implied by accepted filters (a superset: exactness
        comes from the per-batch key filter)."""
        if not self.key_names:
            return None
        first = self.key_names[0]
        lo: Any = None
        hi: Any = None  # exclusive
        for f in filters:
            if any(f is r for r in rejected) or getattr(f, "attribute", None) != (first,):
                continue
            t = self.key_types[first]
            values = f.value if isinstance(f, ds.In) else [getattr(f, "value", None)]
            if not all(_fits(v, t) for v in values):
                continue
            if isinstance(f, ds.GreaterThan | ds.GreaterThanOrEqual | ds.EqualTo | ds.EqualNullSafe):
                v = f.value
                if v is not None and (lo is None or v > lo):
                    lo = v
            if isinstance(f, ds.LessThan):
                v = f.value
                if hi is None or v < hi:
                    hi = v
            elif isinstance(f, ds.LessThanOrEqual | ds.EqualTo | ds.EqualNullSafe):
                v = _successor(f.value, t)
                if v is not None and (hi is None or v < hi):
                    hi = v
            elif isinstance(f, ds.In) and f.value and None not in f.value:
                vs = list(f.value)
                lo = min(vs) if lo is None else max(lo, min(vs))
                v = _successor(max(vs), t)
                if v is not None and (hi is None or v < hi):
                    hi = v
        if lo is None and hi is None:
            return None
        return KeyRange(None if lo is None else (lo,), None if hi is None else (hi,))


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _fits(v: Any, t: pa.DataType) -> bool:
    try:
        pa.array([v], t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError):
        return False
    return v is not None


def _successor(v: Any, t: pa.DataType) -> Any:
    """The smallest value of the key type above `v`, where cheap to know (integers); else None."""
    if v is None or not pa.types.is_integer(t) or not isinstance(v, int):
        return None
    nxt = v + 1
    try:
        pa.scalar(nxt, t)
    except (pa.ArrowInvalid, OverflowError):
        return None
    return nxt
