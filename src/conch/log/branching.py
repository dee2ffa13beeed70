"""What a branch is in the metastore and in the log (`Table.branch`, issue 23); the operations on
branches are `conch.log.branches`.

**Design.** A branch is a table log of its own: its own metastore record (own table id, so its
own compare-and-swap log, commit clock, snapshots, tags and horizon) whose record properties
name the table it branched from (`BranchInfo`: the table's name and id, the base version and
its time) and whose **directory is the table's**: the branch's `TableFiles` write under the
table id, so a branch shares every file of its base and its own writes, compactions, masks and
snapshots land beside the table's (every file name holds a fresh id, so nothing collides).
The branch's version 1 (kind `"branch"`) re-adds the base state's live key spaces and fragments
with their commit times (`seed_ops`), so replay of the branch's log alone gives the base state
and no read of the branch ever consults the table's log; versions count from 1 on the branch.

Why this design: it needs nothing of a metastore beyond what every backend already does
(create a record, append with compare-and-swap, list records), so SQLite, the object-store
WAL, memory, PostgreSQL and the HTTP server all store branches with no new method, as tags
(WAL entries) did; reads, writes, deletes, updates, the change feed, compaction, flush, expire
and tags work on a branch unchanged, because a branch handle *is* a `Table` over a `TableLog`.
DESIGN §3 puts a table's files under `<table-id>/`: a branch keeps that (the table's id is
the directory), and DESIGN §4's one-log-per-table becomes one log per line of the table.

- The record's name is `_branch.<table>.<branch>` (`record_name`): metastores accept it
  (`conch.log.metastore.names`), `Catalog.list_tables` hides the `_branch.` prefix and
  `create_table` refuses it; a branch handle is named `<table>@<branch>` (`Catalog.table`
  accepts that name, and `table(name, branch=)`).
- Cells keep their commit times, so the fresh-record rule is unchanged: a branch's commits
  are later than its base (the metastore stamps them after the branch was created).
- **Fast-forward** appends one entry to the table (kind `"fast_forward"`, `fast_forward_ops`):
  it removes the table's live records the branch head lacks and adds the head's the table
  lacks, with their times, and the head's schema; afterwards the table reads exactly what the
  branch read. It is allowed while the table has only maintenance commits (`NON_MOVING`) since
  the branch point, or since this branch's last fast-forward; a concurrent data commit makes it
  conflict (`serial`).
- **Maintenance** shares the directory: vacuum keeps every file some line (the table or any
  live branch: any retained version, tag, log entry or indexed snapshot) still needs, and logs
  its cutoff on every line so an in-flight write on any line conflicts instead of losing its
  files (`conch.maintain.vacuum`). Expire moves one line's horizon only.
- **Cost** (`python -m bench.branches`): creating a branch writes one record and one entry of
  about 1.4 KB per live file of the base (1,000 live runs: a 1.4 MB entry, ~25 ms CPU); a
  vacuum or expire reads every line's log, so it costs in proportion to the lines and their
  live files. An HTTP metastore refuses request bodies over 32 MiB: branch a table of more than
  about 20,000 live files after compacting it.
- **Limits**: time travel on a branch starts at its version 1; a `since` inside the window of a
  compaction from before the branch point (or inside one a fast-forward brought in) cannot be
  answered from the line's own log and raises `TimeTravelError` (`TableLog._provenance`): read
  such intervals on the line where the compaction ran.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from conch.errors import InvalidArgumentError, InvalidNameError
from conch.files.integrity import open_json, seal_json
from conch.files.manifest import TableState
from conch.log.metastore.base import TableRecord
from conch.log.wal import (
    AddFragment,
    AddIndex,
    AddIndexFile,
    AddKeySpace,
    DropIndex,
    Op,
    RemoveFragment,
    RemoveIndexFile,
    RemoveKeySpace,
    SetSchema,
)

PREFIX = "_branch."
SEP = "@"
MAX_RECORD_NAME = 160  # what metastores accept (`conch.log.metastore.names`)
# kinds a line may have committed since a branch point and still be fast-forwarded: they change
# no fresh record
NON_MOVING = ("flush", "vacuum", "expire", "tag", "compact")
_BRANCH = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True)
class BranchInfo:
    """What a branch's metastore record says: the table it branched from (`table`, and
    `table_id`: its id, which is also the directory the branch shares), the branch's `name`, and
    the base version (`base_seq`, committed at `base_time`)."""

    table: str
    table_id: str
    name: str
    base_seq: int
    base_time: int

    @property
    def display(self) -> str:
        """The branch handle's name: `<table>@<branch>`."""
        return f"{self.table}{SEP}{self.name}"


def check_branch_name(name: object) -> str:
    """`name` if it is a valid branch name (letters, digits, `_`, `-`; 1 to 64 characters)."""
    if not isinstance(name, str) or not _BRANCH.fullmatch(name):
        raise InvalidNameError(f"invalid branch name {name!r}: 1 to 64 letters, digits, '_' or '-'")
    return name


def record_name(table: str, branch: str) -> str:
    """The metastore name of branch `branch` of table `table`."""
    name = f"{PREFIX}{table}.{check_branch_name(branch)}"
    if len(name) > MAX_RECORD_NAME:
        raise InvalidNameError(
            f"branch name {branch!r} is too long for table {table!r}: table and branch names together may hold "
            f"{MAX_RECORD_NAME - len(PREFIX) - 1} characters"
        )
    return name


def split_name(name: str) -> tuple[str, str | None]:
    """`("t", "x")` for a branch handle's name `t@x`; `(name, None)` for a table's."""
    table, sep, branch = name.partition(SEP)
    return (table, branch) if sep else (name, None)


def metastore_name(name: str) -> str:
    """The metastore record name of a handle's name (`t@x` → the branch's record)."""
    table, branch = split_name(name)
    return name if branch is None else record_name(table, branch)


def is_branch_record(record: TableRecord) -> bool:
    return record.name.startswith(PREFIX)


def branch_info(record: TableRecord) -> BranchInfo | None:
    """The branch a metastore record describes (None: a table)."""
    if not is_branch_record(record):
        return None
    b = open_json(record.props, f"the metastore record of branch {record.name!r}").get("branch")
    if not isinstance(b, dict):
        return None
    return BranchInfo(str(b["table"]), str(b["table_id"]), str(b["name"]), int(b["base_seq"]), int(b["base_time"]))


def branch_record(table: TableRecord, branch: str, base: TableState, created_us: int, new_id: str) -> TableRecord:
    """The metastore record of a new branch of `table` at `base` (its properties: the table's,
    with the base's schema and the `branch` description)."""
    props: dict[str, Any] = dict(open_json(table.props, f"the metastore record of table {table.name!r}"))
    props["schema"] = base.schema.to_json()
    props["branch"] = {
        "table": table.name,
        "table_id": table.id,
        "name": branch,
        "base_seq": base.seq,
        "base_time": base.time,
    }
    # its own id (its log's key in the metastore; the object-store WAL keeps `<id>/_log/`), which
    # is never the table's directory nor under it
    return TableRecord(record_name(table.name, branch), f"branch-{new_id}", created_us, seal_json(json.dumps(props)))


def seed_ops(state: TableState) -> tuple[Op, ...]:
    """A branch's version 1: the base state's live records, with their commit times."""
    ops: list[Op] = [SetSchema(state.schema)]
    ops += [AddKeySpace(k) for k in state.key_spaces.values()]
    ops += [AddFragment(f) for f in state.fragments.values()]
    ops += [AddIndex(i) for i in state.indexes.values()]  # search indexes and their files are shared
    ops += [AddIndexFile(f) for f in state.index_files.values()]
    return tuple(ops)


def fast_forward_ops(main: TableState, head: TableState) -> tuple[Op, ...]:
    """The operations that turn `main`'s live records into `head`'s (and its schema)."""
    ops: list[Op] = []
    if head.schema != main.schema:
        ops.append(SetSchema(head.schema))
    ops += [RemoveKeySpace(i) for i in main.key_spaces if i not in head.key_spaces]
    ops += [RemoveFragment(i) for i in main.fragments if i not in head.fragments]
    # records are immutable by id: one both lines hold is the same file (its `seq` differs: the
    # version that added it on each line) and stays as it is
    ops += [AddKeySpace(k) for i, k in head.key_spaces.items() if i not in main.key_spaces]
    ops += [AddFragment(f) for i, f in head.fragments.items() if i not in main.fragments]
    ops += [
        DropIndex(n) for n, i in main.indexes.items() if n not in head.indexes or head.indexes[n].options != i.options
    ]
    ops += [
        AddIndex(i) for n, i in head.indexes.items() if n not in main.indexes or main.indexes[n].options != i.options
    ]
    ops += [RemoveIndexFile(i) for i in main.index_files if i not in head.index_files]
    ops += [AddIndexFile(f) for i, f in head.index_files.items() if i not in main.index_files]
    return tuple(ops)


def no_branch(table: str, branch: str, known: list[str]) -> str:
    """The message for a branch that does not exist."""
    return f"table {table!r} has no branch {branch!r} (branches: {', '.join(known) or 'none'}; see `branches()`)"


def check_not_branch_name(name: str) -> None:
    """Table names starting with `_branch.` are reserved for branches."""
    if name.startswith(PREFIX):
        raise InvalidArgumentError(f"invalid table name {name!r}: names starting with {PREFIX!r} are reserved")
