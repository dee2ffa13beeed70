"""Filter terms on key columns turned into a key range (key columns are first-class in `where=`).

A conjunct comparing the first key column with a literal bounds the keys the scan can return:
`id >= 10`, `id < 20`, `id == 7` (and, for integer keys, `id > 9`, `id <= 19`) become a
`KeyRange`, which prunes key spaces by their key spans and selects rows of sorted runs by binary
search, and which also lets the streamed path run. A term the range states exactly leaves the
filter; any other term on keys (other key columns, `!=`, `isin`, mixed with values, a literal
that does not fit the key type) stays in the filter and is evaluated exactly on the keys.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from conch.expr import And, Cmp, Expr, col_op_lit, conjuncts
from conch.keys import KeyRange


def key_range_of(filt: Expr, key_fields: Sequence[pa.Field]) -> tuple[KeyRange | None, Expr | None]:
    """(the key range the conjuncts on the first key column imply, or None; the remaining filter,
    or None if every term became part of the range)."""
    first = key_fields[0]
    integer = pa.types.is_integer(first.type)
    lo: Any = None
    hi: Any = None
    rest: list[Expr] = []
    for term in conjuncts(filt):
        norm = col_op_lit(term) if isinstance(term, Cmp) else None
        if norm is None or norm[0] != first.name or not _fits(norm[2], first.type):
            rest.append(term)
            continue
        _, op, v = norm
        nxt = v + 1 if integer and _fits(v + 1, first.type) else None
        exact = True
        if op == ">=":
            lo = _max(lo, v)
        elif op == "<":
            hi = _min(hi, v)
        elif op == ">":
            lo, exact = (_max(lo, nxt), True) if nxt is not None else (_max(lo, v), False)
        elif op == "<=":
            if nxt is not None:
                hi = _min(hi, nxt)
            else:
                exact = False
        elif op == "==":
            lo = _max(lo, v)
            if nxt is not None:
                hi = _min(hi, nxt)
            else:
                exact = False
        else:  # "!=": no range
            exact = False
        if not exact:
            rest.append(term)
    if lo is None and hi is None:
        return None, filt
    rng = KeyRange(None if lo is None else (lo,), None if hi is None else (hi,))
    out: Expr | None = None
    for t in rest:
        out = t if out is None else And(out, t)
    return rng, out


def _fits(v: Any, t: pa.DataType) -> bool:
    """Whether literal `v` is exactly a value of key type `t` (else the term is not a range)."""
    if v is None or isinstance(v, bool) or (isinstance(v, float) and math.isnan(v)):
        return False
    try:
        return bool(pa.array([v], t)[0].as_py() == v)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError):
        return False


def _max(a: Any, b: Any) -> Any:
    return b if a is None or b > a else a


def _min(a: Any, b: Any) -> Any:
    return b if a is None or b < a else a
