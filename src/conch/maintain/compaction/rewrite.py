"""Execute one compaction task: rewrite its window of runs (spec/003, DESIGN §6).

The fresh cells of the window are computed by the scan engine itself, run over a *view* of the
table that holds only the inputs (their key spaces, fragments, and the tombstones among them):
the scan is the definition of a fresh cell (spec/000), so the rewrite cannot disagree with it.
Each level's result streams out in key order and is cut into pieces at the L1 range boundaries
inside the task's range, at partition changes (`partition_by`), and, for the root level of a
major, wherever a piece reaches its share of `Policy.max_l1_rows` at a change of root key
(child levels are cut where the root level was, so a key and its subtree stay in one range). A
forced task (`CompactionTask.recut`) is cut at `recut_boundaries` only: as one write of its rows.
Each piece is written as one key space and, per column group, byte-bounded dense fragments
(`write.write_key_space` / `write_fragments`: one way to write files).

**Cell times stay exact** (DESIGN §6's invariant, by the first of its two options: per-cell times
would cost a column per group and a wider merge on every read, while a window contiguous in
commit time costs nothing to read): the output takes the newest input's time and records the
oldest as `min_time`. `asof` before the compaction reads the retained originals (time travel
replays the log); a `since` inside `(min_time, time]` reads them too (`sinceview.py`).

- **major**: a column with only nulls in a piece is not written: nothing older is left in the
  range, so "no cell" and "a null cell" read the same (null), now and for any later `since`.
  Tombstones are dropped (applied; no older data of their level or below is left).
- **merge** (L0 → L0): older runs stay outside the window, so a column the window never wrote for
  a key must stay "no cell" (a null would hide the older value): rows are grouped by which
  columns hold cells (`_by_presence`). The window's tombstones are merged into one run per
  level whose time is the window's *oldest* time: it still hides every older run (all older
  than the window), and never the window's own output (newer).

`execute` writes files and returns them with their operations (`Staged`), committing nothing:
in-process compaction (`run.py`) and Spark tasks over key ranges (`within`) share it, and one
`run.commit` adds every part's outputs and removes the inputs in one WAL entry.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.files.keycache import INDEX_STEP, KeyCache, as_numpy
from conch.files.layout import TableFiles
from conch.files.manifest import KeySpace, TableState
from conch.log.wal import AddFragment, AddKeySpace, Op
from conch.maintain.compaction import blobcopy
from conch.maintain.compaction.displacement import MapKeys, StreamedMap, WrittenMap, map_runs, write_map
from conch.maintain.compaction.plan import REWRITE_BYTES_PER_ROW, CompactionTask, table_ranges
from conch.maintain.compaction.ranges import change_points, prefix_key, prefix_keys
from conch.model import sets
from conch.model.budget import ScanOptions, WriteOptions, budget_split, release_freed_memory
from conch.model.keys import EncodedRange, encode_keys, numeric_key_type, range_mask, sorted_unique
from conch.model.schema import Column, Schema
from conch.scan.context import ScanContext
from conch.scan.execute import execute as run_scan
from conch.scan.plan import narrow, plan_scan
from conch.scan.request import ScanRequest
from conch.write.stage import StagedWrite, write_fragments, write_key_space


@dataclass
class Staged:
    """What one execution wrote (nothing committed): output operations, files, the displacement
    map, and byte counts for the write-amplification figures."""

    ops: list[Op] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    map: WrittenMap | None = None
    bytes_written: int = 0
    started_us: int = 0


@dataclass(frozen=True, slots=True)
class Layout:
    """How outputs are cut: root key columns, partition key columns, the most rows per piece."""

    root_keys: int
    partition_keys: int = 0
    max_rows: int = 1 << 20


def input_view(state: TableState, task: CompactionTask) -> TableState:
    """The table as far as the task's inputs go: their runs and their fragments."""
    kss = {i: state.key_spaces[i] for i in task.inputs}
    data = {i for i, k in kss.items() if k.kind == "data"}
    frs = {f.id: f for f in state.fragments.values() if f.key_space in data}
    return TableState(state.schema, state.seq, state.time, kss, frs)


# A rewrite this large hands its freed heap back (`release_freed_memory`); smaller ones, frequent,
# leave it for the next to reuse (pages handed back fault in again when allocated anew)
TRIM_BYTES = 64 << 20


def execute(
    files: TableFiles,
    key_cache: KeyCache,
    state: TableState,
    task: CompactionTask,
    layout: Layout,
    within: EncodedRange | None = None,
    opts: WriteOptions | None = None,
    scan: ScanOptions | None = None,
) -> Staged:
    """Write the outputs of `task` (restricted to keys in `within`, a Spark task's part) and
    return them with their operations; removing the inputs is `run.commit`'s job. `scan`: how
    the inputs are read (the warehouse's, sized by `connect(memory_budget=)`). Big blob values
    are copied in parts, never read whole (`blobcopy`)."""
    with blobcopy.streamed_values(files.storage), files.format.read_once():
        staged = _execute(files, key_cache, state, task, layout, within, opts, scan)
    if task.memory_bytes >= TRIM_BYTES:  # the inputs' and outputs' buffers are gone now
        release_freed_memory()
    return staged


def _execute(
    files: TableFiles,
    key_cache: KeyCache,
    state: TableState,
    task: CompactionTask,
    layout: Layout,
    within: EncodedRange | None = None,
    opts: WriteOptions | None = None,
    scan: ScanOptions | None = None,
) -> Staged:
    opts = opts or WriteOptions()
    scan = scan or ScanOptions()
    started = time.time_ns() // 1000
    view = input_view(state, task)
    schema = state.schema
    staged = StagedWrite(schema, schema, [], base_seq=state.seq)
    levels = sorted(
        {k.level for k in view.key_spaces.values() if k.kind == "data"}, key=lambda lvl: lvl.count(".") + bool(lvl)
    )
    # a fold drops the boundaries between its inputs: it concatenates their ranges into one; a
    # forced major too, cut where one write of its rows would be (`recut_boundaries`)
    fixed = [
        b
        for b in table_ranges(state.key_spaces.values()).boundaries
        if b > task.lo and _below(b, task.hi) and task.kind != "fold"
    ]
    target = None
    if task.recut:
        fixed = list(task.cuts) if task.cuts is not None else recut_boundaries(view, layout, key_cache)
    elif task.kind in ("major", "fold"):
        target = _target_rows(view, layout.max_rows, key_cache)
    cuts = fixed
    outputs: dict[str, list[tuple[str, MapKeys]]] = {}
    streamed: dict[str, list[pa.Table]] = {}  # a level's map runs, mapped as its pieces were written
    slices = _slices(view, layout, key_cache, slice_rows(scan.cache_bytes))
    for level in levels:  # root first: child levels are cut where it was
        batches = _sliced_batches(view, level, files.format, key_cache, within, scan, slices)
        if task.kind == "merge":
            for merged, present in _by_presence(view, level, batches, key_cache):
                for piece in _pieces(merged, layout, [], None):  # partition cuts only
                    _write_piece(files, schema, level, piece, staged, opts, outputs, present)
            continue
        starts: list[bytes] = []
        stream = _streamed_map(view, level, key_cache)
        for piece in _pieces(batches, layout, cuts, target):
            starts.append(prefix_key(piece.columns, layout.root_keys, 0))
            ks_id = _write_piece(files, schema, level, piece, staged, opts, outputs if stream is None else {})
            if stream is not None:
                stream.add(ks_id, as_numpy(piece.column(schema.key_names(level)[0])))
        if stream is not None:
            streamed[level] = stream.runs
        if level == "":
            cuts = sorted(set(fixed) | set(starts[1:]))
            target = None
    if task.kind == "merge":
        _merge_tombstones(files, schema, view, staged, within, key_cache)
    now = time.time_ns() // 1000
    ops = [_as_output(op, task, now) for op in staged.ops]
    runs = [
        map_runs(k.id, _map_keys(key_cache, k, schema), *_dest(outputs.get(k.level, [])))
        for k in view.key_spaces.values()
        if k.kind == "data" and k.level not in streamed
    ]
    runs += [r for level in levels if level in streamed for r in streamed[level]]
    written = write_map(files.storage, files.table_id, runs)
    return Staged(
        ops,
        [*staged.files, written.path],
        written,
        sum(_op_bytes(op) for op in ops) + written.bytes,
        started,
    )


def _streamed_map(view: TableState, level: str, key_cache: KeyCache) -> StreamedMap | None:
    """The displacement map of a major's or fold's `level`, built as its pieces are written (they
    come in key order, disjoint): for a single integer or timestamp key; None for other keys
    (`map_runs`; float keys too: -0.0 and 0.0 are two keys, equal as numbers)."""
    fields = view.schema.key_fields(level)
    if not _integer_key(fields):
        return None
    origins = [k for k in view.key_spaces.values() if k.kind == "data" and k.level == level]
    return StreamedMap([(k.id, k.rows, _block_reader(key_cache, k, fields)) for k in origins])


def _block_reader(key_cache: KeyCache, ks: KeySpace, fields: list[Any]) -> Callable[[int, int], np.ndarray]:
    return lambda start, stop: _key_block(key_cache, ks, fields, start, stop)


def _below(b: bytes, hi: bytes | None) -> bool:
    return hi is None or b < hi


def _op_bytes(op: Op) -> int:
    if isinstance(op, AddKeySpace):
        return op.key_space.bytes
    if isinstance(op, AddFragment):
        return op.fragment.bytes
    return 0


def _dest(outs: list[tuple[str, MapKeys]]) -> tuple[list[str], list[MapKeys]]:
    return [i for i, _ in outs], [e for _, e in outs]


def _integer_key(fields: list[Any]) -> bool:
    """A single integer or timestamp key: displacement maps search it as numbers (float keys
    not: -0.0 and 0.0 are two keys, equal as numbers)."""
    return len(fields) == 1 and (pa.types.is_integer(fields[0].type) or pa.types.is_timestamp(fields[0].type))


def _map_keys(key_cache: KeyCache, ks: KeySpace, schema: Schema) -> MapKeys:
    """An origin's keys for its displacement map: numbers for a single integer key, else encoded."""
    fields = schema.key_fields(ks.level)
    if not fields:
        return pa.array([b""] * ks.rows, pa.binary())
    return key_cache.numeric(ks, fields) if _integer_key(fields) else key_cache.encoded(ks, fields)


def _as_output(op: Op, task: CompactionTask, now: int) -> Op:
    """An output record takes the window's times (DESIGN §6), its level and compaction time."""
    lsm = 1 if task.kind in ("major", "fold") else 0
    if isinstance(op, AddKeySpace):
        ks = op.key_space
        if ks.kind == "tombstone":  # a merged tombstone run: the window's oldest time (module doc)
            t = task.min_time
            return AddKeySpace(dataclasses.replace(ks, time=t, min_time=0, lsm=0, compacted_at=now))
        ks = dataclasses.replace(ks, time=task.max_time, min_time=task.min_time, lsm=lsm, compacted_at=now)
        return AddKeySpace(ks)
    if isinstance(op, AddFragment):
        return AddFragment(dataclasses.replace(op.fragment, time=task.max_time, lsm=lsm, compacted_at=now))
    return op


def _target_rows(view: TableState, max_rows: int, key_cache: KeyCache) -> int:
    """Rows per root-level piece: the output rows shared evenly by as few pieces of at most
    `max_rows` as it takes. The output has at most the inputs' rows; when that bound would cut
    more pieces than one, its root keys are counted (an upsert of 10 % of a 1M-key run is 1M
    keys, not 1.1M: one piece, laid out as the rows written once)."""
    runs = [k for k in view.key_spaces.values() if k.kind == "data" and k.level == ""]
    upper = sum(k.rows for k in runs)
    if upper > max_rows and len(runs) > 1:
        upper = _distinct_root_keys(runs, view.schema, key_cache)
    pieces = max(1, -(-upper // max_rows))
    return max(1, -(-upper // pieces))


def recut_boundaries(view: TableState, layout: Layout, key_cache: KeyCache) -> list[bytes]:
    """Where a forced major's output is cut (`CompactionTask.recut`): each partition's distinct
    root keys in `ceil(n / max_rows)` pieces of equal rows, as one write of them would lay them
    out, whatever L1 ranges the inputs had; partition changes are boundaries too. A function of
    the inputs' keys alone, so Spark's driver cuts its parts where `Table.compact()` cuts its
    output. Reads no key when the inputs hold at most `max_rows` root rows (one piece a
    partition, cut at partition changes by `_pieces`)."""
    runs = [k for k in view.key_spaces.values() if k.kind == "data" and k.level == ""]
    fields = view.schema.key_fields("")[: layout.root_keys]
    if not fields or sum(k.rows for k in runs) <= layout.max_rows:
        return []
    if len(fields) == 1 and numeric_key_type(fields[0].type) and not layout.partition_keys:
        return _numeric_cuts(runs, fields, key_cache, layout.max_rows)
    keep = key_cache.fits(runs, fields)  # the rewrite that follows reads the same keys
    keys = sorted_unique(pa.concat_tables([key_cache.keys(k, fields, keep) for k in runs]))
    enc = encode_keys(keys.columns)
    parts = prefix_keys(keys.columns, layout.partition_keys)
    edges = [0, *change_points(parts).tolist(), len(enc)] if layout.partition_keys else [0, len(enc)]
    out: list[bytes] = []
    for start, stop in itertools.pairwise(edges):
        if start:
            out.append(parts[start].as_py())
        out += [enc[start + i].as_py() for i in _cut_ranks(stop - start, layout.max_rows)]
    return out


def _cut_ranks(n: int, max_rows: int) -> list[int]:
    """Ranks cutting `n` sorted distinct keys into `ceil(n / max_rows)` pieces of equal rows."""
    pieces = max(1, -(-n // max_rows))
    return [i * n // pieces for i in range(1, pieces)]


def _numeric_cuts(runs: list[KeySpace], fields: list[pa.Field], key_cache: KeyCache, max_rows: int) -> list[bytes]:
    """`recut_boundaries` of a single numeric key: the keys at the cut ranks of the union of the
    runs, in two streamed passes over key blocks (`_union_blocks`: count, then pick), so memory
    holds one block per run whatever the rows (the whole largest run's keys, copied, held a 6M-key
    major 146 MB above a 2M-key one); blocks come from the key cache when it holds a run's keys."""
    ranks = _cut_ranks(_distinct_numeric(runs, fields, key_cache), max_rows)
    if not ranks:
        return []
    values: list[Any] = []
    seen = 0
    for u in _union_blocks(runs, fields, key_cache):
        while len(values) < len(ranks) and ranks[len(values)] < seen + len(u):
            values.append(u[ranks[len(values)] - seen])
        seen += len(u)
    return encode_keys([pa.array(np.array(values)).cast(fields[0].type)]).to_pylist()


def _distinct_root_keys(runs: list[KeySpace], schema: Schema, key_cache: KeyCache) -> int:
    """Keys in the union of sorted, unique runs. A numeric key: counted in key blocks
    (`_distinct_numeric`, memory one block per run); others: hashed."""
    fields = schema.key_fields("")
    if not fields:  # a keyless root: one row
        return 1
    if len(fields) == 1 and numeric_key_type(fields[0].type):
        return _distinct_numeric(runs, fields, key_cache)
    keep = key_cache.fits(runs, fields)  # the scan that follows reads the same keys
    keys = pa.chunked_array([key_cache.encoded(k, fields, keep) for k in runs], pa.binary())
    return int(pc.count_distinct(keys).as_py())


# Rows of a run's keys read at a time by `_distinct_numeric` (2 MiB of `uint64`).
DISTINCT_BLOCK_ROWS = 1 << 18


def _distinct_numeric(runs: list[KeySpace], fields: list[Any], key_cache: KeyCache) -> int:
    """Keys in the union of sorted, unique runs of one numeric key (`_union_blocks`). Before,
    every run's keys were concatenated and sorted, and a major of 10M keys peaked ~600 MB above
    its baseline here."""
    return sum(len(u) for u in _union_blocks(runs, fields, key_cache))


def _union_blocks(runs: list[KeySpace], fields: list[Any], key_cache: KeyCache) -> Iterator[np.ndarray]:
    """The union of sorted, unique runs of one numeric key, in order, as sorted unique blocks:
    each step takes from every run its keys up to the smallest last key of the blocks read from
    runs not yet read to their end (so one run's block is used up every step). It holds one block
    per run (`DISTINCT_BLOCK_ROWS`), whatever the runs' rows."""
    rows = {k.id: k.rows for k in runs}
    read = dict.fromkeys(rows, 0)  # rows of each run read so far
    pending = {k.id: np.empty(0, np.uint64) for k in runs}  # read, not yet merged
    by_id = {k.id: k for k in runs}
    while True:
        for i, buf in pending.items():
            if not len(buf) and read[i] < rows[i]:
                stop = min(rows[i], read[i] + DISTINCT_BLOCK_ROWS)
                pending[i] = _key_block(key_cache, by_id[i], fields, read[i], stop)
                read[i] = stop
        live = [i for i, buf in pending.items() if len(buf)]
        if not live:
            return
        bounds = [pending[i][-1] for i in live if read[i] < rows[i]]
        parts = []
        for i in live:
            n = len(pending[i]) if not bounds else int(np.searchsorted(pending[i], min(bounds), side="right"))
            parts.append(pending[i][:n])
            pending[i] = pending[i][n:]
        yield sets.distinct(np.concatenate(parts))


def _key_block(key_cache: KeyCache, ks: KeySpace, fields: list[Any], start: int, stop: int) -> np.ndarray:
    """Numeric keys of rows `[start, stop)`: from memory when the key cache holds them, else
    read (only the chunks holding them)."""
    if key_cache.cached(ks):
        return key_cache.numeric(ks, fields)[start:stop]
    return key_cache.numeric_at(ks, fields, np.arange(start, stop))


# The scan's general path holds, per input row of what it merges, its key, run, row, liveness and
# fresh-cell location: ~200 B per row measured (`plan.REWRITE_BYTES_PER_ROW`). A rewrite scans its
# inputs in key slices of about `scan.cache_bytes // REWRITE_BYTES_PER_ROW` rows (a quarter of the
# memory budget's scan share, at least `MIN_SLICE_ROWS`), so that part is bounded by the budget,
# not the task. What it keeps per input row across slices (the pieces' cuts, the output keys of
# its displacement map) is far less: forced majors of the `bench.lsm_shapes` upserts shape, 1.2M
# and 6M input rows, peaked 145 and 250 MB above the process (~22 B a row more, 32 here).
MIN_SLICE_ROWS = 1 << 16
RETAINED_BYTES_PER_ROW = 32


def slice_rows(cache_bytes: int) -> int:
    """The input rows of one key slice of a rewrite under a scan cache of `cache_bytes`."""
    return max(MIN_SLICE_ROWS, cache_bytes // REWRITE_BYTES_PER_ROW)


def input_rows(task: CompactionTask) -> int:
    """The data rows `task` reads (what `CompactionTask.memory_bytes` was weighed by)."""
    return task.memory_bytes // REWRITE_BYTES_PER_ROW


def sliced_memory(task: CompactionTask, memory_budget: int) -> int:
    """The memory `task` needs as `execute` runs it, slice by slice, in a warehouse of
    `memory_budget` (`CompactionTask.memory_bytes` is a whole task's merge at once)."""
    rows = input_rows(task)
    per_slice = slice_rows(budget_split(memory_budget).scan_cache)
    return REWRITE_BYTES_PER_ROW * min(rows, per_slice) + RETAINED_BYTES_PER_ROW * rows


def _slices(view: TableState, layout: Layout, key_cache: KeyCache, rows: int) -> list[EncodedRange | None]:
    """Key slices of about `rows` input rows each, cut at root keys (a key and its subtree fall in
    one slice, `ranges.py`) taken from the largest root-level input run: its sparse index for a
    numeric key (no key read), else its keys read once. One unbounded slice for a small task."""
    runs = [k for k in view.key_spaces.values() if k.kind == "data" and k.level == ""]
    total = sum(k.rows for k in runs)
    if not runs or layout.root_keys == 0 or total <= rows:
        return [None]
    big = max(runs, key=lambda k: k.rows)
    fields = view.schema.key_fields("")[: layout.root_keys]
    step = max(1, big.rows // -(-total // rows))
    if len(fields) == 1 and numeric_key_type(fields[0].type):
        firsts = key_cache.index(big, fields).firsts
        every = max(1, step // INDEX_STEP)
        values = pa.array(firsts[every::every])
        bounds = encode_keys([values.cast(fields[0].type)]) if len(values) else pa.array([], pa.binary())
    else:
        keys = key_cache.keys(big, fields, keep=False)
        bounds = encode_keys(keys.take(pa.array(np.arange(step, big.rows, step))).columns)
    edges: list[bytes | None] = [None, *sorted({b for b in bounds.to_pylist() if b}), None]
    return [EncodedRange(a, b) for a, b in itertools.pairwise(edges)]


def _sliced_batches(
    view: TableState,
    level: str,
    fmt: Any,
    key_cache: KeyCache,
    within: EncodedRange | None,
    scan: ScanOptions,
    slices: list[EncodedRange | None],
) -> Iterator[pa.Table]:
    """The fresh records of `level`, slice after slice (`_slices`), in key order."""
    for piece in slices:
        r = within if piece is None else piece if within is None else within.intersect(piece)
        if r is not None and r.empty:
            continue
        yield from _fresh_batches(view, level, fmt, key_cache, r, scan)


def _fresh_batches(
    view: TableState, level: str, fmt: Any, key_cache: KeyCache, within: EncodedRange | None, scan: ScanOptions
) -> Iterator[pa.Table]:
    plan = plan_scan(view, ScanRequest.resolve(view.schema, level=level))
    if within is not None:
        plan = narrow(plan, within)
    scan = blobcopy.ref_options(scan, plan, view)
    for b in run_scan(ScanContext(plan, fmt, key_cache, scan, admit=False)):
        if b.num_rows:
            yield blobcopy.as_sources(_flatten(pa.Table.from_batches([b]), view.schema, level), plan, scan)


def _flatten(t: pa.Table, schema: Schema, level: str) -> pa.Table:
    """Scan output (groups as structs) → key columns + one column per leaf, named by its path
    within the level."""
    keys = schema.key_names(level)
    cols: dict[str, Any] = {k: t.column(k) for k in keys}
    for name in t.column_names:
        if name not in keys:
            _leaves(name, t.column(name), cols)
    return pa.table(cols)


def _leaves(prefix: str, arr: pa.ChunkedArray, cols: dict[str, Any]) -> None:
    """Add the leaf columns of `arr` to `cols`, named by their paths. (A module function: a
    recursive closure is a reference cycle that kept each scan batch's columns alive until the
    cyclic collector ran, rarely, as few Python objects are allocated: a 4M-key major held ~23 MB
    more for every 1M rows written.)"""
    if pa.types.is_struct(arr.type) and not isinstance(arr.type, pa.ExtensionType):
        for i, sub in enumerate(arr.type):
            # StructArray.flatten() folds the struct's validity into its children.
            child = pa.chunked_array([c.flatten()[i] for c in arr.chunks], sub.type)
            _leaves(f"{prefix}.{sub.name}", child, cols)
    else:
        cols[prefix] = arr


def _pieces(batches: Iterator[pa.Table], layout: Layout, cuts: list[bytes], target: int | None) -> Iterator[pa.Table]:
    """Cut a key-ordered stream into pieces at the boundaries `cuts` (root-key prefixes), at
    every change of partition prefix, and, when `target` is set, at the first change of root key
    after every `target` rows."""
    pending: list[pa.Table] = []
    rows = 0
    bi = 0
    part: bytes | None = None  # the partition prefix of the pending rows

    def flush() -> Iterator[pa.Table]:
        nonlocal pending, rows
        if pending:
            yield pa.concat_tables(pending).combine_chunks()
        pending, rows = [], 0

    for t in batches:
        while t.num_rows:
            n = t.num_rows
            if layout.partition_keys:  # cut at the first change of partition
                parts = prefix_keys(t.columns, layout.partition_keys)
                if part is not None and parts[0].as_py() != part:
                    yield from flush()
                part = parts[0].as_py()
                changes = change_points(parts)
                n = int(changes[0]) if len(changes) else n
            if bi < len(cuts):
                below = _count_below(t, layout.root_keys, cuts[bi])
                if below == 0:  # at the cut
                    yield from flush()
                    bi += 1
                    continue
                # the rows before the cut take the `target` path below like any others, so the
                # pieces do not depend on where scan batches end (a Spark part ends at the cut)
                n = min(n, below)
            pending.append(t.slice(0, n))
            rows += n
            t = t.slice(n)
            while target is not None and rows > target:
                whole = pa.concat_tables(pending).combine_chunks()
                # the root-key changes at or after row `target`: only the rows from `target - 1` encoded
                before = max(target, 1) - 1
                after = change_points(prefix_keys([c.slice(before) for c in whole.columns], layout.root_keys)) + before
                if not len(after):
                    pending = [whole]
                    break
                c = int(after[0])
                yield whole.slice(0, c)
                pending, rows = [whole.slice(c)], whole.num_rows - c
    yield from flush()


def _count_below(t: pa.Table, root_keys: int, bound: bytes) -> int:
    """The rows of key-ordered `t` whose root-key prefix is below `bound`: all of them when
    its last row's is (most batches: only the last row encoded), else counted."""
    if prefix_key(t.columns, root_keys, t.num_rows - 1) < bound:
        return t.num_rows
    prefixes = prefix_keys(t.columns, root_keys)
    return int(pc.sum(pc.less(prefixes, pa.scalar(bound, pa.binary()))).as_py() or 0)


def _by_presence(
    view: TableState, level: str, batches: Iterator[pa.Table], key_cache: KeyCache
) -> Iterator[tuple[Iterator[pa.Table], set[int]]]:
    """A merge window's fresh records split by which columns hold a cell: (batches, columns)
    per output run.

    A run's fragments each cover all of its rows, so run `r` holds a cell of column `c` for each
    of its keys iff `c` is in its column set; the rows of the merged result are grouped by the
    union of the column sets of the runs holding them, one output run per group. Usually there
    is one group (writes name the same columns): the batches then stream through as they come,
    with no key lookup; several groups hold the window's merged rows to split them.
    """
    fields = view.schema.key_fields(level)
    names = [f.name for f in fields]
    runs = [k for k in view.key_spaces.values() if k.kind == "data" and k.level == level]
    col_sets: dict[str, frozenset[int]] = {k.id: frozenset() for k in runs}
    for f in view.fragments.values():
        if f.key_space in col_sets:
            col_sets[f.key_space] |= frozenset(f.column_ids)
    distinct = sorted(set(col_sets.values()), key=sorted)
    if len(distinct) == 1:
        yield batches, set(distinct[0])
        return
    bit = {s: 1 << i for i, s in enumerate(distinct)}
    parts = list(batches)
    if not parts:
        return
    out = pa.concat_tables(parts).combine_chunks()
    enc = encode_keys([out.column(n) for n in names]) if names else pa.array([b""] * out.num_rows, pa.binary())
    pattern = np.zeros(out.num_rows, dtype=np.int64)
    for r in runs:
        if not names:
            pattern |= bit[col_sets[r.id]]
            continue
        hit = pc.is_in(enc, value_set=key_cache.encoded(r, fields))
        pattern[np.asarray(hit.to_numpy(zero_copy_only=False), dtype=bool)] |= bit[col_sets[r.id]]
    for value in sets.distinct(pattern):
        cols = set().union(*(s for s in distinct if bit[s] & int(value)))
        rows = np.nonzero(pattern == value)[0]
        yield iter([out.take(pa.array(rows))]), cols


def _merge_tombstones(
    files: TableFiles,
    schema: Schema,
    view: TableState,
    staged: StagedWrite,
    within: EncodedRange | None,
    key_cache: KeyCache,
) -> None:
    """One tombstone run per level: the union of the window's tombstone runs (module doc)."""
    by_level: dict[str, list[KeySpace]] = {}
    for k in view.key_spaces.values():
        if k.kind == "tombstone":
            by_level.setdefault(k.level, []).append(k)
    for level, tombs in by_level.items():
        fields = schema.key_fields(level)
        keys = pa.concat_tables([key_cache.keys(k, fields) for k in tombs])
        if within is not None and fields:
            keys = keys.filter(range_mask(within, encode_keys(keys.columns)))
        keys = sorted_unique(keys) if fields else keys.slice(0, 1)
        if keys.num_rows:
            write_key_space(files, level, keys, staged, kind="tombstone")


def _write_piece(
    files: TableFiles,
    schema: Schema,
    level: str,
    piece: pa.Table,
    staged: StagedWrite,
    opts: WriteOptions,
    outputs: dict[str, list[tuple[str, MapKeys]]],
    present: set[int] | None = None,
) -> str:
    """One output run (its key space's id). `present`: the column ids holding cells (merge); None (major): every
    column that is not all null (see the module doc)."""
    keys = schema.key_names(level)
    ks_id = write_key_space(files, level, piece.select(keys), staged)
    fields = schema.key_fields(level)
    enc: MapKeys
    if _integer_key(fields):
        enc = as_numpy(piece.column(keys[0]))
    else:
        enc = encode_keys(piece.select(keys).columns) if keys else pa.array([b""] * piece.num_rows, pa.binary())
    outputs.setdefault(level, []).append((ks_id, enc))
    by_path = {c.path: c for c in schema.columns_of(level)}
    by_group: dict[str, list[tuple[Column, pa.ChunkedArray]]] = {}
    for name in piece.column_names:
        if name in keys:
            continue
        data = piece.column(name)
        col = by_path[name]
        if (col.id not in present) if present is not None else data.null_count == len(data):
            continue
        by_group.setdefault(col.group, []).append((col, data))
    for group, cols in by_group.items():
        write_fragments(files, level, group, ks_id, cols, staged, opts)
    return ks_id
