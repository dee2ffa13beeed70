"""A warehouse's memory budget (`connect(memory_budget=)`) and how it is shared: the one source
of the sizes of every bounded cache and buffer, and so of their defaults (`DEFAULT_SPLIT`)."""

from __future__ import annotations

from dataclasses import dataclass

from conch.errors import InvalidArgumentError

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


def budget_split(memory_budget: int) -> BudgetSplit:
    """How a warehouse's memory budget is shared (bytes): the Vortex segment cache (1/8), the
    key-space cache (1/8), each scan's decoded-fragment cache (1/4; the streamed overlay decodes
    small runs within a quarter of it), a scan's output batch (1/16) and a write's input chunk
    (1/4). The default 1 GiB gives the sizes these had before the budget existed, except the
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
    )


DEFAULT_SPLIT = budget_split(MEMORY_BUDGET)  # the sizes of a warehouse connected with the default budget
