"""Read partitions: disjoint key ranges that cut one scan into tasks of similar size.

When the level's sorted runs do not overlap (e.g. written by a range-partitioned Spark job) the
boundaries are the runs' own first keys, so each task reads whole fragments; otherwise they are
quantiles of keys sampled from every run. Ranges are clipped to the `where` option's key range,
and empty ones dropped.

`key_range_partitions` is the single entry point: the core's picklable scan splits
(`conch.scan.splits`, issue 9) replace it without touching the reader.
"""

from __future__ import annotations

import itertools
import math
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import conch
from conch.keys import KeyRange, decode_key

ROWS_PER_PARTITION = 500_000  # a read task's target size when `partitions` is not given
BYTES_PER_PARTITION = 128 << 20
MAX_PARTITIONS = 4096


def key_range_partitions(
    table: conch.Table, asof: int | datetime, level: str, bound: KeyRange | None, n: int | None
) -> list[KeyRange | None]:
    """Disjoint key ranges covering the scan of `level` as of `asof` within `bound`, about `n`
    of them (or sized by rows and bytes). The reader's only entry point into partitioning."""
    state = table.state_at(asof)
    fields = state.schema.key_fields(level)
    if not fields:
        return [None]  # a keyless root is one record
    runs = [ks for ks in state.key_spaces.values() if ks.kind == "data" and ks.level == level]
    rows = sum(ks.rows for ks in runs)
    explicit = n is not None
    if n is None:
        live = {ks.id for ks in runs}
        nbytes = sum(f.bytes for f in state.fragments.values() if f.key_space in live)
        n = max(math.ceil(rows / ROWS_PER_PARTITION), math.ceil(nbytes / BYTES_PER_PARTITION), 1)
    n = min(n, MAX_PARTITIONS, max(rows, 1))
    boundaries: list[tuple[Any, ...]] = []
    if n > 1 and runs:
        runs.sort(key=lambda k: k.min_key)
        disjoint = all(a.max_key < b.min_key for a, b in itertools.pairwise(runs))
        enough = len(runs) >= n or (not explicit and len(runs) > 1 and len(runs) >= n // 2)
        if disjoint and enough:
            # Cut at run starts: each task reads whole runs and fragments, a zip with no take.
            boundaries = _run_boundaries(runs, min(n, len(runs)), fields)
        else:
            boundaries = _sampled_boundaries(table, runs, n, fields)
    starts: list[tuple[Any, ...] | None] = [None, *boundaries]
    ends: list[tuple[Any, ...] | None] = [*boundaries, None]
    out: list[KeyRange | None] = []
    for s, e in zip(starts, ends, strict=True):
        empty, r = _intersect(s, e, bound)
        if not empty:
            out.append(r)
    return out or [bound]


def _run_boundaries(runs: list[Any], n: int, fields: list[pa.Field]) -> list[tuple[Any, ...]]:
    """Cut a list of disjoint sorted runs into n groups of about equal rows, at run starts."""
    total = sum(r.rows for r in runs)
    out: list[tuple[Any, ...]] = []
    acc, target = 0, total / n
    for r in runs:
        if acc >= target * (len(out) + 1) and len(out) < n - 1:
            out.append(decode_key(bytes.fromhex(r.min_key), fields))
        acc += r.rows
    return out


def _sampled_boundaries(table: conch.Table, runs: list[Any], n: int, fields: list[pa.Field]) -> list[tuple[Any, ...]]:
    """Quantiles of keys sampled evenly from every run (runs overlap, so their edges say little)."""
    cat = table.log
    per_run = max(64, (64 * n) // max(len(runs), 1))
    samples = []
    for ks in runs:
        keys = cat.key_cache.keys(ks, fields)
        step = max(1, keys.num_rows // per_run)
        samples.append(keys.take(pa.array(np.arange(0, keys.num_rows, step))))
    sample = pa.concat_tables(samples)
    order = pc.sort_indices(sample, [(f.name, "ascending") for f in fields])
    sample = sample.take(order)
    picks = [int(sample.num_rows * i / n) for i in range(1, n)]
    rows = sample.take(pa.array(picks, pa.int64())).to_pylist()
    out: list[tuple[Any, ...]] = []
    for r in rows:
        key = tuple(r[f.name] for f in fields)
        if not out or key > out[-1]:
            out.append(key)
    return out


def _intersect(
    start: tuple[Any, ...] | None, end: tuple[Any, ...] | None, bound: KeyRange | None
) -> tuple[bool, KeyRange | None]:
    """(is empty, [start, end) ∩ bound). Python tuple order is key order (a prefix sorts first).
    An unbounded range is None: no key predicate, so the scan does not encode keys at all."""
    if bound is not None:
        if bound.start is not None and (start is None or bound.start > start):
            start = bound.start
        if bound.end is not None and (end is None or bound.end < end):
            end = bound.end
    if start is not None and end is not None and not start < end:
        return True, None
    return False, (None if start is None and end is None else KeyRange(start, end))
