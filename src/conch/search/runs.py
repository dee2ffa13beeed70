"""Index files: immutable files per run (key space) and index (a vector index's run in parts that
fit the memory budget, `conch.search.build`), and the run views that read a
run's own cells through the scan machinery (DESIGN §6a).

A run view is the table version restricted to one data key space and its fragments (no other
run, no tombstone): scanning it yields, per key of the run, the run's newest cell of each column,
which is what an index over that run holds. The search never trusts a run view for freshness
(`conch.search.query` takes every candidate's fresh record from the full snapshot).

File layout (`<table>/idx/<id>.cix`): `CONCHIX1`, the faiss index's length (u64 little endian),
the serialised faiss index, then an Arrow IPC stream of the run's key columns in faiss row order.
It is written streamed (`write_file`). The whole file's xxh3 digest is the `IndexFile.checksum` (`conch.files.integrity`); a read checks
it, so a damaged file is a `CorruptFileError` naming it. Loaded files are kept per process (LRU by
bytes: at least `CACHE_BYTES`, a quarter of physical memory, and at least what the latest search
asked, `load_all`).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from conch.files.format import FragmentFormat
from conch.files.integrity import digest_file
from conch.files.keycache import KeyCache
from conch.files.manifest import FrozenMap, IndexDef, IndexFile, KeySpace, TableState
from conch.files.storage import Storage
from conch.log.tablelog import TableLog
from conch.model.budget import ScanOptions
from conch.model.lru import Lru
from conch.scan import Scan
from conch.scan.request import ScanRequest
from conch.search import vectors
from conch.search.framing import TEXT_SUFFIX, read_frame

MAGIC = b"CONCHIX1"
# A run with fewer rows than this is searched exactly (a scan of its vectors and numpy) unless
# `build_indexes(min_rows=...)` says otherwise: below it brute force is as fast as an index.
MIN_ROWS = 20_000


def _memory_quarter() -> int:
    """A quarter of this machine's physical memory (0 where the platform does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (ValueError, OSError, AttributeError):
        return 0


# Loaded index files are kept up to the larger of 512 MB and a quarter of physical memory. At 512 MB
# two 1M x 128 indexes searched in turn (664 and 520 MB: an HNSW and a flat index, or two tables)
# each evicted the other, and every query re-read one: 1.9 s a query against 16 ms warm.
CACHE_BYTES = max(512 << 20, _memory_quarter())


class RunView:
    """One run of a table version as a scan source (`conch.scan.api.ScanSource`)."""

    def __init__(self, source: Any, key_space: KeySpace) -> None:
        self._source = source
        st: TableState = source.state
        frs = {i: f for i, f in st.fragments.items() if f.key_space == key_space.id}
        self._state = TableState(st.schema, st.seq, st.time, FrozenMap({key_space.id: key_space}), FrozenMap(frs))

    name = property(lambda self: str(self._source.name))
    uri = property(lambda self: str(self._source.uri))
    seq = property(lambda self: int(self._source.seq))
    time = property(lambda self: int(self._source.time))
    asof = property(lambda self: self._source.asof)

    @property
    def format(self) -> FragmentFormat:
        return self._source.format

    @property
    def key_cache(self) -> KeyCache:
        return self._source.key_cache

    @property
    def scan_options(self) -> ScanOptions:
        return self._source.scan_options

    def view(self, since: int | None = None) -> TableState:
        return self._state

    def scan(
        self, *columns: Any, where: Any = None, keys: Any = None, since: Any = None, level: str | None = None
    ) -> Scan:
        return Scan(self, ScanRequest.resolve(self._state.schema, columns, where, keys, since, level))


def run_fragments(state: TableState, key_space: str, column_id: int) -> tuple[str, ...]:
    """The fragments of a run holding a column: what its index file was built from."""
    return tuple(
        sorted(i for i, f in state.fragments.items() if f.key_space == key_space and column_id in f.column_ids)
    )


def runs_of(state: TableState, definition: IndexDef) -> list[tuple[KeySpace, tuple[IndexFile, ...]]]:
    """Every data run of the index's level holding its column, with its current index files (the
    parts of the newest build over the run's present fragments; a text index has one; none: the
    run is searched exactly)."""
    files: dict[str, list[IndexFile]] = {}
    for f in state.index_files.values():
        if f.index == definition.name and readable(definition, f):
            files.setdefault(f.key_space, []).append(f)
    out = []
    for ks in state.key_spaces.values():
        if ks.kind != "data" or ks.level != definition.level:
            continue
        frs = run_fragments(state, ks.id, definition.column_id)
        if not frs:
            continue
        current = [f for f in files.get(ks.id, ()) if f.fragments == frs]
        newest = max((f.seq for f in current), default=0)  # two builds' parts never mix
        out.append((ks, tuple(sorted((f for f in current if f.seq == newest), key=lambda f: f.id))))
    return out


def readable(definition: IndexDef, f: IndexFile) -> bool:
    """Whether this version reads index file `f`: a text index file of an older format is not
    (`conch.search.textfiles`: its run counts as having no file until the next build)."""
    return definition.kind != "text" or f.path.endswith(TEXT_SUFFIX)


def outdated(state: TableState, definition: IndexDef, key_space: str) -> list[IndexFile]:
    """A run's index files of an older format, which a build of the run replaces."""
    return [
        f
        for f in state.index_files.values()
        if f.index == definition.name and f.key_space == key_space and not readable(definition, f)
    ]


def run_cells(source: Any, state: TableState, definition: IndexDef, key_space: str) -> Any:
    """(keys, values) of a run's non-null cells of the index's column, one scan batch at a time."""
    col = next(c for c in state.schema.columns if c.id == definition.column_id)
    keys = state.schema.key_names(col.level)
    reader = RunView(source, state.key_spaces[key_space]).scan(*keys, col.path, level=col.level)
    # the general path cuts a fragment into batches of `batch_bytes`; the fast one yields it whole
    reader = reader.with_options(fast_paths=False)
    for batch in reader.to_record_batches():
        values = batch.column(batch.schema.get_field_index(col.path))
        valid = values.is_valid()
        if valid.false_count:
            batch = batch.filter(valid)
            values = batch.column(batch.schema.get_field_index(col.path))
        if batch.num_rows:
            yield pa.Table.from_batches([batch]).select(keys), values


@dataclass(frozen=True, slots=True)
class RunVectors:
    """A run's non-null vectors with the keys they belong to (row i ↔ key row i)."""

    keys: pa.Table
    vectors: np.ndarray


# The vectors of runs no index file covers yet (the rows written since the last build) are searched
# exactly by every search: kept per process, named by the run's immutable files, up to this many
# bytes. Re-read and re-verified per query they cost ~8 ms of a 1M x 128 search's 17 ms.
RUN_VECTORS_BYTES = 256 << 20
_run_vectors: Lru[tuple[Any, ...], RunVectors] = Lru(
    max_weight=RUN_VECTORS_BYTES, weight=lambda r: int(r.vectors.nbytes + r.keys.nbytes)
)


def read_run(source: Any, key_space: KeySpace, definition: IndexDef) -> RunVectors:
    """A run's own vectors, read through a scan of its run view (kept: `RUN_VECTORS_BYTES`)."""
    files = tuple(sorted(i for i, f in source.state.fragments.items() if f.key_space == key_space.id))
    name = (str(source.uri), key_space.path, definition.column_id, definition.dim, files)
    return _run_vectors.get_or_make(name, lambda: _read_run(source, key_space, definition))


def _read_run(source: Any, key_space: KeySpace, definition: IndexDef) -> RunVectors:
    col = next(c for c in source.state.schema.columns if c.id == definition.column_id)
    table = RunView(source, key_space).scan(col.path, level=col.level).to_arrow()
    keys = source.state.schema.key_names(col.level)
    table = table.filter(table.column(col.path).is_valid())
    return RunVectors(table.select(keys), vectors.as_matrix(table.column(col.path), definition.dim))


# ----- files ----------------------------------------------------------------------------------
def write_file(storage: Storage, path: str, structure: Any, keys: pa.Table) -> tuple[int, str]:
    """Write an index file (a faiss structure and its keys) streamed through a local staging
    file: the structure's serialised form is never held in memory. Its size and digest."""
    with storage.staged(path) as local, open(local, "w+b") as f:
        f.write(MAGIC + bytes(8))
        vectors.faiss().write_index(structure, vectors.faiss().PyCallbackIOWriter(f.write))
        length = f.tell() - 16
        with pa.ipc.new_stream(f, keys.schema) as w:
            w.write_table(keys)
        size = f.tell()
        f.seek(8)
        f.write(struct.pack("<Q", length))
        f.flush()
        return size, digest_file(f)


@dataclass(frozen=True, slots=True)
class LoadedIndex:
    structure: Any
    keys: pa.Table
    nbytes: int


_cache: Lru[str, LoadedIndex] = Lru(max_weight=CACHE_BYTES, weight=lambda v: v.nbytes, keep=1)


def load_all(storage: Storage, files: list[IndexFile]) -> dict[str, LoadedIndex]:
    """The index files one search asks, loaded (`load`), by file id. A search holds them all at once, so the
    cache first makes room for all of them (at least `CACHE_BYTES`): capped below them, each file
    loaded evicted the one loaded longest ago, which the next search asks first again, and every
    search re-read every part (a 1M x 128 HNSW index of 664 MB: 2 s a query; 100k vectors in 9
    parts under a 16 MB cap: 98 ms against 3 ms)."""
    _cache.max_weight = max(CACHE_BYTES, sum(f.bytes for f in files))
    return {f.id: load(storage, f) for f in files}


def load(storage: Storage, f: IndexFile) -> LoadedIndex:
    """An index file, verified and decoded (cached per process by file id)."""

    def read() -> LoadedIndex:
        payload, keys, size = read_frame(storage, f, MAGIC, "index file")
        return LoadedIndex(vectors.deserialize(payload), keys, size)

    return _cache.get_or_make(f.id, read)


class LogVersion:
    """A table log at one state, as far as reading runs needs (`RunView`): what a maintenance
    step that holds a `TableLog`, not a snapshot, builds indexes with."""

    def __init__(self, log: TableLog, state: TableState) -> None:
        self.log, self.state = log, state
        self.name, self.uri, self.format = log.name, log.uri, log.format
        self.key_cache, self.scan_options = log.key_cache, log.scan_options
        self.seq, self.time, self.asof = state.seq, state.time, None
