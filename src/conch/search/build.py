"""Building index files, in three steps that a single process and a Spark job share (DESIGN §6a,
issue 31; `conch.engines.spark.build_indexes` runs steps 1b and 2 on executors):

1. **plan** (`plan`): the runs of a version that lack a current file of a vector index, with at
   least `min_rows` rows: one `BuildTask` each (plain data: it is pickled to executors);
2. **train** (`sample` per task, `train` once per index): a structure that needs training (IVF)
   is trained once, on a deterministic sample of every run to build (each run contributes its
   share, every n-th vector), so all files of one build share one quantizer; flat and HNSW need
   none;
3. **encode** (`encode_run` per task): the run's vectors are streamed, one scan batch at a time,
   into a copy of the trained structure; once the part being built holds the memory budget's
   `index_part` (1/8; `vectors.bytes_per_vector` estimates a vector's bytes in the structure,
   plus its keys) it is written as one file and a new copy starts, so a run's index is a row range
   (= key range) of parts; **commit** (`commit_files`): one `"index"` WAL entry with every file.

The same tasks, samples and trained structure give the same files wherever step 3 runs (flat and
IVF add vectors deterministically), so a Spark build answers searches exactly as a local one
(tested). Memory: the scan's share of the budget (a decoded fragment, one batch), and one part
(the file is written streamed, `runs.write_file`), whatever the run's size:
a search asks every part of a run as one source each (`conch.search.query`), so the answers
with flat parts are those of one flat index over the run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from conch.files.manifest import IndexDef, IndexFile, TableState
from conch.files.storage import new_id
from conch.log.tablelog import TableLog
from conch.log.txn import Commit
from conch.log.wal import AddIndexFile, RemoveIndexFile, Transaction
from conch.model.budget import budget_split
from conch.search import runs, textfiles, vectors
from conch.search.runs import LogVersion, run_cells, run_fragments, runs_of, write_file

SAMPLE_PER_LIST = 256  # training vectors per IVF list: faiss's k-means uses at most 256 per centroid


@dataclass(frozen=True, slots=True)
class BuildTask:
    """One run's file of one index, over the table version `seq`."""

    index: str
    key_space: str
    rows: int
    seq: int


def plan(state: TableState, names: Sequence[str] | None = None, min_rows: int | None = None) -> list[BuildTask]:
    """The missing or stale files of the indexes `names` (default all) over runs of at
    least `min_rows` rows (default `runs.MIN_ROWS`), in a stable order."""
    floor = max(runs.MIN_ROWS if min_rows is None else min_rows, 1)
    return [
        BuildTask(d.name, ks.id, ks.rows, state.seq)
        for d in sorted(state.indexes.values(), key=lambda i: i.name)
        if names is None or d.name in names
        for ks, current in sorted(runs_of(state, d), key=lambda r: r[0].id)
        if not current and ks.rows >= floor
    ]


def needs_training(definition: IndexDef) -> bool:
    return definition.kind == "vector" and bool(vectors.json_options(definition)["index"] == "ivf")


def sample_size(definition: IndexDef) -> int:
    return int(vectors.json_options(definition)["nlist"]) * SAMPLE_PER_LIST


def _batches(source: Any, state: TableState, task: BuildTask) -> Any:
    """(keys, vectors) of the run's non-null vectors, one scan batch at a time."""
    d = state.indexes[task.index]
    for keys, values in run_cells(source, state, d, task.key_space):
        yield keys, vectors.as_matrix(values, d.dim)


def sample(source: Any, state: TableState, task: BuildTask, quota: int) -> np.ndarray:
    """About `quota` of the run's vectors, every n-th (deterministic), streamed."""
    d = state.indexes[task.index]
    step = max(1, task.rows // max(quota, 1))
    parts, seen = [], 0
    for _, matrix in _batches(source, state, task):
        first = (-seen) % step
        parts.append(matrix[first::step])
        seen += len(matrix)
    return np.concatenate(parts) if parts else np.zeros((0, d.dim), np.float32)


def quotas(tasks: Sequence[BuildTask], definition: IndexDef) -> list[int]:
    """Each task's share of the index's training sample, by its run's rows."""
    total = sum(t.rows for t in tasks) or 1
    return [math.ceil(sample_size(definition) * t.rows / total) for t in tasks]


def train(definition: IndexDef, samples: Sequence[np.ndarray]) -> bytes | None:
    """The trained, empty structure of `definition` serialised (None: it needs no training)."""
    if not needs_training(definition):
        return None
    data = np.concatenate([s for s in samples if len(s)] or [np.zeros((0, definition.dim), np.float32)])
    structure = vectors.empty(definition.dim, definition.metric, vectors.json_options(definition), len(data))
    if len(data):  # else it stays untrained and `encode_run` builds nothing
        with vectors.omp_threads(len(data), vectors.TEAM_ROWS):
            structure.train(vectors.prepare(data, definition.metric))
    return vectors.serialize(structure)


def part_budget(log: TableLog) -> int:
    """Bytes of one index part being built: the memory budget's `index_part` (tests shrink it to
    cut runs of a few rows into parts)."""
    return budget_split(log.warehouse.memory_budget).index_part


def encode_run(log: TableLog, state: TableState, task: BuildTask, trained: bytes | None) -> list[AddIndexFile]:
    """Write the task's index files (vectors streamed into the structure, cut into parts that fit
    the memory budget's `index_part`); their operations, none for a run without vectors. A text
    index's file is a tantivy index (`textfiles`), one per run. Writes nothing else and commits
    nothing."""
    d = state.indexes[task.index]
    frs = run_fragments(state, task.key_space, d.column_id)
    if d.kind == "text":
        texts = run_cells(LogVersion(log, state), state, d, task.key_space)
        op = textfiles.build_file(log.files.storage, log.files.table_id, d.name, task.key_space, frs, texts)
        return [] if op is None else [op]
    opts = vectors.json_options(d)

    def fresh() -> Any:
        return vectors.deserialize(trained) if trained is not None else vectors.empty(d.dim, d.metric, opts, task.rows)

    structure: Any = fresh()
    if not structure.is_trained:  # a structure planned without training (a lone IVF run)
        return []
    part_bytes = part_budget(log)
    per_vector = vectors.bytes_per_vector(d.dim, opts)
    out: list[AddIndexFile] = []
    keys: list[pa.Table] = []
    held = 0  # bytes of the part being built: its vectors in the structure and its keys

    def write_part() -> None:
        nonlocal structure, keys, held
        out.append(_write_part(log, d.name, task.key_space, frs, structure, keys))
        structure, keys, held = None, [], 0

    with vectors.omp_threads(min(task.rows, part_bytes // per_vector), vectors.TEAM_ROWS):
        for key_table, matrix in _batches(LogVersion(log, state), state, task):
            per_row = per_vector + -(-key_table.nbytes // max(key_table.num_rows, 1))
            start = 0
            while start < len(matrix):
                structure = fresh() if structure is None else structure
                take = min(len(matrix) - start, max(1, (part_bytes - held) // per_row))
                structure.add(vectors.prepare(matrix[start : start + take], d.metric))
                keys.append(key_table.slice(start, take))
                held, start = held + take * per_row, start + take
                if held + per_row > part_bytes:  # the part is full
                    write_part()
    if keys:
        write_part()
    return out


def _write_part(
    log: TableLog, index: str, key_space: str, frs: tuple[str, ...], structure: Any, keys: list[pa.Table]
) -> AddIndexFile:
    """One part's file: the structure streamed out with its keys in row order."""
    key_table = pa.concat_tables(keys).combine_chunks()
    fid = new_id()
    path = f"{log.files.table_id}/idx/{fid}.cix"
    size, checksum = write_file(log.files.storage, path, structure, key_table)
    return AddIndexFile(IndexFile(fid, index, key_space, path, key_table.num_rows, frs, size, checksum))


def commit_files(log: TableLog, state: TableState, added: Sequence[AddIndexFile], started: float) -> Commit | None:
    """One `"index"` commit of the built files (None when there are none); it removes the files
    of an older format that they replace (`runs.outdated`) from the manifest."""
    if not added:
        return None
    replaced = {
        f.id: RemoveIndexFile(f.id)
        for op in added
        for f in runs.outdated(state, state.indexes[op.file.index], op.file.key_space)
    }
    txn = Transaction(
        "index",
        (*replaced.values(), *added),
        f"built {len(added)} index files",
        state.seq,
        files=tuple(op.file.path for op in added),
        started_us=int(started * 1_000_000),
    )
    return log.commit(txn)


def trained_structures(source: Any, state: TableState, tasks: Sequence[BuildTask]) -> dict[str, bytes | None]:
    """Step 2 in this process: every index's trained structure, from its tasks' samples."""
    out: dict[str, bytes | None] = {}
    for name in dict.fromkeys(t.index for t in tasks):
        d = state.indexes[name]
        mine = [t for t in tasks if t.index == name]
        if needs_training(d):
            out[name] = train(d, [sample(source, state, t, q) for t, q in zip(mine, quotas(mine, d))])
        else:
            out[name] = None
    return out


def build_indexes(
    log: TableLog, state: TableState | None = None, names: Sequence[str] | None = None, min_rows: int | None = None
) -> Commit | None:
    """Build the missing or stale index files of `state` (default: the newest) in this process
    and commit them in one `"index"` commit; None when nothing needed building. Compaction calls
    it for its outputs (`conch.maintain.compaction.run.commit`)."""
    state = log.state() if state is None else state
    tasks = plan(state, names, min_rows)
    if not tasks:
        return None
    started = time.time()
    with log.staging():
        trained = trained_structures(LogVersion(log, state), state, tasks)
        added = [op for t in tasks for op in encode_run(log, state, t, trained[t.index])]
    return commit_files(log, state, added, started)
