"""The `conch` command line: create, write, read, delete and look at tables.

conch --warehouse W tables | schema T | history T | manifests T | scan T ... | get T KEY | check T
conch --warehouse W create T --key id:uint64 | write T FILES | ingest FILES -t T --key id
conch --warehouse W delete T KEYS | delete T --where EXPR | drop T --yes | vacuum T | flush T
conch --warehouse W expire T --older-than 7d | --retain-last N
conch --warehouse W ui            (the web inspector: the `server` extra)
conch --warehouse W enrich T      (Spark pipelines: the `spark` extra; `ingest --spark` too)

Every error is one line, `error: <what> <how to fix it>`, on stderr with exit code 2;
`--debug` shows the traceback instead.
"""

from __future__ import annotations

import contextlib
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import pyarrow as pa
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

import conch
from conch.errors import ConchError, InvalidArgumentError, InvalidKeyError
from conch.filter_syntax import parse
from conch.key_text import parse_key
from conch.keys import decode_key
from conch.previews import describe
from conch.progress import Progress, human_bytes
from conch.timeparse import to_time as parse_time

app = typer.Typer(help="Conch: keyed, column-grouped tables for ML data.", no_args_is_help=True, add_completion=False)
console = Console()
err_console = Console(stderr=True)

Warehouse = Annotated[
    str, typer.Option("--warehouse", "-w", envvar="CONCH_WAREHOUSE", help="Warehouse directory (default .conch)")
]
_state: dict[str, Any] = {"warehouse": ".conch", "debug": False, "progress": None}


@app.callback()
def _main(
    warehouse: Warehouse = ".conch",
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars")] = False,
) -> None:
    _state["warehouse"] = warehouse
    _state["debug"] = debug
    _state["progress"] = False if quiet else None


def _catalog(create: bool = False) -> conch.Catalog:
    # create=False: a read-only command on a mistyped path says so instead of making a warehouse.
    return conch.connect(_state["warehouse"], create=create)


def when(us: int | None, short: bool = False) -> str:
    if us is None:
        return "N/A"
    t = datetime.fromtimestamp(us / 1_000_000, tz=UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S") if short else str(t)


@app.command()
def tables() -> None:
    """List the tables of the warehouse."""
    cat = _catalog()
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


@app.command()
def schema(table: str) -> None:
    """Print a table's schema tree."""
    console.print(str(_catalog().table(table).schema), highlight=False)


@app.command()
def history(table: str) -> None:
    """List a table's commits (use a Time with `scan --asof`)."""
    out = RichTable(title=f"History of {table}")
    for col in ("Seq", "Time (µs)", "Committed At", "Kind", "Summary"):
        out.add_column(col)
    for c in _catalog().table(table).history():
        out.add_row(str(c.seq), str(c.time), when(c.time, short=console.width < 150), c.kind, c.summary)
    console.print(out)


def _span(lo_hex: str, hi_hex: str, fields: list[pa.Field]) -> str:
    def show(h: str) -> str:
        vals = decode_key(bytes.fromhex(h), fields)
        return ",".join(str(v) for v in vals) if vals else "()"

    return f"{show(lo_hex)}..{show(hi_hex)}"


def _manifest_table(title: str, rows: list[dict[str, Any]]) -> RichTable:
    """A manifest listing as in spec/001, narrowed to the terminal: below 150 columns times lose
    their microseconds and time zone, and the Format column (always vortex) and an all-N/A
    Compacted At column move to the title."""
    total = sum(r["bytes"] for r in rows)
    meta = sum(r["meta"] for r in rows)
    avg = total / len(rows) if rows else 0
    wide = console.width >= 150
    never_compacted = all(r["compacted_at"] is None for r in rows)
    cols = ["ID", "Size (Metadata)", "Format", "Key Span", "Level", "Committed At", "Compacted At"]
    if not wide:
        cols.remove("Format")
        if never_compacted:
            cols.remove("Compacted At")
    note = "" if wide else ", vortex, times UTC" + (", none compacted" if never_compacted else "")
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


@app.command()
def manifests(
    table: str, asof: Annotated[str | None, typer.Option(help="Commit time (µs) or ISO time")] = None
) -> None:
    """Show the key-space manifest and one manifest per column group (as in spec/001)."""
    t = _catalog().table(table)
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
                "span": _span(ks.min_key, ks.max_key, fields),
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


@app.command()
def scan(
    table: str,
    columns: Annotated[str | None, typer.Option(help="Comma-separated column paths or groups")] = None,
    where: Annotated[str | None, typer.Option(help="Filter, e.g. 'silence_ratio < 0.1 and audio_length > 3'")] = None,
    asof: Annotated[str | None, typer.Option(help="Commit time (µs) or ISO time, inclusive")] = None,
    since: Annotated[str | None, typer.Option(help="Commit time (µs) or ISO time, inclusive")] = None,
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
    t = _catalog().table(table)
    cols = [c.strip() for c in columns.split(",")] if columns else []
    s = t.scan(
        *cols,
        where=parse(where) if where else None,
        keys=_parse_keys(keys, t.state().schema.key_fields(level or "")) if keys else None,
        asof=parse_time(asof),
        since=parse_time(since),
        level=level,
        limit=limit,
    )
    if format == "table":
        result = _head(s, limit if limit is not None else 50)
        _print_arrow(result, f"{table} ({result.num_rows} rows{'' if limit is not None else ', first 50'})")
    else:
        _write(s, format, output, _state["progress"])
    if explain:
        console.print(s.explain(), highlight=False)


def _parse_keys(text: str, fields: list[pa.Field]) -> list[tuple[Any, ...]]:
    """`--keys` text as key tuples typed like the key columns ('/' separates a key's columns)."""
    parts = [k.split("/") for k in text.split(",") if k.strip()]
    bad = [p for p in parts if len(p) != len(fields)]
    if bad:
        names = "/".join(f.name for f in fields)
        raise InvalidKeyError(f"--keys: {'/'.join(bad[0])!r} is not a key of columns {names}; write keys like {names}")
    cols = []
    for i, f in enumerate(fields):
        try:
            cols.append(pa.array([p[i].strip() for p in parts]).cast(f.type).to_pylist())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise InvalidKeyError(f"--keys: key column {f.name!r} is {f.type}, got {[p[i] for p in parts]}: {e}") from e
    return list(zip(*cols, strict=True))


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


def _print_arrow(table: pa.Table, title: str) -> None:
    out = RichTable(title=title)
    flat = table.flatten().flatten().flatten()
    for name in flat.column_names:
        out.add_column(name, overflow="ellipsis", max_width=40)
    for row in flat.to_pylist():
        out.add_row(*(_cell(v) for v in row.values()))
    console.print(out)


def _cell(v: Any) -> str:
    if v is None:
        return "[dim]null[/dim]"
    return describe(v).replace("[", "\\[")


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
                        sink.write(json.dumps(row, default=_json_default) + "\n")


def _json_default(v: Any) -> Any:
    if isinstance(v, bytes):
        import base64

        return base64.b64encode(v).decode()
    if isinstance(v, datetime):
        return v.isoformat()
    return str(v)


@app.command()
def vacuum(
    table: str,
    older_than: Annotated[float, typer.Option(help="Grace period in seconds for in-flight writes")] = 3600.0,
    dry_run: Annotated[bool, typer.Option(help="Only count what would be removed")] = False,
) -> None:
    """Remove files no commit references and files only expired versions used (see `expire`)."""
    r = _catalog().table(table).vacuum(older_than, dry_run)
    verb = "would remove" if dry_run else "removed"
    console.print(
        f"{verb} {r.files_removed} files, {human_bytes(r.bytes_removed)} reclaimed (of which {r.expired_files} "
        f"files, {human_bytes(r.expired_bytes)} only expired versions used, {r.snapshots_removed} snapshots); "
        f"kept {r.files_kept}"
    )


@app.command()
def expire(
    table: str,
    older_than: Annotated[
        str | None, typer.Option(help="Expire versions older than this: 7d, 12h, 30m, 90s, 2w or an ISO time")
    ] = None,
    retain_last: Annotated[int | None, typer.Option(help="Keep the newest N versions readable")] = None,
) -> None:
    """Move the time-travel horizon forward; `vacuum` then reclaims files only older versions used."""
    console.print(str(_catalog().table(table).expire(older_than, retain_last)))


@app.command("rename-column")
def rename_column(table: str, column: str, new_name: str) -> None:
    """Rename a column (metadata-only; time travel still sees the old name)."""
    c = _catalog().table(table).rename_column(column, new_name)
    console.print(f"commit {c.seq}: {c.summary}")


@app.command("drop-columns")
def drop_columns(table: str, columns: list[str]) -> None:
    """Drop columns (metadata-only; time travel still sees them)."""
    c = _catalog().table(table).drop_columns(*columns)
    console.print(f"commit {c.seq}: {c.summary}")


@app.command()
def check(table: str) -> None:
    """Verify every live file of a table against its checksums; exit 1 listing each problem."""
    report = _catalog().table(table).check()
    for p in report.problems:
        print(f"{p.file}: {p.what}")
    console.print(str(report).splitlines()[0], highlight=False)
    if not report.ok:
        raise typer.Exit(1)


@app.command()
def flush(table: str) -> None:
    """Fold the WAL into a snapshot now."""
    console.print(f"snapshot at seq {_catalog().table(table).flush()}")


@app.command()
def demo(
    warehouse: Annotated[str, typer.Option(help="Warehouse directory for the demo")] = "demo-warehouse",
    rows: Annotated[int, typer.Option(help="Rows of the generated audio table")] = 20_000,
) -> None:
    """The end-to-end demo pipeline on the embedded default."""
    from conch.pipelines.demo import run

    run(warehouse, rows=rows, console=console)


# ----- creating, writing, reading by key, deleting -------------------------------------------
def _key_flags(key: list[str]) -> tuple[list[str], dict[str, pa.DataType]]:
    """`["id:uint64", "ts"]` → names `["id", "ts"]` and the types given `{"id": uint64}`."""
    from conch.file_input import parse_type

    names, types = [], {}
    for item in ",".join(key).split(","):
        name, _, typ = item.strip().partition(":")
        if not name:
            raise InvalidArgumentError(f"--key takes NAME or NAME:TYPE, got {item!r}")
        names.append(name)
        if typ:
            types[name] = parse_type(typ)
    return names, types


@app.command()
def create(
    table: str,
    key: Annotated[list[str], typer.Option(help="Key column NAME:TYPE, in order (repeat or comma-separate)")],
) -> None:
    """Create an empty table with a key schema: `conch create audio --key id:uint64`."""
    names, types = _key_flags(key)
    missing = [n for n in names if n not in types]
    if missing:
        raise InvalidArgumentError(
            f"--key {missing[0]} needs a type: --key {missing[0]}:uint64 (or int64, string, timestamp[us], ...)"
        )
    t = _catalog(create=True).create_table(table, [(n, types[n]) for n in names])
    console.print(f"created {t.describe()}", highlight=False)


def _write_files(
    table: str, sources: list[str], key: list[str] | None, fmt: str | None, rename: list[str], cast: list[str]
) -> None:
    from conch.file_input import FileInput, expand, parse_pairs, parse_type, read_files

    cat = _catalog(create=True)
    exists = table in cat.list_tables()
    key_names, key_types = _key_flags(key) if key else ([], {})
    if not exists and not key_names:
        raise InvalidArgumentError(f"table {table!r} does not exist: pass --key COLUMN to create it from the data")
    if exists:
        key_names = [f.name for f in cat.table(table).key_schema]
    casts = {k: parse_type(v) for k, v in parse_pairs(cast, "--cast").items()} | key_types
    spec = FileInput(expand(sources), fmt, parse_pairs(rename, "--rename"), casts, key_names)
    reader = read_files(spec)
    for note in spec.notices:
        err_console.print(f"note: {escape(note)}", highlight=False, soft_wrap=True)
    missing = [k for k in key_names if k not in reader.schema.names]
    if missing:
        raise InvalidArgumentError(
            f"key column {missing[0]!r} is not in the input; its columns are {reader.schema.names} (use --key or --rename)"
        )
    t = cat.table(table) if exists else cat.create_table(table, [reader.schema.field(k) for k in key_names])
    c = t.write(reader, progress=_state["progress"])
    console.print(f"wrote {c.summary} to {table!r}: commit {c.seq}", highlight=False)


Rename = Annotated[list[str], typer.Option(help="OLD=NEW column renames (OLD may be a glob)")]
Cast = Annotated[list[str], typer.Option(help="COLUMN=TYPE casts, e.g. Date=timestamp[us]")]


@app.command()
def write(
    table: Annotated[str, typer.Argument(help="Table to write (created when --key is given)")],
    source: Annotated[list[str], typer.Argument(help="Parquet / CSV / JSON-lines files or directories")],
    key: Annotated[list[str] | None, typer.Option(help="Key columns (NAME or NAME:TYPE) to create the table")] = None,
    fmt: Annotated[str | None, typer.Option("--format", help="parquet | csv | json (default: by extension)")] = None,
    rename: Rename = [],  # noqa: B006 (typer reads the default, never mutates it)
    cast: Cast = [],  # noqa: B006
) -> None:
    """Upsert files into a table in one commit (streamed, in this process)."""
    _write_files(table, source, key, fmt, rename, cast)


@app.command()
def ingest(
    source: Annotated[list[str], typer.Argument(help="Parquet / JSON-lines / CSV files or directories")],
    table: Annotated[str, typer.Option("--table", "-t", help="Table to write (created if missing)")],
    key: Annotated[str, typer.Option(help="Key columns, comma-separated")] = "id",
    fmt: Annotated[str | None, typer.Option("--format", help="parquet | json | csv (default: by extension)")] = None,
    rename: Rename = [],  # noqa: B006
    cast: Cast = [],  # noqa: B006
    spark: Annotated[bool, typer.Option("--spark", help="Run as a Spark job (the `spark` extra)")] = False,
    mode: Annotated[str, typer.Option(help="append (upsert) or overwrite (--spark)")] = "append",
    partitions: Annotated[int | None, typer.Option(help="Spark write tasks (key ranges; --spark)")] = None,
    merge_schema: Annotated[bool, typer.Option(help="Add columns the table lacks (--spark)")] = False,
) -> None:
    """Ingest files into a table in one commit: in this process, or as a Spark job with --spark."""
    if not spark:
        if mode != "append" or partitions is not None or merge_schema:
            raise InvalidArgumentError("--mode, --partitions and --merge-schema are Spark options: add --spark")
        _write_files(table, source, [key], fmt, rename, cast)
        return
    if rename or cast:
        raise InvalidArgumentError("--rename and --cast are not supported with --spark: drop --spark")
    import conch.spark
    from conch.pipelines.ingest import ingest as run_ingest

    session = conch.spark.session("conch-ingest")
    res = run_ingest(session, source, _state["warehouse"], table, key.split(","), fmt, mode, partitions, merge_schema)
    console.print(f"ingested {res.rows} rows into {table!r} with {res.partitions} tasks: commit {res.seq}")


@app.command()
def get(
    table: str,
    key: Annotated[list[str], typer.Argument(help="Key(s); a composite key comma-separated: a,2")],
    columns: Annotated[str | None, typer.Option(help="Comma-separated column paths or groups")] = None,
    level: Annotated[str | None, typer.Option(help="Child level, e.g. scenes.clips")] = None,
    asof: Annotated[str | None, typer.Option(help="Commit time (µs) or ISO time, inclusive")] = None,
) -> None:
    """Print the fresh record of each key (a seek, not a scan)."""
    t = _catalog().table(table)
    fields = t.state().schema.key_fields(level or "")
    keys = [parse_key(k, fields) for k in key]
    cols = [c.strip() for c in columns.split(",")] if columns else []
    rows = t.scan(*cols, keys=keys, level=level, asof=parse_time(asof)).to_pylist()
    found = {tuple(r[f.name] for f in fields): r for r in rows}
    for k in keys:
        rec = next((r for kk, r in found.items() if _same_key(kk, k)), None)
        if rec is None:
            console.print(f"[yellow]{_key_text(k)}: no such key[/yellow]")
            continue
        out = RichTable(title=f"{table}[{_key_text(k)}]", show_header=False, title_justify="left")
        out.add_column("column", style="bold")
        out.add_column("value", overflow="fold")
        for path, value in _flatten(rec):
            out.add_row(path, _cell(value))
        console.print(out)
    if len(found) < len(keys):
        raise typer.Exit(1)


def _same_key(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return all(x == y or (isinstance(x, datetime) and x.replace(tzinfo=None) == y) for x, y in zip(a, b, strict=True))


def _key_text(k: tuple[Any, ...]) -> str:
    return ",".join(str(v) for v in k)


def _flatten(rec: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, value in rec.items():
        path = f"{prefix}{name}"
        if isinstance(value, dict):
            out.extend(_flatten(value, path + "."))
        else:
            out.append((path, value))
    return out


@app.command()
def delete(
    table: str,
    key: Annotated[list[str] | None, typer.Argument(help="Keys to delete (a composite key comma-separated)")] = None,
    where: Annotated[
        str | None, typer.Option(help="Delete every key whose fresh record matches (see docs/cli.md)")
    ] = None,
    level: Annotated[str | None, typer.Option(help="Child level, e.g. scenes.clips")] = None,
    dry_run: Annotated[bool, typer.Option(help="Only count the keys --where matches")] = False,
) -> None:
    """Delete keys, or every key matching --where, in one commit (deleting a key deletes its subtree)."""
    t = _catalog().table(table)
    if bool(key) == bool(where):
        raise InvalidArgumentError("give the keys to delete or --where FILTER (one of them)")
    if where:
        expr = parse(where)
        if dry_run:
            n = t.scan(where=expr, level=level).count()
            console.print(f"would delete {n} keys of {table!r}", highlight=False)
            return
        c = t.delete(where=expr, level=level)
    else:
        fields = t.state().schema.key_fields(level or "")
        c = t.delete([parse_key(k, fields) for k in key or []], level=level)
    console.print(f"deleted {c.summary.split(' where ')[0]} of {table!r}: commit {c.seq}", highlight=False)


@app.command()
def drop(
    table: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation")] = False,
) -> None:
    """Drop a table: forget it and delete its files (there is no undo)."""
    cat = _catalog()
    cat.table(table)  # raises TableNotFoundError before asking
    if not yes:
        if not sys.stdin.isatty():
            raise InvalidArgumentError(f"dropping {table!r} deletes its files: pass --yes to confirm")
        typer.confirm(f"Drop table {table!r} and delete its files?", abort=True)
    cat.drop_table(table)
    console.print(f"dropped {table!r}", highlight=False)


@app.command()
def ui(
    host: Annotated[str, typer.Option(help="Address to bind (default: this machine only)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free port)")] = 8765,
) -> None:
    """Serve the read-only web inspector of the warehouse (the `server` extra)."""
    from conch.ui.serve import serve

    serve(_state["warehouse"], host, port, console)


# ----- Spark pipelines (need the `spark` extra) -------------------------------------------------
@app.command()
def enrich(
    table: Annotated[str, typer.Argument(help="Table to enrich")],
    fn: Annotated[
        str, typer.Option(help="enrichment function as module:function (batch -> new columns)")
    ] = "conch.pipelines.enrich:audio_features",
    columns: Annotated[str, typer.Option(help="Input columns, comma-separated")] = "audio.bytes,audio_length",
    into: Annotated[str, typer.Option(help="Output column group")] = "features",
) -> None:
    """Compute new columns with Spark (mapInArrow) and write them as a column group (incremental)."""
    import importlib

    import conch.spark

    module, _, name = fn.partition(":")
    func = getattr(importlib.import_module(module), name)
    spark = conch.spark.session("conch-enrich")
    t = conch.connect(_state["warehouse"]).table(table)
    res = t.enrich(func, inputs=columns.split(","), into=into, engine="spark", spark=spark)
    console.print(f"enriched {res.rows_written} rows of {table!r}: commits {res.commits}")


@app.command()
def serve(
    port: Annotated[int, typer.Option(help="TCP port")] = 8181,
    host: Annotated[str, typer.Option(help="address to bind (0.0.0.0: every interface)")] = "127.0.0.1",
    tokens: Annotated[
        str, typer.Option(envvar="CONCH_SERVER_TOKENS", help="bearer tokens with scopes: 'tokA=read,tokB=admin'")
    ] = "",
    metastore: Annotated[str | None, typer.Option(help="serve this metastore instead (postgresql://...)")] = None,
    max_request_bytes: Annotated[int, typer.Option(help="larger request bodies get 413")] = 32 * 1024 * 1024,
) -> None:
    """Serve the warehouse's metastore over HTTP: `conch.connect("http://host:port", token=...)`."""
    from conch.server.serve import serve as run

    run(_state["warehouse"], host, port, tokens, metastore, max_request_bytes)


def main() -> None:
    """Run the CLI: usage and `ConchError`s print one `error:` line (no traceback without --debug)."""
    from typer.exceptions import Abort, TyperException

    command = typer.main.get_command(app)
    debug = "--debug" in sys.argv[1:]
    try:
        code = command.main(sys.argv[1:], prog_name="conch", standalone_mode=False)
    except TyperException as e:  # usage errors (typer's own click): one line, like ours
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
            print(ctx.get_help())
            sys.exit(0)
        cmd = ctx.command_path if ctx is not None else "conch"
        _fail(f"{e.format_message()} (see `{cmd} --help`)", debug)
    except Abort:
        _fail("aborted", False)
    except (ConchError, ValueError, KeyError, OSError, ImportError) as e:
        _fail(_message(e), debug)
    sys.exit(code if isinstance(code, int) else 0)


def _message(e: BaseException) -> str:
    if isinstance(e, FileNotFoundError):
        return f"no such file: {e.filename}"
    if isinstance(e, KeyError) and e.args:
        return str(e.args[0])
    return " ".join(str(e).split("\n")[0].split()) or type(e).__name__


def _fail(message: str, debug: bool) -> None:
    if debug:
        raise
    err_console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    sys.exit(2)


if __name__ == "__main__":
    main()
