"""Commands that look at tables: tables, schema, history, manifests, scan, get."""

from __future__ import annotations

import contextlib
import json
import sys
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import pyarrow as pa
import typer
from rich.table import Table as RichTable

import conch
from conch.apps.cli.common import (
    app,
    cell_text,
    console,
    flatten_record,
    json_default,
    key_span,
    key_text,
    open_catalog,
    parse_keys,
    print_arrow,
    same_key,
    settings,
    styled,
    when,
)
from conch.errors import InvalidArgumentError
from conch.expr.syntax import parse
from conch.model.key_text import parse_key
from conch.model.progress import Progress, human_bytes
from conch.model.time import to_time as parse_time
from conch.scan.keymask import layout

command = partial(app.command, rich_help_panel="Look at tables")  # `conch --help` groups commands by panel


@command()
def tables() -> None:
    """List the tables of the warehouse."""
    cat = open_catalog()
    out = RichTable(title=f"Tables in {cat.uri}")
    for col in ("Name", "Key", "Commits", "Key spaces", "Fragments", "Size"):
        out.add_column(col)
    for name in cat.list_tables():
        t = cat.table(name)
        state = t.state()
        size = sum(f.bytes for f in state.fragments.values()) + sum(k.bytes for k in state.key_spaces.values())
        keys = ", ".join(f"{f.name}: {f.type}" for f in state.schema.key_schema) or "(none)"
        out.add_row(
            name, keys, str(state.seq), str(len(state.key_spaces)), str(len(state.fragments)), human_bytes(size)
        )
    console.print(out)


@command()
def schema(table: str) -> None:
    """Print a table's schema tree."""
    console.print(str(open_catalog().table(table).schema), highlight=False)


@command()
def history(
    table: str,
    kind: Annotated[
        list[str] | None,
        typer.Option(
            help="Only commits of this kind (repeatable): write, delete, enrich, schema, compact, flush, vacuum, "
            "expire, or the groups data / maintenance"
        ),
    ] = None,
) -> None:
    """List a table's commits, maintenance (compactions, flushes, vacuums, expires) included (use a
    Time with `scan --asof`)."""
    kinds = [k.strip() for flag in kind or [] for k in flag.split(",") if k.strip()] or None
    t = open_catalog().table(table)
    commits = t.history(kinds)
    out = RichTable(title=f"History of {table}" + (f" ({', '.join(kinds)} commits)" if kinds else ""))
    for col in ("Seq", "Time (µs)", "Committed At", "Kind", "Summary"):
        out.add_column(col)
    for c in commits:
        out.add_row(str(c.seq), str(c.time), when(c.time, short=console.width < 150), c.kind, c.summary)
    console.print(out)


def _manifest_table(title: str, rows: list[dict[str, Any]]) -> RichTable:
    """A manifest listing as in spec/001, narrowed to the terminal: below 150 columns times lose
    their microseconds and time zone, and the Format column (always vortex) and an all-N/A
    Compacted At column move to the title; below 100 columns, Compacted At moves there too (as
    how many are compacted) so the Key Span keeps its room."""
    total = sum(r["bytes"] for r in rows)
    meta = sum(r["meta"] for r in rows)
    avg = total / len(rows) if rows else 0
    wide = console.width >= 150
    never_compacted = all(r["compacted_at"] is None for r in rows)
    cols = ["ID", "Size (Metadata)", "Format", "Key Span", "Level", "Committed At", "Compacted At"]
    narrow = console.width < 100
    compacted = sum(1 for r in rows if r["compacted_at"] is not None)
    if not wide:
        cols.remove("Format")
        if never_compacted or narrow:
            cols.remove("Compacted At")
    note = "" if wide else ", vortex, times UTC" + (", none compacted" if never_compacted else "")
    if narrow and not never_compacted:
        note += f", {compacted} compacted"
    out = RichTable(
        title=f"{title}\n{len(rows)} fragments, total: {human_bytes(total)}, avg: {human_bytes(avg)}, "
        f"metadata: {human_bytes(meta)}{note}",
        title_justify="left",
    )
    for col in cols:
        if col == "Key Span":
            out.add_column(col, overflow="fold", ratio=1, min_width=10)
        else:
            out.add_column(col, no_wrap=True, overflow="ellipsis", max_width=None if wide or col != "ID" else 12)
    for r in rows:
        cell = {
            "ID": r["id"], "Size (Metadata)": f"{human_bytes(r['bytes'])} ({human_bytes(r['meta'])})",
            "Format": "vortex", "Key Span": r["span"], "Level": f"L{r['lsm']}",
            "Committed At": when(r["time"], short=not wide), "Compacted At": when(r["compacted_at"], short=not wide),
        }  # fmt: skip
        out.add_row(*(cell[c] for c in cols))
    return out


@command()
def manifests(
    table: str, asof: Annotated[str | None, typer.Option(help="Commit time (µs) or ISO time")] = None
) -> None:
    """Show the key-space manifest and one manifest per column group (as in spec/001)."""
    t = open_catalog().table(table)
    state = t.state_at(parse_time(asof))
    schema_ = state.schema
    ks_rows = []
    for ks in sorted(state.key_spaces.values(), key=lambda k: k.seq):
        fields = schema_.key_fields(ks.level)
        ks_rows.append(
            {
                "id": ks.id + (" (deletes)" if ks.kind == "tombstone" else ""),
                "bytes": ks.bytes,
                "meta": 0,
                "span": key_span(ks.min_key, ks.max_key, fields),
                "lsm": ks.lsm,
                "time": ks.time,
                "compacted_at": ks.compacted_at,
            }
        )
    console.print(_manifest_table("Key Space manifest", ks_rows))
    for lvl in schema_.levels:
        for g in schema_.groups(lvl):
            fields = schema_.key_fields(lvl)
            rows = []
            for f in sorted(
                (f for f in state.fragments.values() if f.level == lvl and f.group == g), key=lambda f: (f.seq, f.start)
            ):
                owner = state.key_spaces.get(f.key_space)
                span = (
                    f"{f.start}..{f.start + f.rows}"
                    if owner is None
                    else f"rows {f.start}..{f.start + f.rows} of {owner.id}"
                )
                if f.mask:  # sparse or masked: say which, and where the rows come from
                    span += f" ({layout(f, t.log.warehouse.storage)} of {f.path.rsplit('/', 1)[-1]})"
                rows.append(
                    {
                        "id": f.id,
                        "bytes": f.bytes,
                        "meta": len(f.stats),
                        "span": span,
                        "lsm": f.lsm,
                        "time": f.time,
                        "compacted_at": f.compacted_at,
                    }
                )
            name = ".".join(p for p in (table, lvl, g) if p)
            console.print(_manifest_table(f"Column Group manifest for {name}", rows))


@command()
def scan(
    table: str,
    columns: Annotated[str | None, typer.Option(help="Comma-separated column paths or groups")] = None,
    where: Annotated[str | None, typer.Option(help="Filter, e.g. 'silence_ratio < 0.1 and audio_length > 3'")] = None,
    asof: Annotated[str | None, typer.Option(help="Commit time (µs), ISO time or tag, inclusive")] = None,
    since: Annotated[str | None, typer.Option(help="Commit time (µs), ISO time or tag, inclusive")] = None,
    version: Annotated[str | None, typer.Option("--version", help="Commit number or tag (instead of --asof)")] = None,
    level: Annotated[str | None, typer.Option(help="Child level, e.g. scenes.clips")] = None,
    limit: Annotated[int | None, typer.Option(min=0, help="At most this many rows (>= 0)")] = None,
    keys: Annotated[
        str | None, typer.Option(help="Records with these keys, e.g. '3,17'; a multi-column key as 'a/1,b/2'")
    ] = None,
    format: Annotated[str, typer.Option("--format", help="table | csv | json | parquet")] = "table",
    output: Annotated[Path | None, typer.Option(help="File to write (csv/json/parquet)")] = None,
    explain: Annotated[bool, typer.Option(help="Print the plan and what the scan read")] = False,
) -> None:
    """Scan fresh records and print them (or write them to a file)."""
    t = open_catalog().table(table)
    cols = [c.strip() for c in columns.split(",")] if columns else []
    s = t.scan(
        *cols,
        where=parse(where) if where else None,
        keys=parse_keys(keys, t.state().schema.key_fields(level or "")) if keys else None,
        asof=time_arg(asof),
        since=time_arg(since),
        level=level,
        limit=limit,
        version=commit_number(version),
    )
    if format == "table":
        result = _head(s, limit if limit is not None else 50)
        print_arrow(result, f"{table} ({result.num_rows} rows{'' if limit is not None else ', first 50'})")
    else:
        _write(s, format, output, settings["progress"])
    if explain:
        console.print(s.explain(), highlight=False)


def time_arg(text: str | None) -> int | str | None:
    """A `--asof`/`--since` value: µs since the epoch (digits), else an ISO time or a tag name,
    which the scan resolves as Python's `asof=` does."""
    if text is None or not text.strip().lstrip("-").isdigit():
        return text
    return parse_time(text)


def commit_number(text: str | None) -> int | str | None:
    """A `--version` value: a commit number, else a tag name."""
    return int(text) if text is not None and text.strip().isdigit() else text


def _head(s: conch.Scan, n: int) -> pa.Table:
    batches, rows = [], 0
    if n == 0:
        return s.schema.empty_table()
    for b in s.to_record_batches():
        batches.append(b)
        rows += b.num_rows
        if rows >= n:
            break
    return pa.Table.from_batches(batches, schema=s.schema).slice(0, n)


def _write(s: conch.Scan, format: str, output: Path | None, progress: bool | None) -> None:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if format not in ("parquet", "csv", "json"):
        raise InvalidArgumentError(f"unknown format {format!r}: use --format table, csv, json or parquet")
    if format == "parquet" and output is None:
        raise InvalidArgumentError("--format parquet needs --output FILE")
    with Progress(f"exporting {format}", progress=progress if output is not None else False) as bar:
        _export(s.to_record_batches(), bar, format, output, pacsv, pq)


def _export(reader: pa.RecordBatchReader, bar: Progress, format: str, output: Path | None, pacsv: Any, pq: Any) -> None:
    reader = pa.RecordBatchReader.from_batches(reader.schema, bar.track(reader))
    if format == "parquet":
        with pq.ParquetWriter(output, reader.schema) as w:
            for b in reader:
                w.write_batch(b)
    elif format in ("csv", "json"):
        with contextlib.ExitStack() as stack:
            binary = format == "csv"
            if output is not None:
                sink: Any = stack.enter_context(open(output, "wb" if binary else "w"))
            else:
                sink = sys.stdout.buffer if binary else sys.stdout
            if binary:
                flat_schema = pa.Table.from_batches([], schema=reader.schema).flatten().flatten().flatten().schema
                with pacsv.CSVWriter(sink, flat_schema) as w:
                    for b in reader:
                        w.write_table(pa.Table.from_batches([b]).flatten().flatten().flatten())
            else:
                for b in reader:
                    for row in b.to_pylist():
                        sink.write(json.dumps(row, default=json_default) + "\n")


@command()
def get(
    table: str,
    key: Annotated[list[str], typer.Argument(help="Key(s); a composite key comma-separated: a,2")],
    columns: Annotated[str | None, typer.Option(help="Comma-separated column paths or groups")] = None,
    level: Annotated[str | None, typer.Option(help="Child level, e.g. scenes.clips")] = None,
    asof: Annotated[str | None, typer.Option(help="Commit time (µs), ISO time or tag, inclusive")] = None,
    version: Annotated[str | None, typer.Option("--version", help="Commit number or tag (instead of --asof)")] = None,
) -> None:
    """Print the fresh record of each key (a seek, not a scan)."""
    t = open_catalog().table(table)
    fields = t.state().schema.key_fields(level or "")
    keys = [parse_key(k, fields) for k in key]
    cols = [c.strip() for c in columns.split(",")] if columns else []
    rows = t.scan(*cols, keys=keys, level=level, asof=time_arg(asof), version=commit_number(version)).to_pylist()
    found = {tuple(r[f.name] for f in fields): r for r in rows}
    for k in keys:
        rec = next((r for kk, r in found.items() if same_key(kk, k)), None)
        if rec is None:
            console.print(styled(f"{key_text(k)}: no such key", "yellow"))
            continue
        out = RichTable(title=f"{table}[{key_text(k)}]", show_header=False, title_justify="left")
        out.add_column("column", style="bold")
        out.add_column("value", overflow="fold")
        for path, value in flatten_record(rec):
            out.add_row(path, cell_text(value))
        console.print(out)
    if len(found) < len(keys):
        raise typer.Exit(1)
