"""Search on the command line: create-index, indexes, drop-index, build-indexes, search,
search-text (`conch.search`, docs/search.md).

conch search T --vector 0.1,0.2,... | --like KEY  [--column emb] [-k 10] [--where EXPR]
conch search-text T "red car" [--column caption]
"""

from __future__ import annotations

from functools import partial
from typing import Annotated

import numpy as np
import typer

from conch.apps.cli.common import app, console, open_catalog, parse_keys, print_arrow
from conch.errors import InvalidArgumentError
from conch.expr.syntax import parse
from conch.model.time import to_time as parse_time

command = partial(app.command, rich_help_panel="Search")

Columns = Annotated[str | None, typer.Option(help="Comma-separated columns to show (default: all)")]
Where = Annotated[str | None, typer.Option(help="Filter on fresh records, e.g. 'label == \"cat\"'")]
Asof = Annotated[str | None, typer.Option(help="Commit time (µs) or ISO time, inclusive")]


def _columns(text: str | None) -> list[str] | None:
    return [c.strip() for c in text.split(",") if c.strip()] if text is not None else None


@command("create-index")
def create_index(
    table: str,
    column: str,
    kind: Annotated[str, typer.Option(help="vector | text")] = "vector",
    metric: Annotated[str, typer.Option(help="cosine | l2 | dot")] = "cosine",
    index: Annotated[str, typer.Option(help="flat (exact) | hnsw | ivf")] = "flat",
    name: Annotated[str | None, typer.Option(help="Index name (default COLUMN_KIND)")] = None,
) -> None:
    """Declare a search index on a column (committed; files are built by build-indexes and compact)."""
    t = open_catalog().table(table)
    c = t.create_index(column, kind=kind, metric=metric, name=name, index=index)
    console.print(f"created {kind} index on {column} (commit {c.seq})", highlight=False)


@command()
def indexes(table: str, asof: Asof = None) -> None:
    """List a table's indexes and the files built for them."""
    t = open_catalog().table(table)
    lines = t.describe().splitlines()[1:]
    if asof is not None:
        lines = [f"  index {n}: {d.kind} on {d.column}" for n, d in t.indexes(asof=parse_time(asof)).items()]
    console.print("\n".join(lines) or "no indexes", highlight=False)


@command("drop-index")
def drop_index(table: str, name: str) -> None:
    """Forget an index (a later vacuum removes its files)."""
    open_catalog().table(table).drop_index(name)
    console.print(f"dropped index {name!r}", highlight=False)


@command("build-indexes")
def build_indexes(
    table: str, min_rows: Annotated[int | None, typer.Option(min=0, help="Smallest run to index")] = None
) -> None:
    """Build the index files runs lack, in one commit."""
    c = open_catalog().table(table).build_indexes(min_rows=min_rows)
    console.print("nothing to build" if c is None else f"{c.summary} (commit {c.seq})", highlight=False)


@command()
def search(
    table: str,
    vector: Annotated[str | None, typer.Option(help="The query vector, comma-separated numbers")] = None,
    like: Annotated[str | None, typer.Option(help="Use this record's vector: its key, e.g. '17'")] = None,
    column: Annotated[str | None, typer.Option(help="The indexed column (default: the only one)")] = None,
    k: Annotated[int, typer.Option("-k", min=1, help="How many nearest records")] = 10,
    where: Where = None,
    columns: Columns = None,
    asof: Asof = None,
    explain: Annotated[bool, typer.Option(help="Print what the search did")] = False,
) -> None:
    """The k nearest fresh records to a vector (or to the vector of a record, --like)."""
    t = open_catalog().table(table)
    if (vector is None) == (like is None):
        raise InvalidArgumentError("give --vector or --like (one of them)")
    if vector is not None:
        try:
            q = np.array([float(x) for x in vector.split(",")], dtype=np.float32)
        except ValueError as e:
            raise InvalidArgumentError(f"--vector {vector!r}: comma-separated numbers") from e
    else:
        d = next((i for i in t.indexes().values() if i.kind == "vector" and column in (None, i.column)), None)
        if d is None:
            raise InvalidArgumentError(
                f"table {table!r} has no vector index{'' if column is None else ' on ' + column}"
            )
        key = parse_keys(like or "", t.state().schema.key_fields(d.level))
        rows = t.scan(d.column, keys=key, level=d.level or None, asof=parse_time(asof)).to_pylist()
        if not rows or rows[0][d.column.rpartition(".")[2]] is None:
            raise InvalidArgumentError(f"record {like} has no {d.column} vector")
        q = np.asarray(rows[0][d.column.rpartition(".")[2]], dtype=np.float32)
    r = t.search(
        q, k=k, column=column, where=parse(where) if where else None, columns=_columns(columns), asof=parse_time(asof)
    )
    print_arrow(r.to_arrow(), f"{table}: {k} nearest")
    if explain:
        console.print(r.explain(), highlight=False)


@command("search-text")
def search_text(
    table: str,
    query: str,
    column: Annotated[str | None, typer.Option(help="The text-indexed column (default: the only one)")] = None,
    k: Annotated[int, typer.Option("-k", min=1, help="How many records")] = 10,
    where: Where = None,
    columns: Columns = None,
    asof: Asof = None,
) -> None:
    """The k fresh records ranked best by BM25 for QUERY."""
    t = open_catalog().table(table)
    r = t.search_text(
        query,
        column=column,
        k=k,
        where=parse(where) if where else None,
        columns=_columns(columns),
        asof=parse_time(asof),
    )
    print_arrow(r.to_arrow(), f"{table}: {k} best for {query!r}")
