"""Disjoint key-range splits of a pinned scan, for data loaders (a stand-in for `conch.scan.splits`).

The core's key-range splits (issue 9 item 6) are being built in `conch/scan/splits.py`; until they
land this module cuts a scan the simplest correct way: read the scan's keys (one narrow column,
no filter, at the pinned version), cut them into `n` runs of equal count, and use the first key
of each run as a boundary. The splits `[None, b1), [b1, b2), …, [bk, None)` cover every key
exactly once, are plain picklable values, and are the same in every process that computes them
from the same spec, which is what sharding across ranks and workers needs.

A scan narrowed by exact keys is split into exact key sets; one narrowed by a key range is split
inside that range; a key-prefix scan is one split (the stand-in does not cut prefixes).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from conch.keys import KeyPrefix, KeyRange, KeySet
from conch.loaders.source import ScanSpec, narrowest_column

Split = KeyRange | KeySet | KeyPrefix | None  # None: every key


def key_splits(spec: ScanSpec, n: int) -> list[Split]:
    """About `n` disjoint splits covering the keys of `spec` (fewer when there are fewer keys)."""
    if n <= 1 or isinstance(spec.keys, KeyPrefix):
        return [spec.keys]
    if isinstance(spec.keys, KeySet):
        enc = spec.keys.encoded
        step = max(1, -(-len(enc) // n))
        return [KeySet(enc.slice(i, step)) for i in range(0, len(enc), step)] or [spec.keys]
    base = spec.scan()
    names = base.plan.schema.key_names(spec.level)
    if not names:
        return [None]  # a keyless root is one record
    keys = spec.table().scan(
        narrowest_column(base.plan.columns),
        keys=spec.keys,
        asof=spec.asof,
        since=spec.since,
        level=spec.level or None,
    )
    table = keys.to_arrow().select(names)
    n = min(n, table.num_rows)
    if n <= 1:
        return [spec.keys]
    picks = pa.array([table.num_rows * i // n for i in range(1, n)], pa.int64())
    rows = pc.take(table, picks).to_pylist()
    bounds: list[tuple[Any, ...]] = []
    for r in rows:
        key = tuple(r[k] for k in names)
        if not bounds or key != bounds[-1]:
            bounds.append(key)
    lo = spec.keys.start if isinstance(spec.keys, KeyRange) else None
    hi = spec.keys.end if isinstance(spec.keys, KeyRange) else None
    starts: list[Any] = [lo, *bounds]
    ends: list[Any] = [*bounds, hi]
    return [None if s is None and e is None else KeyRange(s, e) for s, e in zip(starts, ends, strict=True)]
