"""Index definitions: `Table.create_index` / `drop_index` / `indexes` (DESIGN §6a).

An index is table metadata: one `wal.AddIndex` / `wal.DropIndex` operation in a commit of kind
`"index"`, replayed into `TableState.indexes`, so a snapshot as of an earlier time knows which
indexes existed then (and the files built for it, `TableState.index_files`). A definition names
its column by id, so renaming the column keeps the index; dropping the column makes searching it
an error naming the index.
"""

from __future__ import annotations

import json
from typing import Any

from conch.errors import ColumnNotFoundError, InvalidArgumentError, SchemaError
from conch.files.manifest import IndexDef, TableState
from conch.log.tablelog import TableLog
from conch.log.txn import Commit
from conch.log.wal import AddIndex, DropIndex, Transaction
from conch.search import vectors

KINDS = ("vector", "text")


def create_index(
    log: TableLog,
    column: str,
    kind: str = "vector",
    metric: str = "cosine",
    name: str | None = None,
    index: str = "flat",
    **options: Any,
) -> Commit:
    """Declare an index on `column` (module doc); files are built by `build_indexes`."""
    state = log.state()
    definition = define(state, column, kind, metric, name, index, options)
    summary = f"create {kind} index {definition.name!r} on {column}"
    return log.commit(Transaction("index", (AddIndex(definition),), summary, state.seq))


def define(
    state: TableState, column: str, kind: str, metric: str, name: str | None, index: str, options: dict[str, Any]
) -> IndexDef:
    """A validated definition (typed errors name what is wrong)."""
    if kind not in KINDS:
        raise InvalidArgumentError(f"index kind {kind!r} is not one of {list(KINDS)}")
    col = state.schema.column(column)
    name = name or f"{column}_{kind}"
    if not isinstance(name, str) or not name.replace("_", "").replace(".", "").isalnum():
        raise InvalidArgumentError(f"index name {name!r}: letters, digits, '_' and '.' only")
    if name in state.indexes:
        raise InvalidArgumentError(f"table already has an index named {name!r}; drop_index it first")
    same = [i.name for i in state.indexes.values() if i.column_id == col.id and i.kind == kind]
    if same:
        raise InvalidArgumentError(f"column {column!r} already has a {kind} index ({same[0]!r})")
    if kind == "text":
        if not (col.type.equals("string") or col.type.equals("large_string")):
            raise SchemaError(f"column {column!r} has type {col.type}; a text index needs a string column")
        if options or index != "flat":
            raise InvalidArgumentError("a text index takes no index structure or options (BM25 over tantivy)")
        return IndexDef(name, col.level, column, col.id, kind)
    if metric not in vectors.METRICS:
        raise InvalidArgumentError(f"metric {metric!r} is not one of {list(vectors.METRICS)}")
    dim = vectors.vector_dim(col.type, column)
    opts = vectors.options_for(index, options)
    return IndexDef(name, col.level, column, col.id, kind, metric, dim, json.dumps(opts, sort_keys=True))


def drop_index(log: TableLog, name: str) -> Commit:
    """Forget index `name` and its files (`vacuum` removes them once no version needs them)."""
    state = log.state()
    find(state, name)
    return log.commit(Transaction("index", (DropIndex(name),), f"drop index {name!r}", state.seq))


def find(state: TableState, name: str) -> IndexDef:
    found = state.indexes.get(name)
    if found is None:
        have = ", ".join(sorted(state.indexes)) or "none"
        raise InvalidArgumentError(f"no index named {name!r} (indexes: {have})")
    return found


def for_column(state: TableState, column: str | None, kind: str) -> IndexDef:
    """The `kind` index of `column` (None: the only one of that kind)."""
    mine = [i for i in state.indexes.values() if i.kind == kind]
    if column is not None:
        if column in state.indexes and state.indexes[column].kind == kind:
            return state.indexes[column]
        ids = {c.id for c in state.schema.columns if c.full_path == column}
        mine = [i for i in mine if i.column_id in ids]
    if len(mine) == 1:
        current = [c for c in state.schema.columns if c.id == mine[0].column_id]
        if not current:
            raise ColumnNotFoundError(f"the column of {kind} index {mine[0].name!r} was dropped; drop the index")
        return mine[0]
    what = f"column {column!r}" if column is not None else "this table"
    if not mine:
        raise InvalidArgumentError(f"{what} has no {kind} index; create one with t.create_index(..., kind={kind!r})")
    raise InvalidArgumentError(f"{what} has several {kind} indexes ({[i.name for i in mine]}); name a column")


def describe(state: TableState) -> list[str]:
    """One line per index: name, kind, column, metric/options, files built."""
    out = []
    for i in state.indexes.values():
        files = [f for f in state.index_files.values() if f.index == i.name]
        what = f"{i.metric}, {i.dim} dims, {vectors.describe_options(i.options)}" if i.kind == "vector" else "bm25"
        rows = sum(f.rows for f in files)
        out.append(f"{i.name}: {i.kind} on {i.column} ({what}); {len(files)} index files over {rows} rows")
    return out
