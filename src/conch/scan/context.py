"""One scan's context: its options, its metrics, its caches, and every read it makes.

Every read of a scan goes through `ScanContext`, which charges the rows and bytes to the scan's
own `ScanMetrics` (the one place metrics are counted). Bytes are counted per scan through
`VortexFormat.counted`, so concurrent scans in other threads do not mix their figures.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from conch.expr.tree import Expr
from conch.expr.tree import mask as filter_mask
from conch.files.format import FileRef, FragmentFormat, column_name
from conch.files.hotcache import HotKey
from conch.files.keycache import KeyCache, KeyIndex
from conch.files.manifest import Fragment, KeySpace
from conch.model.budget import ScanOptions
from conch.model.keys import KeyPredicate
from conch.model.lru import Lru
from conch.model.schema import Column, join_path
from conch.scan.keymask import KeyMask, key_mask
from conch.scan.keyspace import predicate_rows
from conch.scan.metrics import GroupMetrics, ScanMetrics
from conch.scan.plan import ScanPlan
from conch.scan.pushdown import StatsCache

_STATS = StatsCache()  # fragment statistics are immutable: decoded once per process


class DecodedCache:
    """Whole decoded fragments, LRU, bounded by Arrow bytes."""

    def __init__(self, max_bytes: int) -> None:
        self._lru: Lru[tuple[str, tuple[str, ...]], pa.Table] = Lru(max_weight=max_bytes, weight=lambda t: t.nbytes)
        self.max_bytes = max_bytes

    def get(self, key: tuple[str, tuple[str, ...]]) -> pa.Table | None:
        return self._lru.get(key)

    def put(self, key: tuple[str, tuple[str, ...]], t: pa.Table) -> None:
        if t.nbytes <= self.max_bytes:
            self._lru.put(key, t)


def _fixed_width(t: pa.DataType) -> bool:
    return pa.types.is_primitive(t) or pa.types.is_decimal(t)


def file_schema(cols: Sequence[Column]) -> pa.Schema:
    """The Vortex file columns holding `cols`."""
    return pa.schema([pa.field(column_name(c.id), c.type) for c in cols])


class ScanContext:
    """The plan, the I/O handles, the options and the metrics of one run of a scan."""

    def __init__(
        self, plan: ScanPlan, fmt: FragmentFormat, key_cache: KeyCache, options: ScanOptions, admit: bool = True
    ) -> None:
        self.plan = plan
        # whether small runs read whole are kept decoded (`small`) and keys and what is derived
        # from them kept in the key cache: not by a compaction's reads, whose inputs are about to
        # be replaced (kept, a 50M-key ingest's folds filled the cache with dead runs' keys)
        self.admit = admit
        self.format = fmt
        self.key_cache = key_cache
        self.options = options
        self.stats = _STATS
        self.metrics = ScanMetrics(pruned=dict(plan.pruned))
        self.decoded = DecodedCache(options.cache_bytes)
        self._seen: set[str] = set()  # fragments counted as considered
        self._fixed: dict[str, list[tuple[Column, str, int, str]]] = {}  # per group (`small`)
        # (fragment file + mask, columns asked) → its small-run entry's key and held columns, or
        # None: decided once per scan (a take over 30 runs asks ~60 times)
        self._small: dict[tuple[str, tuple[str, ...]], tuple[HotKey, list[Column]] | None] = {}
        # the key cache's admission (`KeyCache.fits`), decided once for the scan's key spaces
        keep = admit and key_cache.fits(plan.key_spaces, plan.key_fields)
        self._keys = CountedKeys(key_cache, fmt, self.metrics.add_key_bytes_read, keep)

    # ----- metrics --------------------------------------------------------------------------
    def group(self, group: str) -> GroupMetrics:
        """The metrics of a column group of the scan's level."""
        return self.metrics.group(join_path(self.plan.level, group) or "<root>")

    def consider(self, group: str, fragments: Sequence[Fragment]) -> None:
        """Count fragments as considered, once per scan however many units hold them."""
        new = {f.id for f in fragments} - self._seen
        self._seen |= new
        self.group(group).fragments_considered += len(new)
        self.metrics.fragments_considered += len(new)

    def pruned(self, group: str, n: int) -> None:
        """Count fragments whose statistics proved the filter false."""
        self.group(group).fragments_pruned_by_stats += n
        self.metrics.fragments_pruned_by_stats += n

    def finish(self) -> None:
        self.metrics.fragments_read = sum(g.fragments_read for g in self.metrics.groups.values())

    # ----- counted reads (in fragment rows: the key mask maps them to file rows) ---------------
    def mask(self, fr: Fragment) -> KeyMask:
        """The key mask of `fr` (dense, or its cached mask file)."""
        return key_mask(fr, self.format.storage)

    def keys(self) -> CountedKeys:
        """The key cache as this scan reads it: the key-space bytes it reads charged to the scan,
        its keys kept or dropped by one admission decision (`CountedKeys.keep`)."""
        return self._keys

    def read(
        self,
        group: str,
        fr: Fragment,
        schema: pa.Schema,
        rows: np.ndarray | None = None,
    ) -> pa.Table:
        """Columns `schema` of fragment `fr` (all rows, or the sorted fragment `rows`), counted."""
        gm = self.group(group)
        blobs = [column_name(i) for i in fr.blob_columns]
        if fr.mask:
            rows = self.mask(fr).to_file_rows(rows)
        with self.format.counted(fr, gm.add_bytes_read):
            t = self.format.read(fr, schema.names, schema, rows, blobs, self._refs(schema), self._ref_min)
        gm.rows_read += t.num_rows
        gm.bytes_decoded += t.nbytes
        gm.fragments_read += 1
        return t

    def read_many(self, group: str, parts: Sequence[tuple[Fragment, np.ndarray]], schema: pa.Schema) -> pa.Table:
        """Columns `schema` at the sorted fragment rows of several fragments, concatenated in
        order, counted: a take over many fragments builds one Arrow array per column
        (`VortexFormat.read_many`), not one per fragment plus a concatenation. Small runs are
        taken from their decoded columns (`small`), without a Vortex read."""
        decoded = [self.small(group, fr, schema) for fr, _ in parts]
        if any(t is not None for t in decoded):
            pieces = []
            for is_small, run in itertools.groupby(zip(parts, decoded, strict=True), key=lambda p: p[1] is not None):
                got = list(run)
                if is_small:
                    pieces += [t.take(pa.array(rows)) for (_, rows), t in got if t is not None]
                else:
                    pieces.append(self._read_many(group, [p for p, _ in got], schema))
            return pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
        return self._read_many(group, parts, schema)

    def _read_many(self, group: str, parts: Sequence[tuple[Fragment, np.ndarray]], schema: pa.Schema) -> pa.Table:
        gm = self.group(group)
        tables = []
        for blob_ids, run in itertools.groupby(parts, key=lambda p: p[0].blob_columns):
            frs = [(fr, self.mask(fr).to_file_rows(rows) if fr.mask else rows) for fr, rows in run]
            files = list({fr.path: fr for fr, _ in frs}.values())  # a file shared by fragments: once
            with self.format.counted(files[0], gm.add_bytes_read, *files[1:]):
                blobs = [column_name(i) for i in blob_ids]
                refs = self._refs(schema)
                tables.append(self.format.read_many(frs, schema.names, schema, blobs, refs, self._ref_min))
        t = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        gm.rows_read += t.num_rows
        gm.bytes_decoded += t.nbytes
        gm.fragments_read += len(parts)
        return t

    def small(self, group: str, fr: Fragment, schema: pa.Schema, only_cached: bool = False) -> pa.Table | None:
        """Columns `schema` of all of `fr`'s rows if `fr` is a small run, else None. A small run's
        fixed-width columns (all it holds, whatever `schema` asks) fit one entry of the format's
        hot cache (`FragmentFormat.hot`): they are decoded whole once and kept across scans. An
        LSM tree being written is a large run plus many small ones (appends, their folds, partial
        upserts) that every scan reads; a Vortex scan's fixed cost per file (~0.3-1 ms: its
        threads, its set-up) would be most of what they cost, and the projections of one query
        (the filter's column, then the others at the passing rows) share one entry. With
        `only_cached`, None unless the entry is there (a scan reading a few rows of it)."""
        asked = (fr.path + fr.mask, tuple(schema.names))
        if asked not in self._small:
            self._small[asked] = self._small_entry(group, fr, schema)
        entry = self._small[asked]
        if entry is None:
            return None
        key, held = entry
        t = self.format.hot.get(key)
        if t is None:
            if only_cached or not self.admit:
                return None
            t = self.read(group, fr, file_schema(held)).combine_chunks()
            self.format.hot.put(key, t)
        return t if t.schema.names == schema.names else t.select(schema.names)

    def _small_entry(self, group: str, fr: Fragment, schema: pa.Schema) -> tuple[HotKey, list[Column]] | None:
        """(hot-cache key, columns held) of `fr`'s small-run entry, if it holds `schema` (`small`)."""
        if fr.blob_columns or self._refs(schema):
            return None
        cols = self._fixed.get(group)
        if cols is None:  # (column, file name, bytes per cell, cache label) of the group's fixed-width ones
            cols = [
                (c, column_name(c.id), max(1, c.type.bit_width // 8), f"{column_name(c.id)} {c.type}")
                for c in self.plan.schema.columns_of(self.plan.level, group)
                if _fixed_width(c.type)
            ]
            self._fixed[group] = cols
        ids = set(fr.column_ids)
        held = [h for h in cols if h[0].id in ids]
        if (
            not set(schema.names) <= {h[1] for h in held}
            or fr.rows * sum(h[2] for h in held) > self.format.hot.entry_bytes
        ):
            return None
        return (fr.path + fr.mask, ("small", *(h[3] for h in held))), [h[0] for h in held]

    def read_decoded(self, group: str, fr: Fragment, schema: pa.Schema) -> pa.Table:
        """Columns `schema` of all of `fr`'s rows, decoded once per scan (the scan's decoded
        cache): for a fragment read again and again (by several units, segments or takes).
        Keyed by file and mask: fragments sharing a file differ by mask. A fragment small enough
        stays decoded across scans (`FragmentFormat.hot`): the small runs of an LSM tree being
        written are read whole by every scan of it (`overlay.py`)."""
        t = self.small(group, fr, schema)
        if t is not None:
            return t
        hot_key = self.decoded_key(fr, schema)
        t = self.format.hot.get(hot_key)
        if t is not None:
            return t
        key = (fr.path + fr.mask, tuple(schema.names))
        t = self.decoded.get(key)
        if t is None:
            t = self.read(group, fr, schema)
            if not self.format.hot.put(hot_key, t.combine_chunks()):
                self.decoded.put(key, t)
        return t

    def decoded_key(self, fr: Fragment, schema: pa.Schema) -> tuple[str, tuple[str, ...]]:
        """What names `fr`'s decoded columns `schema` as this scan reads them (blob columns as
        values or as references, `ScanOptions.blob_refs`), across scans."""
        return (
            fr.path + fr.mask,
            (*schema.names, *sorted(self._refs(schema)), str(self._ref_min)),
        )  # refs: another read

    def hot(self, fr: Fragment, schema: pa.Schema) -> pa.Table | None:
        """Columns `schema` of all of `fr`'s rows if they are kept decoded across scans (a small
        run that scans overlay, `read_decoded`): a take from them costs no Vortex read."""
        return self.format.hot.get(self.decoded_key(fr, schema))

    def stream(
        self, group: str, fr: Fragment, schema: pa.Schema, rows: np.ndarray | None, expr: Any, ordinal: bool
    ) -> Iterator[pa.RecordBatch]:
        """Batches of fragment `fr` (optionally filtered in-file by the Vortex `expr`), counted."""
        gm = self.group(group)
        gm.fragments_read += 1
        if ordinal:
            gm.fragments_filtered += 1
            gm.rows_filtered += fr.rows if rows is None else len(rows)
        blobs = [column_name(i) for i in fr.blob_columns]
        mask = self.mask(fr) if fr.mask else None
        if mask is not None:
            rows = mask.to_file_rows(rows)
        with self.format.counted(fr, gm.add_bytes_read):
            refs = self._refs(schema)
            for batch in self.format.stream(fr, schema.names, schema, rows, blobs, expr, ordinal, refs, self._ref_min):
                gm.rows_read += batch.num_rows
                gm.bytes_decoded += batch.nbytes
                if mask is not None and ordinal:  # ordinals are file rows: back to fragment rows
                    i = batch.num_columns - 1
                    frows = mask.from_file_rows(batch.column(i).to_numpy().astype(np.int64))
                    batch = batch.set_column(i, batch.schema.field(i), pa.array(frows.astype(np.uint32)))
                yield batch

    @functools.cached_property
    def decoded_fit(self) -> bool:
        """Whether the filter columns of the fragments small enough for `filter_decoded` fit the
        format's hot cache together: then they stay decoded across scans. Beyond, each evicts
        another before the next scan (LRU) and every scan decoded them all whole again: the
        ingest family at 5M keys, 31 L1 runs of 160k keys, a 1 % filter 160 ms against 29 ms
        written once; their filters then run inside their Vortex scans, as large fragments'."""
        widths = {c.id: max(1, c.type.bit_width // 8) for c in self.plan.filter_columns if _fixed_width(c.type)}
        total = 0
        for frs in self.plan.fragments.values():
            for fr in frs:
                nbytes = fr.rows * sum(widths.get(i, 0) for i in fr.column_ids)
                total += nbytes if nbytes <= self.format.hot.entry_bytes else 0
        return total <= self.format.hot.max_bytes

    def filter_decoded(
        self, group: str, fr: Fragment, schema: pa.Schema, filt: Expr, names: dict[str, str]
    ) -> tuple[np.ndarray, pa.Table]:
        """The fragment rows of `fr` where `filt` holds (null is false), evaluated in Arrow on its
        columns `schema` (`names`: column path → file column) decoded whole and kept decoded
        across scans by the format (`FragmentFormat.hot`, for fragments small enough): a small
        fragment filtered again and again costs no Vortex scan. Returns the rows and the columns."""
        t = self.small(group, fr, schema)
        if t is None:
            key = (
                fr.path + fr.mask,
                (*schema.names, *sorted(self._refs(schema)), str(self._ref_min)),
            )  # refs: another read
            t = self.format.hot.get(key)
            if t is None:
                t = self.read(group, fr, schema).combine_chunks()
                self.format.hot.put(key, t)
        gm = self.group(group)
        gm.fragments_filtered += 1
        gm.rows_filtered += t.num_rows
        return np.flatnonzero(filter_mask(filt, lambda p: t.column(names[p]))), t

    def filter_rows(self, group: str, fr: Fragment, expr: Any, rows: np.ndarray) -> np.ndarray:
        """Rows among `rows` of `fr` where the Vortex `expr` holds (run inside the file), counted."""
        gm = self.group(group)
        if fr.mask:
            mask = self.mask(fr)
            with self.format.counted(fr, gm.add_bytes_read):
                matched = mask.from_file_rows(self.format.filter_rows(fr, expr, mask.to_file_rows(rows)))
            gm.fragments_filtered += 1
            gm.rows_filtered += len(rows)
            return matched
        with self.format.counted(fr, gm.add_bytes_read):
            matched = self.format.filter_rows(fr, expr, None if len(rows) == fr.rows else rows)
        gm.fragments_filtered += 1
        gm.rows_filtered += len(rows)
        return matched

    def _refs(self, schema: pa.Schema) -> tuple[str, ...]:
        """The columns of `schema` read as references to their values (`ScanOptions.blob_refs`)."""
        refs = self.options.blob_refs
        return tuple(n for n in schema.names if n in refs) if refs else ()

    @property
    def _ref_min(self) -> int:
        return self.options.blob_ref_min_bytes

    def has_column(self, group: str, fr: Fragment, name: str) -> bool:
        with self.format.counted(fr, self.group(group).add_bytes_read):
            return self.format.has_column(fr, name)


class CountedKeys:
    """`KeyCache` lookups of one scan: storage reads (cache misses) are charged to it, and what
    they read is kept in the cache only if `keep` (the cache's admission rule, `KeyCache.fits`,
    for all the scan's key spaces): a scan of a table whose keys would fill more than half the
    cache reads them, uses them and drops them."""

    def __init__(self, cache: KeyCache, fmt: FragmentFormat, on_bytes: Any, keep: bool) -> None:
        self.cache, self.format, self.on_bytes, self.keep = cache, fmt, on_bytes, keep
        # key space path → its rows of the scan's key predicate (one predicate per scan): the
        # paths of a take ask again and again (50k keys over a 1M-key run: ~4 ms a search)
        self._rows: dict[str, tuple[KeyPredicate, np.ndarray]] = {}

    def rows(self, ks: FileRef, fields: list[pa.Field], pred: KeyPredicate) -> np.ndarray:
        """Rows of key space `ks` that `pred` admits (`keyspace.predicate_rows`), found once."""
        hit = self._rows.get(ks.path)
        if hit is not None and hit[0] is pred:
            return hit[1]
        rows = predicate_rows(self, ks, fields, pred)
        self._rows[ks.path] = (pred, rows)
        return rows

    def keys(self, ks: FileRef, fields: list[pa.Field]) -> pa.Table:
        with self.format.counted(ks, self.on_bytes):
            return self.cache.keys(ks, fields, self.keep)

    def encoded(self, ks: FileRef, fields: list[pa.Field]) -> pa.BinaryArray:
        with self.format.counted(ks, self.on_bytes):
            return self.cache.encoded(ks, fields, self.keep)

    def numeric(self, ks: FileRef, fields: list[pa.Field]) -> np.ndarray:
        if self.cache.cached(ks):  # nothing to count: a scan asks once per small run (~30 of them)
            return self.cache.numeric(ks, fields, self.keep)
        with self.format.counted(ks, self.on_bytes):
            return self.cache.numeric(ks, fields, self.keep)

    def cached(self, ks: FileRef) -> bool:
        return self.cache.cached(ks)

    def derived(self, name: str, build: Callable[[], Any]) -> Any:
        return self.cache.derived(name, build, self.keep)

    def peek(self, name: str) -> Any:
        """The value `derived` keeps under `name`, or None: nothing is built."""
        return self.cache.peek(name)

    def forget(self, name: str) -> None:
        self.cache.forget(name)

    def same_keys(self, a: KeySpace, b: KeySpace, fields: list[pa.Field]) -> bool:
        """Whether two key spaces hold identical keys (`KeyCache.same_keys`: decided once)."""
        with self.format.counted(a, self.on_bytes, b):
            return self.cache.same_keys(a, b, fields, self.keep)

    def index(self, ks: FileRef, fields: list[pa.Field]) -> KeyIndex:
        with self.format.counted(ks, self.on_bytes):
            return self.cache.index(ks, fields)

    def numeric_at(self, ks: FileRef, fields: list[pa.Field], rows: np.ndarray) -> np.ndarray:
        with self.format.counted(ks, self.on_bytes):
            return self.cache.numeric_at(ks, fields, rows)
