"""A warehouse's memory budget (`connect(memory_budget=)`) and how it is shared: the one source
of the sizes of every bounded cache and buffer, and so of their defaults (`DEFAULT_SPLIT`)."""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from conch.errors import ConchError, InvalidArgumentError

MEMORY_BUDGET = 1 << 30  # default `connect(memory_budget=)`: the caches' and buffers' sizes before it existed
MIN_MEMORY_BUDGET = 16 << 20


@dataclass(frozen=True, slots=True)
class BudgetSplit:
    """Bytes of each bounded cache and buffer of one warehouse."""

    segment_cache: int  # Vortex's raw segments, shared by every open file (`VortexFormat`)
    key_cache: int  # key spaces' keys in all their forms (`KeyCache`)
    scan_cache: int  # each scan's decoded fragments (`ScanOptions.cache_bytes`)
    batch: int  # a scan's output batch (`ScanOptions.batch_bytes`)
    write_chunk: int  # a write's input chunk, sorted and written as one run (`WriteOptions.chunk_bytes`)
    index_part: int  # one part of a run's vector index being built (`conch.search.build`)


def budget_split(memory_budget: int) -> BudgetSplit:
    """How a warehouse's memory budget is shared (bytes): the Vortex segment cache (1/8; a quarter
    of that again, 1/32, keeps small metadata fragments decoded, `files/hotcache`), the
    key-space cache (1/8), each scan's decoded-fragment cache (1/4; the streamed overlay decodes
    small runs within a quarter of it), a scan's output batch (1/16), a write's input chunk
    (1/4) and one part of a vector index being built (1/8: held twice while it is serialised,
    beside a scan of its run). The default 1 GiB gives the sizes these had before the budget existed, except the
    segment cache (256 → 128 MB: a full scan of a large table filled it, measured in
    `bench/memory.py`; the OS page cache still holds local files) and the key cache (512 MB per
    form → 128 MB in all). A budget that is not a whole number of bytes >= 16 MiB is an
    `InvalidArgumentError`."""
    if isinstance(memory_budget, bool) or not isinstance(memory_budget, int) or memory_budget < MIN_MEMORY_BUDGET:
        raise InvalidArgumentError(
            f"memory_budget must be a number of bytes >= {MIN_MEMORY_BUDGET >> 20} MiB, got {memory_budget!r}"
        )
    return BudgetSplit(
        segment_cache=memory_budget // 8,
        key_cache=memory_budget // 8,
        scan_cache=memory_budget // 4,
        batch=memory_budget // 16,
        write_chunk=memory_budget // 4,
        index_part=memory_budget // 8,
    )


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to hand back this way
        return None


def release_freed_memory() -> None:
    """Hand the C heap's free pages back to the operating system (glibc's `malloc_trim`; nothing
    elsewhere), after work whose buffers are gone: a compaction's. glibc keeps what a large
    rewrite freed for reuse, so resident memory ratcheted up fold after fold beside full caches
    (a 50M-key ingest: ~140 MB above the live data at its 150th commit, measured with
    `/proc/self/status` before and after `malloc_trim`)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


DEFAULT_SPLIT = budget_split(MEMORY_BUDGET)  # the sizes of a warehouse connected with the default budget


@dataclass(frozen=True)
class ScanOptions:
    """Execution knobs of one scan (`Scan.with_options`); the defaults are what users want.

    `fast_paths=False` is the documented debug switch that forces the general path (merge, fresh-cell
    location, take) instead of the streamed zip and the whole-unit decode: the scan-engine
    equivalence tests compare both. `batch_rows` fixes the rows per output batch of the general
    path (default: sized by `batch_bytes`); tests set it small to exercise many batches.
    """

    fast_paths: bool = True
    batch_rows: int | None = None
    batch_bytes: int = DEFAULT_SPLIT.batch
    cache_bytes: int = DEFAULT_SPLIT.scan_cache  # decoded fragments shared by a scan's batches
    # False: batches hold the projected columns only, no key columns (a consumer that drops the
    # keys, e.g. DuckDB reading no key column); the streamed path then reads no keys where it can
    with_keys: bool = True
    # True: on the key-less streamed path, batches may carry compact Arrow types of the same values
    # where Vortex decodes them cheaper: dictionary<int32, utf8> for string columns a fragment
    # stores dictionary-encoded, decimal64 for decimal128 columns of precision <= 18. Other batches
    # keep the schema's types. For an engine adapter that normalises batch types
    # (conch.engines.duckdb: DuckDB groups and hashes dictionaries by code), not general consumers.
    compact_types: bool = False
    # file columns (`c<id>`, binary) whose values come back as tagged references to where they are
    # stored instead of their bytes: what `Scan.blob_files` and `open_blob` read (conch.files.blobfile)
    blob_refs: frozenset[str] = frozenset()
    # of those, values shorter than this come back as tagged bytes, not references: compaction
    # streams only the values worth streaming (`conch.maintain.compaction.blobcopy`)
    blob_ref_min_bytes: int = 0

    def __post_init__(self) -> None:
        if self.batch_rows is not None and self.batch_rows < 1:
            raise ConchError(f"ScanOptions.batch_rows must be a positive row count, got {self.batch_rows}")


@dataclass(frozen=True)
class WriteOptions:
    """Sizing knobs. Defaults suit object storage; tests shrink them to exercise many files."""

    chunk_rows: int = 1 << 20  # rows of input sorted and written as one run
    chunk_bytes: int = DEFAULT_SPLIT.write_chunk
    fragment_bytes: int = 128 << 20  # upper bound of one fragment file
    # avg bytes per value from which a column is stored out of line. Vortex chunks hold >= 8192
    # rows, so an inline take costs 8192 x value size per touched chunk: 4 MB at 512 B (measured
    # in docs/performance.md); out of line a take reads exactly the taken values.
    large_value_bytes: int = 512
    # fragments encoded at once (Vortex's writer releases the GIL; each encoding also uses a few
    # cores of its own): memory holds this many fragments being encoded
    write_threads: int = field(default_factory=lambda: min(8, max(2, (os.cpu_count() or 2) // 2)))
