"""Branches of a table (`Table.branch`, `branches`, `drop_branch`, `fast_forward`): create, open,
list, drop and fast-forward them, and find every line sharing a table's directory (`lines`, what
vacuum and expire count). What a branch is, and why, is `conch.log.branching`.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from datetime import datetime

from conch.errors import (
    BranchNotFoundError,
    CommitConflictError,
    InvalidArgumentError,
    TableExistsError,
    TableNotFoundError,
)
from conch.files.manifest import TableState
from conch.files.storage.base import new_id
from conch.log.branching import (
    NON_MOVING,
    PREFIX,
    BranchInfo,
    branch_info,
    branch_record,
    check_branch_name,
    fast_forward_ops,
    no_branch,
    record_name,
    seed_ops,
)
from conch.log.metastore.base import Metastore, TableRecord
from conch.log.tablelog import TableLog
from conch.log.txn import Commit
from conch.log.wal import Transaction
from conch.model.time import format_time


@dataclass(frozen=True, slots=True)
class Branch:
    """One branch of a table (`Table.branches()`): its name, the table's version it branched
    from (`base_version`, committed at `base_time`), and its newest version (`head_version`;
    versions count from 1 on the branch, version 1 being the base state)."""

    name: str
    base_version: int
    base_time: int
    head_version: int

    def __str__(self) -> str:
        return (
            f"{self.name}: from version {self.base_version} ({format_time(self.base_time)}), "
            f"head at version {self.head_version}"
        )


def branch_records(ms: Metastore, table: str, table_id: str) -> list[tuple[TableRecord, BranchInfo]]:
    """The metastore records of the branches of table `table` (id `table_id`), by name."""
    out = []
    for r in ms.list_tables():
        if r.name.startswith(f"{PREFIX}{table}."):
            info = branch_info(r)
            if info is not None and info.table_id == table_id and info.table == table:
                out.append((r, info))
    return sorted(out, key=lambda ri: ri[1].name)


def _require_table(log: TableLog, what: str) -> None:
    if log.branch is not None:
        raise InvalidArgumentError(
            f"{what} works on a table, and {log.name!r} is a branch: call it on table {log.branch.table!r}"
        )


def open_branch(log: TableLog, name: str) -> TableLog:
    """The log of branch `name` of `log`'s table (`BranchNotFoundError` if there is none)."""
    _require_table(log, "opening a branch")
    try:
        record = log.warehouse.metastore.get_table(record_name(log.name, name))
    except TableNotFoundError:
        known = [i.name for _, i in branch_records(log.warehouse.metastore, log.name, log.id)]
        raise BranchNotFoundError(no_branch(log.name, name, known)) from None
    info = branch_info(record)
    if info is None or info.table_id != log.id:  # a branch of a dropped table of the same name
        raise BranchNotFoundError(no_branch(log.name, name, []))
    return TableLog(log.warehouse, record)


def create_branch(log: TableLog, name: str, version: int | str | datetime | None = None) -> TableLog:
    """Branch `name` of `log`'s table at `version` (a version number, a tag name or a time;
    None: the newest), or the existing branch of that name (when `version` is None or names its
    base; else `InvalidArgumentError`). The branch shares the table's files (no copy)."""
    _require_table(log, "branch()")
    check_branch_name(name)
    if (isinstance(version, int) and not isinstance(version, bool)) or (
        isinstance(version, str) and version in log.state().tags
    ):
        base, _ = log.pinned(version=version)
    else:
        base, _ = log.pinned(asof=version)  # None: the newest; else a time
    ms = log.warehouse.metastore
    record = branch_record(log.record, name, base, time.time_ns() // 1000, new_id())
    try:
        ms.create_table(record)
    except TableExistsError:
        existing = open_branch(log, name)
        assert existing.branch is not None
        if version is not None and existing.branch.base_seq != base.seq:
            raise InvalidArgumentError(
                f"table {log.name!r} already has branch {name!r}, from version {existing.branch.base_seq}, not "
                f"{base.seq}: drop_branch({name!r}) first, or pick another name"
            ) from None
        if existing.state().seq == 0:  # its creator died before seeding it
            _seed(existing, log.pinned(version=existing.branch.base_seq)[0])
        return existing
    blog = TableLog(log.warehouse, record)
    _seed(blog, base)
    return blog


def _seed(blog: TableLog, base: TableState) -> None:
    """Commit a new branch's version 1: its base state's records (`conch.log.branching.seed_ops`)."""
    assert blog.branch is not None
    summary = f"branch {blog.branch.name!r} of table {blog.branch.table!r} at its version {base.seq}"
    try:
        blog.commit(Transaction("branch", seed_ops(base), summary, base_seq=0, extra={"base_version": base.seq}))
    except CommitConflictError:
        if blog.state().seq == 0:
            raise  # else a concurrent opener seeded it


def list_branches(log: TableLog) -> list[Branch]:
    """The branches of `log`'s table, by name."""
    _require_table(log, "branches()")
    ms = log.warehouse.metastore
    out = []
    for r, info in branch_records(ms, log.name, log.id):
        try:
            head = ms.last_seq(r.id)
        except TableNotFoundError:  # dropped meanwhile
            continue
        out.append(Branch(info.name, info.base_seq, info.base_time, head))
    return out


def drop_branch(log: TableLog, name: str) -> None:
    """Forget branch `name`; the next vacuum reclaims the files only it used."""
    blog = open_branch(log, name)
    log.warehouse.metastore.drop_table(record_name(log.name, name))
    log.warehouse.storage.delete_prefix(blog.id)  # the metastore's own objects of its log, if any


def drop_all(ms: Metastore, table: TableRecord) -> list[TableRecord]:
    """Forget every branch of `table` (dropping the table); returns their records."""
    dropped = []
    for r, _ in branch_records(ms, table.name, table.id):
        with contextlib.suppress(TableNotFoundError):  # dropped meanwhile
            dropped.append(ms.drop_table(r.name))
    return dropped


def fast_forward(log: TableLog, name: str) -> Commit:
    """Move `log`'s table to the head of branch `name` (one commit of kind `"fast_forward"`;
    `conch.log.branching`). `CommitConflictError` naming the versions when the table has
    changed data since the branch point (or since this branch's last fast-forward)."""
    blog = open_branch(log, name)
    info = blog.branch
    assert info is not None
    head = blog.state()
    main = log.state()
    since = info.base_seq
    entries = list(log.entries(since, main.seq))
    for seq, _, e in entries:  # an earlier fast-forward to this branch is a branch point too
        if e.kind == "fast_forward" and e.extra.get("branch_id") == blog.id:
            since = seq
    moved = [(s, e.kind) for s, _, e in entries if s > since and e.kind not in NON_MOVING]
    if moved:
        s, kind = moved[0]
        raise CommitConflictError(
            f"cannot fast-forward table {log.name!r} to branch {name!r}: the table is at version {main.seq} and "
            f"changed since the branch point, its version {since} (version {s} is a {kind}); the branch is at its "
            f"version {head.seq}. Nothing was committed: apply the branch's changes to the table yourself, or "
            "branch again from the newest version"
        )
    txn = Transaction(
        "fast_forward",
        fast_forward_ops(main, head),
        f"fast-forward to branch {name!r} at its version {head.seq}",
        base_seq=main.seq,
        serial=True,  # a data commit landing meanwhile makes it conflict
        extra={"branch": name, "branch_id": blog.id, "branch_version": head.seq},
    )
    return log.commit(txn)


def lines(log: TableLog) -> list[TableLog]:
    """Every line that shares `log`'s directory: the table (unless dropped) and each of its
    branches; `log` itself is among them, as is."""
    ms = log.warehouse.metastore
    table, table_id = (log.branch.table, log.branch.table_id) if log.branch else (log.name, log.id)
    out = [log]
    if log.branch is not None:
        try:
            rec = ms.get_table(table)
        except TableNotFoundError:
            rec = None
        if rec is not None and rec.id == table_id:
            out.append(TableLog(log.warehouse, rec))
    out += [TableLog(log.warehouse, r) for r, _ in branch_records(ms, table, table_id) if r.id != log.id]
    return out
