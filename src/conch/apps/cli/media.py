"""`conch ingest-media`: a folder of images, audio or video files into a table."""

from __future__ import annotations

from typing import Annotated

import pyarrow as pa
import typer

from conch.apps.cli.common import app, console, open_catalog, settings
from conch.model.progress import Progress
from conch.write.media_files import KEY, SCHEMA, media_files, media_rows


@app.command("ingest-media", rich_help_panel="Change tables")
def ingest_media(
    folder: Annotated[str, typer.Argument(help="Folder of media files (read recursively)")],
    table: Annotated[str, typer.Option("--table", "-t", help="Table to write (created if missing, key: path)")],
    pattern: Annotated[list[str], typer.Option(help="File name globs to take, e.g. '*.jpg' (repeatable)")] = [],  # noqa: B006
    batch: Annotated[int, typer.Option(help="Files per commit")] = 1000,
) -> None:
    """Ingest a folder of media files: one row per file (key `path`, relative to FOLDER) with its
    bytes, streamed in parts (never read whole), size, mtime, MIME type and header metadata
    (image width/height, WAV sample rate/channels/seconds). One commit per --batch files."""
    files = media_files(folder, pattern)
    cat = open_catalog(create=True)
    t = cat.create_table(table, [(KEY, pa.string())], schema=SCHEMA, exist_ok=True)
    rows = media_rows(folder, files)
    with Progress("ingesting", total_rows=len(files), progress=settings["progress"]) as bar:
        for start in range(0, len(files), max(1, batch)):
            chunk = [next(rows) for _ in range(min(batch, len(files) - start))]
            t.write(chunk, progress=False)
            bar.advance(len(chunk), sum(r["size"] for r in chunk))
    console.print(f"ingested {len(files)} files from {folder} into {table!r}", highlight=False)
