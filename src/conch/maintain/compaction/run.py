"""Running compactions: plan, execute, commit, and re-plan after losing to a concurrent one.

The three steps are separate so that Spark runs the middle one on executors (issue 10 item 7):

- `plan_tasks(log, policy, force)`: the tasks the policy asks for now (`plan.py`);
- `execute(log, state, task, within)`: write one task's outputs (restricted to the encoded key
  range `within`, for a Spark task) and return them as `Staged`, committing nothing;
- `commit(log, task, parts)`: one WAL entry of kind `"compact"` removing the task's inputs (and
  their fragments) and adding every part's outputs and displacement maps.

The settle runs a forced major larger than the automatic budget the same way, in one process
(`staged_parts`): its output pieces' key ranges one after another, each within the budget, a
commit arriving between two of them abandoning the rest (the written parts are left to
`vacuum`), and one commit adding them all. A 5M-key table being written (82 MB of runs) was
otherwise never settled: its reads stayed 2-5x a settled table's until an explicit `compact()`.

Concurrency (DESIGN §4): the commit goes through the table log's compare-and-swap. Writes and
deletes committed meanwhile never conflict (outputs take the newest input's time, so later
commits stay newer); a commit that removed one of the inputs (another compaction) makes
`wal.conflicts` reject the entry: the loser's files are deleted by `TableLog.commit` and it
plans again, at most `Policy.max_replans` times, then gives up cleanly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from conch.errors import CommitConflictError, CorruptFileError
from conch.files.manifest import TableState
from conch.log.tablelog import TableLog
from conch.log.txn import Commit
from conch.log.wal import AddDisplacementMap, AddFragment, AddKeySpace, Op, RemoveFragment, RemoveKeySpace, Transaction
from conch.maintain.compaction.plan import (
    CompactionTask,
    MaintenancePlan,
    Policy,
    commit_budget,
    plan,
    rewrite_work,
    table_ranges,
    within_budget,
)
from conch.maintain.compaction.ranges import partitioner
from conch.maintain.compaction.rewrite import Layout, Staged, input_view, recut_boundaries
from conch.maintain.compaction.rewrite import execute as rewrite
from conch.model.keys import EncodedRange
from conch.model.progress import Progress
from conch.search.build import build_indexes


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What `Table.compact()` did: tasks committed, runs in and out, bytes read and written
    (their ratio to ingested bytes is the write amplification), lost races, runs moved."""

    tasks: int = 0
    runs_in: int = 0
    runs_out: int = 0
    bytes_in: int = 0
    bytes_written: int = 0
    conflicts: int = 0
    moved: int = 0  # runs moved to L1 as they were (no rewrite; not counted in `tasks`)

    def __add__(self, o: CompactionResult) -> CompactionResult:
        return CompactionResult(
            self.tasks + o.tasks,
            self.runs_in + o.runs_in,
            self.runs_out + o.runs_out,
            self.bytes_in + o.bytes_in,
            self.bytes_written + o.bytes_written,
            self.conflicts + o.conflicts,
            self.moved + o.moved,
        )


def maintenance_plan(log: TableLog, policy: Policy, force: bool = False) -> MaintenancePlan:
    """What compaction would do now, and why."""
    state = log.state()
    return plan(state.key_spaces, state.fragments, policy, force, partition_of=partitions(log, state), whole=force)


def partitions(log: TableLog, state: TableState) -> Callable[[bytes], bytes] | None:
    """The partition prefix of an encoded key of `log`'s table (`ranges.partitioner`)."""
    return partitioner(state.schema.key_fields(""), log.partition_keys)


def plan_tasks(log: TableLog, policy: Policy, force: bool = False) -> list[CompactionTask]:
    """The tasks the policy asks for now (`force`: a major of every component with L0 runs or
    several runs). Spark's driver calls this, then `execute` per key range, then `commit`."""
    return list(maintenance_plan(log, policy, force).tasks)


def layout(log: TableLog, policy: Policy) -> Layout:
    """How a table's outputs are cut: its root key and partition key, and the policy's bound."""
    state = log.state()
    return Layout(len(state.schema.key_fields("")), log.partition_keys, policy.max_l1_rows)


def with_cuts(log: TableLog, state: TableState, task: CompactionTask, policy: Policy) -> CompactionTask:
    """`task` with its output boundaries chosen now (a forced major's, `rewrite.recut_boundaries`),
    for executors that each write a part of it (Spark); other tasks as they are."""
    if not task.recut or task.cuts is not None:
        return task
    view = input_view(state, task)
    return dataclasses.replace(task, cuts=tuple(recut_boundaries(view, layout(log, policy), log.warehouse.key_cache)))


def execute(
    log: TableLog,
    state: TableState,
    task: CompactionTask,
    within: EncodedRange | None = None,
    policy: Policy | None = None,
) -> Staged:
    """Write `task`'s outputs over `state` (those with keys in `within` only, if given), and
    return them uncommitted (see the module doc)."""
    policy = policy or Policy()
    if task.kind == "move":
        return move(state, task)
    wh = log.warehouse
    with log.staging():
        return rewrite(
            log.files, wh.key_cache, state, task, layout(log, policy), within, wh.write_options, wh.scan_options
        )


def part_ranges(task: CompactionTask, state: TableState) -> list[tuple[bytes | None, bytes | None]]:
    """The parts of `task`: its range cut at its output boundaries (a forced task's `cuts`) or
    at the L1 boundaries inside it (another major), or whole."""
    if task.cuts is not None:
        bounds: tuple[bytes, ...] = task.cuts
    elif task.kind == "major":
        bounds = table_ranges(state.key_spaces.values()).boundaries
    else:
        return [(None, None)]
    inside = [b for b in bounds if b > task.lo and (task.hi is None or b < task.hi)]
    edges: list[bytes | None] = [task.lo or None, *inside, task.hi]
    return list(itertools.pairwise(edges))


def staged_parts(
    log: TableLog, state: TableState, task: CompactionTask, policy: Policy, halt: Callable[[], bool] | None = None
) -> list[Staged] | None:
    """`task`'s outputs, uncommitted: in one piece, or, a forced major over more input than
    `Policy.auto_budget_bytes`, as its parts one after another (module doc). None: `halt()`
    said to stop between two parts."""
    if task.kind == "move" or not task.recut or task.input_bytes <= policy.auto_budget_bytes:
        return [execute(log, state, task, policy=policy)]
    task = with_cuts(log, state, task, policy)
    parts: list[Staged] = []
    for lo, hi in part_ranges(task, state):
        if parts and halt is not None and halt():
            return None
        within = None if lo is None and hi is None else EncodedRange(lo, hi)
        parts.append(execute(log, state, task, within, policy))
    return parts


def move(state: TableState, task: CompactionTask) -> Staged:
    """A `move` task's operations: each input run and its fragments re-added as L1, same ids,
    files, times (`plan.move_task`); nothing is written. The removals make the commit conflict
    if a concurrent compaction removed an input first."""
    now = time.time_ns() // 1000
    ids = set(task.inputs)
    ops: list[Op] = []
    for i in task.inputs:
        ks = state.key_spaces[i]
        ops += [RemoveKeySpace(i), AddKeySpace(dataclasses.replace(ks, lsm=1, compacted_at=now))]
    for f in sorted(state.fragments.values(), key=lambda f: f.id):
        if f.key_space in ids:
            ops += [RemoveFragment(f.id), AddFragment(dataclasses.replace(f, lsm=1, compacted_at=now))]
    return Staged(ops, [], None, 0, now)


def commit(log: TableLog, task: CompactionTask, parts: Sequence[Staged], base_seq: int = -1) -> Commit:
    """Commit the parts of one task as one `"compact"` WAL entry (module doc). `base_seq`: the
    log sequence the task was planned on. `CommitConflictError` if an input was removed
    meanwhile (the parts' files are then deleted)."""
    state = log.state()
    removed = set(task.inputs)
    ops: list[Op] = [op for p in parts for op in p.ops]
    outs = sum(1 for op in ops if isinstance(op, AddKeySpace))
    if task.kind == "move":
        summary = f"move: {len(task.inputs)} runs → L1 as they are (no rewrite)"
    else:
        ops += [AddDisplacementMap(p.map.path, p.map.bytes, p.map.checksum, p.map.runs) for p in parts if p.map]
        ops += [RemoveKeySpace(i) for i in task.inputs]
        # fragments of the inputs live at commit: those of `state` (an input removed meanwhile makes
        # `wal.conflicts` reject the entry whatever these are)
        ops += [RemoveFragment(f.id) for f in state.fragments.values() if f.key_space in removed]
        summary = f"{task.kind}: {len(task.inputs)} runs → {outs}"
    txn = Transaction(
        "compact",
        tuple(ops),
        summary,
        base_seq=base_seq,
        files=tuple(f for p in parts for f in p.files),
        started_us=min((p.started_us for p in parts), default=0),
    )
    done = log.commit(txn)
    if task.kind != "move" and log.cached_state().indexes:  # the outputs get their index files
        with contextlib.suppress(CommitConflictError):  # a concurrent compaction took them: it builds
            build_indexes(log)
    return done


def compact(
    log: TableLog,
    policy: Policy,
    force: bool = True,
    budget: bool | int = False,
    progress: bool | None = False,
    stop: Callable[[], bool] | None = None,
) -> CompactionResult:
    """Run the tasks planned now, once each (a merge's output waits for the next trigger), and
    plan again only when a task lost to a concurrent compaction (at most `policy.max_replans`
    times). `force`: rounds of forced tasks until a plan holds none (at most `FORCED_ROUNDS`):
    a major's outputs can leave small neighbours for a fold, and a second `compact()` then
    rewrites nothing. `budget`: the automatic trigger after commits: the moves (no rewrite) and
    at most one rewrite of at most `budget` input bytes (True: `auto_budget_bytes`). `progress`:
    a progress bar over the tasks (`conch.model.progress`). Each task commits against the state it was
    planned on, so a concurrent compaction that placed L1 runs over its range meanwhile makes it
    re-plan. `stop`: checked before each task and again between a task's output and its commit
    (the background trigger: the table may no longer be touched; an output that may not commit is
    left to `vacuum`)."""
    total = CompactionResult()
    limit = None if budget is False else policy.auto_budget_bytes if budget is True else int(budget)
    tasks, planned = _tasks(log, policy, force, limit)
    replans = 0
    rounds, committed = 1, False
    with Progress("compacting", progress=progress) as bar:
        while tasks or (force and limit is None and committed and rounds < FORCED_ROUNDS):
            if not tasks:  # the next forced round plans over this one's outputs
                tasks, planned = _tasks(log, policy, force, limit)
                rounds, committed = rounds + 1, False
                continue
            if stop is not None and stop():
                break
            task = tasks.pop(0)
            state = log.state()
            if any(i not in state.key_spaces for i in task.inputs):  # another compactor was first
                tasks, planned, replans = _replan(log, policy, force, limit, replans)
                continue
            staged = execute(log, state, task, policy=policy)
            if stop is not None and stop():
                break
            try:
                commit(log, task, [staged], planned)
            except CommitConflictError:
                total = total + CompactionResult(conflicts=1)
                tasks, planned, replans = _replan(log, policy, force, limit, replans)
                continue
            committed = True
            if task.kind == "move":
                total = total + CompactionResult(moved=len(task.inputs))
                continue
            outs = sum(1 for op in staged.ops if isinstance(op, AddKeySpace))
            total = total + CompactionResult(1, len(task.inputs), outs, task.input_bytes, staged.bytes_written)
            bar.advance(sum(state.key_spaces[i].rows for i in task.inputs), task.input_bytes)
            if limit is not None:
                break
    return total


# Rounds of a forced `compact()`: the majors, then folds of what they leave beside small runs;
# more only when concurrent writers keep adding runs meanwhile (bounded: the caller returns)
FORCED_ROUNDS = 4


def _tasks(log: TableLog, policy: Policy, force: bool, limit: int | None) -> tuple[list[CompactionTask], int]:
    """The tasks planned now and the log sequence of the state they were planned on."""
    state = log.state()
    memory = log.warehouse.memory_budget if limit is not None else None
    whole = force and limit is None  # a forced `compact()`: L1 laid out as one write's runs
    tasks = list(
        plan(state.key_spaces, state.fragments, policy, force, limit, memory, partitions(log, state), whole).tasks
    )
    if limit is not None:
        # plan() applied the commit's budget (a large component's major amortized past it, a fold
        # judged against the automatic budget: the stop trigger bounding a scan's runs); what is
        # left is the hard limits: the automatic budget and the memory budget
        moves = [t for t in tasks if t.kind == "move"]
        tasks = moves + [t for t in tasks if t.kind != "move" and within_budget(t, policy, memory=memory)][:1]
    return tasks, state.seq


def _replan(
    log: TableLog, policy: Policy, force: bool, limit: int | None, replans: int
) -> tuple[list[CompactionTask], int, int]:
    if replans >= policy.max_replans:
        return [], -1, replans  # give up cleanly: the files of lost attempts were deleted
    tasks, planned = _tasks(log, policy, force, limit)
    return tasks, planned, replans + 1


def written_by(state: TableState, seq: int) -> int:
    """The work (`plan.rewrite_work`) of the runs and fragments a commit added that are still
    live in `state`: their bytes, or their rows where those cost more."""
    nbytes = sum(k.bytes for k in state.key_spaces.values() if k.seq == seq) + sum(
        f.bytes for f in state.fragments.values() if f.seq == seq
    )
    return rewrite_work(nbytes, sum(k.rows for k in state.key_spaces.values() if k.seq == seq and k.kind == "data"))


def auto(log: TableLog, done: Commit | None = None) -> None:
    """The automatic trigger after a write or delete (`Warehouse.after_commit`): the moves of runs
    that overlap nothing, and at most one rewrite of at most `plan.commit_budget` input bytes
    (a small multiple of what the commit `done` wrote). Losing to a concurrent compactor is not
    an error: the commit that triggered it is done, and the next trigger plans again. Neither is
    a damaged input file: the commit is done too (raising would tell its caller it failed), so
    it becomes a warning naming the file; reads of that file raise, and `conch check` reports it."""
    policy = log.warehouse.maintenance
    busy = _auto_lock((log.warehouse.uri, log.id))
    if not busy.acquire(blocking=False):
        return  # another writer thread of this process is compacting the table: it plans on the newer state
    try:
        written = written_by(log.state(), done.seq) if done is not None else 0
        compact(log, policy, force=False, budget=commit_budget(written, policy))
    except CommitConflictError:
        pass
    except CorruptFileError as e:
        warnings.warn(f"automatic compaction of table {log.name!r} skipped: {e}", RuntimeWarning, stacklevel=4)
    finally:
        busy.release()


_auto_locks: dict[tuple[str, str], threading.Lock] = {}
_auto_locks_guard = threading.Lock()


def _auto_lock(key: tuple[str, str]) -> threading.Lock:
    """One lock per (warehouse, table) in this process: concurrent writer threads that each ran
    the trigger after their commit would plan the same task, and all but one would rewrite the
    component for nothing and lose the commit (measured: 8 threads of one-row commits spent 3×
    the CPU per commit of one). A thread that finds it taken skips the trigger."""
    with _auto_locks_guard:
        return _auto_locks.setdefault(key, threading.Lock())


def _reset_after_fork() -> None:
    global _auto_locks_guard
    _auto_locks.clear()
    _auto_locks_guard = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)
