"""Maintenance commands: check, flush, vacuum (and compaction's when it lands)."""

from __future__ import annotations

from functools import partial
from typing import Annotated

import typer

from conch.cli.common import (
    app,
    console,
    open_catalog,
)
from conch.progress import human_bytes

command = partial(app.command, rich_help_panel="Maintain tables")  # `conch --help` groups commands by panel


@command()
def vacuum(
    table: str,
    older_than: Annotated[float, typer.Option(help="Grace period in seconds for in-flight writes")] = 3600.0,
    dry_run: Annotated[bool, typer.Option(help="Only count what would be removed")] = False,
) -> None:
    """Remove files that no commit references (leftovers of failed writers)."""
    r = open_catalog().table(table).vacuum(older_than, dry_run)
    verb = "would remove" if dry_run else "removed"
    console.print(f"{verb} {r.files_removed} files ({human_bytes(r.bytes_removed)}); kept {r.files_kept}")


@command()
def check(table: str) -> None:
    """Verify every live file of a table against its checksums; exit 1 listing each problem."""
    report = open_catalog().table(table).check()
    for p in report.problems:
        print(f"{p.file}: {p.what}")
    console.print(str(report).splitlines()[0], highlight=False)
    if not report.ok:
        raise typer.Exit(1)


@command()
def flush(table: str) -> None:
    """Fold the WAL into a snapshot now."""
    console.print(f"snapshot at seq {open_catalog().table(table).flush()}")
