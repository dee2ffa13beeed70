"""Execution of nested-level queries: per-level table scans joined by sort-merge on key prefixes.

Why this design (measured, see bench/nested_bench.py and docs/nested.md): every level is scanned
once through the core (`Table.scan`, with key bindings pushed down as key-prefix seeks and simple
filters pushed down as value filters), already sorted by full key. The scans are streamed and cut
into parent-aligned chunks (`conch.nested.stream`); an `Executor` evaluates the plan on one chunk
at a time (`reset(feed)`). Because a child's key extends its parent's, every cross-level operator
is a pass over *runs* of equal key prefixes inside a chunk:

- broadcast (ancestor field at a deeper level): match each run's prefix to its parent row once,
  then repeat — a zip when the run prefixes are exactly the parent rows (checked by equality, the
  common case in a chunk), otherwise a lookup of run prefixes;
- reduction (child field reduced to an ancestor): `np.add.reduceat` & co. over the runs (nulls as
  the identity, so the kernel never depends on the chunk), Arrow's ordered hash aggregation for
  non-numeric values; `.list()` is zero-copy (the runs' offsets become the list offsets);
- window: shifted sums in row order for narrow windows, per-run prefix sums for wide ones, one
  gather otherwise; results depend only on the run, never on the chunk;
- regroup/rekey: each source row's bucket is looked up in the target's sorted keys (the bucket
  keys are checked monotone within each parent, so the matched rows stay sorted by target key).

Only run prefixes — one per parent, not one per row — are matched, by binary search on single
integer keys or Arrow's hash join on composite keys. A general relational engine (DuckDB, Polars)
would re-sort or re-hash rows that are already sorted; here the sort order does the joining.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.errors import ConchError, LevelError
from conch.expr import tree as core_expr
from conch.model.keys import KeyPrefix, KeyRange, equal_adjacent
from conch.model.schema import join_path
from conch.nested import kernels as K
from conch.nested.lower import lower_at as pushable
from conch.nested.nodes import (
    Agg,
    AnyDomain,
    Binary,
    Domain,
    Explode,
    Field,
    Group,
    Key,
    Lit,
    Node,
    RekeyDomain,
    Rows,
    TableHandle,
    Unary,
    Window,
    children,
    node_domain,
    render,
)

MAX_PREFIX_SEEKS = 256  # above this many selected prefixes, one range scan + semi-join is cheaper


class RegroupError(ConchError, ValueError):
    """A regroup key is not monotonically non-decreasing within its parent."""


class Frame:
    """The rows of one domain: key columns first, then value columns nested by group."""

    __slots__ = ("_changes", "_keys", "nkeys", "table")

    def __init__(self, table: pa.Table, nkeys: int) -> None:
        self.table = table
        self.nkeys = nkeys
        self._keys: list[pa.Array] | None = None
        self._changes: list[np.ndarray] = []  # per key column: row i's value differs from row i-1

    def run_starts(self, k: int) -> np.ndarray:
        """Where the first `k` key columns change (row 0 always starts a run); each key column is
        compared once per frame, whatever prefixes are asked for."""
        n = self.n
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        keys = self.keys
        while len(self._changes) < k:
            col = keys[len(self._changes)]
            ch = np.zeros(n, dtype=bool)
            if n > 1:
                ch[1:] = ~equal_adjacent(col)
            self._changes.append(ch)
        change = np.zeros(n, dtype=bool)
        change[0] = True
        for ch in self._changes[:k]:
            change |= ch
        return np.flatnonzero(change)

    @property
    def n(self) -> int:
        return self.table.num_rows

    @property
    def keys(self) -> list[pa.Array]:
        if self._keys is None:
            self._keys = [K.as_array(self.table.column(i)) for i in range(self.nkeys)]
        return self._keys

    @property
    def key_names(self) -> list[str]:
        return self.table.column_names[: self.nkeys]

    def get(self, path: str) -> pa.Array:
        head, *rest = path.split(".")
        arr = K.as_array(self.table.column(head))
        for p in rest:
            arr = arr.field(p)
        return arr

    def values_struct(self) -> pa.Array:
        names = self.table.column_names[self.nkeys :]
        if not names:
            return pa.array([{}] * self.n, pa.struct([]))
        return pa.StructArray.from_arrays([self.get(n) for n in names], names=names)

    def filter(self, mask: pa.Array | np.ndarray) -> Frame:
        return Frame(self.table.filter(mask), self.nkeys)


def domain_key(d: AnyDomain | None) -> tuple[Any, ...]:
    """Structural identity of a domain: two navigations to the same rows share scans and values."""
    if d is None:
        return ()
    if isinstance(d, RekeyDomain):
        return ("rekey", domain_key(d.source), id(d.key), domain_key(d.target))
    return (d.level, d.pins, id(d.keys), tuple(id(f) for f in d.filters), domain_key(d.parent))


def home(n: Node) -> AnyDomain | None:
    """The domain whose rows an expression is computed on before it is broadcast."""
    d = node_domain(n)
    if d is not None:
        return d
    if isinstance(n, Agg):
        return agg_target(n)
    if isinstance(n, Explode):
        return home(n.operand)
    best: AnyDomain | None = None
    for c in children(n):
        h = home(c)
        if h is not None and (best is None or len(h.level) > len(best.level)):
            best = h
    return best


def agg_target(n: Agg) -> Domain:
    if n.target is not None:
        return n.target
    src = home(n.operand)
    if isinstance(n.operand, Explode) and isinstance(src, Domain):
        return src
    if isinstance(src, RekeyDomain):
        return src.target
    if src is None or src.parent is None:
        raise LevelError(f"{render(n)} has no parent level to reduce to; use .per(level)")
    return src.parent


class Executor:
    """Evaluates expression nodes against one table version: every level's scan reads the one
    `Snapshot` taken here (`Table.snapshot`), so a commit landing between two level scans is
    in neither or both. Scans, row sets and values are cached per domain, so a level is read
    once however many expressions use it."""

    def __init__(self, table: TableHandle, asof: Any = None, since: Any = None) -> None:
        self.table = table
        self.snapshot = table.snapshot(asof)
        self.since = since
        self.schema = self.snapshot.state.schema
        self.needed: dict[str, set[str]] = {}
        self._rows: dict[tuple[Any, ...], Frame] = {}
        self._values: dict[tuple[Any, ...], Any] = {}
        self._align: dict[tuple[Any, ...], np.ndarray] = {}
        self.scans: list[str] = []  # what was read, for explain(analyze)
        # Streaming (conch.nested.stream): the core scans each level needs, by scan key, and the
        # current chunk of each. `feed is None` reads every scan whole; a dry run gives every scan
        # an empty table, which discovers the scans and windows of a plan.
        self.sources: dict[tuple[Any, ...], tuple[Domain, list[Any]]] = {}
        self.window_levels: set[str] = set()
        self.feed: dict[tuple[Any, ...], pa.Table] | None = None
        self.dry = False

    def reset(self, feed: dict[tuple[Any, ...], pa.Table] | None, dry: bool = False) -> None:
        """Start a new chunk: drop the rows and values computed so far and read `feed`."""
        self.dry = dry
        self._rows.clear()
        self._values.clear()
        self._align.clear()
        self.feed = feed

    # ----- column collection ----------------------------------------------------------------
    def collect(self, n: Node) -> None:
        if isinstance(n, Field) and not n.key:  # key columns come with every scan
            lvl = n.domain.source.level if isinstance(n.domain, RekeyDomain) else n.domain.level
            self.needed.setdefault(lvl, set()).add(join_path(lvl, n.path))
        elif isinstance(n, Group):
            prefix = n.path + "." if n.path else ""
            cols = [c.full_path for c in self.schema.columns_of(n.domain.level) if c.path.startswith(prefix)]
            self.needed.setdefault(n.domain.level, set()).update(cols)
        if isinstance(n, Agg) and n.target is not None:
            self.collect_domain(n.target)
        d = node_domain(n)
        if d is not None:
            self.collect_domain(d)
        for c in children(n):
            self.collect(c)

    def collect_domain(self, d: AnyDomain | None) -> None:
        if d is None:
            return
        if isinstance(d, RekeyDomain):
            self.collect_domain(d.source)
            self.collect(d.key)
            self.collect_domain(d.target)
            return
        self.needed.setdefault(d.level, set())
        for f in d.filters:
            self.collect(f)
        self.collect_domain(d.parent)

    # ----- rows ---------------------------------------------------------------------------------
    def rows(self, d: AnyDomain) -> Frame:
        key = domain_key(d)
        fr = self._rows.get(key)
        if fr is None:
            fr = self._rekey_rows(d) if isinstance(d, RekeyDomain) else self._domain_rows(d)
            self._rows[key] = fr
        return fr

    def _domain_rows(self, d: Domain) -> Frame:
        pushed = [pushable(f, d.level) for f in d.filters]
        if d.filters and any(p is None for p in pushed):
            prev = replace(d, filters=d.filters[:-1])
            fr = self.rows(prev)
            mask = self.value(d.filters[-1], prev)
            return fr.filter(pc.fill_null(mask, False))
        where = None
        for p in pushed:
            assert p is not None
            where = p if where is None else core_expr.And(where, p)
        fr = self._scan(d, where)
        if d.parent is not None and d.parent.restricted:
            idx = self._match(self.rows(d.parent), fr)
            fr = fr.filter(pa.array(idx >= 0))
        return fr

    def _scan(self, d: Domain, where: core_expr.Expr | None) -> Frame:
        names = self.schema.key_names(d.level)
        if d.level == "" and not names:
            # The key-less root is one record (it exists once anything is written).
            return Frame(pa.table({"__root": [True]}).drop_columns(["__root"]).append_column("__one", [[1]]), 0)
        cols = sorted(self.needed.get(d.level, ()))
        if not cols:  # keys only: project the narrowest column (a scan never drops keys)
            own = self.schema.columns_of(d.level)
            cols = [min(own, key=lambda c: 0 if pa.types.is_primitive(c.type) else 1).full_path] if own else []
        semi: pa.Table | None = None
        if d.keys is None:
            seeks: list[Any] = [KeyPrefix(d.pins) if d.pins else None]
        elif d.keys.num_columns == len(names):
            seeks = [d.keys]
        elif d.keys.num_rows <= MAX_PREFIX_SEEKS:
            seeks = [KeyPrefix(tuple(r.values())) for r in d.keys.to_pylist()]
        else:
            seeks, semi = [KeyRange(tuple(d.keys.slice(0, 1).to_pylist()[0].values()), None)], d.keys
        skey = (d.level, d.pins, id(d.keys), tuple(id(f) for f in d.filters))
        if skey not in self.sources:
            scans = [self.snapshot.scan(*cols, level=d.level, keys=k, where=where, since=self.since) for k in seeks]
            self.sources[skey] = (d, scans)
            self.scans += [f"Scan({d.level}) keys={k!r} where={where!r}" for k in seeks]
        if self.feed is None:
            parts = [s.to_arrow() for s in self.sources[skey][1]]
            t = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        elif skey in self.feed:
            t = self.feed[skey]
        elif self.dry:
            t = self.sources[skey][1][0].schema.empty_table()
        else:
            raise RuntimeError(f"scan of {d.describe()} was not planned by the dry run")
        fr = Frame(t.combine_chunks(), len(names))
        if semi is not None:
            kf = Frame(semi, semi.num_columns)
            fr = fr.filter(pa.array(self._match(kf, fr) >= 0))
        return fr

    def _rekey_rows(self, d: RekeyDomain) -> Frame:
        src, tgt = self.rows(d.source), self.rows(d.target)
        kv = K.as_array(self.value(d.key, d.source))
        plen = tgt.nkeys - 1
        starts = src.run_starts(plen)
        kf = np.asarray(pc.cast(kv, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
        if len(kf) > 1:
            step = np.diff(kf)
            inside = np.ones(len(kf) - 1, dtype=bool)
            inside[starts[1:] - 1] = False
            bad = np.flatnonzero(inside & (step < 0))
            if len(bad):
                i = int(bad[0])
                raise RegroupError(
                    f"regroup key {render(d.key)} must be monotonically non-decreasing within each "
                    f"'{d.target.level.rpartition('.')[0] or '<root>'}' row: it goes from {kf[i]} to {kf[i + 1]} "
                    f"at key {[k[i + 1].as_py() for k in src.keys]}"
                )
        ttype = tgt.table.schema.field(tgt.nkeys - 1).type
        ok = ~np.isnan(kf)
        if pa.types.is_integer(ttype):
            ok &= kf >= 0
        kc = pc.cast(pa.array(np.where(ok, kf, 0)), ttype, safe=False) if not pa.types.is_string(ttype) else kv
        probe = [*src.keys[:plen], kc]
        tidx = K.lookup(tgt.keys, tgt.n, probe, src.n, tgt.run_starts(plen), starts)
        tidx[~ok] = -1
        m = tidx >= 0
        sel = pa.array(np.flatnonzero(m))
        cols = [k.take(pa.array(tidx[m])) for k in tgt.keys] + [src.keys[-1].take(sel)]
        names = [*tgt.key_names, src.key_names[-1]]
        vals = src.table.select(src.table.column_names[src.nkeys :]).take(sel)
        t = pa.Table.from_arrays([*cols, *vals.columns], names=[*names, *vals.column_names])
        return Frame(t, len(names))

    # ----- alignment ----------------------------------------------------------------------------
    def _match(self, src: Frame, dst: Frame) -> np.ndarray:
        """For each `dst` row, the `src` row whose key is a prefix of (or equal to) its key."""
        prefix = dst.keys[: src.nkeys]
        starts = dst.run_starts(src.nkeys)
        probe = [k.take(pa.array(starts)) for k in prefix]
        if len(starts) == src.n and all(p.equals(k) for p, k in zip(probe, src.keys)):
            hit = np.arange(src.n, dtype=np.int64)  # zip: the runs are exactly the src rows
        else:
            hit = K.lookup(src.keys, src.n, probe, len(starts))
        return np.repeat(hit, np.diff(np.r_[starts, dst.n]))

    def align(self, src: AnyDomain, dst: AnyDomain) -> np.ndarray:
        key = (domain_key(src), domain_key(dst))
        idx = self._align.get(key)
        if idx is None:
            idx = self._match(self.rows(src), self.rows(dst))
            self._align[key] = idx
        return idx

    # ----- values -------------------------------------------------------------------------------
    def value(self, n: Node, d: AnyDomain) -> pa.Array:
        """`n` computed for every row of `d` (whose level is `n`'s level or below)."""
        v = self._eval(n, d)
        if isinstance(v, pa.Scalar):
            return pa.repeat(v, self.rows(d).n)
        return K.as_array(v)

    def _eval(self, n: Node, d: AnyDomain) -> Any:
        key = (id(n), domain_key(d))
        if key in self._values:
            return self._values[key]
        out = self._compute(n, d)
        self._values[key] = out
        return out

    def _at(self, arr: pa.Array, src: AnyDomain, d: AnyDomain) -> pa.Array:
        if domain_key(src) == domain_key(d):
            return arr
        return K.take_or_null(arr, self.align(src, d))

    def _compute(self, n: Node, d: AnyDomain) -> Any:
        if isinstance(n, Lit):
            return pa.scalar(n.value)
        if isinstance(n, Field | Group | Key | Rows):
            fr = self.rows(n.domain)
            if isinstance(n, Field):
                arr = fr.get(n.path)
            elif isinstance(n, Group):
                arr = fr.values_struct() if not n.path else fr.get(n.path)
            elif isinstance(n, Key):
                arr = fr.keys[-1]
            else:
                arr = pa.array(np.ones(fr.n, dtype=bool))
            return self._at(arr, n.domain, d)
        if isinstance(n, Binary):
            return binary(n.op, self._eval(n.left, d), self._eval(n.right, d))
        if isinstance(n, Unary):
            return unary(n.op, self._eval(n.operand, d))
        if isinstance(n, Agg):
            tgt = agg_target(n)
            return self._at(self._reduce(n, tgt), tgt, d)
        if isinstance(n, Window):
            w = home(n.operand)
            if w is None:
                raise LevelError(f"{render(n)}: a window needs a level to slide over")
            self.window_levels.add(w.level)
            fr = self.rows(w)
            vals = self.value(n.operand, w)
            starts = fr.run_starts(fr.nkeys - 1)
            return self._at(K.window(n.func, vals, starts, n.lo, n.hi), w, d)
        if isinstance(n, Explode):
            raise LevelError(f"{render(n)} is a level of its own: reduce it (.count(), .list(), ...) or scan it")
        raise TypeError(f"cannot evaluate {n!r}")

    def _reduce(self, n: Agg, tgt: Domain) -> pa.Array:
        tfr = self.rows(tgt)
        if isinstance(n.operand, Explode):
            lst_dom = home(n.operand.operand)
            assert lst_dom is not None
            lists = self.value(n.operand.operand, lst_dom)
            flat = pc.list_flatten(lists)
            parents = np.asarray(pc.list_parent_indices(lists).to_numpy(zero_copy_only=False), dtype=np.int64)
            starts = np.flatnonzero(np.r_[True, parents[1:] != parents[:-1]]) if len(parents) else parents
            res = K.reduce_runs(n.func, flat, starts)
            out = K.scatter(n.func, res, parents[starts], len(lists), flat.type)
            return self._at(out, lst_dom, tgt)
        src = home(n.operand)
        if src is None:
            raise LevelError(f"{render(n)}: nothing to reduce")
        sfr = self.rows(src)
        vals = self.value(n.operand, src)
        prefix = sfr.keys[: tfr.nkeys]
        starts = sfr.run_starts(tfr.nkeys)
        probe = [k.take(pa.array(starts)) for k in prefix]
        t_starts = tfr.run_starts(tfr.nkeys - 1) if tfr.nkeys > 1 else None
        run_rows = K.lookup(tfr.keys, tfr.n, probe, len(starts), t_starts)
        res = K.reduce_runs(n.func, vals, starts)
        return K.scatter(n.func, res, run_rows, tfr.n, vals.type)

    def explode(self, n: Explode) -> pa.Table:
        """The rows of an exploded list column: the list's level keys, `$idx`, the element."""
        d = home(n.operand)
        assert d is not None
        fr = self.rows(d)
        lists = self.value(n.operand, d)
        parents = pc.list_parent_indices(lists)
        starts = np.asarray(lists.offsets.to_numpy())[:-1]
        pidx = np.asarray(parents.to_numpy(zero_copy_only=False), dtype=np.int64)
        pos = np.arange(len(pidx)) - (starts[pidx] if len(pidx) else 0)
        cols = [k.take(parents) for k in fr.keys]
        t = pa.Table.from_arrays(
            [*cols, pa.array(pos, pa.uint64()), pc.list_flatten(lists)], [*fr.key_names, "$idx", "item"]
        )
        return t


_ARITH = {"+": pc.add, "-": pc.subtract, "*": pc.multiply, "**": pc.power}
_CMP = {"==": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}


def binary(op: str, a: Any, b: Any) -> Any:
    if op == "in":  # `x.isin([...])`: the core filter's evaluation (SQL nulls, no rounding)
        return core_expr.evaluate(core_expr.IsIn(core_expr.Col(""), tuple(b.as_py())), lambda _: a)
    if op == "matches":  # `x.matches("red car")`: the core filter's evaluation (tantivy's analysis)
        return core_expr.evaluate(core_expr.Matches(core_expr.Col(""), b.as_py()), lambda _: a)
    if op in _CMP:
        a, b = core_expr.align(a, b)
        return _CMP[op](a, b)
    if op == "&":
        return pc.and_kleene(a, b)
    if op == "|":
        return pc.or_kleene(a, b)
    if op == "/":
        return pc.divide(pc.cast(a, pa.float64()), pc.cast(b, pa.float64()))
    if op == "//":
        return pc.floor(pc.divide(pc.cast(a, pa.float64()), pc.cast(b, pa.float64())))
    if op == "%":
        return pc.subtract(a, pc.multiply(pc.floor(pc.divide(pc.cast(a, pa.float64()), b)), b))
    return _ARITH[op](a, b)


def unary(op: str, a: Any) -> Any:
    if op == "neg":
        return pc.negate(a)
    if op == "not":
        return pc.invert(a)
    if op == "floor":
        return pc.floor(a)
    if op == "ceil":
        return pc.ceil(a)
    if op == "abs":
        return pc.abs(a)
    if op == "is_null":
        return pc.is_null(a)
    if op == "len":
        t = a.type
        if pa.types.is_string(t) or pa.types.is_binary(t):
            return pc.cast(pc.binary_length(a), pa.uint64())
        return pc.cast(pc.list_value_length(a), pa.uint64())
    raise TypeError(f"unknown operation {op}")
