"""Maintenance commands: compact, maintenance (the plan), expire, vacuum, check, flush."""

from __future__ import annotations

from functools import partial
from typing import Annotated

import typer

from conch.apps.cli.common import (
    app,
    console,
    open_catalog,
)
from conch.maintain.vacuum import grace_seconds
from conch.model.progress import human_bytes

command = partial(app.command, rich_help_panel="Maintain tables")  # `conch --help` groups commands by panel


@command()
def compact(
    table: str,
    policy_only: Annotated[
        bool, typer.Option("--policy", help="Only what the policy asks for (see `conch maintenance`)")
    ] = False,
    progress: Annotated[bool | None, typer.Option(help="Show a progress bar (default: on a terminal)")] = None,
    minor: Annotated[
        bool, typer.Option("--minor", help="Re-align fragments to one merged key space (no data rewritten)")
    ] = False,
    level: Annotated[str, typer.Option(help="With --minor: the level (default the root)")] = "",
) -> None:
    """Compact the LSM tree now: by default a major compaction of every key range with L0 runs
    (one sorted L1 run per range); --minor re-aligns instead. Concurrent writes and deletes are
    never lost."""
    t = open_catalog().table(table)
    if minor:
        m = t.compact_minor(level)
        if m is None:
            console.print("nothing to re-align (tombstones, masked fragments or one run: use a major compaction)")
        else:
            console.print(
                f"minor compaction: {m.runs_in} runs → 1 ({m.rows_out:,} keys); {m.fragments_in} fragments → "
                f"{m.fragments_out} masked; wrote {human_bytes(m.mask_bytes + m.map_bytes)} of masks and map",
                highlight=False,
            )
        return
    r = t.compact(force=not policy_only, progress=progress)
    console.print(
        f"{r.tasks} compaction(s): {r.runs_in} runs → {r.runs_out}; read {human_bytes(r.bytes_in)}, wrote "
        f"{human_bytes(r.bytes_written)}" + (f"; {r.conflicts} lost to concurrent compactions" if r.conflicts else ""),
        highlight=False,
    )
    console.print(str(t.maintenance_plan()).splitlines()[0], highlight=False)


@command()
def maintenance(table: str) -> None:
    """Print the maintenance plan: LSM levels, and what compaction would do now and why."""
    console.print(str(open_catalog().table(table).maintenance_plan()), highlight=False)


@command()
def vacuum(
    table: str,
    older_than: Annotated[
        str,
        typer.Option(
            help="Grace period for in-flight writes and readers of expired versions: 1h, 30m, 90s, 0s, 7d, 2w "
            "(or a point in time: an ISO time, µs since the epoch)"
        ),
    ] = "1h",
    dry_run: Annotated[bool, typer.Option(help="Only count what would be removed")] = False,
) -> None:
    """Remove files no commit references and files only expired versions used (see `expire`);
    says what the grace period held back."""
    r = open_catalog().table(table).vacuum(grace_seconds(older_than), dry_run)
    console.print(str(r), highlight=False)


@command()
def expire(
    table: str,
    older_than: Annotated[
        str | None,
        typer.Option(
            help="Expire versions older than this: an age (7d, 12h, 30m, 90s, 2w, 0s) or a point in time (an ISO "
            "time, µs since the epoch as `conch history` shows commit times)"
        ),
    ] = None,
    retain_last: Annotated[int | None, typer.Option(help="Keep the newest N versions readable")] = None,
) -> None:
    """Move the time-travel horizon forward; `vacuum` then reclaims files only older versions used."""
    console.print(str(open_catalog().table(table).expire(older_than, retain_last)))


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
