"""The streamed path's segments: which key spaces are bases, which are small runs laid over them.

`segments_of` cuts the considered key spaces into segments in key order (`stream.py`'s module
doc); `absorb` moves tiny disjoint bases among the small runs of the largest (an LSM tree being
written: one large run and many appends and folds).
"""

from __future__ import annotations

import bisect

import numpy as np

from conch.scan.context import ScanContext
from conch.scan.keyspace import numeric_bound, numeric_key


def segments_of(
    ctx: ScanContext, groups: dict[tuple[str, str, int], list[int]]
) -> list[tuple[list[int], list[int], dict[int, tuple[int, int]]]] | None:
    """(base key spaces, small runs, small-run row ranges) per segment, in key order; None when
    small runs exist but the keys are not numeric (the general merge).

    Bases are the largest key sets whose spans do not overlap one another (greedy, largest
    first); every other key space is a small run. Segment j covers the keys from its base's first
    key to the next base's first key (the first and last segments are open-ended), so a small run
    spanning several bases (an upsert of keys all over a table written in many chunks) is cut by
    row ranges among them: each segment overlays only its slice, and no segment ever holds more
    than its base's keys plus its slice of the small runs.
    """
    plan = ctx.plan
    mins: list[str] = []  # chosen bases' spans, sorted and disjoint
    maxes: list[str] = []
    bases: list[tuple[str, str, int]] = []
    small: list[int] = []
    for g in sorted(groups, key=lambda g: (-g[2], g[0])):
        i = bisect.bisect_right(mins, g[1])
        if i > 0 and maxes[i - 1] >= g[0]:
            small.extend(groups[g])
            continue
        mins.insert(i, g[0])
        maxes.insert(i, g[1])
        bases.append(g)
    bases = sorted(absorb(ctx, groups, bases, small))
    if not small:
        return [(groups[b], [], {}) for b in bases]
    fields = plan.key_fields
    if not numeric_key(fields):
        return None
    keys_of = ctx.keys()
    cuts = np.array([numeric_bound(bytes.fromhex(b[0]), fields) for b in bases[1:]])
    per_seg: list[tuple[list[int], dict[int, tuple[int, int]]]] = [([], {}) for _ in bases]
    for i in sorted(small):
        num = keys_of.numeric(plan.key_spaces[i], fields)
        edges = np.r_[0, np.searchsorted(num, cuts, "left"), len(num)] if len(cuts) else np.array([0, len(num)])
        for j in range(len(bases)):
            a, b = int(edges[j]), int(edges[j + 1])
            if b > a:
                per_seg[j][0].append(i)
                per_seg[j][1][i] = (a, b)
    return [(groups[b], runs, ranges) for b, (runs, ranges) in zip(bases, per_seg, strict=True)]


def absorb(
    ctx: ScanContext, groups: dict[tuple[str, str, int], list[int]], bases: list[tuple[str, str, int]], small: list[int]
) -> list[tuple[str, str, int]]:
    """`bases` less the tiny ones, moved to `small`: an LSM tree being written is one large run
    and many disjoint small ones (appends and their folds, 20+ at 1M keys); as bases each is a
    segment with fixed costs per scan (planning, a merge with its slice of the upserts), as
    small runs of the large one they are laid over it once (the overlay, kept across scans).
    A base is absorbed if it is 1/64 to 1/8 of the largest, in all at most the largest's rows
    and 1/16 of the scan's decoded cache in file bytes (small runs are decoded whole). Tinier
    runs (a commit's append) stay segments: the overlay is named by its runs, so one absorbed
    run per commit would rebuild it after every commit (a reader during ingest pays that)."""
    if len(bases) < 2 or not numeric_key(ctx.plan.key_fields):
        return bases
    nbytes: dict[str, int] = {}
    for frs in ctx.plan.fragments.values():
        for f in frs:
            nbytes[f.key_space] = nbytes.get(f.key_space, 0) + f.bytes
    big = max(g[2] for g in bases)
    rows, room = big, ctx.decoded.max_bytes // 16
    kept = []
    for g in sorted(bases, key=lambda g: g[2]):  # smallest first
        size = sum(nbytes.get(ctx.plan.key_spaces[i].id, 0) for i in groups[g])
        if g[2] * 8 <= big <= g[2] * 64 and g[2] <= rows and size <= room:
            small.extend(groups[g])
            rows, room = rows - g[2], room - size
        else:
            kept.append(g)
    return kept
