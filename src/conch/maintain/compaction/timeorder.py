"""DESIGN §6's invariant, kept by every compaction: runs that could hold the same key stay
ordered by time (spec/003 "Compaction"). A compacted run spans `[min_time, time]` (its oldest
and newest input's times); a window of runs is merged only when it is contiguous in commit time
against the runs it stays beside (`time_contiguous`), and `interleaved` finds the pairs of live
runs that break it (`conch check`). Out of `plan.py`, which chooses the windows, to keep it
within the house's module size.
"""

from __future__ import annotations

from collections.abc import Iterable

from conch.files.manifest import KeySpace, TableState, extent


def oldest_time(ks: KeySpace) -> int:
    """The oldest cell time in a run (a compacted run spans `[min_time, time]`)."""
    return ks.min_time or ks.time


def time_contiguous(window: list[KeySpace], runs: Iterable[KeySpace]) -> list[KeySpace]:
    """`window` (oldest first) less its oldest runs until it is contiguous in commit time
    against the other `runs` it stays beside (DESIGN §6): every run left outside must be older
    than the window's oldest cell. Empty when fewer than two runs are left.

    Why by time spans and not by position in a time-sorted list: a compacted run spans
    `[min_time, time]`, and runs can share a span (one merge's outputs split by the columns they
    hold, one Spark write's runs). A window holding some of them and not the others would
    relabel its older cells with its newest time, above a sibling's newer cell of the same key,
    and its merged tombstone (at the window's oldest time) would stop hiding the siblings'
    deleted keys: the deleted cells that came back in issue 29."""
    window = list(window)
    inside = {k.id for k in window}
    outside = [k.time for k in runs if k.id not in inside]
    while len(window) >= 2:
        if not outside or max(outside) < min(oldest_time(k) for k in window):
            return window
        outside.append(window.pop(0).time)
    return []


def interleaved(state: TableState) -> list[tuple[KeySpace, KeySpace]]:
    """Pairs of live runs that break DESIGN §6's invariant: added by different commits, on one
    level (or a tombstone and a run below it), with overlapping key extents, and time spans
    `[oldest_time, time]` that intersect. Every compaction keeps the spans of such runs disjoint
    (`time_contiguous`; a major takes every run of its key range), so a pair means a cell was
    relabelled past another run's newer cell or tombstone: a fresh record may be wrong (what the
    merges of issue 29 stored). `conch check` reports them."""
    ancestors = {
        lvl: {a.path for a in state.schema.ancestry(lvl)} for lvl in {k.level for k in state.key_spaces.values()}
    }

    def related(a: KeySpace, b: KeySpace) -> bool:
        if a.level == b.level:
            return True
        return (a.kind == "tombstone" and a.level in ancestors[b.level]) or (
            b.kind == "tombstone" and b.level in ancestors[a.level]
        )

    runs = sorted((k for k in state.key_spaces.values() if k.rows), key=lambda k: extent(k)[0])
    found: list[tuple[KeySpace, KeySpace]] = []
    open_runs: list[tuple[bytes | None, KeySpace]] = []  # (extent end, run) of runs still overlapping the sweep
    for b in runs:
        lo = extent(b)[0]
        open_runs = [(end, a) for end, a in open_runs if end is None or lo < end]
        for _, a in open_runs:
            if a.seq != b.seq and related(a, b) and oldest_time(a) <= b.time and oldest_time(b) <= a.time:
                found.append((a, b))
        open_runs.append((extent(b)[1], b))
    return found
