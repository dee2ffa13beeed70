"""The `conch` command line: browse tables, scan them, look at manifests and history.

conch --warehouse W tables | schema T | history T | manifests T | scan T ... | vacuum T | check T | demo
conch --warehouse W ingest FILES -t T --key id | enrich T   (Spark pipelines: the `spark` extra)
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
from rich.table import Table as RichTable

import conch
from conch.errors import ConchError, InvalidKeyError
from conch.expr import parse
from conch.keys import decode_key
from conch.timeparse import to_time as parse_time

app = typer.Typer(help="Conch: keyed, column-grouped tables for ML data.", no_args_is_help=True, add_completion=False)
console = Console()

Warehouse = Annotated[
    str, typer.Option("--warehouse", "-w", envvar="CONCH_WAREHOUSE", help="Warehouse directory (default .conch)")
]
_state: dict[str, str] = {"warehouse": ".conch"}


@app.callback()
def _main(warehouse: Warehouse = ".conch") -> None:
    _state["warehouse"] = warehouse


def _catalog() -> conch.Catalog:
    # create=False: a read-only command on a mistyped path says so instead of making a warehouse.
    return conch.connect(_state["warehouse"], create=False)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f}{unit}" if unit != "B" else f"{int(n)}B"
        n /= 1000
    return f"{n:.1f}TB"


def when(us: int | None) -> str:
    if us is None:
        return "N/A"
    return str(datetime.fromtimestamp(us / 1_000_000, tz=UTC))


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
        out.add_row(str(c.seq), str(c.time), when(c.time), c.kind, c.summary)
    console.print(out)


def _span(lo_hex: str, hi_hex: str, fields: list[pa.Field]) -> str:
    def show(h: str) -> str:
        vals = decode_key(bytes.fromhex(h), fields)
        return ",".join(str(v) for v in vals) if vals else "()"

    return f"{show(lo_hex)}..{show(hi_hex)}"


def _manifest_table(title: str, rows: list[dict[str, Any]]) -> RichTable:
    total = sum(r["bytes"] for r in rows)
    meta = sum(r["meta"] for r in rows)
    avg = total / len(rows) if rows else 0
    out = RichTable(
        title=f"{title}\n{len(rows)} fragments, total: {human_bytes(total)}, avg: {human_bytes(avg)}, "
        f"metadata: {human_bytes(meta)}",
        title_justify="left",
    )
    for col in ("ID", "Size (Metadata)", "Format", "Key Span", "Level", "Committed At", "Compacted At"):
        out.add_column(col, no_wrap=True)
    for r in rows:
        out.add_row(
            r["id"], f"{human_bytes(r['bytes'])} ({human_bytes(r['meta'])})", "vortex", r["span"], f"L{r['lsm']}",
            when(r["time"]), when(r["compacted_at"]),
        )  # fmt: skip
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
                "id": ks.id + (" (tombstones)" if ks.kind == "tombstone" else ""),
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
        result = s.to_arrow() if limit is not None else _head(s, 50)
        _print_arrow(result, f"{table} ({result.num_rows} rows{'' if limit is not None else ', first 50'})")
    else:
        _write(s, format, output)
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
    if isinstance(v, bytes):
        return f"<{len(v)} bytes>"
    if isinstance(v, list) and len(v) > 8:
        return f"[{len(v)} items]"
    return str(v)


def _write(s: conch.Scan, format: str, output: Path | None) -> None:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    reader = s.to_record_batches()
    if format == "parquet":
        if output is None:
            raise typer.BadParameter("--format parquet needs --output FILE")
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
    else:
        raise typer.BadParameter(f"unknown format {format!r}: table, csv, json or parquet")


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
    """Remove files that no commit references (leftovers of failed writers)."""
    r = _catalog().table(table).vacuum(older_than, dry_run)
    verb = "would remove" if dry_run else "removed"
    console.print(f"{verb} {r.files_removed} files ({human_bytes(r.bytes_removed)}); kept {r.files_kept}")


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


# ----- Spark pipelines (need the `spark` extra) -------------------------------------------------
@app.command()
def ingest(
    source: Annotated[list[str], typer.Argument(help="Parquet / JSON-lines / CSV files or directories")],
    table: Annotated[str, typer.Option("--table", "-t", help="Table to write (created if missing)")],
    key: Annotated[str, typer.Option(help="Key columns, comma-separated")] = "id",
    fmt: Annotated[str | None, typer.Option("--format", help="parquet | json | csv (default: by extension)")] = None,
    mode: Annotated[str, typer.Option(help="append (upsert) or overwrite")] = "append",
    partitions: Annotated[int | None, typer.Option(help="Spark write tasks (key ranges)")] = None,
    merge_schema: Annotated[bool, typer.Option(help="Add columns the table lacks")] = False,
) -> None:
    """Ingest files into a table with Spark, in one commit."""
    import conch.spark
    from conch.pipelines.ingest import ingest as run_ingest

    spark = conch.spark.session("conch-ingest")
    res = run_ingest(spark, source, _state["warehouse"], table, key.split(","), fmt, mode, partitions, merge_schema)
    console.print(f"ingested {res.rows} rows into {table!r} with {res.partitions} tasks: commit {res.seq}")


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
    try:
        app()
    except ConchError as e:
        console.print(f"[red]error:[/red] {e}", highlight=False)
        sys.exit(2)
    except (ValueError, KeyError) as e:
        console.print(f"[red]error:[/red] {e}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
