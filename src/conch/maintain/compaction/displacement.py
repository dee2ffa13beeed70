"""Displacement maps (spec/003): where each row of a compaction's origin key spaces went.

Every key-space compaction writes one: for each origin (input) data key space, its rows that
survive, mapped to a destination (output) key space and row. It is what minor compaction needs to
re-align an origin's fragments to the destination key spaces without reading their data, and it
documents a compaction for time travel and audits.

Stored compactly as **runs**: `(origin, origin_start, dest, dest_start, length)` says origin rows
`[origin_start, origin_start + length)` are destination rows `[dest_start, dest_start + length)`.
Rows of one origin are contiguous in its destination wherever no other input's key falls between
them, so an L1 run merged with a few small L0 runs is a handful of runs, not one entry per key.
Rows absent from the map were dropped (deleted by a tombstone). The map is a small Arrow IPC
stream (`maps/<id>.arrow`, `conch.files.ipc`; maps written earlier as IPC files read the same),
its key-space ids stored dictionary-encoded (`STORED_MAP_SCHEMA`: a merge of 32 runs of random
keys maps 64k runs, and their ids as plain strings were ~4.6 MB to compress, 24 ms of a 200 ms
merge; maps stored with plain strings read the same),
referenced by the compaction's `AddDisplacementMap` WAL op with its size and checksum; reads
verify it (`CorruptFileError` naming the file).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.files.integrity import digest, verify
from conch.files.ipc import read_table, table_bytes
from conch.files.storage import Storage, new_id

MAP_SCHEMA = pa.schema(
    [
        ("origin", pa.string()),
        ("origin_start", pa.int64()),
        ("dest", pa.string()),
        ("dest_start", pa.int64()),
        ("length", pa.int64()),
    ]
)


# as stored: the ids dictionary-encoded (read back as `MAP_SCHEMA`)
STORED_MAP_SCHEMA = pa.schema(
    [f.with_type(pa.dictionary(pa.int32(), pa.string())) if f.type == pa.string() else f for f in MAP_SCHEMA]
)


def _ids(ids: list[str], which: np.ndarray) -> pa.DictionaryArray:
    """The strings `ids[which[i]]`, dictionary-encoded as stored (`STORED_MAP_SCHEMA`): a map
    has a run per key of random upserts, and a Python list of 64k ids was ~20 ms of a merge,
    their strings taken and then hashed back into a dictionary ~7 ms more."""
    return pa.DictionaryArray.from_arrays(pa.array(which, pa.int32()), pa.array(ids, pa.string()))


@dataclass(frozen=True, slots=True)
class WrittenMap:
    path: str
    bytes: int
    checksum: str
    runs: int
    rows: int  # origin rows mapped


MapKeys: TypeAlias = pa.BinaryArray | np.ndarray  # encoded keys, or a single integer key as numpy (`as_numpy`)


def map_runs(origin: str, origin_enc: MapKeys, dest_ids: list[str], dest_encs: list[MapKeys]) -> pa.Table:
    """The runs (as stored: `STORED_MAP_SCHEMA`) mapping one origin key space (its encoded
    keys, in row order) into destination key spaces (each in key order; no key in two). A single
    integer key may come as numpy arrays (origin and destinations alike): searched as they are,
    with no key encoded (a merge of L0 runs spent ~40 % of its time encoding and converting keys
    for its map). Destinations one after another in key order
    (a major's or fold's pieces) are searched as one sorted array; destinations whose key ranges
    interleave (a merge's outputs split by which columns hold cells, `rewrite._by_presence`)
    each on its own: searched as one, their concatenation is not sorted and keys went missing."""
    if not dest_encs or len(origin_enc) == 0:
        return STORED_MAP_SCHEMA.empty_table()
    offsets = np.cumsum([0] + [len(d) for d in dest_encs])
    numeric = isinstance(origin_enc, np.ndarray)
    dests = [d if isinstance(d, np.ndarray) else d.cast(pa.binary()) for d in dest_encs]
    origin_bin = origin_enc if isinstance(origin_enc, np.ndarray) else origin_enc.cast(pa.binary())
    if _in_key_order(dests):
        found, gpos = _positions(origin_bin, np.concatenate(dests) if numeric else pa.concat_arrays(dests))
    else:
        found = np.zeros(len(origin_bin), dtype=bool)
        where = np.zeros(len(origin_bin), dtype=np.int64)
        for start, d in zip(offsets, dests, strict=False):
            hit, pos = _positions(origin_bin, d)
            where[np.nonzero(hit)[0]] = pos + start
            found |= hit
        gpos = where[found]
    rows = np.nonzero(found)[0].astype(np.int64)
    if not len(rows):
        return STORED_MAP_SCHEMA.empty_table()
    dest = np.searchsorted(offsets, gpos, side="right") - 1
    brk = np.ones(len(rows), dtype=bool)
    brk[1:] = (np.diff(rows) != 1) | (np.diff(gpos) != 1) | (np.diff(dest) != 0)
    starts = np.nonzero(brk)[0]
    lengths = np.diff(np.append(starts, len(rows)))
    return pa.table(
        {
            "origin": _ids([origin], np.zeros(len(starts), dtype=np.int32)),
            "origin_start": pa.array(rows[starts]),
            "dest": _ids(dest_ids, dest[starts]),
            "dest_start": pa.array(gpos[starts] - offsets[dest[starts]]),
            "length": pa.array(lengths.astype(np.int64)),
        },
        schema=STORED_MAP_SCHEMA,
    )


class StreamedMap:
    """The runs of origins mapped into destination key spaces written one after another in key
    order, disjoint (a major's or a fold's pieces of one level), for a single numeric key. Each
    origin's keys are read a block at a time (`read(start, stop)`, sorted) as the pieces pass
    them, so memory holds one block per origin and one piece: `map_runs` takes the output's
    keys whole, ~0.3 KB a row at its peak (a 10M-key major went 745 -> 1,000 MB there). The runs
    are the ones `map_runs` finds: a destination change always breaks a run."""

    def __init__(self, origins: list[tuple[str, int, Callable[[int, int], np.ndarray]]], block: int = 1 << 18) -> None:
        self.origins = origins
        self.block = block
        self.read = [0] * len(origins)  # rows of each origin read so far
        self.pending: list[np.ndarray] = [np.empty(0, np.uint64) for _ in origins]  # read, not mapped
        self.runs: list[pa.Table] = []

    def add(self, dest: str, keys: np.ndarray) -> None:
        """Map the origins' keys up to `keys[-1]` into destination `dest` (its keys, sorted)."""
        if not len(keys):
            return
        for i, (origin, rows, read) in enumerate(self.origins):
            first = self.read[i] - len(self.pending[i])  # origin row of the first pending key
            parts = []
            while True:
                buf = self.pending[i]
                if not len(buf) and self.read[i] < rows:
                    stop = min(rows, self.read[i] + self.block)
                    buf = read(self.read[i], stop)
                    self.read[i] = stop
                n = int(np.searchsorted(buf, keys[-1], side="right"))
                parts.append(buf[:n])
                self.pending[i] = buf[n:]
                if n < len(buf) or self.read[i] >= rows:
                    break
            parts = [p for p in parts if len(p)]  # (the empty start: no dtype of its own)
            mine = np.concatenate(parts) if parts else np.empty(0, keys.dtype)
            at0 = int(np.searchsorted(keys, mine[0])) if len(mine) else 0
            if len(mine) and np.array_equal(keys[at0 : at0 + len(mine)], mine):
                # the origin's keys are one stretch of the piece's (a major over upserts: the
                # base's keys; a fold: each input run): one run, without a search of every key
                # (~30 ms per 1M keys)
                one = np.ones(1, dtype=np.int64)
                self._append(origin, one * first, dest, one * at0, one * len(mine))
                continue
            at = np.minimum(np.searchsorted(keys, mine), len(keys) - 1)
            found = keys[at] == mine
            self._runs(origin, first + np.nonzero(found)[0].astype(np.int64), dest, at[found].astype(np.int64))

    def _runs(self, origin: str, rows: np.ndarray, dest: str, at: np.ndarray) -> None:
        if not len(rows):
            return
        brk = np.ones(len(rows), dtype=bool)
        brk[1:] = (np.diff(rows) != 1) | (np.diff(at) != 1)
        starts = np.nonzero(brk)[0]
        self._append(origin, rows[starts], dest, at[starts], np.diff(np.append(starts, len(rows))))

    def _append(
        self, origin: str, origin_starts: np.ndarray, dest: str, dest_starts: np.ndarray, lengths: np.ndarray
    ) -> None:
        self.runs.append(
            pa.table(
                {
                    "origin": _ids([origin], np.zeros(len(lengths), dtype=np.int32)),
                    "origin_start": pa.array(origin_starts.astype(np.int64)),
                    "dest": _ids([dest], np.zeros(len(lengths), dtype=np.int32)),
                    "dest_start": pa.array(dest_starts.astype(np.int64)),
                    "length": pa.array(lengths.astype(np.int64)),
                },
                schema=STORED_MAP_SCHEMA,
            )
        )


def _in_key_order(dests: list[MapKeys]) -> bool:
    """Whether each non-empty destination's keys all come after the previous one's."""
    bounds = [(d[0], d[-1]) if isinstance(d, np.ndarray) else (d[0].as_py(), d[-1].as_py()) for d in dests if len(d)]
    return all(prev[1] < nxt[0] for prev, nxt in itertools.pairwise(bounds))


def _positions(origin: MapKeys, allkeys: MapKeys) -> tuple[np.ndarray, np.ndarray]:
    """For each origin key: whether it is in `allkeys` (sorted, distinct), and where (for the
    found ones). Keys of at most 8 bytes, all of one width (every fixed-width key type), are
    searched as big-endian integers: a binary search over the sorted destination, where hashing
    the destination's keys cost ~60 % of a major compaction's CPU (259k keys, 3 origins)."""
    if isinstance(origin, np.ndarray) and isinstance(allkeys, np.ndarray):
        if not len(allkeys):
            return np.zeros(len(origin), dtype=bool), np.zeros(0, dtype=np.int64)
        at = np.minimum(np.searchsorted(allkeys, origin), len(allkeys) - 1)
        hit = allkeys[at] == origin
        return hit, at[hit].astype(np.int64)
    assert isinstance(origin, pa.Array) and isinstance(allkeys, pa.Array)
    o, a = _as_words(origin), _as_words(allkeys)
    same_width = not len(origin) or not len(allkeys) or len(origin[0].as_py()) == len(allkeys[0].as_py())
    if o is None or a is None or not len(a) or not same_width:  # padding would equate different widths
        pos = pc.index_in(origin, value_set=allkeys)
        found = np.asarray(pos.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        return found, np.asarray(pos.filter(pa.array(found)).to_numpy(zero_copy_only=False), dtype=np.int64)
    at = np.minimum(np.searchsorted(a, o), len(a) - 1)
    found = a[at] == o
    return found, at[found].astype(np.int64)


def _as_words(keys: pa.BinaryArray) -> np.ndarray | None:
    """Keys all of one width `w <= 8`, as integers ordered like the bytes (right-padded with
    zeros to 8 bytes; equal widths keep the order); None for other keys."""
    n = len(keys)
    if not n:
        return np.empty(0, dtype=np.uint64)
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32, count=n + 1, offset=keys.offset * 4)
    widths = np.diff(offsets)
    width = int(widths[0])
    if not 0 < width <= 8 or keys.null_count or not (widths == width).all():
        return None
    data = np.frombuffer(keys.buffers()[2], dtype=np.uint8, count=width * n, offset=int(offsets[0]))
    words = np.zeros((n, 8), dtype=np.uint8)
    words[:, :width] = data.reshape(n, width)
    return words.view(">u8").ravel().astype(np.uint64)


def write_map(storage: Storage, table_id: str, runs: list[pa.Table]) -> WrittenMap:
    """Write the runs as one zstd Arrow IPC stream (`conch.files.ipc`) under the table's `maps/`."""
    t = pa.concat_tables(runs).unify_dictionaries().combine_chunks() if runs else STORED_MAP_SCHEMA.empty_table()
    data = table_bytes(t)  # one record batch: a chunk per origin compressed alone was ~2x slower
    path = f"{table_id}/maps/{new_id()}.arrow"
    storage.write(path, data)
    rows = int(pc.sum(t.column("length")).as_py() or 0)
    return WrittenMap(path, len(data), digest(data), t.num_rows, rows)


def read_map(storage: Storage, path: str, checksum: str = "") -> pa.Table:
    """A displacement map's runs, verified against its recorded checksum."""
    data = storage.read(path)
    if checksum:
        verify(data, checksum, f"displacement map {path}")
    return read_table(data, f"displacement map {path}", MAP_SCHEMA, STORED_MAP_SCHEMA)


def displace(runs: pa.Table, origin: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where origin rows `rows` (sorted) went: `(dest index into the map's dest ids, dest row)`,
    -1 for rows that were dropped. Dest ids are `runs['dest']` values (use `dest_ids(runs)`)."""
    mine = runs.filter(pc.equal(runs.column("origin"), origin))
    o = mine.column("origin_start").to_numpy()
    n = mine.column("length").to_numpy()
    order = np.argsort(o)
    o, n = o[order], n[order]
    d = mine.column("dest_start").to_numpy()[order]
    ids = pc.index_in(mine.column("dest"), value_set=dest_ids(runs)).to_numpy().astype(np.int64)[order]
    i = np.searchsorted(o, rows, side="right") - 1
    ok = (i >= 0) & (rows < o[np.maximum(i, 0)] + n[np.maximum(i, 0)]) if len(o) else np.zeros(len(rows), bool)
    j = np.maximum(i, 0)
    dest = np.where(ok, ids[j] if len(o) else -1, -1)
    row = np.where(ok, d[j] + rows - o[j] if len(o) else -1, -1)
    return dest, row


def dest_ids(runs: pa.Table) -> pa.Array:
    """The distinct destination key spaces of a map, in first-seen order."""
    return pc.unique(runs.column("dest")) if runs.num_rows else pa.array([], pa.string())
