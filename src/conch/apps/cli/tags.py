"""Tags, branches and the change feed on the command line: tag, untag, tags, branch, branches,
drop-branch, fast-forward, changes. Every other command reads and writes a branch by its
name `TABLE@BRANCH` (`conch scan t@dev`, `conch write t@dev data.parquet`)."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

import typer

from conch.apps.cli.common import app, console, open_catalog, print_arrow, when

command = partial(app.command, rich_help_panel="Tags, branches and changes")  # `conch --help` groups commands by panel


def _version(text: str | None) -> Any:
    """A version number, else the text (a tag name or an ISO time)."""
    if text is None:
        return None
    return int(text) if text.lstrip("-").isdigit() else text


@command()
def tag(
    table: str,
    name: str,
    version: Annotated[str | None, typer.Option(help="The version to tag (default: the newest)")] = None,
) -> None:
    """Name a version: `expire` keeps it readable and `vacuum` keeps its files until `untag`."""
    t = open_catalog().table(table)
    c = t.tag(name, _version(version))
    console.print(f"tagged version {t.tags()[name]} as {name!r} (commit {c.seq})", highlight=False)


@command()
def untag(table: str, name: str) -> None:
    """Remove a tag; a later `vacuum` reclaims the files only its version kept."""
    open_catalog().table(table).untag(name)
    console.print(f"removed tag {name!r}", highlight=False)


@command()
def tags(table: str) -> None:
    """List the tags: name, version, commit time."""
    t = open_catalog().table(table)
    times = {c.seq: c.time for c in t.history()}
    named = sorted(t.tags().items(), key=lambda kv: kv[1])
    if not named:
        console.print("no tags")
    for name, v in named:
        console.print(f"{name}\tversion {v}\t{when(times.get(v))}", highlight=False)


@command()
def changes(
    table: str,
    since: Annotated[str, typer.Option(help="Base version (exclusive): a number, a tag or an ISO time")],
    until: Annotated[str | None, typer.Option(help="Last version (default: the newest)")] = None,
    images: Annotated[str, typer.Option(help="after | before_and_after | keys")] = "keys",
    per_commit: Annotated[bool, typer.Option("--per-commit", help="One row per key per commit")] = False,
    level: Annotated[str | None, typer.Option(help="Child level, e.g. scenes.clips")] = None,
    limit: Annotated[int, typer.Option(min=0, help="At most this many rows")] = 50,
) -> None:
    """The keys inserted, updated or deleted between two versions (`Table.changes`)."""
    t = open_catalog().table(table)
    ch = t.changes(_version(since), _version(until), images=images, per_commit=per_commit, level=level)
    result = ch.to_arrow()
    print_arrow(result.slice(0, limit), f"{table}: {result.num_rows} changed keys (versions {ch.since}..{ch.until}]")


@command()
def branch(
    table: str,
    name: str,
    version: Annotated[
        str | None, typer.Option(help="The version to branch from: a number, a tag or an ISO time (default: newest)")
    ] = None,
) -> None:
    """Create branch NAME of TABLE (it shares the table's files); read and write it as TABLE@NAME."""
    t = open_catalog().table(table)
    b = t.branch(name, _version(version))
    assert b.log.branch is not None
    console.print(
        f"branch {name!r} of table {table!r} from version {b.log.branch.base_seq}: use it as {b.name!r}",
        highlight=False,
    )


@command()
def branches(table: str) -> None:
    """List the branches: name, base version, head version (on the branch)."""
    found = open_catalog().table(table).branches()
    if not found:
        console.print("no branches")
    for b in found:
        console.print(f"{b.name}\tbase version {b.base_version}, head version {b.head_version}", highlight=False)


@command("drop-branch")
def drop_branch(table: str, name: str) -> None:
    """Forget a branch; a later `vacuum` reclaims the files only it used."""
    open_catalog().table(table).drop_branch(name)
    console.print(f"dropped branch {name!r} of table {table!r}", highlight=False)


@command("fast-forward")
def fast_forward(table: str, name: str) -> None:
    """Move TABLE to the head of branch NAME (only if TABLE changed no data since the branch point)."""
    c = open_catalog().table(table).fast_forward(name)
    console.print(f"fast-forwarded table {table!r} to branch {name!r} (commit {c.seq})", highlight=False)
