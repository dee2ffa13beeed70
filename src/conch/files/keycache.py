"""The key-space cache: key spaces are immutable files, so their keys (as a table, encoded,
as numpy, as a sparse index) are cached by path, LRU within one byte budget, per warehouse."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from conch.files.format import FileRef, FragmentFormat
from conch.files.manifest import KeySpace
from conch.model.budget import DEFAULT_SPLIT
from conch.model.keys import encode_keys, key_space_schema
from conch.model.lru import Lru


class KeyCache:
    """Key spaces are immutable: cache their key tables (and encodings) by file path, LRU, within
    one byte budget over every form held (a numeric key column's numpy form, where it is a view of
    the kept table's buffer, is kept in the table's entry, `_KeyTable`, and not weighed twice).
    The budget, not the table's key count, bounds what scans keep: a key space larger than it is
    read, used and dropped.

    Admission has one rule, `fits`: a reader of key spaces whose keys would fill more than half
    the cache reads them with `keep=False` (a scan decides it once: `ScanContext.keys`), since
    keeping them would only evict what other readers use. Sparse indexes are always kept (8 B
    per 1,024 keys). Thread-safe: scans of a server's request threads and the background settle
    (`conch.maintain.compaction.background`) share one cache; two threads missing the same key space may
    both read it, and the second put replaces the first."""

    def __init__(self, fmt: FragmentFormat, max_entries: int = 65536, max_bytes: int = DEFAULT_SPLIT.key_cache) -> None:
        self.format = fmt
        # an un-compacted table has hundreds of key spaces: `max_entries` bounds the count too
        self._lru: Lru[tuple[str, str], Any] = Lru(max_entries, max_bytes, weight=lambda v: v.nbytes)
        self.max_bytes = max_bytes
        self._same: Lru[tuple[str, str], bool] = Lru(max_entries=65536)  # (path, path) → identical keys

    def keys(self, ks: FileRef, fields: list[pa.Field], keep: bool = True) -> pa.Table:
        """The key space's keys as a table named like `fields`; `keep=False`: not cached (see
        `fits`)."""
        kept = self._get("table", ks.path)
        if kept is not None:
            return kept.table
        schema = key_space_schema(fields)
        t = self.format.read(ks, schema.names, schema).rename_columns([f.name for f in fields])
        t = t.combine_chunks()
        if keep:
            self._put("table", ks.path, _KeyTable(t))
        return t

    def encoded(self, ks: FileRef, fields: list[pa.Field], keep: bool = True) -> pa.BinaryArray:
        """The key space's keys in the order-preserving byte encoding; `keep` as in `keys`."""
        e = self._get("encoded", ks.path)
        if e is None:
            e = encode_keys(self.keys(ks, fields, keep).columns)
            if keep:
                self._put("encoded", ks.path, e)
        return e

    def numeric(self, ks: FileRef, fields: list[pa.Field], keep: bool = True) -> np.ndarray:
        """The single numeric key column as numpy (timestamps as int64); `keep` as in `keys`."""
        a = self._get("numeric", ks.path)
        if a is not None:
            return a
        kept = self._get("table", ks.path)
        if kept is not None and kept.view is not None:
            return kept.view
        col = (kept.table if kept is not None else self.keys(ks, fields, keep)).column(0)
        a = as_numpy(col)
        if keep and not shares_buffer(a, col):
            self._put("numeric", ks.path, a)
        elif keep and (kept := kept or self._get("table", ks.path)) is not None:
            kept.view = a  # a view of the kept table's keys weighs nothing more: kept with it
        return a

    def derived(self, name: str, build: Callable[[], Any], keep: bool = True) -> Any:
        """A value computed from immutable key spaces only, named by their paths (and whatever
        else it depends on) in `name`, with an `nbytes`: built once and kept like their keys
        (`keep` as in `keys`). The streamed path's overlays (`conch.scan.overlay`): every scan
        of a table being written places the same small runs among the same base."""
        v = self._get("derived", name)
        if v is None:
            v = build()
            if keep:
                self._put("derived", name, v)
        return v

    def peek(self, name: str) -> Any:
        """What `derived` keeps under `name`, or None (nothing is built)."""
        return self._get("derived", name)

    def forget(self, name: str) -> None:
        """Drop what `derived` keeps under `name`: a value another has superseded (an older
        version's overlay, grown into the new one's), so the two are never weighed together."""
        self._lru.remove_if(lambda key: key == ("derived", name))

    def same_keys(self, a: KeySpace, b: KeySpace, fields: list[pa.Field], keep: bool = True) -> bool:
        """Whether two key spaces hold identical keys (a table written group by group: the
        direct take and the zip merge then need no merge). Decided once per pair and
        remembered: comparing 200k keys on every take was a third of a 20-key take's time."""
        pair = (a.path, b.path) if a.path <= b.path else (b.path, a.path)
        hit = self._same.get(pair)
        if hit is None:
            hit = (a.min_key, a.max_key, a.rows) == (b.min_key, b.max_key, b.rows) and self.keys(
                a, fields, keep
            ).equals(self.keys(b, fields, keep))
            self._same.put(pair, hit)
        return hit

    def fits(self, key_spaces: Sequence[KeySpace], fields: list[pa.Field]) -> bool:
        """The admission rule: whether these key spaces' keys fill at most half the cache. Then
        their readers keep them (repeated scans and takes search memory); beyond, keeping them
        would only evict, so they are read, used and dropped (`keep=False`), and takes find
        keys through sparse indexes (`find_keys`)."""
        width = sum(max(1, f.type.bit_width // 8) if pa.types.is_primitive(f.type) else 16 for f in fields)
        return 2 * width * sum(ks.rows for ks in key_spaces) <= self.max_bytes

    def cached(self, ks: FileRef) -> bool:
        """Whether the key space's keys are in memory (a lookup then needs no file read)."""
        return ("numeric", ks.path) in self._lru or ("table", ks.path) in self._lru

    def index(self, ks: FileRef, fields: list[pa.Field]) -> KeyIndex:
        """The sparse index of a numeric key space (`KeyIndex`), built by one streamed pass over
        its keys (one Vortex batch in memory) and cached by path: key spaces are immutable."""
        idx = self._get("index", ks.path)
        if idx is None:
            firsts, offset = [], 0
            for b in self.format.stream(ks, ["k0"], pa.schema([pa.field("k0", fields[0].type)])):
                v = as_numpy(b.column(0))
                firsts.append(v[(-offset) % INDEX_STEP :: INDEX_STEP])
                offset += len(v)
            idx = KeyIndex(np.concatenate(firsts) if firsts else np.zeros(0), offset)
            self._put("index", ks.path, idx)
        return idx

    def numeric_at(self, ks: FileRef, fields: list[pa.Field], rows: np.ndarray) -> np.ndarray:
        """The numeric keys at sorted `rows` (Vortex reads only the chunks holding them)."""
        t = self.format.read(ks, ["k0"], pa.schema([pa.field("k0", fields[0].type)]), rows)
        return as_numpy(t.column(0))

    def keys_at(self, ks: FileRef, fields: list[pa.Field], rows: np.ndarray) -> pa.Table:
        """The keys at sorted `rows`, named like `fields`: from memory when the key table is
        cached, else Vortex reads only the chunks holding them (not the whole key table)."""
        kept = self._get("table", ks.path)
        if kept is not None:
            return kept.table.take(pa.array(rows))
        schema = key_space_schema(fields)
        return self.format.read(ks, schema.names, schema, rows).rename_columns([f.name for f in fields])

    def _get(self, kind: str, path: str) -> Any:
        return self._lru.get((kind, path))

    def _put(self, kind: str, path: str, v: Any) -> None:
        if v.nbytes > self.max_bytes:
            return  # larger than the whole budget: the caller uses it once
        self._lru.put((kind, path), v)


INDEX_STEP = 1024  # keys per block of a sparse key index


@dataclass
class _KeyTable:
    """A kept key table, and its numeric key column as a numpy view of the table's buffer once
    asked for (weighed with the table: the view holds no bytes of its own). Taken again on every
    call, the view cost ~5 µs, and a scan of a table being written asks once per small run and
    per step: 0.2 of the 0.8 ms that a 50-key take over ten small runs paid above one run."""

    table: pa.Table
    view: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes)


@dataclass
class KeyIndex:
    """A numeric key space's sparse index: the key at every `INDEX_STEP`-th row (8 B per 1,024
    keys). A key set finds its rows by reading only the blocks its keys fall in."""

    firsts: np.ndarray
    rows: int

    @property
    def nbytes(self) -> int:
        return int(self.firsts.nbytes)


def shares_buffer(a: np.ndarray, col: pa.ChunkedArray | pa.Array) -> bool:
    """Whether numpy array `a` is a view of one chunk of `col`'s data buffer (`as_numpy` of a
    one-chunk numeric column is: counted twice, a 5M-key base weighed 80 MB in a 128 MB cache)."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    if len(chunks) != 1 or not len(a) or len(chunks[0].buffers()) < 2 or chunks[0].buffers()[1] is None:
        return False
    buf = chunks[0].buffers()[1]
    return buf.address <= a.ctypes.data < buf.address + buf.size


def as_numpy(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A numeric key column as numpy (timestamps as their int64 value)."""
    if pa.types.is_timestamp(col.type):
        col = col.cast(pa.int64())
    return np.asarray(col.to_numpy(zero_copy_only=False) if isinstance(col, pa.Array) else col.to_numpy())
