"""The end-to-end demo on the embedded default: the spec/001 audio table, step by step.

Each step prints what it did and how long it took; long steps show a progress bar.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.progress import Progress

import conch
from conch.pipelines.generate import AUDIO_SCHEMA, audio_batches


@contextmanager
def step(console: Console, title: str) -> Iterator[dict[str, Any]]:
    info: dict[str, Any] = {}
    console.rule(f"[bold]{title}")
    t0 = time.perf_counter()
    yield info
    dt = time.perf_counter() - t0
    console.print(f"[green]✓[/green] {title}: {info.get('what', '')} [dim]({dt:.2f}s)[/dim]", highlight=False)


def _tracked(batches: Iterator[pa.RecordBatch], progress: Progress, task: Any) -> Iterator[pa.RecordBatch]:
    for b in batches:
        progress.advance(task, b.num_rows)
        yield b


def run(warehouse: str, rows: int = 20_000, console: Console | None = None, fresh: bool = True) -> dict[str, Any]:
    console = console or Console()
    if fresh:
        shutil.rmtree(warehouse, ignore_errors=True)
    cat = conch.connect(warehouse)
    results: dict[str, Any] = {}
    with step(console, "Create the audio table (spec/001 schema)") as s:
        t = cat.create_table("audio", [("id", pa.uint64())], pa.schema(list(AUDIO_SCHEMA)[1:]))
        console.print(str(t.schema), highlight=False)
        s["what"] = f"table {t.name!r} in {cat.uri}"

    with step(console, "Write metadata (one commit)") as s:
        meta = pa.Table.from_batches(list(audio_batches(rows))).select(["id", "audio_length", "silence_ratio"])
        c_meta = t.write(meta)
        s["what"] = f"{rows} rows, commit {c_meta.seq}"

    with step(console, "Write audio blobs, streamed (one commit)") as s, Progress(console=console) as progress:
        task = progress.add_task("audio", total=rows)
        stream = (b.select(["id", "audio"]) for b in _tracked(audio_batches(rows), progress, task))
        schema = pa.schema([AUDIO_SCHEMA.field("id"), AUDIO_SCHEMA.field("audio")])
        c_audio = t.write(pa.RecordBatchReader.from_batches(schema, stream))
        size = sum(f.bytes for f in t.state().fragments.values())
        s["what"] = f"commit {c_audio.seq}, {size / 1e6:.1f} MB of fragments"

    with step(console, "Update silence_ratio for 1% of keys") as s:
        upd = pa.table({"id": pa.array(range(0, rows, 100), pa.uint64())})
        upd = upd.append_column("silence_ratio", pa.array([0.0] * upd.num_rows))
        c_upd = t.write(upd)
        s["what"] = f"{upd.num_rows} cells, commit {c_upd.seq}"

    with step(console, "Delete 10 keys") as s:
        c_del = t.delete(list(range(1, 11)))
        s["what"] = f"commit {c_del.seq}"

    with step(console, "The typical scan: audio.bytes where silence_ratio < 0.1") as s:
        scan = cat.scan(t["audio.bytes"], where=t["silence_ratio"] < 0.1)
        out = scan.to_arrow()
        m = scan.metrics()
        returned = pc.sum(pc.binary_length(out.column("audio").combine_chunks().field("bytes"))).as_py() or 0
        read = sum(m.blob_bytes_read.values())
        console.print(scan.explain(), highlight=False)
        s["what"] = f"{out.num_rows} rows; audio bytes returned {returned / 1e6:.1f} MB, read {read / 1e6:.1f} MB"
        results["scan_rows"] = out.num_rows

    with step(console, "Manifests") as s:
        for name, m_table in t.manifests().items():
            console.print(f"  {name or '/'}: {m_table.num_rows} entries")
        s["what"] = "see `conch manifests audio` for the full listing"

    with step(console, "Time travel: the table before the update and the delete") as s:
        before = t.scan("silence_ratio", asof=c_audio.time).to_arrow()
        now = t.scan("silence_ratio").to_arrow()
        s["what"] = f"{before.num_rows} rows as of commit {c_audio.seq}, {now.num_rows} rows now"
        results["rows_before"], results["rows_now"] = before.num_rows, now.num_rows
    return results
