"""Which runs to compact, and why: the maintenance policy (spec/003 "Compaction", DESIGN §6).

The LSM tree has two levels. **L0** holds what commits add: overlapping sorted runs (one key
space per write and level, tombstone sets too). **L1** holds disjoint sorted runs, one per key
range (`ranges.Ranges`). A *component* is a maximal set of ranges connected by runs that span
them; a compaction works on one component (a run can only be removed whole), so every run of
any level overlapping the component's key span is in it.

Two kinds of task, both over a **contiguous window in commit time** (DESIGN §6's invariant): the
runs they merge are exactly the component's runs whose times fall in the window, so no run left
outside is both older than one input and newer than another, and each output can take the
newest input's place in the time order without changing any fresh cell:

- **major** (`L0 + L1 → L1`): every run of the component. Tombstones are applied and dropped
  (TEAM rule: no data run of their level or a descendant overlapping them, older than them, is
  left), shadowed cells dropped, the output cut at the range boundaries plus new ones where a
  range outgrows `max_l1_rows`, and at partition changes (`partition_by`). A *forced* one
  (`compact()`, the settle) drops the boundaries inside it: cut as one write of its rows would be.
- **merge** (`L0 → L0`, size-tiered): the newest L0 runs whose sizes are similar (each older run
  at most `size_ratio` × the newer ones together). Cheap: it rewrites small runs only, so many
  small commits do not each rewrite L1. Tombstones in the window are applied to the window's
  data and merged into one tombstone run per level (they still hide older runs), so a
  delete-heavy history does not pile up tombstone runs either.

The default policy (`conch.Policy()`, measured in `docs/compaction.md`) is **read-cost aware**.
Every L0 run beside the rest of its component costs a scan a fixed time whatever its size: its
files are opened and decoded and the scan takes the overlay path (measured: the first run ~1.1
ms, each further one ~0.25 ms, while a scan reads ~0.5 MB of fragments per ms and costs ~0.6 ms
fixed). `Policy.l0_read_bytes` (512 KB) is that cost as bytes of scanning. A small component
(`small_bytes`, and at most `small_rows` rows) is compacted whole (major) once `n` L0 runs would cost more than
`read_overhead` (1.0) × its own scan (its bytes plus one run's fixed cost): `read_trigger`. So
below 0.5 MB every second run is folded in, below 1 MB every third, above that every
`l0_trigger`-th: reads *during* an ingest stay within ~2-3× of one run, and the background settle
(`background.py`) folds what is left once the writer pauses (at rest: one run). A larger
component waits for `l0_trigger` runs, major when its L0 bytes reach `l1_ratio` × its L1 bytes,
when it has no L1 yet, or when a merge would not reduce the run count; else merge. The automatic trigger after
commits runs at most `commit_budget` of input per commit: a small multiple of what the commit
wrote (a writer never stalls long); larger tasks are listed by `maintenance_plan()` and run by
the settle, `Table.compact()` or `conch compact`, except a large component's major once it is
amortized over the commits that wrote its L0 (below, "The major of a large component").

**The cost model** (issue 30): each rewrite task carries the bytes it rewrites (write
amplification spent), the runs a scan of its range merges before and after it (read
amplification removed: ~`l0_read_bytes` of scanning per run beside the others) and the memory
it needs (`REWRITE_BYTES_PER_ROW` per input row). Rows count beside bytes (`small_rows`,
`move_rows`) because a rewrite decodes and encodes every row, and compressible columns make
millions of rows a few MB. The warehouse's `memory_budget` is a hard limit for the automatic
triggers (`within_budget`); `compact()` runs what they leave. Measured in `docs/compaction.md`.

A third kind of task rewrites nothing: **move** (`move_task`), L0 runs that overlap no other run
re-labelled L1 as they are, whatever their size (RocksDB's trivial move): a bulk load lands as
disjoint runs, and sorted appends land beyond the last key; merging them would rewrite every byte
for nothing. Two exceptions: runs of a small component (`small_bytes`, `small_rows`) are folded
whole as before (a tiny table is cheaper to rewrite than to read as many runs), and small runs
wait until `l0_trigger` of them move together (a move is a commit of its own), excluded from
rewrites meanwhile (`_move_now`).

**Folds** (issue 30): moving small appends leaves adjacent small L1 runs. A `fold` concatenates
consecutive ones (`fold_tasks`): their inputs overlap no other run, so the output's time span
relabels no cell a sibling could hide, and the boundaries between them are dropped. The
commit-time trigger folds only at `Policy.fold_trigger` (16) of them (16 too large for one piece:
as many as `max_l1_rows` lets in), a stop trigger bounding the runs a scan opens, size-tiered (a
unit larger than the rest of its window waits), so a row is rewritten about log₁₆(commits) times;
the settle and `compact()` fold any more than one write makes, `compact()` (`whole`) all below `max_l1_rows`.

**Majors need L0 large in rows too** (issue 30): `l1_ratio` applies to bytes (read cost) and to
rows (a major decodes and encodes every L1 row). By bytes alone, 1,000-row upserts into a 500k-row
table of 0.9 B/row triggered a major of the whole table every fourth commit. When no L0 run
joins the newest by size (a history of alternating upserts and tombstone runs), the merge window
at the stop trigger `l0_stop` is the newest `len(l0) - l0_trigger + 2` runs (universal
compaction's fallback), not a major; a component whose window the time order blocks gets its
major at `STOP_RUNS` × `l0_trigger` L0 runs, else it waits for the settle.

**Sorted runs and the stop trigger** (issue 30, third pass): `tiers.py`. L0 is counted in sorted
runs (one commit's runs); a large component (above `small_bytes` or `small_rows`, with L1)
merges L0 into L0 only at `Policy.l0_stop` (32; 8 until the sixth pass) sorted runs, tombstone
runs among them (since the seventh pass; they kept `l0_trigger` before).

**The major of a large component** (issue 30, fourth pass; `docs/compaction.md`). Wanted at
`l1_ratio`. The commit-time trigger runs it when it fits the commit's budget or, past it, once
it is amortized: it rewrites at most `Policy.major_amplification` (3) x the L0 bytes it applies
((L1 + L0) / L0, the cost model's write amplification; the commits that wrote L0 pay for it),
and always within the memory budget (a hard limit: `plan(memory=)`). Until then L0 stays
size-tiered exactly as below `l1_ratio`: merges at the stop trigger, windows of similar sizes,
the newest runs whatever their sizes only at `l0_stop` (history and figures:
`docs/compaction.md`, "The major of a large component").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from conch.files.manifest import Fragment, KeySpace, extent
from conch.maintain.compaction.ranges import Ranges, ranges_of
from conch.maintain.compaction.tiers import (
    filled_window,
    fold_window,
    merge_rows,
    n_sorted_runs,
    newest_window,
    sorted_runs,
    tier_window,
)
from conch.maintain.compaction.timeorder import oldest_time, time_contiguous
from conch.model.policy import Policy

# L0 runs (× `l0_trigger`) at which a component with no merge window gets its major anyway
STOP_RUNS = 4


@dataclass(frozen=True, slots=True)
class CompactionTask:
    """One compaction: merge `inputs` (key-space ids) over the key range `[lo, hi)`."""

    kind: str  # "major" | "merge" | "move" (to L1 as they are: no rewrite)
    lo: bytes
    hi: bytes | None
    inputs: tuple[str, ...]  # key spaces removed (data and tombstone runs)
    min_time: int  # oldest cell time of the inputs
    max_time: int  # newest: the output's place in the time order
    input_bytes: int  # key spaces + fragments read
    l0_runs: int
    reason: str
    # the cost model's numbers (module doc, "The cost model"): what a scan of the task's range
    # merges before and after it (read amplification removed), and the memory it needs
    scan_runs_before: int = 0
    scan_runs_after: int = 0
    memory_bytes: int = 0
    # a forced major: its output cut in `max_l1_rows` pieces per partition only, the boundaries
    # inside its range dropped; `cuts`: those chosen from the inputs' keys (`rewrite.recut_boundaries`;
    # Spark's driver sets them so every part cuts where `Table.compact()` would)
    recut: bool = False
    cuts: tuple[bytes, ...] | None = None

    @property
    def bytes_rewritten(self) -> int:
        """Write amplification spent: a move writes nothing; a rewrite about its input."""
        return 0 if self.kind == "move" else self.input_bytes

    def describe(self) -> str:
        hi = self.hi.hex() if self.hi is not None else "ff…"
        cost = (
            f"; rewrites {self.bytes_rewritten:,} B, a scan of the range merges {self.scan_runs_before} → "
            f"{self.scan_runs_after} runs, needs ~{self.memory_bytes:,} B"
            if self.kind != "move"
            else "; rewrites 0 B"
        )
        return (
            f"{self.kind} [{self.lo.hex() or '00'}, {hi}): {len(self.inputs)} runs "
            f"({self.l0_runs} L0), {self.input_bytes:,} B — {self.reason}{cost}"
        )


@dataclass(frozen=True, slots=True)
class MaintenancePlan:
    """What compaction would do now, and why (`Table.maintenance_plan()`; prints readably)."""

    tasks: tuple[CompactionTask, ...]
    l0_runs: int
    l1_runs: int
    ranges: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __str__(self) -> str:
        lines = [f"LSM: {self.l0_runs} L0 runs, {self.l1_runs} L1 runs over {self.ranges} key range(s)"]
        lines += [f"  - {t.describe()}" for t in self.tasks] or ["  nothing to compact"]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def is_l1(ks: KeySpace) -> bool:
    return ks.lsm >= 1 and ks.kind == "data"


def table_ranges(key_spaces: Iterable[KeySpace]) -> Ranges:
    """The L1 ranges: the root level's L1 runs start them (`ranges.ranges_of`)."""
    return ranges_of(bytes.fromhex(k.min_key) for k in key_spaces if is_l1(k) and k.level == "")


def lsm_counts(key_spaces: Iterable[KeySpace]) -> tuple[int, int]:
    """(L0 runs, L1 runs) of a state: what `explain()` and the manifests show."""
    ks = list(key_spaces)
    l1 = sum(1 for k in ks if is_l1(k))
    return len(ks) - l1, l1


def run_bytes(key_spaces: Iterable[KeySpace], fragments: Iterable[Fragment]) -> dict[str, int]:
    """Bytes of each run: its key space file plus the fragments aligned to it."""
    out = {k.id: k.bytes for k in key_spaces}
    for f in fragments:
        if f.key_space in out:
            out[f.key_space] += f.bytes
    return out


@dataclass
class Component:
    """Ranges `first..last` and every run overlapping them."""

    first: int
    last: int
    runs: list[KeySpace]


def components(key_spaces: Iterable[KeySpace], ranges: Ranges) -> list[Component]:
    """Maximal sets of ranges connected by runs that span them (sweep over range intervals)."""
    spans = sorted(
        ((*ranges.span(bytes.fromhex(k.min_key), bytes.fromhex(k.max_key)), k) for k in key_spaces if k.rows),
        key=lambda s: (s[0], s[1]),
    )
    out: list[Component] = []
    for first, last, ks in spans:
        if out and first <= out[-1].last:
            out[-1].last = max(out[-1].last, last)
            out[-1].runs.append(ks)
        else:
            out.append(Component(first, last, [ks]))
    return out


def plan(
    key_spaces: Mapping[str, KeySpace],
    fragments: Mapping[str, Fragment],
    policy: Policy,
    force: bool = False,
    budget: int | None = None,
    memory: int | None = None,
    partition_of: Callable[[bytes], bytes] | None = None,
    whole: bool = False,
) -> MaintenancePlan:
    """The compaction tasks the policy asks for now (`force`: a major compaction of every
    component with any L0 run or more than one L1 run of one level, whatever the thresholds; a
    component already holding one L1 run per level is left as it is, so a repeated `compact()`
    rewrites nothing). Runs that overlap nothing come first, as one `move` task (`move_task`),
    and the rest is planned as if it were done. `budget`: the input bytes a rewrite may take (the
    commit-time trigger's, `commit_budget`): a component whose major would exceed it (and is not
    amortized: module doc, "The major of a large component") keeps its L0 size-tiered, merged at
    its stop trigger (the major waits for the settle or `compact()`). `memory`: the warehouse's
    memory budget, a hard limit on the automatic trigger's majors (`within_budget` checks every
    task against it again). `partition_of`: the partition prefix of an encoded key
    (`ranges.partitioner`; None: not partitioned), so a fold never spans two partitions.
    `whole` (a forced `compact()`): folds take L1 runs below `max_l1_rows` rows too (`fold_tasks`)."""
    ks_list = list(key_spaces.values())
    sizes = run_bytes(ks_list, fragments.values())
    tasks: list[CompactionTask] = []
    n_l0, n_l1 = lsm_counts(ks_list)
    move = move_task(ks_list, sizes, policy, _in_small_components(ks_list, sizes, policy))
    if move is not None and (force or _move_now(move, ks_list, policy)):
        tasks.append(move)
        moved = set(move.inputs)
        ks_list = [dataclasses.replace(k, lsm=1) if k.id in moved else k for k in ks_list]
    elif move is not None:  # small disjoint runs wait to move together; nothing rewrites them meanwhile
        waiting = set(move.inputs)
        ks_list = [k for k in ks_list if k.id not in waiting]
    ranges = table_ranges(ks_list)
    cap = policy.auto_budget_bytes if budget is None else min(budget, policy.auto_budget_bytes)
    most = merge_rows(memory, REWRITE_BYTES_PER_ROW)  # the rows an automatic L0 merge may take
    comps = components(ks_list, ranges)
    for comp in comps:
        l0 = sorted((k for k in comp.runs if not is_l1(k)), key=lambda k: (k.time, k.seq, k.id))
        l1 = [k for k in comp.runs if is_l1(k)]
        groups = sorted_runs(l0)
        if not l0 and (not force or _one_run_per_level(l1)):
            continue
        l0_bytes = sum(sizes[k.id] for k in l0)
        l1_bytes = sum(sizes[k.id] for k in l1)
        rows = sum(k.rows for k in comp.runs if k.kind == "data")
        small = l0_bytes + l1_bytes <= policy.small_bytes and rows <= policy.small_rows
        trigger = read_trigger(l0_bytes + l1_bytes, policy) if small else policy.l0_trigger
        if not force and len(groups) < trigger:
            continue
        if not force and small and not l1 and len(groups) == 1:
            continue  # one run and nothing to merge it with: rewriting it would gain nothing
        lo, hi = ranges.bounds(comp.first, comp.last)
        # L0 is large beside L1 in bytes (read cost) and in rows (a major decodes and encodes every
        # row: a compressible L1 is small in bytes, and by bytes alone 1,000-row upserts into
        # 500k rows of 0.9 B/row rewrote the whole table every 4th commit, 30x the upserts' rows)
        l0_rows = sum(k.rows for k in l0)
        l1_rows = sum(k.rows for k in l1)
        l0_large = l0_bytes >= policy.l1_ratio * l1_bytes and l0_rows >= policy.l1_ratio * l1_rows
        if force:
            tasks.append(_task("major", lo, hi, comp.runs, sizes, len(l0), "forced", recut=True))
            continue
        # a large component's L0 sorted runs wait for the stop trigger (module doc, "Sorted runs"),
        # tombstone runs too: a scan streaming over them keeps the deleted keys and rows per version
        # (`scan.segments.deleted_keys`), and the general path (string keys, an ancestor's
        # tombstones) pays by the rows L0 holds, not its runs (1M deletes family: 1.8 -> 1.0 s
        # written, auto-off 0.63 s, reads unchanged; 200k string keys: 4.9 -> 2.8 s, full scan
        # 95 -> 100 ms; docs/compaction.md, seventh pass)
        tiered = not small
        # The major of a large component (module doc, "The major of a large component"): wanted at
        # `l1_ratio`; the commit-time trigger runs it when it fits this commit's budget or, amortized
        # over the commits that wrote L0, when it rewrites at most `major_amplification` x the L0
        # bytes it applies; within the memory budget either way (a hard limit)
        # in work (`rewrite_work`): bytes, or rows where the rows cost more (a compressible L1)
        amplification = rewrite_work(l0_bytes + l1_bytes, l0_rows + l1_rows) / max(1, rewrite_work(l0_bytes, l0_rows))
        memory_needed = REWRITE_BYTES_PER_ROW * rows
        amortized = (
            not small
            and amplification <= policy.major_amplification
            and l0_bytes + l1_bytes <= policy.auto_budget_bytes
        )
        fits = (budget is None or rewrite_work(l0_bytes + l1_bytes, rows) <= budget or amortized) and (
            memory is None or memory_needed <= memory
        )
        wanted = small or not l1 or l0_large
        if not (wanted and fits):
            # L0 -> L0, size-tiered, whatever the major waits for. Before, a major over the commit's
            # budget made every commit from `l0_trigger` on merge "the window that fits": the large
            # merged L0 run with the newest small one, every commit (57 MB rewritten for 7 MB)
            if len(groups) < (policy.l0_stop if tiered else trigger):
                continue
            window = tier_window(groups, sizes, policy, cap, 1.0 if tiered else None, most)
            if tiered and n_sorted_runs(window) < policy.l0_stop // 2:  # long cycles: the size rule on rows
                window = tier_window(groups, sizes, policy, cap, policy.size_ratio, most)
            window = time_contiguous(window, comp.runs)
            if n_sorted_runs(window) < 2 and len(groups) >= policy.l0_stop:
                # the stop trigger: runs stay bounded even when no run joins the newest by size
                window = time_contiguous(newest_window(groups, sizes, policy, cap, most), comp.runs)
            if n_sorted_runs(window) < 2:  # a window of one commit's runs would rewrite them as they are
                if not (l1 and fits and len(groups) >= STOP_RUNS * policy.l0_trigger):
                    continue  # no merge window (time order): the settle or compact() folds it
                why = f"{len(groups)} L0 runs >= {STOP_RUNS} × {policy.l0_trigger} and no merge window in commit-time order"
                tasks.append(_task("major", lo, hi, comp.runs, sizes, len(l0), why))
                continue
            waits = (
                f"L0 {l0_bytes:,} B, {l0_rows:,} rows < {policy.l1_ratio:g} × L1 in bytes or rows"
                if not wanted
                else f"the major waits: it needs ~{memory_needed:,} B > the memory budget {memory:,} B"
                if memory is not None and memory_needed > memory
                else f"the major waits: {l0_bytes + l1_bytes:,} B > this commit's budget {budget or 0:,} B"
                + (
                    f" and its write amplification (L1 + L0) / L0 = {amplification:.1f}x > {policy.major_amplification:g} (major_amplification)"
                    if l1 and not small and amplification > policy.major_amplification
                    else f" and the automatic budget {policy.auto_budget_bytes:,} B"
                    if l1 and not small
                    else ""
                )
            )
            why = (
                f"{len(groups)} L0 sorted runs >= {policy.l0_stop if tiered else trigger}; the newest "
                f"{n_sorted_runs(window)} merged (similar sizes, or the newest at the stop trigger); {waits}"
            )
            tasks.append(_task("merge", lo, hi, window, sizes, len(window), why, comp.runs))
            continue
        why = (
            f"{len(groups)} L0 run(s) >= {trigger} in a small component ({l0_bytes + l1_bytes:,} B <= "
            f"{policy.small_bytes:,} B, {rows:,} rows; their fixed read cost > {policy.read_overhead:g} × its scan): rewritten whole"
            if small
            else f"{len(groups)} L0 sorted runs; L0 {l0_bytes:,} B, {l0_rows:,} rows >= {policy.l1_ratio:g} × L1 "
            f"{l1_bytes:,} B, {l1_rows:,} rows; write amplification (L1 + L0) / L0 = {amplification:.1f}x"
            + (
                f" <= {policy.major_amplification:g} (major_amplification): amortized over the commits that wrote L0, "
                f"past this commit's budget {budget:,} B"
                if budget is not None and l0_bytes + l1_bytes > budget
                else ""
            )
            if l1
            else f"{len(groups)} L0 runs >= {policy.l0_trigger}, no L1 run yet"
        )
        tasks.append(_task("major", lo, hi, comp.runs, sizes, len(l0), why))
    tasks += fold_tasks(
        comps, ranges, sizes, policy, 2 if force else policy.fold_trigger, not force, partition_of, whole
    )
    return MaintenancePlan(tuple(tasks), n_l0, n_l1, len(ranges))


def _one_run_per_level(runs: list[KeySpace]) -> bool:
    return len(runs) == len({k.level for k in runs})


def read_trigger(component_bytes: int, policy: Policy) -> int:
    """The L0 runs at which a small component is compacted: the fewest whose fixed read cost
    (`l0_read_bytes` each) exceeds `read_overhead` × the component's own scan (its bytes plus one
    run's fixed cost), at most `l0_trigger` (module doc)."""
    if policy.l0_read_bytes <= 0:
        return policy.l0_trigger
    scan = component_bytes + policy.l0_read_bytes
    return min(policy.l0_trigger, int(policy.read_overhead * scan // policy.l0_read_bytes) + 1)


# Peak memory of a rewrite per input row, beyond the caches the budget already bounds: the scan's
# general path merges every input key and locates its fresh cell before streaming the output, and
# the displacement map holds the output's encoded keys. Measured with `python -m bench.lsm_shapes`-
# shaped majors of 2M and 8M rows (u64 key + 2 f64): 223 and 165 B per row above the baseline.
REWRITE_BYTES_PER_ROW = 200


def _task(
    kind: str,
    lo: bytes,
    hi: bytes | None,
    runs: list[KeySpace],
    sizes: Mapping[str, int],
    n_l0: int,
    why: str,
    component: list[KeySpace] | None = None,
    recut: bool = False,
) -> CompactionTask:
    """A rewrite task over `runs`, with the cost model's numbers: a scan of its range merges the
    data runs of each level of `component` now, and after it one run per level for a major (plus
    the runs outside a merge's window)."""
    comp = [k for k in (component or runs) if k.kind == "data"]
    levels = {k.level for k in comp}
    before = len(comp)
    if kind in ("major", "fold"):
        after = len(levels)
    else:
        merged = [k for k in runs if k.kind == "data"]
        after = before - len(merged) + len({k.level for k in merged})
    return CompactionTask(
        kind,
        lo,
        hi,
        tuple(k.id for k in runs),
        min(oldest_time(k) for k in runs),
        max(k.time for k in runs),
        sum(sizes[k.id] for k in runs),
        n_l0,
        why,
        before,
        after,
        REWRITE_BYTES_PER_ROW * sum(k.rows for k in runs if k.kind == "data"),
        recut,
    )


def within_budget(task: CompactionTask, policy: Policy, budget: int | None = None, memory: int | None = None) -> bool:
    """Whether an automatic trigger may run `task`: a move rewrites nothing, so always; a rewrite
    when its input fits the byte budget and, given the warehouse's `memory` budget, its memory
    (`CompactionTask.memory_bytes`) fits that: a hard limit, the task then waits for an explicit
    `compact()` (or a Spark job, which splits it by key range)."""
    limit = policy.auto_budget_bytes if budget is None else budget
    if task.kind == "move":
        return True
    return task.input_bytes <= limit and (memory is None or task.memory_bytes <= memory)


# A rewrite decodes and encodes every row (~0.4 us a row), so the commit-time trigger weighs it by
# max(bytes, rows x 32 B): by bytes alone a major of 1M compressible rows ran every ~50 commits.
ROW_WORK_BYTES = 32


def rewrite_work(nbytes: int, rows: int) -> int:
    """The cost of rewriting (or of writing) `rows` rows in `nbytes` bytes, in bytes of input."""
    return max(nbytes, rows * ROW_WORK_BYTES)


def commit_budget(written: int, policy: Policy) -> int:
    """The work (`rewrite_work`) the commit-time trigger may rewrite after a commit that wrote
    `written` of it: `commit_rewrite_ratio` × that, at least `small_bytes` (a small table is still folded at
    its read-cost trigger), at most `auto_budget_bytes`. So the work a commit does inline is
    bounded by what it wrote; larger merges run in the settle or `compact()`."""
    return min(policy.auto_budget_bytes, max(policy.small_bytes, int(policy.commit_rewrite_ratio * written)))


def _in_small_components(ks_list: list[KeySpace], sizes: Mapping[str, int], policy: Policy) -> set[str]:
    """Runs of small components (`small_bytes`, `small_rows`) of a small table: folded whole at
    their read-cost trigger, cheaper than reading them as runs of their own, so they do not move.
    Past `small_rows` rows in the table every disjoint run moves: else the small last range of a
    large table took each sorted append into a major of it (485 majors in 1,000 appends)."""
    out: set[str] = set()
    if sum(k.rows for k in ks_list if k.kind == "data" and k.level == "") > policy.small_rows:
        return out
    for comp in components(ks_list, table_ranges(ks_list)):
        rows = sum(k.rows for k in comp.runs if k.kind == "data")
        if rows <= policy.small_rows and sum(sizes[k.id] for k in comp.runs) <= policy.small_bytes:
            out |= {k.id for k in comp.runs}
    return out


def move_task(
    key_spaces: Iterable[KeySpace],
    sizes: Mapping[str, int],
    policy: Policy,
    stay: set[str] | frozenset[str] = frozenset(),
) -> CompactionTask | None:
    """L0 runs that overlap nothing, moved to L1 as they are (RocksDB's "trivial move"): a bulk
    load lands as disjoint runs, sorted appends beyond the last key, and merging them would
    rewrite every byte for nothing.

    Runs are grouped by overlapping extents (`manifest.extent`: a run's keys and the subtrees of
    its largest key), over every run of every level and kind. A group moves when it holds only L0
    data runs, at most one per level, and its root-level run starts it (that run's first key
    becomes a range boundary, `ranges.ranges_of`, and the group lies inside the range it starts:
    any run holding a key between it and the next boundary would overlap it), whatever its
    size, unless it holds a run of `stay` (the runs of small components, folded whole by their
    read-cost trigger) and is below `move_bytes` and `move_rows`. Each run keeps its files, time
    and `min_time`: no cell is relabelled, so DESIGN §6's invariant holds trivially. One task
    moves every such group; None when there is none."""
    runs = sorted((k for k in key_spaces if k.rows), key=lambda k: extent(k)[0])
    groups: list[list[KeySpace]] = []
    hi: bytes | None = b""
    for k in runs:
        lo, end = extent(k)
        if groups and (hi is None or lo < hi):
            groups[-1].append(k)
            hi = None if hi is None or end is None else max(hi, end)
        else:
            groups.append([k])
            hi = end
    moved = [g for g in groups if _movable_shape(g) and (_large(g, sizes, policy) or not any(k.id in stay for k in g))]
    if not moved:
        return None
    ins = [k for g in moved for k in g]
    return CompactionTask(
        "move",
        b"",
        None,
        tuple(k.id for k in ins),
        min(oldest_time(k) for k in ins),
        max(k.time for k in ins),
        sum(sizes[k.id] for k in ins),
        len(ins),
        f"{len(moved)} group(s) of runs overlapping no other run: moved to L1 as they are, no rewrite",
    )


def _movable_shape(group: list[KeySpace]) -> bool:
    """L0 data runs only, one per level, started by the root level's run (`move_task`)."""
    if any(k.lsm != 0 or k.kind != "data" for k in group) or not _one_run_per_level(group):
        return False
    root = next((k for k in group if k.level == ""), None)
    return root is not None and root.min_key == group[0].min_key


def _move_now(move: CompactionTask, key_spaces: list[KeySpace], policy: Policy) -> bool:
    """Whether the commit-time trigger moves now: `l0_trigger` runs are waiting, or they hold
    `move_bytes` or `move_rows` (a bulk load moves inside its `write()`). A move is a commit of
    its own (~5 ms), so small appends move `l0_trigger` at a time, not one per commit."""
    ids = set(move.inputs)
    rows = sum(k.rows for k in key_spaces if k.id in ids)
    return move.l0_runs >= policy.l0_trigger or move.input_bytes >= policy.move_bytes or rows >= policy.move_rows


def _large(group: list[KeySpace], sizes: Mapping[str, int], policy: Policy) -> bool:
    return sum(sizes[k.id] for k in group) >= policy.move_bytes or sum(k.rows for k in group) >= policy.move_rows


def fold_tasks(
    comps: list[Component],
    ranges: Ranges,
    sizes: Mapping[str, int],
    policy: Policy,
    trigger: int,
    tiered: bool = True,
    partition_of: Callable[[bytes], bytes] | None = None,
    whole: bool = False,
) -> list[CompactionTask]:
    """Adjacent small L1 units concatenated into one (`fold`): what moving small disjoint runs
    leaves behind (module doc, "Folds"). A unit is a component of one range holding only L1 data
    runs, one per level, below `move_rows` rows and `move_bytes` bytes together; units of
    consecutive ranges form a sequence. `tiered` (the commit-time trigger): one fold, the oldest
    sequence of `trigger` units whose rows stay within `max_l1_rows` (one output piece), less its
    ends while an end holds more rows than the rest (a row is rewritten about log(n) times, not
    once per fold), or if none, once it holds `trigger` units, its oldest filling a piece. Not
    `tiered` (`compact()`, the settle): each sequence (in chunks of at most
    `auto_budget_bytes`) holding more runs than one write of its rows would make is rewritten as
    that write (`recut`: `max_l1_rows` pieces). The inputs overlap no other run, so their times
    stay exact whatever the window. With `partition_of` a sequence never crosses a partition
    change: a fold across one was cut there again, 2 runs → 2 on every `compact()`. `whole` (a
    forced `compact()`, not the settle): units below `max_l1_rows` rows (and `move_bytes`), a
    sequence not chunked (5M appends compacted to 7 runs where one write makes 5 read 1.1-1.2x)."""
    windows: list[list[Component]] = []
    for seq in _fold_sequences(comps, sizes, policy, partition_of, whole):
        if tiered:  # `trigger` units; else, once the sequence holds that many, a full piece
            rows = [sum(k.rows for k in c.runs) for c in seq]
            ends = [(i + 1, fold_window(rows[: i + 1], policy.max_l1_rows, trigger)) for i in range(len(seq))]
            tier = [seq[end - n : end] for end, n in ends if n >= trigger]
            windows += tier or ([seq[: filled_window(rows, policy.max_l1_rows)]] if len(seq) >= trigger else [])
        else:  # more runs than one write of their rows would make: rewritten as that write
            chunks = [seq] if whole else _budget_chunks(seq, sizes, policy)
            windows += [w for w in chunks if len(w) > -(-_rows(w) // policy.max_l1_rows) and len(w) >= trigger]
    windows = [w for w in windows if len(w) >= 2]
    if tiered and windows:
        windows = [max(windows, key=len)]  # the oldest longest
    why = "adjacent small L1 runs (< {:,} rows each) >= {}: concatenated"
    return [
        _task(
            "fold",
            ranges.bounds(w[0].first)[0],
            ranges.bounds(w[-1].last)[1],
            [k for c in w for k in c.runs],
            sizes,
            0,
            f"{len(w)} " + why.format(policy.move_rows, trigger),
            recut=not tiered,
        )
        for w in windows
    ]


def _fold_sequences(
    comps: list[Component],
    sizes: Mapping[str, int],
    policy: Policy,
    partition_of: Callable[[bytes], bytes] | None,
    whole: bool,
) -> list[list[Component]]:
    """The maximal sequences of fold units (`fold_tasks`) of consecutive ranges, one partition each."""
    seqs: list[list[Component]] = []
    part: bytes | None = None  # the partition of the last sequence's units
    last = -2
    for comp in comps:
        runs = comp.runs
        parts = (
            {partition_of(bytes.fromhex(e)) for k in runs for e in (k.min_key, k.max_key)} if partition_of else {b""}
        )
        unit = (
            comp.first == comp.last
            and all(is_l1(k) for k in runs)
            and _one_run_per_level(runs)
            and sum(k.rows for k in runs) < (policy.max_l1_rows if whole else policy.move_rows)
            and sum(sizes[k.id] for k in runs) < policy.move_bytes
            and len(parts) == 1
        )
        if not unit:
            continue
        if last + 1 != comp.first or parts != {part}:
            seqs.append([])
        seqs[-1].append(comp)
        part, last = next(iter(parts)), comp.last
    return seqs


def _budget_chunks(seq: list[Component], sizes: Mapping[str, int], policy: Policy) -> list[list[Component]]:
    """`seq` cut from its start into chunks of at most `auto_budget_bytes` (the settle runs them)."""
    out: list[list[Component]] = [[]]
    total = 0
    for c in seq:
        b = sum(sizes[k.id] for k in c.runs)
        if out[-1] and total + b > policy.auto_budget_bytes:
            out.append([])
            total = 0
        out[-1].append(c)
        total += b
    return out


def _rows(units: list[Component]) -> int:
    return sum(k.rows for c in units for k in c.runs if k.level == "")
