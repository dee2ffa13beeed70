"""Distributed compaction on Spark (issue 10 item 7): `conch.engines.spark.compact(spark, "wh/audio")`.

The same compaction as `Table.compact()` (`conch.maintain.compaction`), for tables too big for one
process, in three steps on the contract `conch.maintain.compaction` exposes:

1. **plan on the driver**: `plan_tasks(log, policy, force)`, the tasks the policy asks for;
2. **execute on executors**: every task is cut into *parts*, one per L1 key range it spans
   (a major's output is cut at those boundaries anyway, and its row-count cuts restart at each:
   so a part computes exactly the runs the Python compaction writes for that range); a forced
   major (`force=True`) drops those boundaries and is cut where one write of its rows would be:
   the driver chooses those cuts once from the inputs' keys (`Table.cut_compaction`), and each
   part is one output piece (a forced fold too); a merge or another fold is one part. All parts of all tasks run as one Spark job; each part
   reopens the table on its executor (with the data source's connection options: metastore,
   token, storage options), takes the table state of the planned commit, and calls
   `execute(log, state, task, within=part's range)`, which writes its output files and returns
   their operations, committing nothing;
3. **commit on the driver**: one `"compact"` WAL entry per task with every part's operations
   (`conch.maintain.compaction.commit`), through the table log's compare-and-swap. A forced
   compaction plans again over what it committed, in rounds, as `Table.compact()` does
   (`run.FORCED_ROUNDS`): a second call then finds nothing to do.

So the result is the Python compaction's: the same runs and fragments (modulo file ids and one
displacement map per part instead of one per task), hence the same scans, `asof` and `since`
(tested). Concurrency is the Python compaction's too: writes and deletes committed while the job
runs stay newer than its outputs and are never undone; a task that lost an input to another
compactor fails its commit (its files are deleted) and the driver plans again, at most
`Policy.max_replans` times. A failed Spark job leaves the files of its finished parts:
`Table.vacuum()` removes them (nothing references them).

Parallelism is the number of L1 ranges the tasks span (a forced major: the `max_l1_rows` pieces
and partitions of its output): a table's first automatic major (L1 is one range until then) is
one Spark task per component; later ones, one per range.

>>> conch.engines.spark.compact(spark, "wh/audio")  # doctest: +SKIP
CompactionResult(tasks=1, runs_in=12, runs_out=4, ...)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conch.engines.spark.common import Location, open_table
from conch.errors import CommitConflictError
from conch.log.wal import AddKeySpace
from conch.maintain.compaction import CompactionResult, CompactionTask, Policy, Staged
from conch.maintain.compaction.run import FORCED_ROUNDS, part_ranges
from conch.model.keys import EncodedRange


def compact(
    spark: Any,
    path: str | None = None,
    *,
    force: bool = True,
    policy: Policy | None = None,
    **options: str,
) -> CompactionResult:
    """Compact a table with Spark: `force=True` (default) a major compaction of every key range
    with L0 runs or several runs, `force=False` only what the policy asks for; `policy`: default
    the warehouse's. `path` is `<warehouse>/<table>`, or pass `warehouse=` and `table=`;
    `options` are the data source's connection options (`metastore`, `token`, `storageOptions`)."""
    loc = Location.from_options({**options, **({"path": path} if path else {})})
    table = loc.connect().table(loc.table)
    policy = policy or table.maintenance_policy
    total = CompactionResult()
    tasks = table.compaction_tasks(policy, force)
    replans, rounds = 0, 1
    while tasks:
        state = table.state()
        live = [t for t in tasks if all(i in state.key_spaces for i in t.inputs)]
        lost = len(live) < len(tasks)  # another compactor removed an input since planning
        committed = False
        tasks = [table.cut_compaction(t, state.seq, policy) for t in live]
        parts = [
            Part(loc, state.seq, i, t, lo, hi, policy) for i, t in enumerate(tasks) for lo, hi in part_ranges(t, state)
        ]
        staged: dict[int, list[Staged]] = {}
        if parts:
            for i, s in spark.sparkContext.parallelize(parts, len(parts)).map(run_part).collect():
                staged.setdefault(i, []).append(s)
        for i, task in enumerate(tasks):
            try:
                table.commit_compaction(task, staged[i], state.seq)
            except CommitConflictError:  # an input was removed meanwhile: its files are deleted
                total, lost = total + CompactionResult(conflicts=1), True
                continue
            committed = True
            if task.kind == "move":  # to L1 as they are: nothing written
                total = total + CompactionResult(moved=len(task.inputs))
                continue
            outs = sum(1 for s in staged[i] for op in s.ops if isinstance(op, AddKeySpace))
            written = sum(s.bytes_written for s in staged[i])
            total = total + CompactionResult(1, len(task.inputs), outs, task.input_bytes, written)
        tasks = []
        if lost and replans < policy.max_replans:  # plan again after losing to another compactor
            replans += 1
            tasks = table.compaction_tasks(policy, force)
        elif force and committed and rounds < FORCED_ROUNDS:  # the next round, as `Table.compact()`
            rounds += 1
            tasks = table.compaction_tasks(policy, force)
    return total


@dataclass(frozen=True)
class Part:
    """One Spark task: a compaction task restricted to a key range, over the state of the
    planned commit. Plain data, pickled to the executors."""

    loc: Location
    seq: int
    index: int  # of its task in the driver's list
    task: CompactionTask
    lo: bytes | None
    hi: bytes | None
    policy: Policy


def run_part(part: Part) -> tuple[int, Staged]:
    """Write the part's outputs on the executor; returns them (uncommitted) to the driver."""
    within = None if part.lo is None and part.hi is None else EncodedRange(part.lo, part.hi)
    return part.index, open_table(part.loc).stage_compaction(part.task, part.seq, within, part.policy)
