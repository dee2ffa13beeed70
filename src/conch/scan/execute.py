"""Scan execution: fresh records, streamed in key order (DESIGN §2, §5; spec/000, spec/001).

1. **Join key spaces** (`keyspace.py`): read the considered key spaces (keys only), select the
   key predicate's rows by binary search, and merge them: a zip when there is one run or the runs
   hold identical key sets, a run merge otherwise. Per key: its newest tombstone (own level or an
   ancestor's prefix) and whether it has a cell newer than that.
2. **Find fresh cells.** Per set of columns that the same key spaces hold (a *read unit*), the
   newest key space holding the key after its tombstone holds the fresh cell; a key's row there
   maps (vectorised binary search) to a fragment and a row within it.
3. **Row mask.** For each conjunct of the filter whose columns share a read unit: fragments whose
   statistics (vectorised over Arrow arrays) prove it false fail the keys whose fresh cell they
   hold; the rest run the conjunct *inside the Vortex scan* and return the ordinals of matching
   rows, intersected with the rows that hold fresh cells. A fragment's verdict is only ever used
   for keys whose fresh cell it holds, so stale cells are never evaluated (spec/000). Other
   conjuncts are evaluated on assembled fresh records (SQL three-valued logic, in Arrow).
4. **Take.** In batches of bounded bytes, read exactly the fresh rows of the projected columns
   from each fragment (a Vortex take by row index; blob columns read exactly the taken values)
   and assemble record batches sorted by key. A fragment that many batches need (overlapping
   LSM runs) is decoded once into a byte-bounded cache instead of once per batch.

Memory: the keys of the considered key spaces, one output batch, and the bounded caches.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.expr import And, Expr, columns, computable, conjuncts
from conch.expr import mask as filter_mask
from conch.fragments import ORDINAL, VortexFormat, column_name
from conch.keys import KeySet, encode_keys
from conch.manifest import Fragment
from conch.scan.keyspace import KeyCache, MergedKeys, merge_key_spaces, numeric_key, predicate_rows
from conch.scan.plan import ScanPlan
from conch.scan.pushdown import StatsCache, may_match_many, to_vortex
from conch.schema import Column, Schema, join_path, nest, struct_of

__all__ = ["KeyCache", "ScanExecutor", "ScanMetrics", "output_schema"]


@dataclass
class GroupMetrics:
    """What one column group contributed to a scan."""

    fragments_considered: int = 0
    fragments_pruned_by_stats: int = 0
    fragments_filtered: int = 0  # fragments a filter was pushed into
    fragments_read: int = 0  # fragments values were taken from
    rows_filtered: int = 0  # rows a pushed-down filter ran over
    rows_read: int = 0  # rows of values decoded
    bytes_read: int = 0  # bytes read from storage (Vortex segments + blob ranges)
    bytes_decoded: int = 0  # Arrow bytes decoded


@dataclass
class ScanMetrics:
    """What a scan read; `Scan.metrics()` after a scan ran."""

    key_spaces: int = 0
    tombstones: int = 0
    keys_merged: int = 0
    keys_out: int = 0
    merge: str = ""
    fragments_considered: int = 0
    fragments_read: int = 0
    fragments_pruned_by_stats: int = 0
    key_bytes_read: int = 0
    rows_out: int = 0
    bytes_out: int = 0
    groups: dict[str, GroupMetrics] = field(default_factory=dict)
    pruned: dict[str, int] = field(default_factory=dict)

    def group(self, name: str) -> GroupMetrics:
        """The metrics of one column group (created on first use)."""
        return self.groups.setdefault(name, GroupMetrics())

    @property
    def rows_read(self) -> dict[str, int]:
        """Rows read per column group."""
        return {g: m.rows_read for g, m in self.groups.items()}

    @property
    def bytes_read(self) -> dict[str, int]:
        """Bytes read from storage per group (Vortex segment reads and blob ranges)."""
        return {g: m.bytes_read for g, m in self.groups.items()}

    @property
    def blob_bytes_read(self) -> dict[str, int]:
        """Bytes read from storage per column group (blob files included)."""
        return self.bytes_read

    @property
    def total_bytes_read(self) -> int:
        """Every byte the scan read from storage: key spaces and all groups."""
        return self.key_bytes_read + sum(m.bytes_read for m in self.groups.values())

    def render(self) -> list[str]:
        """Human-readable lines, as `Scan.explain()` prints them after a run."""
        lines = [
            f"keys: {self.key_spaces} key spaces merged by {self.merge or '-'} ({self.keys_merged} rows → "
            f"{self.keys_out} live keys, {self.key_bytes_read} B read); {self.rows_out} rows out, {self.bytes_out} B"
        ]
        for g, m in sorted(self.groups.items()):
            lines.append(
                f"{g}: fragments {m.fragments_considered} considered, {m.fragments_pruned_by_stats} pruned by stats,"
                f" {m.fragments_filtered} filtered in-file ({m.rows_filtered} rows), {m.fragments_read} read;"
                f" rows read {m.rows_read}; bytes read {m.bytes_read} (decoded {m.bytes_decoded})"
            )
        return lines


@dataclass
class ReadUnit:
    """Columns of one group held by the same key spaces: they share fresh-cell locations."""

    group: str
    columns: list[Column]
    fragments: list[Fragment]
    frag: np.ndarray  # per output key: index into `fragments`, -1 = no cell (null)
    row: np.ndarray  # per output key: row within that fragment
    shared: set[int] = field(default_factory=set)  # fragments many batches need: decode once
    # every fragment decoded and concatenated (many small overlapping runs): one take per batch
    resident: pa.Table | None = None
    base: np.ndarray | None = None  # fragment → its first row in `resident`

    def subset(self, cols: list[Column]) -> ReadUnit:
        return ReadUnit(self.group, cols, self.fragments, self.frag, self.row, self.shared)


class _DecodedCache:
    """Whole decoded fragments, LRU, bounded by Arrow bytes."""

    def __init__(self, max_bytes: int) -> None:
        self._d: OrderedDict[tuple[str, tuple[str, ...]], pa.Table] = OrderedDict()
        self._bytes = 0
        self.max_bytes = max_bytes

    def get(self, key: tuple[str, tuple[str, ...]]) -> pa.Table | None:
        t = self._d.get(key)
        if t is not None:
            self._d.move_to_end(key)
        return t

    def put(self, key: tuple[str, tuple[str, ...]], t: pa.Table) -> None:
        if t.nbytes > self.max_bytes:
            return
        self._d[key] = t
        self._bytes += t.nbytes
        while self._bytes > self.max_bytes:
            _, old = self._d.popitem(last=False)
            self._bytes -= old.nbytes


_STATS = StatsCache()

FAST_PATHS = True  # tests set it False to force the general path and compare


@dataclass
class _Patch:
    """A newer key space whose keys are a subset of the segment's: its cells overwrite."""

    pos: np.ndarray  # its rows' positions among the segment's keys (ascending)
    fragments: list[Fragment]  # dense, sorted by start
    table: pa.Table | None = None  # decoded on first use


@dataclass
class _StreamUnit:
    """Columns of one group whose fresh cells sit in one key space's dense fragments (`fragments`;
    empty = no base cells, nulls), overwritten where newer subset key spaces (`patches`, oldest
    first) hold cells: a partial upsert read by merge-on-read."""

    group: str
    columns: list[Column]
    fragments: list[Fragment]  # sorted by start, covering the key space's rows
    patches: list[_Patch] = field(default_factory=list)
    null_base: bool = False  # no key space holding every key has cells: nulls under the patches


class ScanExecutor:
    def __init__(
        self,
        plan: ScanPlan,
        fmt: VortexFormat,
        key_cache: KeyCache,
        batch_bytes: int = 64 << 20,
        limit: int | None = None,
        cache_bytes: int = 256 << 20,
    ) -> None:
        self.plan = plan
        self.format = fmt
        self.key_cache = key_cache
        self.batch_bytes = batch_bytes
        self.limit = limit
        self.metrics = ScanMetrics(pruned=dict(plan.pruned))
        self._decoded = _DecodedCache(cache_bytes)
        self._seen: set[str] = set()  # fragments counted as considered

    # ----- output schema ----------------------------------------------------------------
    def output_schema(self) -> pa.Schema:
        return output_schema(self.plan.schema, self.plan.level, self.plan.columns)

    def _group_name(self, group: str) -> str:
        return join_path(self.plan.level, group) or "<root>"

    # ----- step 1: join key spaces ------------------------------------------------------
    def _merge(self) -> MergedKeys:
        """Merge the considered key spaces into distinct keys, newest rows first per key."""
        plan = self.plan
        fields = plan.key_fields
        numeric = numeric_key(fields)
        before = self.format.bytes_read
        parts, rows_l, nums = [], [], []
        for ks in plan.key_spaces:
            kt = self.key_cache.keys(ks, fields)
            num = self.key_cache.numeric(ks, fields) if numeric else None
            if plan.key_predicate is not None:
                rows = predicate_rows(self.key_cache, ks, fields, plan.key_predicate)
                kt = kt.take(pa.array(rows))
                num = num[rows] if num is not None else None
            else:
                rows = np.arange(kt.num_rows, dtype=np.int64)
            parts.append(kt)
            rows_l.append(rows)
            nums.append(num)
        m = self.metrics
        m.key_spaces = len(parts)
        m.tombstones = len(plan.tombstones)
        if not parts:
            empty = pa.schema(fields).empty_table()
            z = np.zeros(0, dtype=np.int64)
            return MergedKeys(empty, z, z, z, np.zeros(0, dtype=bool), np.zeros(0, dtype=bool))
        times = np.array([ks.time for ks in plan.key_spaces], dtype=np.int64)
        keys, kidx, krow, gid, first, strategy = merge_key_spaces(parts, rows_l, times, fields, nums)
        m.keys_merged = len(kidx)
        m.merge = strategy
        tomb = self._tombstone_times(keys)
        m.key_bytes_read += self.format.bytes_read - before
        # Rows sorted newest first within a key: a key lives iff its newest row beats its tombstone.
        return MergedKeys(
            keys=keys,
            ks=kidx,
            row=krow,
            gid=gid,
            alive=times[kidx[first]] > tomb,
            row_ok=times[kidx] > tomb[gid],
            strategy=strategy,
        )

    def _tombstone_times(self, keys: pa.Table) -> np.ndarray:
        """Per key, the time of its newest tombstone (own key or an ancestor prefix); 0 if none."""
        out = np.zeros(keys.num_rows, dtype=np.int64)
        if not self.plan.tombstones or keys.num_rows == 0:
            return out
        schema = self.plan.schema
        encoded_prefix: dict[str, pa.BinaryArray] = {}
        for ts in self.plan.tombstones:
            fields = schema.key_fields(ts.level)
            names = [f.name for f in fields]
            tk = self.key_cache.keys(ts, fields)
            if len(names) == 1:
                hit = pc.is_in(computable(keys.column(names[0])), value_set=computable(tk.column(0)))
            else:
                if ts.level not in encoded_prefix:
                    encoded_prefix[ts.level] = encode_keys([keys.column(n) for n in names])
                hit = pc.is_in(encoded_prefix[ts.level], value_set=self.key_cache.encoded(ts, fields))
            m = np.asarray(hit.to_numpy(zero_copy_only=False), dtype=bool)
            out[m] = np.maximum(out[m], ts.time)
        return out

    # ----- step 2: fresh-cell locations ---------------------------------------------------
    def _units(self, cols: list[Column], merged: MergedKeys, live_keys: np.ndarray) -> list[ReadUnit]:
        plan = self.plan
        kidx, krow, gid = merged.ks, merged.row, merged.gid
        by_set: dict[tuple[str, frozenset[int]], list[Column]] = {}
        holders: dict[tuple[str, frozenset[int]], list[Fragment]] = {}
        ks_pos = {ks.id: i for i, ks in enumerate(plan.key_spaces)}
        for c in cols:
            frs = [f for f in plan.fragments.get(c.group, []) if c.id in f.column_ids]
            ks_set = frozenset(ks_pos[f.key_space] for f in frs)
            key = (c.group, ks_set)
            by_set.setdefault(key, []).append(c)
            holders[key] = frs
        units = []
        remap = np.full(len(merged.alive), -1, dtype=np.int64)
        remap[live_keys] = np.arange(len(live_keys))
        for (group, ks_set), ucols in by_set.items():
            frs = holders[(group, ks_set)]
            self._consider(group, frs)
            n_out = len(live_keys)
            frag = np.full(n_out, -1, dtype=np.int64)
            row = np.zeros(n_out, dtype=np.int64)
            if ks_set and n_out:
                member = np.zeros(len(plan.key_spaces), dtype=bool)
                member[list(ks_set)] = True
                valid = member[kidx] & merged.row_ok
                idx = np.nonzero(valid)[0]
                g = gid[idx]
                firsts = np.ones(len(idx), dtype=bool)
                firsts[1:] = g[1:] != g[:-1]
                idx, g = idx[firsts], g[firsts]
                out_pos = remap[g]
                keep = out_pos >= 0
                idx, out_pos = idx[keep], out_pos[keep]
                # (key space, start row) of every fragment as one sortable code; a fresh row maps
                # to its fragment by one vectorised binary search.
                codes = np.array([ks_pos[f.key_space] * (1 << 40) + f.start for f in frs], dtype=np.int64)
                fstart = np.array([f.start for f in frs], dtype=np.int64)
                order = np.argsort(codes)
                code = kidx[idx].astype(np.int64) * (1 << 40) + krow[idx]
                which = order[np.searchsorted(codes[order], code, side="right") - 1]
                frag[out_pos] = which
                row[out_pos] = krow[idx] - fstart[which]
            units.append(ReadUnit(group, ucols, frs, frag, row))
        return units

    # ----- reading values -----------------------------------------------------------------
    def _gather(self, unit: ReadUnit, positions: np.ndarray) -> dict[int, pa.Array]:
        """Fresh values of a unit's columns at output key `positions` (sorted), in that order."""
        fk, rk = unit.frag[positions], unit.row[positions]
        schema = pa.schema([pa.field(column_name(c.id), c.type) for c in unit.columns])
        gm = self.metrics.group(self._group_name(unit.group))
        if unit.resident is not None and unit.base is not None:
            idx = np.where(fk >= 0, unit.base[np.maximum(fk, 0)] + rk, unit.resident.num_rows - 1)
            got = unit.resident.take(pa.array(idx))
            return {c.id: got.column(column_name(c.id)).combine_chunks() for c in unit.columns}
        pieces: list[pa.Table] = []
        where: list[np.ndarray] = []
        for f, sel in _split_by(fk):
            if f < 0:
                pieces.append(
                    pa.table({n: pa.nulls(len(sel), t) for n, t in zip(schema.names, schema.types, strict=True)})
                )
                where.append(sel)
                continue
            fr = unit.fragments[f]
            rows = rk[sel]
            blobs = [column_name(i) for i in fr.blob_columns]
            before = self.format.bytes_read
            if len(rows) == fr.rows:
                t = self.format.read(fr, schema.names, schema, None, blobs)
                gm.rows_read += t.num_rows
                gm.bytes_decoded += t.nbytes
                gm.fragments_read += 1
            elif f in unit.shared:
                key = (fr.path, tuple(schema.names))
                whole = self._decoded.get(key)
                if whole is None:
                    whole = self.format.read(fr, schema.names, schema, None, blobs)
                    self._decoded.put(key, whole)
                    gm.rows_read += whole.num_rows
                    gm.bytes_decoded += whole.nbytes
                    gm.fragments_read += 1
                t = _take(whole, rows)
            else:
                t = self.format.read(fr, schema.names, schema, rows, blobs)
                gm.rows_read += t.num_rows
                gm.bytes_decoded += t.nbytes
                gm.fragments_read += 1
            gm.bytes_read += self.format.bytes_read - before
            pieces.append(t)
            where.append(sel)
        if not pieces:
            return {c.id: pa.nulls(0, c.type) for c in unit.columns}
        table = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
        if len(pieces) > 1:
            order = np.argsort(np.concatenate(where), kind="stable")
            table = table.take(pa.array(order))
        return {c.id: table.column(column_name(c.id)).combine_chunks() for c in unit.columns}

    def _plan_sharing(self, units: list[ReadUnit], positions: np.ndarray, step: int) -> None:
        """Mark fragments that several output batches take a large share of rows from (LSM runs
        that overlap in key range): they are decoded once, not once per batch."""
        if len(positions) <= step:
            return
        for u in units:
            if not u.fragments:
                continue
            nf = len(u.fragments)
            batches_touching = np.zeros(nf, dtype=np.int64)
            need = np.zeros(nf, dtype=np.int64)
            for start in range(0, len(positions), step):
                fk = u.frag[positions[start : start + step]]
                fk = fk[fk >= 0]
                if len(fk):
                    counts = np.bincount(fk, minlength=nf)
                    need += counts
                    batches_touching += counts > 0
            rows = np.array([f.rows for f in u.fragments], dtype=np.int64)
            inline = np.array([not f.blob_columns for f in u.fragments], dtype=bool)
            share = (batches_touching > 1) & (need * 8 >= rows) & inline
            u.shared = set(np.nonzero(share)[0].tolist())
            if FAST_PATHS and nf >= 8 and inline.all() and 2 * int((batches_touching > 1).sum()) >= nf:
                self._make_resident(u)

    def _make_resident(self, u: ReadUnit) -> None:
        """Decode all of a unit's fragments into one table (plus a null row for keys without a
        cell), if it fits the decoded-fragment budget: many small runs that every batch needs
        (an un-compacted LSM tree) then cost one take per batch instead of one per fragment."""
        schema = pa.schema([pa.field(column_name(c.id), c.type) for c in u.columns])
        gm = self.metrics.group(self._group_name(u.group))
        parts, total = [], 0
        before = self.format.bytes_read
        for fr in u.fragments:
            t = self.format.read(fr, schema.names, schema)
            total += t.nbytes
            gm.rows_read += t.num_rows
            gm.bytes_decoded += t.nbytes
            gm.fragments_read += 1
            if total > self._decoded.max_bytes:
                gm.bytes_read += self.format.bytes_read - before
                return
            parts.append(t)
        gm.bytes_read += self.format.bytes_read - before
        parts.append(pa.table({n: pa.nulls(1, t) for n, t in zip(schema.names, schema.types, strict=True)}))
        u.resident = pa.concat_tables(parts).combine_chunks()
        u.base = np.cumsum([0] + [p.num_rows for p in parts[:-1]])[:-1].astype(np.int64)

    # ----- step 3: the row mask -------------------------------------------------------------
    def _filter(self, units: list[ReadUnit], n: int) -> np.ndarray:
        """Output key positions whose fresh record passes the filter."""
        plan = self.plan
        assert plan.filter is not None
        schema = plan.schema
        ok = np.ones(n, dtype=bool)
        unit_of = {c.full_path: u for u in units for c in u.columns}

        def col_info(path: str) -> tuple[int, pa.DataType]:
            c = schema.column(path)
            return c.id, c.type

        residual: list[Expr] = []
        pushed: dict[int, tuple[ReadUnit, list[Expr]]] = {}
        for term in conjuncts(plan.filter):
            cols = columns(term)
            owners = {id(unit_of[c]) for c in cols}
            if len(owners) != 1:
                residual.append(term)
                continue
            u = unit_of[cols[0]]
            # keys with no cell in this unit: every column of the term is null for them
            nulls = {c: pa.nulls(1, schema.column(c).type) for c in cols}
            if not filter_mask(term, nulls.__getitem__)[0]:
                ok &= u.frag >= 0
            if u.fragments:
                may = may_match_many(term, u.fragments, _STATS, col_info)
                if not may.all():
                    held = np.zeros(len(u.fragments), dtype=bool)
                    held[np.unique(u.frag[u.frag >= 0])] = True
                    self._pruned(u.group, int((~may & held).sum()))
                    ok &= ~((u.frag >= 0) & ~may[np.maximum(u.frag, 0)])
            if self._vortex_expr(term, u.fragments) is None:
                residual.append(term)
            else:
                pushed.setdefault(id(u), (u, []))[1].append(term)
        for u, terms in pushed.values():
            fallback = self._push_down(u, terms, ok)
            if len(fallback):
                paths = list(dict.fromkeys(p for t in terms for p in columns(t)))
                m = self._evaluate(_and(terms), [u.subset([schema.column(p) for p in paths])], fallback)
                ok[fallback[~m]] = False
        if residual:
            survivors = np.nonzero(ok)[0]
            needed = {p for t in residual for p in columns(t)}
            sub = [u.subset(cs) for u in units if (cs := [c for c in u.columns if c.full_path in needed])]
            m = self._evaluate(_and(residual), sub, survivors)
            ok[survivors[~m]] = False
        return np.nonzero(ok)[0]

    def _consider(self, group: str, fragments: list[Fragment]) -> None:
        """Count fragments as considered, once per scan however many units hold them."""
        new = {f.id for f in fragments} - self._seen
        self._seen |= new
        self.metrics.group(self._group_name(group)).fragments_considered += len(new)
        self.metrics.fragments_considered += len(new)

    def _pruned(self, group: str, n: int) -> None:
        self.metrics.group(self._group_name(group)).fragments_pruned_by_stats += n
        self.metrics.fragments_pruned_by_stats += n

    def _vortex_expr(self, e: Expr, fragments: list[Fragment]) -> Any | None:
        """`e` as a Vortex expression over these fragments' files; None if a column is out of
        line or a literal does not fit its column's type exactly."""
        schema = self.plan.schema
        blob_ids = {i for f in fragments for i in f.blob_columns}

        def name(p: str) -> str | None:
            cid = schema.column(p).id
            return None if cid in blob_ids else column_name(cid)

        return to_vortex(e, name, lambda p: schema.column(p).type)

    def _push_down(self, u: ReadUnit, terms: list[Expr], ok: np.ndarray) -> np.ndarray:
        """Run `terms` inside the Vortex scan of each fragment of `u` over the rows holding fresh
        cells of still-passing keys; clears `ok` where they fail. Returns positions of fragments
        that cannot take the filter (no ordinal column), to evaluate on fresh records instead."""
        expr = self._vortex_expr(_and(terms), u.fragments)
        gm = self.metrics.group(self._group_name(u.group))
        cand = np.nonzero(ok & (u.frag >= 0))[0]
        fallback: list[np.ndarray] = []
        for f, sel in _split_by(u.frag[cand]):
            pos = cand[sel]
            fr = u.fragments[f]
            before = self.format.bytes_read
            if not self.format.has_column(fr, ORDINAL):
                fallback.append(pos)
                continue
            rows = u.row[pos]
            matched = self.format.filter_rows(fr, expr, None if len(rows) == fr.rows else rows)
            ok[pos[~np.isin(rows, matched, assume_unique=True)]] = False
            gm.fragments_filtered += 1
            gm.rows_filtered += len(rows)
            gm.bytes_read += self.format.bytes_read - before
        return np.concatenate(fallback) if fallback else np.zeros(0, dtype=np.int64)

    def _evaluate(self, e: Expr, units: list[ReadUnit], positions: np.ndarray) -> np.ndarray:
        """The filter `e` on the assembled fresh records at `positions` (true = pass)."""
        out = np.zeros(len(positions), dtype=bool)
        step = self._batch_rows(units)
        for start in range(0, len(positions), step):
            pos = positions[start : start + step]
            values: dict[str, pa.Array] = {}
            for u in units:
                got = self._gather(u, pos)
                for c in u.columns:
                    values[c.full_path] = got[c.id]
            out[start : start + len(pos)] = filter_mask(e, values.__getitem__)
        return out

    def _batch_rows(self, units: list[ReadUnit]) -> int:
        per_row = 0.0
        for u in units:
            rows = sum(f.rows for f in u.fragments) or 1
            per_row += sum(f.bytes for f in u.fragments) / rows
        return int(min(1 << 16, max(256, self.batch_bytes // max(per_row, 1.0))))

    # ----- the streaming zip path ------------------------------------------------------------
    def _stream(self) -> _Stream | None:
        """The fast path, or None where it does not apply.

        It applies when no tombstone is considered and the considered key spaces form *segments*
        in key order: each segment is one key space, or several holding identical key sets (a
        table written group by group, or rewritten whole), and segments do not overlap in key
        range (one large write cut into several key spaces). A key predicate must select a
        contiguous range of rows (a `KeyRange`/`KeyPrefix`). Within a segment, every projected
        column's fresh cells sit in the dense fragments of one key space (the newest holding the
        column: with identical key sets and no tombstones, every key's fresh cell is there). A
        filter is allowed when it pushes whole into the Vortex scan of the one unit holding every
        projected column. Then Vortex batches go straight to output with the key column sliced
        beside them: no per-key location arrays, no takes.
        """
        plan = self.plan
        if plan.tombstones or not plan.key_spaces or isinstance(plan.key_predicate, KeySet):
            return None
        groups: dict[tuple[str, str, int], list[int]] = {}
        for i, ks in enumerate(plan.key_spaces):
            groups.setdefault((ks.min_key, ks.max_key, ks.rows), []).append(i)
        # segments in key order: a base group, then groups inside its key range with fewer keys
        # (candidate patches, checked to be subsets in _segment); segments must not overlap
        order = sorted(groups, key=lambda g: (g[0], -g[2]))
        segs: list[tuple[list[int], list[int]]] = []
        last: tuple[str, str, int] | None = None
        for g in order:
            if last is not None and g[0] <= last[1]:
                if g[1] <= last[1] and g[2] < last[2] and numeric_key(plan.key_fields):
                    segs[-1][1].extend(groups[g])
                    continue
                return None  # overlapping runs: the general merge
            segs.append((groups[g], []))
            last = g
        before = self.format.bytes_read
        expr = None
        if plan.filter is not None:
            expr = self._vortex_expr(plan.filter, plan.fragments.get(plan.filter_columns[0].group, []))
            if expr is None:
                return None
        segments = []
        for base, patches in segs:
            seg = self._segment(base, patches)
            if seg is None:
                return None
            if seg.hi > seg.lo:
                segments.append(seg)
        m = self.metrics
        m.key_spaces = len(plan.key_spaces)
        m.keys_merged = sum(ks.rows for ks in plan.key_spaces)
        m.keys_out = sum(s.hi - s.lo for s in segments)
        m.merge = "zip (streamed)"
        m.key_bytes_read += self.format.bytes_read - before
        return _Stream(self, segments, expr)

    def _segment(self, members: list[int], patch_members: list[int]) -> _Segment | None:
        """One segment of the streaming path (key spaces `members` of the plan, with identical
        key sets, and `patch_members`, whose keys must be subsets of them), or None."""
        plan = self.plan
        fields = plan.key_fields
        if patch_members and plan.filter is not None:
            return None
        kss = [plan.key_spaces[i] for i in members]
        n = kss[0].rows
        paths = kss  # file references of the member key spaces
        keys = self.key_cache.keys(paths[-1], fields)
        if len(kss) > 1:
            if numeric_key(fields):
                a = self.key_cache.numeric(paths[-1], fields)
                same = all(np.array_equal(a, self.key_cache.numeric(p, fields)) for p in paths[:-1])
            else:
                same = all(self.key_cache.keys(p, fields).equals(keys) for p in paths[:-1])
            if not same:
                return None
        lo, hi = 0, n
        if plan.key_predicate is not None:
            rows = predicate_rows(self.key_cache, paths[-1], fields, plan.key_predicate)
            lo = hi = 0
            if len(rows):
                lo, hi = int(rows[0]), int(rows[-1]) + 1
                if hi - lo != len(rows):
                    return None
        # patches: their keys' positions among the segment's keys (numeric keys: binary search)
        pos_of: dict[int, np.ndarray] = {}
        for i in patch_members:
            pk = self.key_cache.numeric(plan.key_spaces[i], fields)
            base_keys = self.key_cache.numeric(paths[-1], fields)
            pos = np.searchsorted(base_keys, pk)
            if len(pos) and (pos[-1] >= n or not np.array_equal(base_keys[np.minimum(pos, n - 1)], pk)):
                return None  # not a subset: the general merge
            pos_of[i] = pos.astype(np.int64)
        # units: (group, newest member key space holding the column, newer patches) → fragments
        in_seg = {plan.key_spaces[i].id: i for i in [*members, *patch_members]}
        by_key: dict[tuple[str, int, tuple[int, ...]], _StreamUnit] = {}
        missing: list[Column] = []
        filter_cols = plan.filter_columns if plan.filter is not None else []
        unit_of: dict[int, tuple[str, int, tuple[int, ...]]] = {}

        patch_bytes = 0

        def dense(frs: list[Fragment], rows: int) -> list[Fragment] | None:
            frs = sorted(frs, key=lambda f: f.start)
            at = 0
            for f in frs:
                if f.start != at:
                    return None
                at += f.rows
            return frs if at == rows else None

        for c in [*plan.columns, *[c for c in filter_cols if c not in plan.columns]]:
            frs = [f for f in plan.fragments.get(c.group, []) if f.key_space in in_seg and c.id in f.column_ids]
            holders = {in_seg[f.key_space] for f in frs}
            full = [i for i in members if i in holders]
            newest = max(full) if full else -1
            newer = tuple(sorted(i for i in holders if i in pos_of and i > newest))
            if newest < 0 and not newer:
                if c in filter_cols:
                    return None  # a filter over cells that do not exist: the general path decides
                missing.append(c)
                continue
            key = (c.group, newest, newer)
            u = by_key.get(key)
            if u is None:
                base_frs: list[Fragment] | None = []
                if newest >= 0:
                    base_frs = dense([f for f in frs if in_seg[f.key_space] == newest], n)
                if base_frs is None:
                    return None
                u = by_key[key] = _StreamUnit(c.group, [], base_frs, null_base=newest < 0)
                for i in newer:
                    pf = dense([f for f in frs if in_seg[f.key_space] == i], plan.key_spaces[i].rows)
                    if pf is None or any(f.blob_columns for f in pf):
                        return None
                    patch_bytes += sum(f.bytes for f in pf)
                    if patch_bytes * 4 > self._decoded.max_bytes:  # patches are decoded whole
                        return None
                    u.patches.append(_Patch(pos_of[i], pf))
            elif {f.id for f in frs if in_seg[f.key_space] in (newest, *newer)} != {
                f.id for f in [*u.fragments, *(f for p in u.patches for f in p.fragments)]
            }:
                return None
            u.columns.append(c)
            unit_of[c.id] = key
        for u in by_key.values():
            self._consider(u.group, u.fragments)
        if plan.filter is not None:
            if missing or len(by_key) != 1:
                return None
            (u,) = by_key.values()
            blob_ids = {i for f in u.fragments for i in f.blob_columns}
            if any(c.id in blob_ids for c in filter_cols):
                return None
            if not all(self.format.has_column(f, ORDINAL) for f in u.fragments):
                return None
            # fragments whose statistics prove the filter false are not opened
            schema = plan.schema
            may = may_match_many(
                plan.filter, u.fragments, _STATS, lambda p: (schema.column(p).id, schema.column(p).type)
            )
            if not may.all():
                self._pruned(u.group, int((~may).sum()))
                u.fragments = [f for f, ok in zip(u.fragments, may, strict=True) if ok]
        return _Segment(keys, lo, hi, list(by_key.values()), missing)

    # ----- the stream -----------------------------------------------------------------------
    def batches(self) -> Iterator[pa.RecordBatch]:
        plan = self.plan
        schema = self.output_schema()
        streamed = self._stream() if FAST_PATHS else None
        if streamed is not None:
            yield from streamed
            return
        merged = self._merge()
        live = np.nonzero(merged.alive)[0]
        keys = merged.keys.take(pa.array(live)) if len(live) != merged.keys.num_rows else merged.keys
        self.metrics.keys_out = len(live)
        filter_units = self._units(plan.filter_columns, merged, live) if plan.filter is not None else []
        positions = self._filter(filter_units, len(live)) if plan.filter is not None else np.arange(len(live))
        if self.limit is not None:
            positions = positions[: self.limit]
        units = self._units(plan.columns, merged, live)
        step = self._batch_rows(units)
        self._plan_sharing(units, positions, step)
        emitted = False
        for start in range(0, len(positions), step):
            pos = positions[start : start + step]
            arrays: dict[int, pa.Array] = {}
            for u in units:
                arrays.update(self._gather(u, pos))
            key_part = _take(keys, pos)
            batch = assemble(schema, key_part, plan.level, plan.columns, arrays)
            self.metrics.rows_out += batch.num_rows
            self.metrics.bytes_out += batch.nbytes
            emitted = True
            yield batch
        self.metrics.fragments_read = sum(g.fragments_read for g in self.metrics.groups.values())
        if not emitted:
            yield pa.RecordBatch.from_pylist([], schema=schema)


@dataclass
class _Segment:
    """Key-space rows [lo, hi) of one segment of the streaming path, and where their cells are."""

    keys: pa.Table
    lo: int
    hi: int
    units: list[_StreamUnit]
    missing: list[Column]  # projected columns with no cells in this segment: nulls


class _Stream:
    """The streaming zip path (see `ScanExecutor._stream`)."""

    def __init__(self, ex: ScanExecutor, segments: list[_Segment], filter_expr: Any) -> None:
        self.ex, self.segments, self.filter_expr = ex, segments, filter_expr
        self.left = ex.limit if ex.limit is not None else sum(s.hi - s.lo for s in segments)

    def _unit_batches(self, s: _Segment, u: _StreamUnit, ordinal: bool) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(key-space row of the fragment's first row, batch) of `u`'s columns over [lo, hi)."""
        ex = self.ex
        schema = pa.schema([pa.field(column_name(c.id), c.type) for c in u.columns])
        gm = ex.metrics.group(ex._group_name(u.group))
        if u.null_base:  # no base cells: nulls, overwritten by the patches
            for a in range(s.lo, s.hi, 1 << 16):
                m = min(s.hi - a, 1 << 16)
                yield a, pa.RecordBatch.from_arrays([pa.nulls(m, t) for t in schema.types], schema=schema)
        for fr in u.fragments:
            a, b = max(s.lo, fr.start), min(s.hi, fr.start + fr.rows)
            if a >= b:
                continue
            idx = None if (a, b) == (fr.start, fr.start + fr.rows) else np.arange(a - fr.start, b - fr.start)
            blobs = [column_name(i) for i in fr.blob_columns]
            gm.fragments_read += 1
            if ordinal:
                gm.fragments_filtered += 1
                gm.rows_filtered += b - a
            before = ex.format.bytes_read
            for batch in ex.format.stream(fr, schema.names, schema, idx, blobs, self.filter_expr, ordinal):
                gm.rows_read += batch.num_rows
                gm.bytes_decoded += batch.nbytes
                gm.bytes_read += ex.format.bytes_read - before
                before = ex.format.bytes_read
                yield fr.start, batch
            gm.bytes_read += ex.format.bytes_read - before

    def _emit(self, s: _Segment, key_part: pa.Table, cols: dict[int, pa.Array]) -> pa.RecordBatch:
        ex = self.ex
        n = key_part.num_rows
        for c in s.missing:
            cols[c.id] = pa.nulls(n, c.type)
        batch = assemble(ex.output_schema(), key_part, ex.plan.level, ex.plan.columns, cols)
        ex.metrics.rows_out += n
        ex.metrics.bytes_out += batch.nbytes
        self.left -= n
        return batch

    def _filtered(self, s: _Segment) -> Iterator[pa.RecordBatch]:
        (u,) = s.units
        for start, batch in self._unit_batches(s, u, ordinal=True):
            if self.left <= 0:
                return
            rows = batch.column(batch.num_columns - 1).to_numpy().astype(np.int64) + start
            if len(rows) > self.left:
                rows, batch = rows[: self.left], batch.slice(0, self.left)
            cols = {c.id: batch.column(i) for i, c in enumerate(u.columns)}
            yield self._emit(s, _take(s.keys, rows), cols)

    def _zipped(self, s: _Segment) -> Iterator[pa.RecordBatch]:
        its = [iter(self._unit_batches(s, u, ordinal=False)) for u in s.units]
        pending: list[pa.RecordBatch | None] = [None] * len(its)
        pos = s.lo
        while pos < s.hi and self.left > 0:
            for i, it in enumerate(its):
                p = pending[i]
                if p is None or p.num_rows == 0:
                    pending[i] = next(it)[1]
            n = min(self.left, s.hi - pos, 1 << 16, *(p.num_rows for p in pending if p is not None))
            cols: dict[int, pa.Array] = {}
            for i, u in enumerate(s.units):
                p = pending[i]
                assert p is not None
                here = self._patched(u, p.slice(0, n), pos) if u.patches else p.slice(0, n)
                for j, c in enumerate(u.columns):
                    cols[c.id] = here.column(j)
                pending[i] = p.slice(n)
            yield self._emit(s, s.keys.slice(pos, n), cols)
            pos += n

    def _patched(self, u: _StreamUnit, batch: pa.RecordBatch, pos: int) -> pa.RecordBatch:
        """`batch` (segment rows [pos, pos + n)) with the cells of `u`'s patches laid over it,
        newest last: one take over the batch and the patches' matching runs (slices)."""
        n = batch.num_rows
        src = np.arange(n, dtype=np.int64)
        pieces = [batch]
        offset = n
        for p in u.patches:
            a, b = np.searchsorted(p.pos, [pos, pos + n])
            if b <= a:
                continue
            table = self._patch_table(u, p)
            src[p.pos[a:b] - pos] = offset + np.arange(b - a)
            pieces.append(
                pa.RecordBatch.from_arrays(
                    [table.column(j).slice(int(a), int(b - a)).combine_chunks() for j in range(table.num_columns)],
                    schema=batch.schema,
                )
            )
            offset += int(b - a)
        if len(pieces) == 1:
            return batch
        cols = [
            pa.concat_arrays([pc_.column(j) for pc_ in pieces]).take(pa.array(src)) for j in range(batch.num_columns)
        ]
        return pa.RecordBatch.from_arrays(cols, schema=batch.schema)

    def _patch_table(self, u: _StreamUnit, p: _Patch) -> pa.Table:
        if p.table is None:
            ex = self.ex
            schema = pa.schema([pa.field(column_name(c.id), c.type) for c in u.columns])
            gm = ex.metrics.group(ex._group_name(u.group))
            before = ex.format.bytes_read
            parts = [ex.format.read(f, schema.names, schema) for f in p.fragments]
            t = pa.concat_tables(parts).combine_chunks() if parts else schema.empty_table()
            gm.fragments_read += len(parts)
            gm.rows_read += t.num_rows
            gm.bytes_decoded += t.nbytes
            gm.bytes_read += ex.format.bytes_read - before
            p.table = t
        return p.table

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        ex = self.ex
        emitted = False
        for s in self.segments:
            if self.left <= 0:
                break
            for batch in self._filtered(s) if self.filter_expr is not None else self._zipped(s):
                emitted = True
                yield batch
        ex.metrics.fragments_read = sum(g.fragments_read for g in ex.metrics.groups.values())
        if not emitted:
            yield pa.RecordBatch.from_pylist([], schema=ex.output_schema())


def _take(t: pa.Table, rows: np.ndarray) -> pa.Table:
    """Rows of `t`; a zero-copy slice when they are contiguous (full and range scans)."""
    if len(rows) == t.num_rows:
        return t
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
        return t.slice(int(rows[0]), len(rows))
    return t.take(pa.array(rows))


def _and(terms: list[Expr]) -> Expr:
    out = terms[0]
    for t in terms[1:]:
        out = And(out, t)
    return out


def _split_by(fk: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(value, ascending indices holding it) for each distinct value of `fk`: one stable sort,
    not one scan per value (a scan can touch hundreds of fragments)."""
    if len(fk) == 0:
        return
    if fk[0] == fk[-1] and (len(fk) < 3 or (fk == fk[0]).all()):
        yield int(fk[0]), np.arange(len(fk))
        return
    order = np.argsort(fk, kind="stable")
    s = fk[order]
    cuts = np.flatnonzero(s[1:] != s[:-1]) + 1
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(s)]):
        yield int(s[a]), order[a:b]


# ----- output shape ---------------------------------------------------------------------------
def output_schema(schema: Schema, level: str, cols: list[Column]) -> pa.Schema:
    """Key columns, then the projected columns nested as in the schema tree (groups → structs)."""
    return pa.schema([*schema.key_fields(level), *struct_of(nest(cols))])


def assemble(
    out: pa.Schema, keys: pa.Table, level: str, cols: list[Column], arrays: dict[int, pa.Array]
) -> pa.RecordBatch:
    by_path = {c.path: arrays[c.id] for c in cols}
    data: list[pa.Array] = [keys.column(i).combine_chunks() for i in range(keys.num_columns)]
    n = keys.num_rows
    for f in out:
        if f.name in keys.column_names:
            continue
        data.append(_build(f, f.name, by_path, n))
    return pa.RecordBatch.from_arrays(data, schema=out)


def _build(f: pa.Field, path: str, by_path: dict[str, pa.Array], n: int) -> pa.Array:
    if path in by_path:
        return by_path[path]
    children = [_build(sub, f"{path}.{sub.name}", by_path, n) for sub in f.type]
    return pa.StructArray.from_arrays(children, fields=list(f.type)) if children else pa.nulls(n, f.type)
