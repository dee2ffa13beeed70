"""Step 3 of the general path: the row mask, i.e. which live keys' fresh records pass the filter.

The filter's AND terms (`ScanPlan.terms`, cut once by `conch.scan.filter`):

- terms over **key columns only** are evaluated on the live keys themselves (no value read);
- terms over the value columns of **one read unit**: fragments whose statistics (vectorised over
  Arrow arrays) prove the term false fail the keys whose fresh cell they hold; the rest run the
  term *inside the Vortex scan* and return the ordinals of matching rows, intersected with the
  rows that hold fresh cells. A fragment's verdict is only ever used for keys whose fresh cell
  it holds, so stale cells are never evaluated (spec/000);
- every other term (several units, keys mixed with values, literals Vortex cannot take) is
  evaluated on the assembled fresh records, SQL three-valued logic, in Arrow.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from conch.expr.tree import Expr, columns
from conch.expr.tree import mask as filter_mask
from conch.files.format import ORDINAL
from conch.files.manifest import Fragment
from conch.model.sets import distinct
from conch.scan.context import ScanContext
from conch.scan.filter import and_all as all_of
from conch.scan.locate import ReadUnit
from conch.scan.pushdown import may_match_many, schema_vortex_expr
from conch.scan.take import batch_rows, gather, split_by


def row_mask(ctx: ScanContext, units: list[ReadUnit], keys: pa.Table) -> np.ndarray:
    """Positions (among the live `keys`) whose fresh record passes the plan's filter."""
    plan = ctx.plan
    assert plan.filter is not None
    schema = plan.schema
    n = keys.num_rows
    ok = np.ones(n, dtype=bool)
    unit_of = {c.full_path: u for u in units for c in u.columns}
    key_names = set(plan.filter_keys)

    def col_info(path: str) -> tuple[int, pa.DataType]:
        c = schema.column(path)
        return c.id, c.type

    key_terms: list[Expr] = []
    residual: list[Expr] = []
    pushed: dict[int, tuple[ReadUnit, list[Expr]]] = {}
    for term in plan.terms:
        cols = columns(term)
        if all(c in key_names for c in cols):
            key_terms.append(term)
            continue
        owners = {id(unit_of[c]) for c in cols if c not in key_names}
        if len(owners) != 1 or any(c in key_names for c in cols):
            residual.append(term)
            continue
        u = unit_of[cols[0]]
        # keys with no cell in this unit: every column of the term is null for them
        nulls = {c: pa.nulls(1, schema.column(c).type) for c in cols}
        if not filter_mask(term, nulls.__getitem__)[0]:
            ok &= u.frag >= 0
        if u.fragments:
            may = may_match_many(term, u.fragments, ctx.stats, col_info)
            if not may.all():
                held = np.zeros(len(u.fragments), dtype=bool)
                held[distinct(u.frag[u.frag >= 0])] = True
                ctx.pruned(u.group, int((~may & held).sum()))
                ok &= ~((u.frag >= 0) & ~may[np.maximum(u.frag, 0)])
        if vortex_expr(ctx, term, u.fragments) is None:
            residual.append(term)
        else:
            pushed.setdefault(id(u), (u, []))[1].append(term)
    if key_terms:
        ok &= filter_mask(and_all(key_terms), lambda p: keys.column(p).combine_chunks())
    for u, terms in pushed.values():
        fallback = _push_down(ctx, u, terms, ok)
        if len(fallback):
            paths = list(dict.fromkeys(p for t in terms for p in columns(t)))
            m = evaluate(ctx, and_all(terms), [u.subset([schema.column(p) for p in paths])], fallback, keys)
            ok[fallback[~m]] = False
    if residual:
        survivors = np.nonzero(ok)[0]
        needed = {p for t in residual for p in columns(t)}
        sub = [u.subset(cs) for u in units if (cs := [c for c in u.columns if c.full_path in needed])]
        m = evaluate(ctx, and_all(residual), sub, survivors, keys)
        ok[survivors[~m]] = False
    return np.nonzero(ok)[0]


def vortex_expr(ctx: ScanContext, e: Expr, fragments: list[Fragment]) -> Any | None:
    """`e` as a Vortex expression over these fragments' files; None if a column is out of
    line, is a key column, or a literal does not fit its column's type exactly."""
    return schema_vortex_expr(ctx.plan.schema, e, fragments)


def _push_down(ctx: ScanContext, u: ReadUnit, terms: list[Expr], ok: np.ndarray) -> np.ndarray:
    """Run `terms` inside the Vortex scan of each fragment of `u` over the rows holding fresh
    cells of still-passing keys; clears `ok` where they fail. Returns positions of fragments
    that cannot take the filter (no ordinal column), to evaluate on fresh records instead."""
    expr = vortex_expr(ctx, and_all(terms), u.fragments)
    cand = np.nonzero(ok & (u.frag >= 0))[0]
    fallback: list[np.ndarray] = []
    for f, sel in split_by(u.frag[cand]):
        pos = cand[sel]
        fr = u.fragments[f]
        if not ctx.has_column(u.group, fr, ORDINAL):
            fallback.append(pos)
            continue
        rows = u.row[pos]
        matched = ctx.filter_rows(u.group, fr, expr, rows)
        ok[pos[~np.isin(rows, matched, assume_unique=True)]] = False
    return np.concatenate(fallback) if fallback else np.zeros(0, dtype=np.int64)


def evaluate(ctx: ScanContext, e: Expr, units: list[ReadUnit], positions: np.ndarray, keys: pa.Table) -> np.ndarray:
    """The filter `e` on the assembled fresh records at `positions` (true = pass)."""
    out = np.zeros(len(positions), dtype=bool)
    step = batch_rows(ctx, units)
    for start in range(0, len(positions), step):
        pos = positions[start : start + step]
        values: dict[str, Any] = {}
        for u in units:
            got = gather(ctx, u, pos)
            for c in u.columns:
                values[c.full_path] = got[c.id]
        for name in ctx.plan.filter_keys:
            values[name] = keys.column(name).take(pa.array(pos)).combine_chunks()
        out[start : start + len(pos)] = filter_mask(e, values.__getitem__)
    return out


def and_all(terms: list[Expr]) -> Expr:
    """The AND of (at least one of) `terms`."""
    out = all_of(terms)
    assert out is not None
    return out
