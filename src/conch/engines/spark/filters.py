"""The `where` read option: a Conch filter fixed when the DataFrame is created.

Why an option and not Spark's filter pushdown: PySpark 4.3 (classic) caches a Python source's
planned reader — with its pushed filters and partitions — on the JVM object behind the
DataFrame (`PythonDataSourceV2.readInfo`) and serves it to every later query of that DataFrame
whose filters do not trigger a new pushdown, and to every scan of the same DataFrame within one
query (the last pushdown wins). A reader that used pushed filters therefore answered
`df.filter("x > 1").count()` and then `df.count()` with the same number, and a self-join of two
filtered uses read one filter for both sides. No per-query information reaches a Python reader
at read time, so the only filters a reader can safely apply are those that are part of the
DataFrame itself: its options. Spark's own filters stay in Spark's plan (correct, not pruned).

A `where` expression (Python syntax, `conch.expr.syntax.parse`) is split into AND terms:

- a term on **value columns only** goes to the scan's `where=`: evaluated on fresh records, never
  on stale cells (DESIGN §2), with stats pruning and in-file pushdown where legal;
- a term on **key columns only** becomes an exact filter on each output batch's key columns
  (keys are never stale) and, where it bounds the first key column, a `KeyRange` that prunes
  key spaces, fragments and read partitions;
- a term mixing key and value columns (e.g. `id < 3 or x > 1`) is refused.

>>> split_where(parse("id >= 10 and x < 0.5"), [pa.field("id", pa.uint64())])  # doctest: +SKIP
Pushed(where=(x < 0.5), key_filter=(id >= 10), key_range=KeyRange(start=(10,), end=None))
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from conch.errors import FilterSyntaxError
from conch.expr.tree import And, Expr, columns, conjuncts
from conch.model.keys import KeyRange
from conch.scan.keyfilter import extract


@dataclass(frozen=True)
class Pushed:
    """A `where` option split by what evaluates it."""

    where: Expr | None = None  # value filter, evaluated by the scan on fresh records
    key_filter: Expr | None = None  # exact filter on key columns, evaluated per output batch
    key_range: KeyRange | None = None  # coarse range on the first key column, for pruning


def and_all(terms: list[Expr]) -> Expr | None:
    out: Expr | None = None
    for t in terms:
        out = t if out is None else And(out, t)
    return out


def split_where(expr: Expr | None, key_fields: list[pa.Field]) -> Pushed:
    """Split a filter into value terms, key terms and the first key column's range."""
    if expr is None:
        return Pushed()
    key_names = {f.name for f in key_fields}
    values: list[Expr] = []
    keys: list[Expr] = []
    for term in conjuncts(expr):
        used = set(columns(term))
        if used and used <= key_names:
            keys.append(term)
        elif used & key_names:
            raise FilterSyntaxError(
                f"filter term {term!r} mixes key columns {sorted(used & key_names)} with value columns "
                f"{sorted(used - key_names)}; write key and value conditions as separate AND terms, or filter in Spark"
            )
        else:
            values.append(term)
    # the one key-range rule (scan/keyfilter); the per-batch key filter stays exact
    bound = extract(and_all(keys), key_fields).range if key_fields else None
    return Pushed(and_all(values), and_all(keys), bound)
