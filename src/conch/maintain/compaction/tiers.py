"""Size tiers: L0 sorted runs, the windows a merge takes, the stop trigger; the windows a fold of L1 units takes.

**Sorted runs and the stop trigger** (issue 30, third pass). L0 is counted in *sorted runs*
(`sorted_runs`: the runs one commit added, as Paimon and RocksDB's universal compaction count a
sorted run of several files), not files: a merge over tombstones writes a data run and a
tombstone run, and counted as two, L0 never fell below `l0_trigger` and a history of
interleaved upserts and deletes merged its newest runs at every commit. A *large* component
(above `small_bytes` or `small_rows`, with L1) merges L0 into L0 only at
`Policy.l0_stop` (32; 8 until the sixth pass) sorted runs (`tier_window` on rows); below it only the major at
`l1_ratio` rewrites. A scan pays for L0 mostly once, by the rows it overlays (a 500k-row L1
under 1 to 14 runs of 1,000 random keys: full / 1 % / take 1.7 / 1.4 / 1.6x a clean read at one
run, 1.9 / 1.4 / 2.0x at 14; 8 keeps a take within ~5 % of 3 runs), while merging at
`l0_trigger` cost a merge every other commit. Components with tombstone runs kept `l0_trigger`
until the seventh pass (a scan over them then searched every newer run for each tombstone's keys
again per scan); with the deleted keys kept per version they are tiered like data.

The windows (`tier_window`, `newest_window`) are contiguous in commit time only once `plan.time_contiguous` trims them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from conch.files.manifest import KeySpace
from conch.model.policy import Policy


def sorted_runs(l0: list[KeySpace]) -> list[list[KeySpace]]:
    """L0 runs grouped into *sorted runs*, oldest first: the runs one commit added (`seq`;
    module doc, "Sorted runs": 100 commits of interleaved deletes merged 79 times by files)."""
    by_seq: dict[int, list[KeySpace]] = {}
    for k in l0:
        by_seq.setdefault(k.seq, []).append(k)
    return sorted(by_seq.values(), key=lambda g: max((k.time, k.seq) for k in g))


def n_sorted_runs(runs: Iterable[KeySpace]) -> int:
    return len({k.seq for k in runs})


def tier_window(
    groups: list[list[KeySpace]],
    sizes: Mapping[str, int],
    policy: Policy,
    cap: int,
    rows_ratio: float | None = None,
    max_rows: int | None = None,
) -> list[KeySpace]:
    """The newest sorted runs (`sorted_runs`) of similar size: walking from the newest, an older
    one joins while its bytes are at most `size_ratio` × the window's so far (universal
    compaction's size rule) and the window stays within `cap` bytes (the automatic budget).
    With `rows_ratio` (a large component at its stop trigger) the rule is on rows (a merge
    decodes and encodes rows; merged runs of random keys compress better, so by bytes they
    joined windows they should not). Ratio 1 rewrites a row ~1.5 times between majors ~50
    commits apart but degrades to many small windows in long cycles, where `plan` takes
    `size_ratio` (simulated, 2,000 commits at l0_stop 8: 6.4 rewrites a row against 66).
    Within `max_rows` rows too (`merge_rows`). Empty when it would merge fewer than two."""
    window: list[list[KeySpace]] = []
    total = total_rows = 0
    for g in reversed(groups):
        b = sum(sizes[k.id] for k in g)
        rows = sum(k.rows for k in g)
        too_big = rows > rows_ratio * total_rows if rows_ratio is not None else b > policy.size_ratio * total
        # within the automatic budget too: otherwise a geometric series of runs would make every
        # window span them all, exceed the budget, and let L0 grow without bound
        if window and (too_big or total + b > cap or _past(total_rows + rows, max_rows)):
            break
        window.append(g)
        total += b
        total_rows += rows
    if len(window) < 2:
        return []
    return [k for g in window[::-1] for k in g]


def newest_window(
    groups: list[list[KeySpace]], sizes: Mapping[str, int], policy: Policy, cap: int, max_rows: int | None = None
) -> list[KeySpace]:
    """When no sorted run joins by size, universal compaction's fallback: the newest
    `len(groups) - l0_trigger + 2` (at least two), within `cap` bytes and `max_rows` rows. Bounded work that brings
    the run count back under the trigger, instead of a major rewriting every L1 row of the
    component. `plan` takes it only at the stop trigger `l0_stop`: below it, merging the newest
    runs whatever their sizes merged a large L0 run with each new small one, every commit."""
    want = max(2, len(groups) - policy.l0_trigger + 2)
    window: list[list[KeySpace]] = []
    total = total_rows = 0
    for g in reversed(groups):
        b = sum(sizes[k.id] for k in g)
        rows = sum(k.rows for k in g)
        if len(window) >= want or (window and (total + b > cap or _past(total_rows + rows, max_rows))):
            break
        window.append(g)
        total += b
        total_rows += rows
    return [k for g in window[::-1] for k in g] if len(window) >= 2 else []


def merge_rows(memory: int | None, bytes_per_row: int) -> int | None:
    """The most input rows an automatic merge of L0 takes under the warehouse's `memory` budget
    (None: no limit): its working memory (`bytes_per_row` a row) within a scan's share of the
    budget, a quarter, beside caches that may be full. A 50M-key ingest's upserts of 100k keys
    merged 31 of them (3.1M rows) at the stop trigger, its caches full from the folds before:
    1.2 GB peak with a 1 GiB budget. Majors keep the whole budget as their limit (`plan`)."""
    return None if memory is None else max(1, memory // (4 * bytes_per_row))


def _past(rows: int, max_rows: int | None) -> bool:
    return max_rows is not None and rows > max_rows


def fold_window(rows: list[int], cap: int, tier: int) -> int:
    """How many of the last units (L1 runs of consecutive ranges, `rows` each, oldest first) a
    tiered fold takes (`plan.fold_tasks`): at most `tier`, within `cap` rows (one output piece),
    less those larger than the rest (a unit waits for its tier). Without the cap a commit-time
    window of many equal small units grew by one unit a commit, past the commit budget, and never
    ran: 500 appends of 400 rows left 101 L1 runs for every scan to open."""
    total = n = 0
    for r in reversed(rows):
        if total + r > cap or (n and r > total):
            break
        total, n = total + r, n + 1
        if n == tier:
            break
    return n


def filled_window(rows: list[int], cap: int) -> int:
    """How many of the oldest units fill one piece of `cap` rows (0: they do not; from the
    oldest: a window ending elsewhere left its oldest unit alone for good). Units of ~160k rows
    never made a tiered window of 16 under a 1M cap: a 5M-key ingest of 10k-key commits left 43
    L1 runs, one more per 160k keys (1 % filter 4.2x a table written once)."""
    total = 0
    for i, r in enumerate(rows):
        total += r
        if total > cap:
            return i
    return 0
