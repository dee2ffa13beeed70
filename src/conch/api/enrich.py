"""Enrichment: derived columns computed from a scan and written back by key (`Table.enrich`).

>>> def lengths(batch):  # keys + inputs in, new columns out (same rows, same order)
...     return {"n": pc.binary_length(batch.column("audio").field("bytes"))}
>>> t.enrich(lengths, inputs=["audio.bytes"], into="stats")  # doctest: +SKIP

A **run** pins the table version it reads (`pin`, the newest commit time when it starts) and
writes the outputs as the column group `into`: one commit per key range, each naming only the
key columns and `into`, so no other group's files are rewritten (Conch writes only the columns a
write names).

**Incremental.** A run's commits carry a summary `enrich {...}` naming the enrichment's
signature (level, inputs, output group, filter), the run id, its pin, and which key range; a
run that finished commits a last marker. The next run recomputes only keys that some *other*
commit wrote since the previous run's pin (found with `since=`/`asof=` scans over the commits in
between, skipping the enrichment's own commits), so new keys and keys whose inputs changed are
recomputed, and a run over an unchanged table writes nothing. Writes that touch only other
columns of a key recompute it too (cells do not say which columns a write named; recomputing
is safe). `full=True` recomputes every key (after changing `fn`, say).

**Resumable.** The keys to compute are a deterministic function of (previous pin, pin), cut
into ranges of `range_rows` keys. A run killed part-way leaves its committed ranges and no
marker; the next call finds the unfinished run in the history, keeps its pin and range plan,
and computes only the ranges that have no commit yet.

**Engines.** `engine="local"` runs ranges in a process pool (`workers`, default: the CPUs; the
first range runs in this process so that concurrent commits never race to add the same new
columns) or in this process (`workers=0`, or when `fn` cannot be pickled).
`engine="spark"` (needs `spark=`) runs the pipeline's `mapInArrow` job
(`conch.engines.spark.enrich`) over the same keys in one Spark commit. A rich progress bar counts
ranges when stderr is a terminal.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from conch.api.handle import TableLike
from conch.api.snapshot import Snapshot
from conch.errors import EnrichError
from conch.expr.tree import Expr
from conch.log.tablelog import TableLog
from conch.log.wal import Transaction
from conch.log.warehouse import Connection
from conch.model.keys import KeySet, encode_keys, to_key_predicate
from conch.scan import Scan
from conch.scan.columns import narrowest_column
from conch.scan.request import ScanRequest
from conch.write.stage import StagedWrite, stage_write

Fn = Callable[[pa.RecordBatch], Any]
SUMMARY = "enrich "
RANGE_ROWS = 65_536
# Engines other than "local" live above the core and register themselves when imported
# (`register_engine`): "spark" when `conch.engines.spark` is (`conch.engines.spark.enrich`).
ENGINES: dict[str, Callable[..., tuple[list[int], int]]] = {}


@dataclass(frozen=True)
class EnrichResult:
    """What a run did: keys it computed, ranges committed now or found done, its commits."""

    run: str
    pin: int
    keys: int
    ranges: int
    ranges_skipped: int  # already committed by an earlier, interrupted attempt of this run
    rows_written: int
    commits: list[int]

    @property
    def wrote(self) -> bool:
        return self.rows_written > 0


@dataclass(frozen=True)
class RangeJob:
    """One key range of a run: everything a worker process needs (picklable)."""

    snapshot: Snapshot  # the version the run reads (its pin); reopened in a worker as `connect()` did
    request: ScanRequest  # the inputs of the range's keys (`keys=`) the filter admits, at the level
    fn: Fn
    into: str
    batch_rows: int
    summary: str
    complete: bool  # the run computes every key of the level (a first run without `where`)

    @property
    def level(self) -> str:
        return self.request.level

    @property
    def inputs(self) -> tuple[str, ...]:
        """The input columns (full paths)."""
        return self.request.columns

    @property
    def key_names(self) -> list[str]:
        return self.snapshot.state.schema.key_names(self.level)

    @property
    def table(self) -> str:
        return self.snapshot.name

    @property
    def pin(self) -> int:
        """The commit time the run reads as of (µs)."""
        return self.snapshot.asof if self.snapshot.asof is not None else self.snapshot.time


def enrich(
    table: TableLike,
    fn: Fn,
    inputs: Sequence[str],
    into: str,
    *,
    where: Expr | None = None,
    level: str | None = None,
    batch_rows: int = 4096,
    range_rows: int = RANGE_ROWS,
    full: bool = False,
    engine: str = "local",
    workers: int | None = None,
    progress: bool | None = None,
    spark: Any = None,
) -> EnrichResult:
    """Compute `fn` over `inputs` and write its columns as group `into`; see the module doc."""
    if not into or into.startswith(".") or into.endswith("."):
        raise EnrichError(f"into={into!r}: name the output column group, e.g. into='features'")
    if batch_rows < 1 or range_rows < 1:
        raise EnrichError("batch_rows and range_rows must be positive")
    latest = table.snapshot()
    probe = latest.scan(*inputs, where=where, level=level)  # validates inputs, filter and level
    lvl = probe.plan.level
    sig = _signature(lvl, [c.full_path for c in probe.plan.columns], into, where)
    history = table.history()
    runs = _runs(history, sig)
    last = list(runs.values())[-1] if runs else None
    unfinished = last if last is not None and not last["done"] else None  # killed: resume it
    if unfinished is not None and not full:
        run, pin, prev = unfinished["run"], unfinished["pin"], unfinished["prev"]
        pinned = table.snapshot(asof=pin)
    else:
        run, pin, pinned = uuid.uuid4().hex[:12], latest.time, latest
        done = [r for r in runs.values() if r["done"]]
        prev = None if full or not done else max(r["pin"] for r in done)
    own = {seq for r in runs.values() for seq in r["seqs"]}
    keys = _work_keys(table, pinned, probe, lvl, where, prev, history, own)
    ranges = [keys.slice(i, range_rows) for i in range(0, keys.num_rows, range_rows)]
    finished = runs.get(run, {}).get("ranges", set())
    head = {"sig": sig, "run": run, "pin": pin, "prev": prev, "n": len(ranges)}
    fields = probe.plan.key_fields
    jobs = [
        RangeJob(
            pinned,
            probe.request.replace(keys=to_key_predicate(r, fields)),
            fn,
            into,
            batch_rows,
            SUMMARY + json.dumps({**head, "i": i}),
            prev is None and where is None,
        )
        for i, r in enumerate(ranges)
        if i not in finished
    ]
    if engine == "local":
        commits, rows = _run_local(jobs, workers, progress, table.log)
    else:
        if engine not in ENGINES:
            raise EnrichError(
                f"engine={engine!r}: use 'local' or one of {sorted(ENGINES) or ['spark']} "
                "(import conch.engines.spark to register 'spark')"
            )
        commits, rows = ENGINES[engine](table, jobs, spark=spark)
    if ranges:  # the marker: this run is done, the next one starts from its pin
        marker = SUMMARY + json.dumps({**head, "done": True, "seqs": commits})

        def stage_marker() -> Transaction:
            state = table.state()
            return StagedWrite(state.schema, state.schema, [], base_seq=state.seq).transaction("enrich", marker)

        commits.append(table.log.transact(stage_marker).seq)
    return EnrichResult(run, pin, keys.num_rows, len(ranges), len(ranges) - len(jobs), rows, commits)


# ----- which keys -----------------------------------------------------------------------------
def _signature(level: str, inputs: list[str], into: str, where: Expr | None) -> str:
    text = json.dumps([level, inputs, into, repr(where)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _runs(history: Sequence[Any], sig: str) -> dict[str, dict[str, Any]]:
    """The runs of this enrichment in the history, oldest first: pin, ranges committed, done."""
    runs: dict[str, dict[str, Any]] = {}
    for c in history:
        if c.kind != "enrich" or not c.summary.startswith(SUMMARY):
            continue
        d = json.loads(c.summary[len(SUMMARY) :])
        if d.get("sig") != sig:
            continue
        r = runs.setdefault(d["run"], {"run": d["run"], "pin": d["pin"], "prev": d["prev"], "ranges": set()})
        r.setdefault("seqs", set()).add(c.seq)
        r["done"] = r.get("done", False) or bool(d.get("done"))
        if "i" in d:
            r["ranges"].add(d["i"])
        r["seqs"].update(d.get("seqs", []))
    return runs


def _work_keys(
    table: TableLike,
    pinned: Snapshot,
    probe: Any,
    level: str,
    where: Expr | None,
    prev: int | None,
    history: Sequence[Any],
    own: set[int],
) -> pa.Table:
    """The sorted, unique keys a run computes: all keys (first run), else keys other commits wrote
    in (prev, pin] (`pinned`: the version of the pin)."""
    narrow = narrowest_column(probe.plan.columns)
    names = probe.plan.schema.key_names(level)
    pin = pinned.asof if pinned.asof is not None else pinned.time
    if prev is None:
        return pinned.scan(narrow, where=where, level=level or None).to_arrow().select(names)
    parts: list[pa.Table] = []
    window: list[Any] = []
    for c in [*history, None]:
        if c is not None and prev < c.time <= pin and c.seq not in own:
            window.append(c)
            continue
        if window:  # a maximal run of other commits: one since/asof scan finds the keys they wrote
            sc = table.snapshot(asof=window[-1].time).scan(narrow, since=window[0].time, level=level or None)
            parts.append(sc.to_arrow().select(names))
            window = []
    if not parts:
        return probe.schema.empty_table().select(names)
    keys = pa.concat_tables(parts)
    keys = keys.combine_chunks()
    if where is not None:  # only changed keys the filter admits (as of the pin)
        sc = pinned.scan(narrow, where=where, keys=KeySet(pc.unique(encode_keys(keys.columns))), level=level or None)
        keys = sc.to_arrow().select(names).combine_chunks()
    enc = encode_keys(keys.columns)
    order = pc.sort_indices(enc)
    keys, enc = keys.take(order), enc.take(order)
    if keys.num_rows > 1:
        distinct = pc.not_equal(enc.slice(1), enc.slice(0, len(enc) - 1))
        keep = pa.concat_arrays([pa.array([True]), distinct])
        keys = keys.filter(keep)
    return keys


# ----- computing a range ----------------------------------------------------------------------
def compute_range(job: RangeJob) -> tuple[int, int]:
    """Compute and commit one key range (in any process: the job's snapshot reopens the
    warehouse as `connect()` reached it); returns (commit seq, rows written)."""
    log = job.snapshot.log
    scan = Scan(job.snapshot, job.request)
    outputs = [out for batch in _batches(scan.to_record_batches(), job.batch_rows) for out in [apply_fn(job, batch)]]
    rows = sum(o.num_rows for o in outputs)

    def stage() -> Transaction:
        state = log.state()
        if rows:
            data = pa.concat_tables(outputs)
            staged = stage_write(log.files, state, data, job.level, log.warehouse.write_options, evolve=True)
        else:  # nothing to write (keys deleted meanwhile): the commit still marks the range done
            staged = StagedWrite(state.schema, state.schema, [], base_seq=state.seq)
        return staged.transaction("enrich", job.summary)

    return log.transact(stage).seq, rows


def require_reopenable(connection: Connection, what: str) -> None:
    """`EnrichError` unless other processes can reopen the warehouse as `connect()` reached it
    (`Warehouse.connection`): a Metastore object cannot be named to them."""
    if not connection.reopenable:
        raise EnrichError(
            f"{what} needs a warehouse other processes can reopen: connect() with the metastore's URI, "
            "not a Metastore object"
        )


def _batches(reader: pa.RecordBatchReader, rows: int) -> Iterator[pa.RecordBatch]:
    for b in reader:
        for i in range(0, b.num_rows, rows):
            yield b.slice(i, rows)


def apply_fn(job: RangeJob, batch: pa.RecordBatch) -> pa.Table:
    """`fn` on one batch, as key columns + the `into` group."""
    out = job.fn(batch)
    try:
        t = _as_table(out)
    except (TypeError, pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise EnrichError(
            f"enrich fn returned {type(out).__name__}: return a RecordBatch, Table or dict of arrays ({e})"
        ) from e
    if t.num_rows != batch.num_rows:
        raise EnrichError(
            f"enrich fn returned {t.num_rows} rows for a batch of {batch.num_rows}: one output row per input row, in order"
        )
    if not t.num_columns:
        raise EnrichError("enrich fn returned no columns")
    group = pa.StructArray.from_arrays([c.combine_chunks() for c in t.columns], fields=list(t.schema))
    parts = job.into.split(".")
    value: pa.Array = group
    for name in reversed(parts[1:]):
        value = pa.StructArray.from_arrays([value], names=[name])
    names = job.key_names
    return pa.Table.from_arrays([*(batch.column(n) for n in names), value], names=[*names, parts[0]])


def _as_table(out: Any) -> pa.Table:
    if isinstance(out, pa.Table):
        return out
    if isinstance(out, pa.RecordBatch):
        return pa.Table.from_batches([out])
    if isinstance(out, dict):
        return pa.table({k: v if isinstance(v, pa.Array | pa.ChunkedArray) else pa.array(v) for k, v in out.items()})
    if hasattr(out, "to_dict") and hasattr(out, "columns"):  # pandas
        return pa.Table.from_pandas(out, preserve_index=False)
    raise TypeError(f"unsupported output {type(out).__name__}")


# ----- running ranges -------------------------------------------------------------------------
def _run_local(
    jobs: list[RangeJob], workers: int | None, progress: bool | None, log: TableLog
) -> tuple[list[int], int]:
    """The ranges in this process (`workers=0`, one range, or an fn a pool cannot take) or, the
    first done here, in a pool of processes that reopen the warehouse as `connect()` did."""
    if not jobs:
        return [], 0
    picklable, reopenable = _picklable(jobs[0].fn), log.warehouse.connection.reopenable
    pool_ok = workers != 0 and len(jobs) > 1 and picklable and reopenable
    if workers is not None and workers > 0:
        if not picklable:
            raise EnrichError(
                "workers > 0 needs a picklable fn (a module-level function); use workers=0 or define it at module level"
            )
        require_reopenable(log.warehouse.connection, "workers > 0 (use workers=0 otherwise)")
    n = workers or os.cpu_count() or 1
    commits: list[int] = []
    rows = 0
    with _progress(len(jobs), progress) as advance:
        seq, r = compute_range(jobs[0])  # first: adds the new columns before anyone races to
        commits.append(seq)
        rows += r
        advance()
        if pool_ok and n > 1:
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")  # no inherited threads or connections
            with ProcessPoolExecutor(max_workers=min(n, len(jobs) - 1), mp_context=ctx) as pool:
                for seq, r in pool.map(compute_range, jobs[1:]):
                    commits.append(seq)
                    rows += r
                    advance()
        else:
            for job in jobs[1:]:
                seq, r = compute_range(job)
                commits.append(seq)
                rows += r
                advance()
    return commits, rows


def _picklable(fn: Fn) -> bool:
    try:
        pickle.dumps(fn)
    except Exception:
        return False
    return True


class _progress:
    """A rich progress bar over ranges, shown only on a terminal (or when asked)."""

    def __init__(self, total: int, show: bool | None) -> None:
        self.total = total
        self.show = sys.stderr.isatty() if show is None else show
        self.bar: Any = None

    def __enter__(self) -> Callable[[], None]:
        if not self.show:
            return lambda: None
        from rich.console import Console
        from rich.progress import Progress

        self.bar = Progress(console=Console(stderr=True), transient=True)
        self.bar.start()
        task = self.bar.add_task("enrich: key ranges", total=self.total)
        return lambda: self.bar.advance(task)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def register_engine(name: str, runner: Callable[..., tuple[list[int], int]]) -> None:
    """Add an engine: `runner(table, jobs, **options) -> (commit seqs, rows written)`."""
    ENGINES[name] = runner


__all__ = ["EnrichResult", "RangeJob", "apply_fn", "compute_range", "enrich", "register_engine"]
