"""Scan execution: fresh records, streamed in key order (DESIGN §2, §5; spec/000, spec/001).

1. **Merge keys.** Read the considered key spaces (keys only, never values), apply the key
   predicate, and merge them: per key, the newest tombstone time (own level or an ancestor's
   prefix) and whether the key has any cell newer than it. With one key space and no tombstone
   this is a zip, not a sort.
2. **Find fresh cells.** Per set of columns that the same key spaces hold, the newest key space
   holding the key after its tombstone holds the fresh cell; a key's row there maps to a
   fragment and a row within it.
3. **Filter.** For each single-column conjunct of the filter, fragments whose statistics prove it
   false fail the keys whose fresh cell they hold, without reading values. The rest read the
   filter columns' fresh cells, assemble them with nulls and evaluate the filter on the fresh
   records: never on stale cells.
4. **Take.** In batches of bounded bytes, read exactly the fresh rows of the projected columns
   from each fragment (a Vortex take by row indices; whole fragments are read without indices)
   and assemble record batches sorted by key.

Memory: the keys of the considered key spaces (step 1) and one output batch of values.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.expr import columns, conjuncts, may_match
from conch.expr import mask as filter_mask
from conch.fragments import VortexFormat, column_name, decode_stats
from conch.keys import encode_keys, equal_adjacent, predicate_mask
from conch.manifest import Fragment
from conch.scan.plan import ScanPlan
from conch.schema import Column, Schema, join_path


@dataclass
class ScanMetrics:
    """What a scan read; `Scan.metrics()` after a scan ran."""

    key_spaces: int = 0
    tombstones: int = 0
    keys_merged: int = 0
    keys_out: int = 0
    fragments_considered: int = 0
    fragments_read: int = 0
    fragments_pruned_by_stats: int = 0
    rows_read: dict[str, int] = field(default_factory=dict)
    bytes_read: dict[str, int] = field(default_factory=dict)  # decoded Arrow bytes per group
    blob_bytes_read: dict[str, int] = field(default_factory=dict)  # exact bytes read from blob files
    rows_out: int = 0
    pruned: dict[str, int] = field(default_factory=dict)

    def add_read(self, group: str, rows: int, nbytes: int, blob_bytes: int = 0) -> None:
        self.rows_read[group] = self.rows_read.get(group, 0) + rows
        self.bytes_read[group] = self.bytes_read.get(group, 0) + nbytes
        self.blob_bytes_read[group] = self.blob_bytes_read.get(group, 0) + blob_bytes


class KeyCache:
    """Key spaces are immutable: cache their key tables (and encodings) by path."""

    def __init__(self, fmt: VortexFormat, max_entries: int = 256) -> None:
        self.format = fmt
        self._tables: OrderedDict[str, pa.Table] = OrderedDict()
        self._encoded: OrderedDict[str, pa.BinaryArray] = OrderedDict()
        self._max = max_entries

    def keys(self, path: str, fields: list[pa.Field]) -> pa.Table:
        t = self._tables.get(path)
        if t is None:
            schema = pa.schema([pa.field(f"k{i}", f.type) for i, f in enumerate(fields)])
            t = self.format.read(path, schema.names, schema).rename_columns([f.name for f in fields])
            self._put(self._tables, path, t)
        return t

    def encoded(self, path: str, fields: list[pa.Field]) -> pa.BinaryArray:
        e = self._encoded.get(path)
        if e is None:
            e = encode_keys(self.keys(path, fields).columns)
            self._put(self._encoded, path, e)
        return e

    def _put(self, d: OrderedDict[str, Any], k: str, v: Any) -> None:
        d[k] = v
        if len(d) > self._max:
            d.popitem(last=False)


@dataclass
class MergedKeys:
    """The considered key-space rows, sorted by key then newest first.

    `gid` numbers the distinct keys (row → key); `keys` holds one row per distinct key; `alive[g]`
    says key g exists after tombstones; `row_ok[r]` says row r is newer than its key's tombstone.
    """

    keys: pa.Table
    ks: np.ndarray  # row → index of its key space in the plan
    row: np.ndarray  # row → row within its key space
    gid: np.ndarray
    alive: np.ndarray
    row_ok: np.ndarray


@dataclass
class ReadUnit:
    """Columns of one group held by the same key spaces: they share fresh-cell locations."""

    group: str
    columns: list[Column]
    fragments: list[Fragment]
    frag: np.ndarray  # per output key: index into `fragments`, -1 = no cell (null)
    row: np.ndarray  # per output key: row within that fragment


class ScanExecutor:
    def __init__(
        self,
        plan: ScanPlan,
        fmt: VortexFormat,
        key_cache: KeyCache,
        abspath: Any,
        batch_bytes: int = 64 << 20,
        limit: int | None = None,
    ) -> None:
        self.plan = plan
        self.format = fmt
        self.key_cache = key_cache
        self.abspath = abspath
        self.batch_bytes = batch_bytes
        self.limit = limit
        self.metrics = ScanMetrics(pruned=dict(plan.pruned))

    # ----- output schema ----------------------------------------------------------------
    def output_schema(self) -> pa.Schema:
        return output_schema(self.plan.schema, self.plan.level, self.plan.columns)

    # ----- step 1: merge keys -----------------------------------------------------------
    def _merge(self) -> MergedKeys:
        """Merge the considered key spaces into distinct keys, newest rows first per key."""
        plan = self.plan
        fields = plan.key_fields
        names = [f.name for f in fields]
        parts, ks_idx, ks_row = [], [], []
        for i, ks in enumerate(plan.key_spaces):
            path = self.abspath(ks.path)
            kt = self.key_cache.keys(path, fields)
            rows = np.arange(kt.num_rows, dtype=np.int64)
            if plan.key_predicate is not None:
                m = predicate_mask(plan.key_predicate, self.key_cache.encoded(path, fields), fields)
                rows = np.nonzero(np.asarray(m.to_numpy(zero_copy_only=False), dtype=bool))[0]
                kt = kt.take(rows)
            parts.append(kt)
            ks_idx.append(np.full(len(rows), i, dtype=np.int32))
            ks_row.append(rows)
        self.metrics.key_spaces = len(parts)
        self.metrics.tombstones = len(plan.tombstones)
        if not parts:
            empty = pa.schema(fields).empty_table()
            z = np.zeros(0, dtype=np.int64)
            return MergedKeys(empty, z, z, z, np.zeros(0, dtype=bool), np.zeros(0, dtype=bool))
        times = np.array([ks.time for ks in plan.key_spaces], dtype=np.int64)
        kidx = np.concatenate(ks_idx)
        krow = np.concatenate(ks_row)
        self.metrics.keys_merged = len(kidx)
        if len(parts) == 1:
            keys = parts[0]
            gid = np.arange(len(kidx), dtype=np.int64)
            first = gid
        else:
            combined = pa.concat_tables(parts).append_column("__t", pa.array(-times[kidx]))
            order = pc.sort_indices(combined, [*[(n, "ascending") for n in names], ("__t", "ascending")])
            order_np = np.asarray(order)
            combined = combined.take(order)
            kidx, krow = kidx[order_np], krow[order_np]
            new = np.ones(len(kidx), dtype=bool)
            if len(kidx) > 1:
                same = np.ones(len(kidx) - 1, dtype=bool)
                for n in names:
                    same &= equal_adjacent(combined.column(n))
                new[1:] = ~same
            gid = np.cumsum(new) - 1
            first = np.nonzero(new)[0]
            keys = combined.select(names).take(pa.array(first))
        tomb = self._tombstone_times(keys)
        # Rows sorted newest first within a key: a key lives iff its newest row beats its tombstone.
        return MergedKeys(
            keys=keys,
            ks=kidx,
            row=krow,
            gid=gid,
            alive=times[kidx[first]] > tomb,
            row_ok=times[kidx] > tomb[gid],
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
            tk = self.key_cache.keys(self.abspath(ts.path), fields)
            if len(names) == 1:
                hit = pc.is_in(keys.column(names[0]), value_set=tk.column(0))
            else:
                if ts.level not in encoded_prefix:
                    encoded_prefix[ts.level] = encode_keys([keys.column(n) for n in names])
                hit = pc.is_in(
                    encoded_prefix[ts.level], value_set=self.key_cache.encoded(self.abspath(ts.path), fields)
                )
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
            self.metrics.fragments_considered += len(frs)
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
                w_ks, w_row = kidx[idx], krow[idx]
                # fragments per key space, sorted by start: a row maps by binary search
                for ks_i in np.unique(w_ks):
                    ks_id = plan.key_spaces[ks_i].id
                    local = [(f.start, fi) for fi, f in enumerate(frs) if f.key_space == ks_id]
                    local.sort()
                    starts = np.array([s for s, _ in local], dtype=np.int64)
                    ids = np.array([fi for _, fi in local], dtype=np.int64)
                    sel = w_ks == ks_i
                    rows = w_row[sel]
                    which = np.searchsorted(starts, rows, side="right") - 1
                    frag[out_pos[sel]] = ids[which]
                    row[out_pos[sel]] = rows - starts[which]
            units.append(ReadUnit(group, ucols, frs, frag, row))
        return units

    # ----- reading values -----------------------------------------------------------------
    def _gather(self, unit: ReadUnit, positions: np.ndarray) -> dict[int, pa.Array]:
        """Fresh values of a unit's columns at output key `positions` (sorted), in that order."""
        fk, rk = unit.frag[positions], unit.row[positions]
        schema = pa.schema([pa.field(column_name(c.id), c.type) for c in unit.columns])
        pieces: list[pa.Table] = []
        where: list[np.ndarray] = []
        for f in np.unique(fk):
            sel = np.nonzero(fk == f)[0]
            if f < 0:
                pieces.append(
                    pa.table({n: pa.nulls(len(sel), t) for n, t in zip(schema.names, schema.types, strict=True)})
                )
                where.append(sel)
                continue
            fr = unit.fragments[int(f)]
            rows = rk[sel]
            whole = len(rows) == fr.rows
            blobs = [column_name(i) for i in fr.blob_columns]
            before = self.format.blob_bytes_read
            t = self.format.read(self.abspath(fr.path), schema.names, schema, None if whole else rows, blobs)
            blob_bytes = self.format.blob_bytes_read - before
            self.metrics.fragments_read += 1
            self.metrics.add_read(join_path(self.plan.level, unit.group) or "<root>", t.num_rows, t.nbytes, blob_bytes)
            pieces.append(t)
            where.append(sel)
        if not pieces:
            return {c.id: pa.nulls(0, c.type) for c in unit.columns}
        table = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
        if len(pieces) > 1:
            order = np.argsort(np.concatenate(where), kind="stable")
            table = table.take(pa.array(order))
        return {c.id: table.column(column_name(c.id)).combine_chunks() for c in unit.columns}

    def _filter(self, units: list[ReadUnit], n: int) -> np.ndarray:
        """Output key positions whose fresh record passes the filter."""
        plan = self.plan
        assert plan.filter is not None
        ok = np.ones(n, dtype=bool)
        unit_of = {c.full_path: u for u in units for c in u.columns}
        for term in conjuncts(plan.filter):
            cols = columns(term)
            if len(cols) != 1:
                continue
            unit = unit_of[cols[0]]
            col = plan.schema.column(cols[0])
            for fi, fr in enumerate(unit.fragments):
                if not may_match(term, _fragment_stats(fr, col)):
                    hit = unit.frag == fi
                    if hit.any():
                        self.metrics.fragments_pruned_by_stats += 1
                        ok &= ~hit
        survivors = np.nonzero(ok)[0]
        passed: list[np.ndarray] = []
        step = self._batch_rows(units)
        for start in range(0, len(survivors), step):
            pos = survivors[start : start + step]
            values: dict[str, pa.Array] = {}
            for u in units:
                got = self._gather(u, pos)
                for c in u.columns:
                    values[c.full_path] = got[c.id]
            m = filter_mask(plan.filter, values.__getitem__)
            passed.append(pos[m])
        return np.concatenate(passed) if passed else np.zeros(0, dtype=np.int64)

    def _batch_rows(self, units: list[ReadUnit]) -> int:
        per_row = 0.0
        for u in units:
            rows = sum(f.rows for f in u.fragments) or 1
            per_row += sum(f.bytes for f in u.fragments) / rows
        return int(min(1 << 16, max(256, self.batch_bytes // max(per_row, 1.0))))

    # ----- the stream -----------------------------------------------------------------------
    def batches(self) -> Iterator[pa.RecordBatch]:
        plan = self.plan
        schema = self.output_schema()
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
        emitted = False
        for start in range(0, len(positions), step):
            pos = positions[start : start + step]
            arrays: dict[int, pa.Array] = {}
            for u in units:
                arrays.update(self._gather(u, pos))
            key_part = keys.take(pa.array(pos))
            batch = assemble(schema, key_part, plan.level, plan.columns, arrays)
            self.metrics.rows_out += batch.num_rows
            emitted = True
            yield batch
        if not emitted:
            yield pa.RecordBatch.from_pylist([], schema=schema)


def _fragment_stats(fr: Fragment, col: Column) -> Any:
    batch = decode_stats(fr.stats)
    names = batch.schema.names

    def get(path: str) -> tuple[Any, Any, int, int] | None:
        if path != col.full_path or f"min.{col.id}" not in names:
            return None
        return (
            batch.column(f"min.{col.id}")[0].as_py(),
            batch.column(f"max.{col.id}")[0].as_py(),
            batch.column(f"nulls.{col.id}")[0].as_py(),
            fr.rows,
        )

    return get


# ----- output shape ---------------------------------------------------------------------------
def output_schema(schema: Schema, level: str, cols: list[Column]) -> pa.Schema:
    """Key columns, then the projected columns nested as in the schema tree (groups → structs)."""
    tree: dict[str, Any] = {}
    for c in cols:
        node = tree
        parts = c.path.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = c.type
    fields = list(schema.key_fields(level))
    fields += [pa.field(k, _struct(v) if isinstance(v, dict) else v) for k, v in tree.items()]
    return pa.schema(fields)


def _struct(tree: dict[str, Any]) -> pa.DataType:
    return pa.struct([pa.field(k, _struct(v) if isinstance(v, dict) else v) for k, v in tree.items()])


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
