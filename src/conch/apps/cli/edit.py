"""Commands that change tables: create, write, ingest, delete, drop, rename-column, drop-columns."""

from __future__ import annotations

import sys
from functools import partial
from typing import Annotated

import pyarrow as pa
import typer

from conch.api.catalog import Catalog
from conch.apps.cli.common import (
    app,
    console,
    err_console,
    open_catalog,
    settings,
)
from conch.errors import InvalidArgumentError
from conch.expr.syntax import parse
from conch.model.key_text import parse_key

Rename = Annotated[list[str], typer.Option(help="OLD=NEW column renames (OLD may be a glob)")]
Cast = Annotated[
    list[str], typer.Option(help=r"COLUMN=TYPE casts, e.g. Date=timestamp\[us]")
]  # \[: help is rich markup
Comment = Annotated[
    str | None,
    typer.Option(help="CSV: skip every line starting with this character (a leading '#' block is always skipped)"),
]
TimestampFormat = Annotated[
    list[str],
    typer.Option(help="CSV: strptime format of timestamp text besides ISO 8601, e.g. '%d-%b-%y' (repeatable)"),
]

command = partial(app.command, rich_help_panel="Change tables")  # `conch --help` groups commands by panel


@command("rename-column")
def rename_column(table: str, column: str, new_name: str) -> None:
    """Rename a column (metadata-only; time travel still sees the old name)."""
    c = open_catalog().table(table).rename_column(column, new_name)
    console.print(f"commit {c.seq}: {c.summary}")


@command("drop-columns")
def drop_columns(table: str, columns: list[str]) -> None:
    """Drop columns (metadata-only; time travel still sees them)."""
    c = open_catalog().table(table).drop_columns(*columns)
    console.print(f"commit {c.seq}: {c.summary}")


# ----- creating, writing, reading by key, deleting -------------------------------------------
def _key_flags(key: list[str]) -> tuple[list[str], dict[str, pa.DataType]]:
    """`["id:uint64", "ts"]` → names `["id", "ts"]` and the types given `{"id": uint64}`."""
    from conch.write.file_input import parse_type

    names, types = [], {}
    for item in ",".join(key).split(","):
        name, _, typ = item.strip().partition(":")
        if not name:
            raise InvalidArgumentError(f"--key takes NAME or NAME:TYPE, got {item!r}")
        names.append(name)
        if typ:
            types[name] = parse_type(typ)
    return names, types


@command()
def create(
    table: str,
    key: Annotated[list[str], typer.Option(help="Key column NAME:TYPE, in order (repeat or comma-separate)")],
    partition_by: Annotated[
        list[str] | None, typer.Option(help="Partitioning key: a prefix of the key columns (repeat or comma-separate)")
    ] = None,
) -> None:
    """Create an empty table with a key schema: `conch create audio --key id:uint64`."""
    names, types = _key_flags(key)
    missing = [n for n in names if n not in types]
    if missing:
        raise InvalidArgumentError(
            f"--key {missing[0]} needs a type: --key {missing[0]}:uint64 (or int64, string, timestamp[us], ...)"
        )
    parts = [p for flag in partition_by or [] for p in flag.split(",") if p]
    t = open_catalog(create=True).create_table(table, [(n, types[n]) for n in names], partition_by=parts or None)
    console.print(f"created {t.describe()}", highlight=False)


def _write_files(
    table: str,
    sources: list[str],
    key: list[str] | None,
    fmt: str | None,
    rename: list[str],
    cast: list[str],
    comment: str | None = None,
    timestamp_format: list[str] | None = None,
) -> None:
    from conch.write.file_input import FileInput, expand, parse_pairs, parse_type, read_files

    cat = open_catalog(create=True)
    exists = table in cat.list_tables()
    key_names, key_types = _key_flags(key) if key else ([], {})
    if not exists and not key_names:
        raise InvalidArgumentError(f"table {table!r} does not exist: pass --key COLUMN to create it from the data")
    if exists:
        key_names = _table_key(cat, table, key_names)
    casts = {k: parse_type(v) for k, v in parse_pairs(cast, "--cast").items()} | key_types
    if comment is not None and len(comment) != 1:
        raise InvalidArgumentError(f"--comment takes one character, e.g. --comment '#', got {comment!r}")
    spec = FileInput(
        expand(sources), fmt, parse_pairs(rename, "--rename"), casts, key_names, [], comment, timestamp_format or []
    )
    reader = read_files(spec)
    for note in spec.notices:
        err_console.print(f"note: {note}", highlight=False, soft_wrap=True)
    missing = [k for k in key_names if k not in reader.schema.names]
    if missing:
        raise InvalidArgumentError(
            f"key column {missing[0]!r} is not in the input; its columns are {reader.schema.names} (use --key or --rename)"
        )
    untyped = [k for k in key_names if pa.types.is_null(reader.schema.field(k).type)]
    if untyped and not exists:
        raise InvalidArgumentError(
            f"key column {untyped[0]!r} has no values in the input (a header without rows?), so its type is unknown: "
            f"give it with --key {untyped[0]}:TYPE (e.g. {untyped[0]}:string), or ingest a file with rows"
        )
    t = cat.table(table) if exists else cat.create_table(table, [reader.schema.field(k) for k in key_names])
    try:
        c = t.write(reader, progress=settings["progress"])
    except BaseException:
        if not exists and not t.history():  # the table this command created holds nothing: undo it
            cat.drop_table(table)
        raise
    console.print(f"wrote {c.summary} to {table!r}: commit {c.seq}", highlight=False)


def _ingest_key(table: str, key: list[str] | None) -> list[str]:
    """The key columns an ingest writes by: the table's (a different --key is refused), else
    --key, else `id` for a new table."""
    cat = open_catalog(create=True)
    if table not in cat.list_tables():
        return key or ["id"]
    return _table_key(cat, table, _key_flags(key)[0] if key else [])


def _table_key(cat: Catalog, table: str, asked: list[str]) -> list[str]:
    """The key columns of existing `table`; `asked` (--key) must be them, if given."""
    have = [f.name for f in cat.table(table).key_schema]
    if asked and asked != have:
        raise InvalidArgumentError(
            f"table {table!r} exists with key {','.join(have)}, not {','.join(asked)}: drop --key to write "
            f"to it by its key, or write to a new table (`conch drop {table}` first to re-create it)"
        )
    return have


@command()
def write(
    table: Annotated[str, typer.Argument(help="Table to write (created when --key is given)")],
    source: Annotated[list[str], typer.Argument(help="Parquet / CSV / JSON-lines files or directories")],
    key: Annotated[list[str] | None, typer.Option(help="Key columns (NAME or NAME:TYPE) to create the table")] = None,
    fmt: Annotated[str | None, typer.Option("--format", help="parquet | csv | json (default: by extension)")] = None,
    rename: Rename = [],  # noqa: B006 (typer reads the default, never mutates it)
    cast: Cast = [],  # noqa: B006
    comment: Comment = None,
    timestamp_format: TimestampFormat = [],  # noqa: B006
) -> None:
    """Upsert files into a table in one commit (streamed, in this process)."""
    _write_files(table, source, key, fmt, rename, cast, comment, timestamp_format)


@command()
def ingest(
    source: Annotated[list[str], typer.Argument(help="Parquet / JSON-lines / CSV files or directories")],
    table: Annotated[str, typer.Option("--table", "-t", help="Table to write (created if missing)")],
    key: Annotated[
        list[str] | None,
        typer.Option(help="Key columns NAME[:TYPE] of a new table, in order (repeat or comma-separate; default id)"),
    ] = None,
    fmt: Annotated[str | None, typer.Option("--format", help="parquet | json | csv (default: by extension)")] = None,
    rename: Rename = [],  # noqa: B006
    cast: Cast = [],  # noqa: B006
    comment: Comment = None,
    timestamp_format: TimestampFormat = [],  # noqa: B006
    spark: Annotated[bool, typer.Option("--spark", help="Run as a Spark job (the `spark` extra)")] = False,
    mode: Annotated[str, typer.Option(help="append (upsert) or overwrite (--spark)")] = "append",
    partitions: Annotated[int | None, typer.Option(help="Spark write tasks (key ranges; --spark)")] = None,
    merge_schema: Annotated[bool, typer.Option(help="Add columns the table lacks (--spark)")] = False,
) -> None:
    """Ingest files into a table in one commit: in this process, or as a Spark job with --spark."""
    if not spark:
        if mode != "append" or partitions is not None or merge_schema:
            raise InvalidArgumentError("--mode, --partitions and --merge-schema are Spark options: add --spark")
        _write_files(table, source, _ingest_key(table, key), fmt, rename, cast, comment, timestamp_format)
        return
    if rename or cast:
        raise InvalidArgumentError("--rename and --cast are not supported with --spark: drop --spark")
    import conch.engines.spark
    from conch.apps.pipelines.ingest import ingest as run_ingest
    from conch.apps.pipelines.spark_csv import CsvOptions

    session = conch.engines.spark.session("conch-ingest")
    csv = CsvOptions(comment, tuple(timestamp_format))
    res = run_ingest(
        session,
        source,
        settings["warehouse"],
        table,
        _key_flags(_ingest_key(table, key))[0],
        fmt,
        mode,
        partitions,
        merge_schema,
        csv=csv,
    )
    console.print(f"ingested {res.rows} rows into {table!r} with {res.partitions} tasks: commit {res.seq}")


@command()
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
    t = open_catalog().table(table)
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


@command()
def drop(
    table: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation")] = False,
) -> None:
    """Drop a table: forget it and delete its files (there is no undo)."""
    cat = open_catalog()
    cat.table(table)  # raises TableNotFoundError before asking
    if not yes:
        if not sys.stdin.isatty():
            raise InvalidArgumentError(f"dropping {table!r} deletes its files: pass --yes to confirm")
        typer.confirm(f"Drop table {table!r} and delete its files?", abort=True)
    cat.drop_table(table)
    console.print(f"dropped {table!r}", highlight=False)
