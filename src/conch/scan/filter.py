"""The filter of a scan, analysed in one place: lowered once, cut once into key terms and value
terms (`analyse`), and the key terms turned into keys to seek (`extract`).

`analyse` takes a `where=` in any of its spellings (`t["x"]`, `t.x` and `_.x` lowered to
`conch.expr.tree`, or a tree an engine built), checks its literal types against the schema,
names columns by their full paths, and cuts it into AND terms over key columns only (evaluated
on keys, never on values) and every other term. `conch.scan.request.ScanRequest` carries both;
the planner, the row mask, the split planner, `explain` and every engine read them from there.

The core scan (`where=`), Spark's `where` option, the Polars and DuckDB pushdown all translate
their own syntax into `conch.expr.tree` and ask `extract` which keys the filter can match; nothing
else decides it, so the engines cannot disagree (NaN, None, out-of-range or mixed-type literals).

A conjunct bounds the first key column when it compares it with a literal that *is* a value of
the key type (`conch.expr.tree.literal_fits`): `id >= 10`, `id < 20`, `id == 7`, `id > 9` (integers and strings
have a successor, so `>`, `<=` and `==` are exact for them), and `id.isin([...])`. A term the
result states exactly leaves the filter; any other term on keys (other key columns, `!=`, a
literal that does not fit, NaN, None, a bool on a number) stays in the residual and is evaluated
exactly on the keys. Engines whose own filter runs afterwards (Spark, Polars) use only `range`.

>>> f = extract(Col("id") >= 10, [pa.field("id", pa.uint64())])  # doctest: +SKIP
>>> f.range, f.residual  # doctest: +SKIP
(KeyRange(start=(10,), end=None), None)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from conch.errors import ExpressionError, LevelError
from conch.expr.tree import (
    And,
    Arith,
    Cmp,
    Col,
    Expr,
    IsIn,
    Lit,
    as_expr,
    check_types,
    col_op_lit,
    columns,
    conjuncts,
    literal_fits,
    rename,
)
from conch.model.keys import KeyPredicate, KeyRange, to_key_predicate
from conch.model.schema import Schema, join_path

__all__ = [
    "FilterTerms",
    "KeyFilter",
    "analyse",
    "and_all",
    "extract",
    "key_fits",
    "key_range_of",
    "literal_fits",
    "successor",
]


@dataclass(frozen=True)
class FilterTerms:
    """A filter cut into its AND terms (`analyse`), over full column paths and key names."""

    key_terms: tuple[Expr, ...] = ()  # terms over key columns only: evaluated on keys
    value_terms: tuple[Expr, ...] = ()  # every other term (value columns, maybe keys too)

    @property
    def terms(self) -> tuple[Expr, ...]:
        return self.key_terms + self.value_terms

    @property
    def where(self) -> Expr | None:
        """The whole filter (None: no filter)."""
        return and_all(self.terms)


def and_all(terms: Sequence[Expr]) -> Expr | None:
    """The AND of `terms` (None for none)."""
    out: Expr | None = None
    for t in terms:
        out = t if out is None else And(out, t)
    return out


def analyse(where: Any, schema: Schema, level: str) -> FilterTerms:
    """`where` (a `conch.expr.tree` tree, or an object that lowers to one) checked against
    `schema`'s `level` and cut into key terms and value terms, columns named by full path.
    `ExpressionError` for anything that is not a filter, `ColumnNotFoundError` for an unknown
    column, `LevelError` for a column of another level."""
    if where is None:
        return FilterTerms()
    tree = as_expr(where)
    if not isinstance(tree, Expr) or isinstance(tree, Col | Lit | Arith):  # a value is not a condition
        raise ExpressionError(f"where= takes a Conch expression like t['x'] < 1 (a condition), got {where!r}")
    key_names = set(schema.key_names(level))

    def full(p: str) -> str:
        if schema.has_column(p):
            return p
        if level and schema.has_column(join_path(level, p)):
            return join_path(level, p)
        if p in key_names:
            return p
        schema.column(p)  # raises ColumnNotFoundError
        return p

    tree = rename(tree, full)
    key_types = {f.name: f.type for f in schema.key_fields(level)}
    check_types(tree, lambda c: schema.column(c.path).type if schema.has_column(c.path) else key_types.get(c.path))
    other = {schema.column(p).level for p in columns(tree) if schema.has_column(p)} - {level}
    if other:
        raise LevelError(f"filter {where!r} reads level(s) {sorted(other)} but the scan is of level {level!r}")
    keys: list[Expr] = []
    values: list[Expr] = []
    for term in conjuncts(tree):
        on_keys = all(p in key_names and not schema.has_column(p) for p in columns(term))
        (keys if on_keys and columns(term) else values).append(term)
    return FilterTerms(tuple(keys), tuple(values))


def key_fits(v: Any, t: pa.DataType) -> bool:
    """Whether `v` can be a key of type `t`: it fits (`literal_fits`) and is not NaN."""
    return literal_fits(v, t) and not (isinstance(v, float | np.floating) and math.isnan(v))


def successor(v: Any, t: pa.DataType) -> Any:
    """The smallest key of type `t` above `v` (integers and strings/binary), else None (floats,
    times, or past the type's largest value)."""
    if pa.types.is_integer(t):
        return v + 1 if key_fits(v + 1, t) else None
    if isinstance(v, str):
        return v + "\x00"
    if isinstance(v, bytes):
        return v + b"\x00"
    return None


@dataclass(frozen=True)
class KeyFilter:
    """What a filter says about the keys it can match (`extract`)."""

    range: KeyRange | None = None  # every matching key's first column lies in it (None: unbounded)
    keys: tuple[tuple[Any, ...], ...] | None = None  # exactly these keys (one-column keys, `isin`)
    residual: Expr | None = None  # the terms `range`/`keys` do not state exactly (None: none left)
    rest: tuple[Expr, ...] = ()  # the same terms, one by one

    @property
    def empty(self) -> bool:
        """Whether no key can match."""
        if self.keys is not None:
            return not self.keys
        r = self.range
        return r is not None and r.start is not None and r.end is not None and r.start >= r.end

    def predicate(self, fields: Sequence[pa.Field]) -> KeyPredicate | None:
        """The key predicate for a scan's `keys=` (a key set for exact keys, else the range)."""
        if self.keys is not None:
            return to_key_predicate(list(self.keys), fields)
        return self.range


def extract(filt: Expr | None, key_fields: Sequence[pa.Field]) -> KeyFilter:
    """The keys the conjuncts of `filt` on the first key column allow, and the residual filter."""
    if filt is None or not key_fields:
        return KeyFilter(residual=filt, rest=tuple(conjuncts(filt)) if filt is not None else ())
    first = key_fields[0]
    t = first.type
    lo: Any = None
    hi: Any = None  # exclusive
    values: set[Any] | None = None
    rest: list[Expr] = []
    for term in conjuncts(filt):
        if isinstance(term, IsIn) and isinstance(term.operand, Col) and term.operand.path == first.name:
            vs = set(term.values)
            if not vs or not all(key_fits(v, t) for v in vs):
                rest.append(term)
                continue
            values = vs if values is None else values & vs
            lo = _max(lo, min(vs))
            nxt = successor(max(vs), t)
            hi = _min(hi, nxt) if nxt is not None else hi
            if len(key_fields) > 1:  # only the first column's range: the term stays
                rest.append(term)
            continue
        norm = col_op_lit(term) if isinstance(term, Cmp) else None
        if norm is None or norm[0] != first.name or norm[1] == "!=" or not key_fits(norm[2], t):
            rest.append(term)
            continue
        _, op, v = norm
        nxt = successor(v, t)
        if op == ">=":
            lo = _max(lo, v)
        elif op == "<":
            hi = _min(hi, v)
        elif op == ">":
            lo = _max(lo, nxt if nxt is not None else v)
        else:  # "<=" and "=="
            if op == "==":
                lo = _max(lo, v)
            if nxt is not None:
                hi = _min(hi, nxt)
        if nxt is None and op in (">", "<=", "=="):
            rest.append(term)  # the range holds v itself (or everything up from it): not exact
    residual = and_all(rest)
    rng = None if lo is None and hi is None else KeyRange(None if lo is None else (lo,), None if hi is None else (hi,))
    if values is not None and len(key_fields) == 1:
        keep = sorted(v for v in values if (lo is None or v >= lo) and (hi is None or v < hi))
        return KeyFilter(rng, tuple((v,) for v in keep), residual, tuple(rest))
    return KeyFilter(rng, None, residual, tuple(rest))


def key_range_of(filt: Expr, key_fields: Sequence[pa.Field]) -> tuple[KeyPredicate | None, Expr | None]:
    """(the key predicate the filter implies, or None; the remaining filter, or None)."""
    f = extract(filt, key_fields)
    return f.predicate(key_fields), f.residual


def _max(a: Any, b: Any) -> Any:
    return b if a is None or b > a else a


def _min(a: Any, b: Any) -> Any:
    return b if a is None or b < a else a
