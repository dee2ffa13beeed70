"""Issue 30's matrix: the LSM tree judged on a family of write shapes, not one
(`python -m bench.lsm_shapes`, `--small` for a quick run; results in
`bench/results/lsm_shapes*.json`).

For each family × size, the same history is written three ways, each ingest in a fresh
subprocess (its own peak RSS, `VmHWM`):

- **default**: `conch.Policy()` with the background settle postponed (the commit-time trigger
  runs as always; `bench.compaction.unsettled`), so the reads "right after the last commit" are
  not raced by it; then `wait_for_maintenance()` settles it and the reads are taken again;
- **auto-off**: `conch.Policy(auto=False)`;
- **once**: the final fresh rows in one write: the denominator of every read ratio.

Per side: the ingest's wall and CPU seconds, bytes compactions wrote (a move writes none;
`bench.compaction.bytes_by_kind`), L0/L1 runs left and peak RSS. Reads (full scan, 1 % filter
`a < 0.01`, 50-key take) are medians alternated rep by rep with the same query on `once`
(`bench.systems.interleaved`), printed as ratios. `--before PATH` runs the default side a second
time with `PYTHONPATH=PATH/src` (another checkout: before/after on the same machine, same run);
its settle, `compact()` and every read run in children with that code too (until issue 30's
`compact()` pass the settle and `compact()` ran in this process, and until its eighth pass the
reads after the last commit, settled and compacted did: the "before" columns measured this
checkout's reads of the other's tables). `compact()`'s seconds, bytes written and runs left are printed below.

Families (keys `uint64`; `a`: floats with two decimals, so 1 % of rows hold 0.00; `b`: derived
from the key, compressible as real measurements are):

- `bulk_reader`: one write of a sorted `RecordBatchReader` (1M-row batches at full scale);
- `unsorted_table`: one write of a table of shuffled keys;
- `appends`: many commits of sorted, time-ordered appends;
- `upserts`: a base load, then commits of full rows on random keys;
- `partial`: a base load, then commits of column `a` only on random keys;
- `deletes`: a base load, then upserts and deletes of random keys, interleaved;
- `two_groups`: spec/001's shape: one commit of `a`/`b`, one of a second column group `m`.

- `ingest`: issue 30's read shape: sorted appends of 0.2 % of the keys per commit (4 `float64`;
  500 commits at 1M keys), then commits upserting `a` on 0.2 % of the keys at random.

- `spark` (only with `--families spark`: a Spark session per run, minutes at 5M keys): one Spark
  job (local[2], `conch.engines.spark.session`) writing the sorted keys from 4 range-partitioned
  tasks (`repartitionByRange`, as `conch.apps.pipelines.ingest`) in one commit; `a` and `b`
  derived from the key (`spark_rows`), so the local side writes the same rows. Its **default**
  side is the job as it runs by default: its commit worker runs the commit-time trigger with the
  default `Policy()` (no background settle; `conch.engines.spark.common.Location.connect`); its
  **auto-off** side the same job with `.option("autoCompact", "false")`; `once` the same rows
  written once locally with auto off. What the job's commit and the driver's settle did is
  printed from the table's history. Wall and CPU are the
  driver process's (the tasks run in Spark's Python workers, outside its CPU and peak RSS); the
  clock starts after the session is up and warmed on a throwaway table. No reads during the
  ingest: one commit shows nothing before it lands.

Read ratios are taken four times: **after** the last commit (the settle postponed), **during**
the ingest (the default side's ingest run again in its own subprocess with `conch.Policy()` as
it runs in use, background settle included, and a reader thread scanning the newest version
again and again, each query alternated with the same query on `once`: `_Reader`), **settled**
(`wait_for_maintenance()`) and **compacted** (after `compact()`). **Each version** (since issue
30's seventh pass): the default side's ingest once more, each sampled version of its second half
read between commits by the writing thread (`_VersionReads`): the first read of every new
version, with no thread contending for the interpreter (the "during" reader shares it with the
writer, and its medians moved by 2x between runs of unchanged code).

`--write-reps N` ingests each side N times, the sides alternated, and keeps the fastest (the
reads are of the last): one ingest of unchanged code beside another moved by up to 20 % on this
shared machine.

`--bulk 50000000,100000000` measures only the one-write bulk load at those key counts, the write
side (default beside auto off; no `once` side and no reads), in minutes rather than hours;
`--bulk-families ingest` the write side of other families at those counts (peak RSS, runs left).

Not built: the Lance read shapes of the issue (`python -m bench.selective --parts shapes` has those
reads).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench import systems as S
from bench.rss import peak_rss

RESULTS = Path(__file__).parent / "results"
SCHEMA = pa.schema([("id", pa.uint64()), ("a", pa.float64()), ("b", pa.float64())])
FAMILIES = ("bulk_reader", "unsorted_table", "appends", "upserts", "partial", "deletes", "two_groups", "ingest")
EXTRA_FAMILIES = ("spark",)  # selectable with --families, not in the default run (a Spark session each)
SPARK_TASKS = 4  # the Spark family's write tasks (local[2])
SIZES = {"full": (1_000_000, 5_000_000), "small": (50_000, 250_000)}
COMMITS = {"full": 100, "small": 40}  # commits of the many-commit families


def rows(ids: np.ndarray, seed: int, wide: bool = False) -> pa.Table:
    rng = np.random.default_rng(seed)
    a = np.round(rng.random(len(ids)), 2)
    t = pa.table([pa.array(ids, pa.uint64()), a, ids.astype(np.float64) * 0.25], schema=SCHEMA)
    if wide:  # issue 30's read shape: 4 float64
        t = t.append_column("c", pa.array(rng.random(len(ids)))).append_column("d", pa.array(rng.random(len(ids))))
    return t


Op = tuple[str, Any]  # ("write", table | reader factory) or ("delete", keys)


def spark_rows(ids: np.ndarray) -> pa.Table:
    """The Spark family's rows, computed from the key alone so the Spark job and the local write
    produce the same ones: `a` = `(id * 7919 % 100) / 100` (1 % hold 0.00), `b` = `id * 0.25`."""
    a = ((ids * np.uint64(7919)) % np.uint64(100)).astype(np.float64) / 100
    return pa.table([pa.array(ids, pa.uint64()), a, ids.astype(np.float64) * 0.25], schema=SCHEMA)


def spark_job(path: str, auto_compact: bool) -> Callable[[int], None]:
    """A Spark session (local[2]) warmed on a throwaway table of warehouse `path`, and the job
    the clock holds: `n` sorted keys written into table `t` from `SPARK_TASKS` range-partitioned
    tasks as one commit, as `conch.apps.pipelines.ingest` writes (option `autoCompact`)."""
    import conch.engines.spark

    spark = conch.engines.spark.session(
        "conch-lsm-shapes", conf={"spark.driver.memory": "2g", "spark.driver.host": "127.0.0.1"}
    )

    def job(table: str, n: int) -> None:
        df = spark.range(0, n, numPartitions=SPARK_TASKS).selectExpr(
            "id", "cast(id * 7919 % 100 as double) / 100 as a", "cast(id as double) * 0.25 as b"
        )
        w = df.repartitionByRange(SPARK_TASKS, "id").write.format("conch")
        w = w.options(warehouse=path, table=table, key="id", autoCompact=str(auto_compact).lower())
        w.mode("append").save()

    job("warmup", 1000)
    return lambda n: job("t", n)


def history(family: str, n: int, commits: int) -> Iterator[Op]:
    """The commits of one family at `n` keys, generated lazily (the generator's memory is one
    commit, not the history)."""
    rng = np.random.default_rng(7)
    batch = max(1000, n // 10)
    if family == "spark":  # the local side of the Spark family: its rows, in one write
        yield "write", spark_rows(np.arange(n, dtype=np.uint64))
        return
    if family == "bulk_reader":
        step = min(batch, 1_000_000)  # 1M-row batches at every size (the reader's memory is one batch)

        def reader() -> pa.RecordBatchReader:
            parts = (rows(np.arange(s, min(n, s + step), dtype=np.uint64), s) for s in range(0, n, step))
            return pa.RecordBatchReader.from_batches(SCHEMA, (b for p in parts for b in p.to_batches()))

        yield "write", reader
        return
    if family == "unsorted_table":
        yield "write", rows(rng.permutation(n).astype(np.uint64), 1)
        return
    if family == "appends":
        per = n // commits
        for c in range(commits):
            yield "write", rows(np.arange(c * per, (c + 1) * per, dtype=np.uint64), c)
        return
    if family == "two_groups":
        yield "write", rows(np.arange(n, dtype=np.uint64), 1)
        m = pa.StructArray.from_arrays([pa.array(rng.random(n)), pa.array(rng.random(n))], ["x", "y"])
        yield "write", pa.table({"id": pa.array(np.arange(n, dtype=np.uint64)), "m": m})
        return
    per = max(1, n // 500)  # 0.2 % of the keys per commit
    if family == "ingest":  # sorted appends of `per` keys, then `commits` upserts of `a` on random keys
        for s in range(0, n, per):
            yield "write", rows(np.arange(s, min(n, s + per), dtype=np.uint64), s, wide=True)
        for c in range(commits):
            keys = np.sort(rng.choice(n, per, replace=False)).astype(np.uint64)
            yield "write", rows(keys, 100 + c).select(["id", "a"])
        return
    yield "write", rows(np.arange(n, dtype=np.uint64), 1)  # the base of the upsert families
    for c in range(commits):
        keys = np.sort(rng.choice(n, per, replace=False)).astype(np.uint64)
        if family == "upserts":
            yield "write", rows(keys, 100 + c)
        elif family == "partial":
            t = rows(keys, 100 + c)
            yield "write", t.select(["id", "a"])
        elif family == "deletes":
            yield ("delete", keys[: per // 2]) if c % 2 else ("write", rows(keys, 100 + c))


# ----- one ingest per subprocess ---------------------------------------------------------------
def _side_env(side: str, before: Path | None) -> dict[str, str] | None:
    """The environment of a side's children: `--before`'s code on its PYTHONPATH."""
    return {"PYTHONPATH": str(before / "src")} if side == "before" and before else None


def _reads_child(path: str, once_path: str, reps: int) -> dict[str, float]:
    """`read_ratios` of the table at `path` against the one at `once_path`, with this process's
    code (the side's: `--before`'s reads are its own code's, not this checkout's)."""
    import conch

    def table(p: str) -> Any:
        return conch.connect(p, maintenance=conch.Policy(auto=False)).table("t")

    return read_ratios(table(path), table(once_path), reps)


def _maintain_child(step: str, path: str) -> dict[str, Any]:
    """The settle (`wait_for_maintenance`) or `compact()` of the table at `path`, with this
    process's code: its seconds, and for `compact()` the bytes it wrote and the runs left."""
    import conch

    t = conch.connect(path).table("t")
    t0 = time.perf_counter()
    if step == "settle":
        t.wait_for_maintenance()
        return {"settle_s": round(time.perf_counter() - t0, 2)}
    done = t.compact()
    plan = t.maintenance_plan()
    return {
        "compact_s": round(time.perf_counter() - t0, 2),
        "compact_mb": round(done.bytes_written / 2**20, 2),
        "compacted_runs": [plan.l0_runs, plan.l1_runs],
    }


def _ingest_child(side: str, family: str, path: str, n: int, commits: int, source: str) -> dict[str, Any]:
    import vortex  # noqa: F401  (imported before the clock starts: a write's cost, not an import's)

    import conch
    from bench.compaction import bytes_by_kind

    if side == "auto-off":
        policy = conch.Policy(auto=False)
    elif side == "during":  # the default policy as it runs in use: the background settle too
        policy = conch.Policy()
    elif side == "versions":  # the default side again, each sampled version read by this thread
        policy = conch.Policy(settle_after=3600.0)
    else:
        policy = conch.Policy(settle_after=3600.0)
    schema = SCHEMA if family == "spark" else None  # Spark's `id` is a bigint: cast to the table's uint64
    t = conch.connect(path, maintenance=policy).create_table("t", [("id", pa.uint64())], schema)
    # lazily: a list held the whole history (the base load's rows: ~340 MB at 10M keys) beside the
    # table for the whole ingest, in every side's peak RSS
    ops: Iterable[Op] = history(family, n, commits) if side != "once" else []
    spark = spark_job(path, side != "auto-off") if family == "spark" and side in ("default", "auto-off") else None
    if spark is not None:  # the Spark family's default and auto-off sides are the Spark job
        ops = [("spark", n)]
    during = _Reader(path, source) if side == "during" else None
    versions = _VersionReads(path, source, _ops(family, n, commits)) if side == "versions" else None
    if side == "once":  # the final fresh rows of the auto-off table (`source`), in one write
        src = conch.connect(source, maintenance=conch.Policy(auto=False)).table("t")
        ops = [("write", src.scan().to_arrow())]
    c0, t0 = S.process_cpu(), time.perf_counter()
    written = done = 0
    for kind, data in ops:
        done += 1
        if kind == "delete":
            t.delete(pa.table({"id": pa.array(data, pa.uint64())}))
        elif spark is not None:
            spark(data)
        else:
            d = data() if callable(data) else data
            written += 0 if isinstance(d, pa.RecordBatchReader) else d.nbytes
            t.write(d)
        if versions is not None:
            versions.after(done)
    wall, cpu = time.perf_counter() - t0, S.process_cpu() - c0
    if during is not None:
        return {"during": during.stop(), "reads": during.reads}
    if versions is not None:
        return {"versions": versions.medians(), "version_reads": versions.reads}
    if spark is not None:  # the job committed in a Spark worker: the driver's table object is stale
        t = conch.connect(path, maintenance=policy).table("t")
    plan = t.maintenance_plan()
    kinds = bytes_by_kind(t)
    # The Spark job's commit worker runs the commit-time trigger (unless autoCompact=false):
    # what it did is the history after the job's entry.
    extra = {"history": [f"{c.kind}: {c.summary}" for c in t.history()]} if spark is not None else {}
    return {
        **extra,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "peak_rss_mb": round(peak_rss() / 2**20),
        "rewritten": kinds.get("compact", 0),
        "written": sum(v for k, v in kinds.items() if k != "compact"),
        "l0": plan.l0_runs,
        "l1": plan.l1_runs,
        "commits": done,
    }


class _Reads:
    """Reads of the table being written (`live`): full scan, 1 % filter and 50-key take, each
    alternated with the same query on the rows written once (`once`: the final rows). Full and
    filter ratios are per row out (the table grows under appends), the take's as measured;
    `medians` per query."""

    def __init__(self, path: str, once_path: str) -> None:
        import conch

        self.live = conch.connect(path, maintenance=conch.Policy(auto=False)).table("t")
        self.once = conch.connect(once_path, maintenance=conch.Policy(auto=False)).table("t")
        self.queries = _queries(self.once)
        self.final = self.once.scan().to_arrow().num_rows
        self.samples: dict[str, list[float]] = {k: [] for k in self.queries}
        self.reads = 0

    def round(self, least_share: float) -> None:
        """Each query once on the newest version, kept when the table holds at least
        `least_share` of its final rows."""
        share = 0.0
        for case, q in self.queries.items():
            t0 = time.perf_counter()
            got = q(self.live)
            mine = time.perf_counter() - t0
            t0 = time.perf_counter()
            q(self.once)
            base = time.perf_counter() - t0
            if case == "full":
                share = max(got.num_rows, 1) / max(1, self.final)
            if share >= least_share:
                self.samples[case].append(mine / base / (share if case != "take" else 1.0))
                self.reads += 1

    def medians(self) -> dict[str, float]:
        return {k: round(float(np.median(v)), 2) if v else float("nan") for k, v in self.samples.items()}


class _Reader(_Reads):
    """A reader thread during the ingest: `round` again and again, counted once the table holds
    half its final rows. `stop` returns the median ratio per query."""

    def __init__(self, path: str, once_path: str) -> None:
        import threading

        super().__init__(path, once_path)
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lsm-shapes-reader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._read()
        except BaseException as e:  # handed to `stop`: a failed read must fail the bench
            self.error = e

    def _read(self) -> None:
        from conch.errors import SchemaError

        while not self._stop.is_set():
            try:
                self.round(0.5)
            except SchemaError:  # before the first commit of the filtered column
                time.sleep(0.01)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.medians()


def _ops(family: str, n: int, commits: int) -> int:
    """How many commits `history` makes (it is lazy: counting it would build every commit)."""
    if family in ("bulk_reader", "unsorted_table", "spark"):
        return 1
    if family == "two_groups":
        return 2
    if family == "appends":
        return commits
    per = max(1, n // 500)
    return (-(-n // per) if family == "ingest" else 1) + commits


class _VersionReads(_Reads):
    """Reads of each new version, in the writing thread between commits (no other thread
    contending): from the second half of the history on, at most ~40 versions, each read by one
    `round` (its full scan is the version's first read: its overlay is built then)."""

    def __init__(self, path: str, once_path: str, ops: int) -> None:
        super().__init__(path, once_path)
        self.ops, self.step = ops, max(1, ops // 2 // 40)

    def after(self, done: int) -> None:
        if done < self.ops and (done < self.ops // 2 or (self.ops - done) % self.step):
            return
        self.round(0.0)


# ----- reads, in this process ------------------------------------------------------------------
def _queries(once: Any) -> dict[str, Callable[[Any], Any]]:
    """Full scan, 1 % filter (`a < 0.01`) and a take of 50 keys of the final rows."""
    ids = once.scan().to_arrow().column("id").to_numpy()
    keys = [int(k) for k in np.random.default_rng(50).choice(ids, size=min(50, len(ids)), replace=False)]
    return {
        "full": lambda x: x.scan().to_arrow(),
        "filter": lambda x: x.scan(where=x["a"] < 0.01).to_arrow(),
        "take": lambda x: x.scan(keys=keys).to_arrow(),
    }


def read_ratios(t: Any, once: Any, reps: int) -> dict[str, float]:
    """Full scan, 1 % filter and 50-key take of `t` as ratios to `once` (alternated medians)."""
    queries = _queries(once)
    out = {}
    for case, (mine, base, got, want) in S.alternated_reads(t, once, queries, reps).items():
        assert got.num_rows == want.num_rows, (case, got.num_rows, want.num_rows)
        out[case] = round(mine / base, 2)
    return out


def shape(
    work: Path, family: str, n: int, commits: int, reps: int, before: Path | None, write_reps: int = 1
) -> list[dict[str, Any]]:
    import conch

    out: list[dict[str, Any]] = []
    sides = ["auto-off", "once", "default"] + (["before"] if before else [])
    got: dict[str, dict[str, Any]] = {}
    here = work / family / str(n)
    # each side's ingest `write_reps` times, the sides alternated; the fastest kept (this machine
    # is shared: one ingest beside another of the same code moved by up to 20 %)
    for rep in range(write_reps):
        for side in sides:
            if side == "once" and rep:
                continue
            path = S.fresh(here / side)
            env = _side_env(side, before)
            child_side = "default" if side == "before" else side
            args = [child_side, family, str(path), str(n), str(commits), str(here / "auto-off")]
            r = S.child_json("bench.lsm_shapes", args, env)
            if side not in got or r["wall_s"] < got[side]["wall_s"]:
                got[side] = r
    for side in sides:
        env = _side_env(side, before)
        if side in ("default", "before") and family != "spark":  # the ingest again, read by a thread
            # (one Spark commit shows nothing before it lands: no reads during it)
            args = ["during", family, str(S.fresh(here / "during")), str(n), str(commits), str(here / "once")]
            got[side].update(S.child_json("bench.lsm_shapes", args, env))
            shutil.rmtree(here / "during", ignore_errors=True)
            # and again, each new version read between commits
            args = ["versions", family, str(S.fresh(here / "versions")), str(n), str(commits), str(here / "once")]
            got[side].update(S.child_json("bench.lsm_shapes", args, env))
            shutil.rmtree(here / "versions", ignore_errors=True)
    once = str(work / family / str(n) / "once")
    for side in sides:
        r = {"family": family, "keys": n, "side": side, **got[side]}
        # the reads, the settle and compact() run with the side's code (children: `--before`'s
        # PYTHONPATH), each read in a fresh process (its first query builds what later ones reuse)
        env = _side_env(side, before)
        table = str(work / family / str(n) / side)
        reads = ["reads", table, once, str(reps)]
        if side in ("default", "before", "auto-off"):
            r["after_last_commit"] = S.child_json("bench.lsm_shapes", reads, env)
        if side in ("default", "before"):
            r.update(S.child_json("bench.lsm_shapes", ["maintain", "settle", table], env))
            if family == "spark":  # what the driver's settle added to the job's history
                t = conch.connect(table).table("t")
                r["settled_history"] = [f"{c.kind}: {c.summary}" for c in t.history()][len(r["history"]) :]
            r["settled"] = S.child_json("bench.lsm_shapes", reads, env)
            r.update(S.child_json("bench.lsm_shapes", ["maintain", "compact", table], env))
            r["compacted"] = S.child_json("bench.lsm_shapes", reads, env)
        off = got["auto-off"]
        r["wall_vs_off"] = round(r["wall_s"] / max(off["wall_s"], 1e-9), 2)
        r["cpu_vs_off"] = round(r["cpu_s"] / max(off["cpu_s"], 1e-9), 2)
        out.append(r)
        _print(r)
        if "compact_s" in r:
            print(
                f"    compact(): {r['compact_s']:.2f} s, {r['compact_mb']:.1f} MB written, "
                f"L0/L1 {r['compacted_runs'][0]}/{r['compacted_runs'][1]} after",
                flush=True,
            )
        if "history" in r:
            print("    history: " + " | ".join(r["history"]), flush=True)
            print("    settle added: " + (" | ".join(r.get("settled_history", [])) or "-"), flush=True)
    shutil.rmtree(work / family / str(n), ignore_errors=True)
    return out


def bulk_only(
    work: Path, n: int, before: Path | None, family: str = "bulk_reader", commits: int = 1
) -> list[dict[str, Any]]:
    """`--bulk N`: the write side of `family` at `n` keys (by default one write of a sorted
    `RecordBatchReader`, 1M-row batches; `--bulk-families` for others), the default policy beside
    auto off (and `--before`): wall, CPU, bytes rewritten, peak RSS, runs left. No `once` side and
    no reads: at 50M-100M keys a read back into one table would measure the reader's memory, not
    the write's."""
    out: list[dict[str, Any]] = []
    got: dict[str, dict[str, Any]] = {}
    sides = ["auto-off", "default"] + (["before"] if before else [])
    for side in sides:
        path = S.fresh(work / "bulk" / str(n) / side)
        env = _side_env(side, before)
        child_side = "default" if side == "before" else side
        got[side] = S.child_json("bench.lsm_shapes", [child_side, family, str(path), str(n), str(commits), "-"], env)
        shutil.rmtree(path, ignore_errors=True)
    for side in sides:
        r = {"family": family, "keys": n, "side": side, **got[side]}
        r["wall_vs_off"] = round(r["wall_s"] / max(got["auto-off"]["wall_s"], 1e-9), 2)
        r["cpu_vs_off"] = round(r["cpu_s"] / max(got["auto-off"]["cpu_s"], 1e-9), 2)
        out.append(r)
        _print(r)
    return out


def _print(r: dict[str, Any]) -> None:
    def ratios(k: str) -> str:
        v = r.get(k)
        return f"{v['full']:.2f}/{v['filter']:.2f}/{v['take']:.2f}" if v else "-"

    print(
        f"  {r['family']:<15} {r['keys']:>10,} {r['side']:<9} {r['wall_s']:8.2f} {r['cpu_s']:8.2f} "
        f"{r['wall_vs_off']:6.2f}x {r['rewritten'] / 2**20:9.1f} {r['written'] / 2**20:8.1f} {r['peak_rss_mb']:6} "
        f"{r['l0']:3}/{r['l1']:<4} {ratios('after_last_commit'):>16} {ratios('during'):>16} {ratios('versions'):>16} "
        f"{ratios('settled'):>16} {ratios('compacted'):>16}",
        flush=True,
    )


HEADER = (
    f"  {'family':<15} {'keys':>10} {'side':<9} {'wall s':>8} {'CPU s':>8} {'÷off':>7} {'rewr MB':>9} "
    f"{'wrote MB':>8} {'RSS MB':>6} {'L0/L1':>8} {'after: f/1%/take':>16} {'during':>16} {'each version':>16} "
    f"{'settled':>16} {'compacted':>16}"
)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.lsm_shapes", description=__doc__)
    ap.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--small", action="store_true", help="small sizes and fewer commits: a quick run")
    ap.add_argument(
        "--families",
        default=",".join(FAMILIES),
        help="of: " + ", ".join(FAMILIES + EXTRA_FAMILIES) + " (" + ", ".join(EXTRA_FAMILIES) + ": only when named)",
    )
    ap.add_argument("--sizes", default="", help="comma-separated key counts (default: two per scale)")
    ap.add_argument("--commits", type=int, default=0, help="commits of the many-commit families")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--write-reps", type=int, default=1, help="ingests per side, alternated; the fastest kept (default 1)"
    )
    ap.add_argument(
        "--bulk",
        default="",
        help="comma-separated key counts (e.g. 50000000,100000000): only the one-write bulk load, "
        "write side only (not in the default run: minutes each)",
    )
    ap.add_argument("--bulk-families", default="bulk_reader", help="the families `--bulk` writes (default bulk_reader)")
    ap.add_argument("--before", type=Path, default=None, help="another checkout: its default policy beside this one")
    ap.add_argument("--work", type=Path, default=Path("/tmp/conch-bench-lsm-shapes"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.child and args.child[0] == "reads":
        print(json.dumps(_reads_child(args.child[1], args.child[2], int(args.child[3]))))
        return
    if args.child and args.child[0] == "maintain":
        print(json.dumps(_maintain_child(args.child[1], args.child[2])))
        return
    if args.child:
        side, family, path, n, commits, source = args.child
        print(json.dumps(_ingest_child(side, family, path, int(n), int(commits), source)))
        return
    scale = "small" if args.small else "full"
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else list(SIZES[scale])
    commits = args.commits or COMMITS[scale]
    print(HEADER, flush=True)
    out: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    if args.bulk:
        for family in args.bulk_families.split(","):
            for n in (int(x) for x in args.bulk.split(",")):
                out += bulk_only(args.work, n, args.before, family.strip(), args.commits or COMMITS["full"])
        scale = "bulk"
    for family in args.families.split(",") if not args.bulk else []:
        for n in sizes:
            out += shape(args.work, family.strip(), n, commits, args.reps, args.before, args.write_reps)
    name = {"small": "lsm_shapes-small.json", "bulk": "lsm_shapes-bulk.json"}.get(scale, "lsm_shapes.json")
    S.write_results(args.out, name, args, out, t0)


if __name__ == "__main__":
    main()
