"""The README's main job: the spec/001 audio pipeline on Spark, into the embedded warehouse.

1. start a local Spark session (the `conch` source registered, pushdown on);
2. generate the audio dataset locally as Parquet files (keys, `audio_length`, `silence_ratio`,
   `audio.bytes` of 2–30 KB of 16-bit PCM, `audio.meta`);
3. ingest them with Spark: range-partitioned by `id`, one commit;
4. enrich on Spark (`Table.enrich(..., engine="spark")`, `mapInArrow`): loudness and noisiness
   features from the audio bytes, written as a new column group `features` without rewriting the
   existing groups;
5. the typical scan, `scan(audio.bytes, where=silence_ratio < 0.1)`, in plain Python and on
   Spark (the `where` option: filtered by Conch), with equal results;
6. the manifests; 7. time travel to before the enrichment, in Python and on Spark;
8. a tag pins the enriched version, and a Structured Streaming query streams only the changes of
   `audio` into `audio_summary` (the conch streaming source and sink): the whole table first, then,
   resumed from its checkpoint, just an update by predicate and a delete by filter;
9. an enrichment tried on a branch (`Table.branch`, sharing the table's files): invisible on the
   table until `fast_forward` moves the table to the branch's head.

Each step prints what it did and how long it took; Spark jobs and generation show progress.

`s3=True` (`conch demo --s3`) runs the same pipeline with the table on `s3://`: a local
S3-compatible server (moto, `conch.apps.pipelines.local_s3`) is started on 127.0.0.1 first and stopped
at the end; the WAL is the object-store metastore (put-if-absent objects, no service), and the
driver, the Spark executors and the Python scans reach the bucket through the usual `AWS_*`
environment variables. Only the generated input Parquet stays on local disk (`<warehouse>/_input`).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.console import Console
from rich.progress import Progress
from rich.table import Table as RichTable
from rich.text import Text

import conch
from conch.apps.pipelines.generate import AUDIO_SCHEMA, audio_batches
from conch.apps.pipelines.progress import spark_progress


@contextmanager
def step(console: Console, title: str, timings: list[tuple[str, float]]) -> Iterator[dict[str, Any]]:
    info: dict[str, Any] = {}
    console.rule(Text(title, style="bold"))  # Text, not markup: the CLI's console has markup off
    t0 = time.perf_counter()
    yield info
    dt = time.perf_counter() - t0
    timings.append((title, dt))
    line = Text.assemble(("✓", "green"), f" {title}: {info.get('what', '')} ", (f"({dt:.2f}s)", "dim"))
    console.print(line, highlight=False)


def has_filter_node(plan: str) -> bool:
    """Does a Spark physical plan keep a `Filter` operator (not `RuntimeFilters: []`)?"""
    return re.search(r"(^|[\s*+-])Filter[\s(]", plan) is not None


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def generate_parquet(directory: str, rows: int, files: int, console: Console) -> int:
    """Write the audio dataset as `files` Parquet files; returns total bytes written."""
    os.makedirs(directory, exist_ok=True)
    per_file = -(-rows // files)
    writers: list[pq.ParquetWriter] = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("generating audio", total=rows)
        for batch in audio_batches(rows):
            i = min(int(batch.column("id")[0].as_py()) // per_file, files - 1)
            while len(writers) <= i:
                writers.append(
                    pq.ParquetWriter(os.path.join(directory, f"audio-{len(writers):03d}.parquet"), AUDIO_SCHEMA)
                )
            writers[i].write_batch(batch)
            progress.advance(task, batch.num_rows)
    for w in writers:
        w.close()
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))


def _group_files(t: conch.Table, version: int | None = None) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    state = t.state() if version is None else t.state_at(version=version)
    for f in state.fragments.values():
        out.setdefault(f.group or "<root>", set()).add(f.id)
    return out


def silence_bucket(batch: pa.RecordBatch) -> dict[str, Any]:
    """The trial enrichment of the branch step (module-level: picklable): silence in tenths."""
    return {"bucket": pc.cast(pc.floor(pc.multiply(batch.column("silence_ratio"), 10)), pa.int8())}


def _stream_step(spark: Any, t: conch.Table, warehouse: str, checkpoint: str) -> dict[str, Any]:
    """Tag the enriched version; stream its changes (the whole table first) into `audio_summary`
    with the conch streaming source and sink (`applyChanges`: deletes are deletes); update and
    delete some records; restart the stream from its checkpoint, which carries only those changes."""
    columns = "silence_ratio,features"
    t.tag("enriched")

    def run_stream() -> None:
        query = (
            spark.readStream.format("conch")
            .option("changesSince", "0")
            .option("columns", columns)
            .load(f"{warehouse}/audio")
            .writeStream.format("conch")
            .option("checkpointLocation", checkpoint)
            .option("applyChanges", "true")
            .option("key", "id")
            .start(f"{warehouse}/audio_summary")
        )
        query.processAllAvailable()
        query.stop()

    run_stream()
    t.update(where=t["silence_ratio"] > 0.9, set={"silence_ratio": 1.0})
    t.delete(where=t["silence_ratio"] < 0.02)
    run_stream()  # resumed: reads only the versions committed since the last micro-batch
    summary = conch.connect(warehouse).table("audio_summary")
    batches = [c for c in summary.history() if "stream batch" in c.summary]
    want = t.scan(*columns.split(",")).to_arrow().to_pylist()
    return {
        "tag": "enriched",
        "tagged": t.tags()["enriched"],
        "batches": len(batches),
        "batch_rows": [c.summary.split(": ")[1].split(" from")[0] for c in batches],
        "mirror_equal": summary.to_arrow().to_pylist() == want,
    }


def run(
    warehouse: str,
    rows: int = 20_000,
    console: Console | None = None,
    fresh: bool = True,
    spark: Any = None,
    s3: bool = False,
) -> dict[str, Any]:
    """Run the whole pipeline; returns the numbers it printed (tests check them). A session
    passed in is used and left running; otherwise one is started and stopped. `s3=True`: the
    table lives on a local S3 server started here (see the module doc); a session passed in must
    then be started inside `conch.apps.pipelines.local_s3.local_s3()`, so its workers see the bucket."""
    console = console or Console()
    local = os.path.abspath(warehouse)
    if fresh:
        shutil.rmtree(local, ignore_errors=True)
    timings: list[tuple[str, float]] = []
    started = time.perf_counter()
    with ExitStack() as stack:
        uri = local
        if s3:
            from conch.apps.pipelines.local_s3 import local_s3

            with step(console, "Start a local S3 server (moto on 127.0.0.1)", timings) as s:
                server = stack.enter_context(local_s3())
                uri = server.uri(os.path.basename(local))
                s["what"] = f"{server.endpoint}, warehouse {uri} (WAL as put-if-absent objects)"
        results = _pipeline(uri, os.path.join(local, "_input"), rows, console, spark, timings, started)
    results["warehouse"] = uri
    return results


def _pipeline(
    warehouse: str,
    source: str,
    rows: int,
    console: Console,
    spark: Any,
    timings: list[tuple[str, float]],
    started: float,
) -> dict[str, Any]:
    """The steps, on the table at `warehouse` (a directory or an `s3://` URI), from Parquet input
    generated into the local directory `source`."""
    import conch.engines.spark
    from conch.apps.pipelines.enrich import audio_features
    from conch.apps.pipelines.ingest import ingest

    results: dict[str, Any] = {}
    with step(console, "Start Spark (local[2], conch data source registered)", timings) as s:
        own_session = spark is None
        spark = spark if spark is not None else conch.engines.spark.session("conch-demo")
        s["what"] = f"Spark {spark.version}, master {spark.sparkContext.master}"

    with step(console, "Generate the audio dataset locally (Parquet)", timings) as s:
        nbytes = generate_parquet(source, rows, files=4, console=console)
        s["what"] = f"{rows} rows, 4 files, {_mb(nbytes)} in {source}"

    cat = conch.connect(warehouse)
    with step(console, "Ingest with Spark: Parquet → table `audio` (one commit)", timings) as s:
        t = cat.create_table("audio", [("id", pa.uint64())], pa.schema(list(AUDIO_SCHEMA)[1:]))
        console.print(str(t.schema), highlight=False)
        with spark_progress(spark, console, "ingest"):
            ing = ingest(spark, source, warehouse, "audio", key=["id"])
        t.wait_for_maintenance()  # what the background settle would fold after a pause, now
        plan = t.maintenance_plan()
        size = sum(f.bytes for f in t.state().fragments.values())
        s["what"] = (
            f"{ing.rows} rows from {ing.partitions} Spark tasks, commit {ing.seq}; settled: {plan.l0_runs} L0 and "
            f"{plan.l1_runs} L1 run(s) (disjoint runs and runs above the automatic budget stay), {_mb(size)} of fragments"
        )
        results["ingested"] = ing.rows

    with step(console, "Enrich on Spark (mapInArrow): new column group `features`", timings) as s:
        before = _group_files(t)
        with spark_progress(spark, console, "enrich"):
            enr = t.enrich(
                audio_features, inputs=["audio.bytes", "audio_length"], into="features", engine="spark", spark=spark
            )
        after = _group_files(t, version=enr.commits[0])  # its own commit: a later settle may compact
        untouched = all(before[g] <= after.get(g, set()) for g in before)
        new_groups = sorted(set(after) - set(before))
        s["what"] = (
            f"{enr.rows_written} rows, commit {enr.commits[0]}; new group(s) {new_groups}; "
            f"existing groups' {sum(len(v) for v in before.values())} fragments untouched: {untouched}"
        )
        results["enriched"], results["untouched"] = enr.rows_written, untouched

    with step(console, "The typical scan: audio.bytes where silence_ratio < 0.1", timings) as s:
        scan = cat.scan(t["audio.bytes"], where=t["silence_ratio"] < 0.1)
        out = scan.to_arrow()
        console.print(scan.explain(), highlight=False)
        returned = pc.sum(pc.binary_length(out.column("audio").combine_chunks().field("bytes"))).as_py() or 0
        df = (
            spark.read.format("conch")
            .option("columns", "audio.bytes")
            .option("where", "silence_ratio < 0.1")  # evaluated by Conch (Spark's filters are not pushed)
            .load(f"{warehouse}/audio")
        )
        q = df.select("id", "audio.bytes")
        plan = q._jdf.queryExecution().executedPlan().toString()
        with spark_progress(spark, console, "spark scan"):
            spark_rows = q.count()
        pushed = not has_filter_node(plan)
        s["what"] = (
            f"Python: {out.num_rows} rows, {_mb(returned)} of audio; Spark: {spark_rows} rows "
            f"(filter evaluated by Conch, no Spark Filter node: {pushed})"
        )
        results["scan_rows"], results["spark_scan_rows"], results["pushed"] = out.num_rows, spark_rows, pushed

    with step(console, "Manifests", timings) as s:
        grid = RichTable("manifest", "entries", "rows", "bytes")
        for name, m in t.manifests().items():
            grid.add_row(
                name,
                str(m.num_rows),
                str(pc.sum(m.column("rows")).as_py() or 0),
                _mb(pc.sum(m.column("bytes")).as_py() or 0),
            )
        console.print(grid)
        s["what"] = (
            "one key space per sorted run; per group, fragments aligned to it (`conch manifests audio` lists them)"
        )

    with step(console, "Time travel: the table before the enrichment", timings) as s:
        old = t.scan(asof=ing.time)
        old_rows = old.to_arrow()
        now_cols = t.schema.columns
        sdf = spark.read.format("conch").option("asof", str(ing.time)).load(f"{warehouse}/audio")
        spark_cols = [f.name for f in sdf.schema.fields]
        spark_old = sdf.count()
        s["what"] = (
            f"as of commit {ing.seq}: {old_rows.num_rows} rows, columns {old_rows.column_names} "
            f"(Spark: {spark_old} rows, {spark_cols}); now {len(now_cols)} columns incl. "
            f"{[c for c in now_cols if c.startswith('features')]}"
        )
        results["rows_before"], results["spark_rows_before"] = old_rows.num_rows, spark_old
        results["columns_before"], results["spark_columns_before"] = old_rows.column_names, spark_cols

    with step(console, "Stream only the changes into another table (Structured Streaming)", timings) as s:
        with tempfile.TemporaryDirectory(prefix="conch-demo-checkpoint-") as checkpoint:
            results.update(_stream_step(spark, t, warehouse, checkpoint))
        s["what"] = (
            f"tag {results['tag']!r} pins version {results['tagged']}; micro-batches {results['batches']} "
            f"(rows {results['batch_rows']}), resumed from the checkpoint after an update and a delete; "
            f"`audio_summary` equals the source's columns: {results['mirror_equal']}"
        )

    with step(console, "Try an enrichment on a branch, then fast-forward the table to it", timings) as s:
        trial = t.branch("trial")  # shares the table's files: nothing is copied
        trial.enrich(silence_bucket, inputs=["silence_ratio"], into="trial", workers=0)
        hidden = "trial.bucket" not in t.schema.columns
        ff = t.fast_forward("trial")
        same = t.scan("trial").to_arrow().equals(trial.scan("trial").to_arrow())
        s["what"] = (
            f"branch {trial.name!r}: its new group was invisible on the table: {hidden}; fast-forward "
            f"(commit {ff.seq}): the table reads what the branch reads: {same}"
        )
        results["branch_hidden"], results["branch_same"] = hidden, same

    if own_session:
        spark.stop()
    grid = RichTable("step", "seconds")
    for title, dt in timings:
        grid.add_row(title, f"{dt:.2f}")
    grid.add_row(Text("total", style="bold"), Text(f"{time.perf_counter() - started:.2f}", style="bold"))
    console.print(grid)
    results["seconds"] = time.perf_counter() - started
    return results
