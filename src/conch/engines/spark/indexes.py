"""Distributed index builds on Spark (issue 31): `conch.engines.spark.build_indexes(spark, "wh/t")`.

The same build as `Table.build_indexes()` (`conch.search.build`), its steps spread over a job:

1. **plan on the driver**: `build.plan(state)`, one task per run lacking a current index file;
2. **sample on executors, train on the driver**: for a structure that needs training (IVF), every
   task's run yields its share of a deterministic sample on an executor; the driver concatenates
   them in task order and trains the structure once (the trained, empty structure is shipped to
   the executors as bytes);
3. **encode on executors**: one Spark task per run streams the run's vectors into copies of the
   trained structure and writes the index files (parts within the memory budget), committing nothing;
4. **commit on the driver**: one `"index"` WAL entry with every file, through the table log's
   compare-and-swap (a run compacted away meanwhile makes it a `CommitConflictError`; its files
   are then unreferenced and `vacuum` removes them).

Tasks, samples and training are those of the local build, so the files (modulo ids) and the
searches answered from them are the same (tested against `Table.build_indexes()`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from conch.engines.spark.common import Location, open_table
from conch.log.txn import Commit
from conch.log.wal import AddIndexFile
from conch.search import build
from conch.search.runs import LogVersion


@dataclass(frozen=True)
class Part:
    """One Spark task: a build task of the planned version, with its sample quota or the trained
    structure. Plain data, pickled to the executors."""

    loc: Location
    task: build.BuildTask
    quota: int = 0
    trained: bytes | None = None


def build_indexes(
    spark: Any,
    path: str | None = None,
    *,
    names: Sequence[str] | None = None,
    min_rows: int | None = None,
    **options: str,
) -> Commit | None:
    """Build the missing or stale index files of a table with Spark and commit them at once;
    None when nothing needed building. `names`: only these indexes; `min_rows`: the smallest run
    that gets a file (default `conch.search.runs.MIN_ROWS`). `path` is `<warehouse>/<table>`, or
    pass `warehouse=` and `table=`; `options` are the data source's connection options."""
    loc = Location.from_options({**options, **({"path": path} if path else {})})
    log = loc.connect().table(loc.table).log
    state = log.state()
    tasks = build.plan(state, names, min_rows)
    if not tasks:
        return None
    started = time.time()
    sc = spark.sparkContext
    trained: dict[str, bytes | None] = {}
    for name in dict.fromkeys(t.index for t in tasks):
        d = state.indexes[name]
        mine = [t for t in tasks if t.index == name]
        if build.needs_training(d):
            parts = [Part(loc, t, q) for t, q in zip(mine, build.quotas(mine, d))]
            samples = sc.parallelize(parts, len(parts)).map(sample_part).collect()
            trained[name] = build.train(d, samples)
        else:
            trained[name] = None
    parts = [Part(loc, t, trained=trained[t.index]) for t in tasks]
    added = sc.parallelize(parts, len(parts)).flatMap(encode_part).collect()
    return build.commit_files(log, state, added, started)


def _version(part: Part) -> tuple[Any, Any]:
    log = open_table(part.loc).log
    return log, log.state_at(version=part.task.seq)


def sample_part(part: Part) -> np.ndarray:
    """The run's share of the training sample, read on the executor."""
    log, state = _version(part)
    return build.sample(LogVersion(log, state), state, part.task, part.quota)


def encode_part(part: Part) -> list[AddIndexFile]:
    """The run's index files (its parts), written on the executor; their operations go back to
    the driver."""
    log, state = _version(part)
    with log.staging():
        return build.encode_run(log, state, part.task, part.trained)
