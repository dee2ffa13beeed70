"""Commands that run something: the demo pipeline, the web inspector, enrichment on Spark, the
metastore server."""

from __future__ import annotations

from functools import partial
from typing import Annotated

import typer

from conch.apps.cli.common import (
    app,
    console,
    settings,
)

command = partial(app.command, rich_help_panel="Run pipelines and servers")  # `conch --help` groups commands by panel


@command()
def demo(
    warehouse: Annotated[str, typer.Option(help="Warehouse directory for the demo")] = "demo-warehouse",
    rows: Annotated[int, typer.Option(help="Rows of the generated audio table")] = 20_000,
    s3: Annotated[
        bool, typer.Option("--s3", help="Run on s3:// against a local S3 server (moto) started and stopped here")
    ] = False,
) -> None:
    """The end-to-end demo pipeline on the embedded default (or on `s3://` with `--s3`)."""
    from conch.apps.pipelines.demo import run

    run(warehouse, rows=rows, console=console, s3=s3)


@command()
def ui(
    host: Annotated[str, typer.Option(help="Address to bind (default: this machine only)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free port)")] = 8765,
) -> None:
    """Serve the read-only web inspector of the warehouse (the `server` extra)."""
    from conch.apps.ui.serve import serve

    serve(settings["warehouse"], host, port, console)


# ----- Spark pipelines (need the `spark` extra) -------------------------------------------------
@command()
def enrich(
    table: Annotated[str, typer.Argument(help="Table to enrich")],
    fn: Annotated[
        str, typer.Option(help="enrichment function as module:function (batch -> new columns)")
    ] = "conch.apps.pipelines.enrich:audio_features",
    columns: Annotated[str, typer.Option(help="Input columns, comma-separated")] = "audio.bytes,audio_length",
    into: Annotated[str, typer.Option(help="Output column group")] = "features",
) -> None:
    """Compute new columns with Spark (mapInArrow) and write them as a column group (incremental)."""
    import importlib

    import conch.engines.spark

    module, _, name = fn.partition(":")
    func = getattr(importlib.import_module(module), name)
    spark = conch.engines.spark.session("conch-enrich")
    t = conch.connect(settings["warehouse"]).table(table)
    res = t.enrich(func, inputs=columns.split(","), into=into, engine="spark", spark=spark)
    console.print(f"enriched {res.rows_written} rows of {table!r}: commits {res.commits}")


@command()
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
    from conch.apps.server.serve import serve as run

    run(settings["warehouse"], host, port, tokens, metastore, max_request_bytes)
