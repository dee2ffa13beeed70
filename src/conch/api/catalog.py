"""`connect()` and `Catalog`: named tables in a warehouse (files + a metastore).

`connect` resolves the warehouse URI through the storage and metastore registries
(`conch.files.storage.registry`, `conch.log.metastore.registry`), builds the I/O handles once
(`conch.log.warehouse.Warehouse`) and hands them down to every table.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import pyarrow as pa

from conch.api.connection import local_uri, open_connection
from conch.api.table import Table, TableColumn
from conch.errors import ConchError, ExpressionError, SchemaError, TableExistsError
from conch.files.integrity import seal_json
from conch.files.storage.base import new_id
from conch.log.branches import drop_all, open_branch
from conch.log.branching import check_not_branch_name, is_branch_record, split_name
from conch.log.metastore.base import Metastore, TableRecord
from conch.log.tablelog import TableLog
from conch.log.warehouse import MEMORY_BUDGET, Connection, Warehouse, budget_split
from conch.maintain.compaction import background
from conch.model.budget import WriteOptions
from conch.model.policy import Policy
from conch.model.schema import parse_key_schema, schema_from_arrow
from conch.scan import Scan

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")


def connect(
    uri: str | os.PathLike[str] = ".conch",
    write_options: WriteOptions | None = None,
    *,
    create: bool | None = None,
    evolve: bool = True,
    metastore: str | Metastore | None = None,
    token: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    maintenance: Policy | None = None,
    memory_budget: int = MEMORY_BUDGET,
) -> Catalog:
    """Open a warehouse. A path (or `file:///path`) is the embedded default: files under it and
    an SQLite metastore in `<path>/_catalog.sqlite`. Zero set-up.

    `create`: None (default) makes the directory on the first `create_table`, so reading a
    mistyped path never leaves a warehouse behind; True makes it now; False raises
    `WarehouseNotFoundError` if it does not exist. A path that is a file raises `WarehouseError`,
    as does an unsupported scheme (the message lists the supported ones).

    `evolve`: whether writes may add columns the schema lacks (default True: Python writes build
    tables up column by column and every commit names the columns it added, see
    `Table.history()`); False makes a write with unknown columns raise `SchemaError` unless it
    passes `evolve=True` itself, as Spark writes do without `mergeSchema`.

    Beyond one machine (`docs/backends.md`): `s3://`, `gs://`, `az://` and `memory://` keep files
    and the WAL on object storage (no service); `http://host:port` is a `conch serve` metastore
    whose storage the client opens (`token=`: a bearer token); `metastore=` picks another
    metastore (`postgresql://...`, `sqlite:///path/file.sqlite`, `http://...`, or a `Metastore`);
    `storage_options` configure object stores (endpoint, region, credentials, `allow_http`).

    `maintenance`: the compaction policy (`conch.Policy`, default on: after each write or
    delete, the writing process runs a bounded compaction when the policy asks for one);
    `conch.Policy(auto=False)` turns the automatic part off (`Table.compact()` still works).

    `memory_budget`: bytes this process may hold for the warehouse's caches and buffers (default
    1 GiB; at least 16 MiB): the key-space, file-segment and decoded-fragment caches, a scan's
    output batch and a write's input chunk are sized from it (`Warehouse`), so memory stays flat
    however many keys a table holds. `Scan.with_options` still tunes one scan.

    >>> with conch.connect("/tmp/wh") as cat:  # doctest: +SKIP
    ...     cat.list_tables()
    >>> cat = conch.connect("s3://bucket/wh", storage_options={"region": "eu-west-1"})  # doctest: +SKIP
    """
    budget_split(memory_budget)  # a bad budget is refused before anything is opened
    reopenable = metastore is None or isinstance(metastore, str)
    conn = Connection(
        local_uri(uri),
        metastore=metastore if isinstance(metastore, str) else None,
        token=token,
        storage_options=dict(storage_options or {}),
        write_options=write_options,
        evolve=evolve,
        maintenance=maintenance,
        memory_budget=memory_budget,
        # a Metastore object cannot be named to another process: workers must not reopen then
        reopenable=reopenable,
    )
    given = None if metastore is None or isinstance(metastore, str) else metastore  # an object: used as is
    wh = open_connection(conn, create=create, metastore=given)
    return Catalog(wh)


class Catalog:
    """Tables of one warehouse. Usable as a context manager (`close()` on exit)."""

    def __init__(self, warehouse: Warehouse) -> None:
        self.warehouse = warehouse

    @property
    def uri(self) -> str:
        """The warehouse location."""
        return self.warehouse.uri

    def __repr__(self) -> str:
        return f"Catalog({self.uri!r})"

    def close(self) -> None:
        """Release the metastore's connections and cached file handles, and stop the background
        maintenance of the warehouse's tables: a pending settle is dropped (the next writer or
        `Table.compact()` does it) and a running one stops before its next commit; once this
        returns no background thread touches the warehouse again. Tables opened from this
        catalog reconnect if used again (without background settles)."""
        background.forget(self.warehouse)
        self.warehouse.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def create_table(
        self,
        name: str,
        key_schema: Any,
        schema: pa.Schema | None = None,
        exist_ok: bool = False,
        partition_by: list[str] | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> Table:
        """Create a table. `key_schema`: a `pyarrow.Schema`, `[(name, type)]` or `{name: type}`
        (empty for a root that only holds child levels). `schema`: optional Arrow value schema;
        structs are column groups and `list<struct<$: K, ...>>` fields are child levels.
        `exist_ok`: return the existing table of that name if its key schema is the same (a
        different key schema raises `SchemaError`). `partition_by`: the partitioning key
        (spec/003), a prefix of the key columns: no key space or fragment spans two partitions.
        `properties`: text fixed with the table (`Table.properties`), e.g. the Hugging Face
        features `conch.engines.hf.write` keeps.

        >>> cat.create_table("events", [("day", pa.date32()), ("id", pa.uint64())], partition_by=["day"])  # doctest: +SKIP
        """
        if not _NAME.match(name):
            raise ConchError(f"invalid table name {name!r}: letters, digits, '_', '.', '-'")
        check_not_branch_name(name)
        keys = parse_key_schema(key_schema)
        if isinstance(schema, dict):
            schema = pa.schema(list(schema.items()))
        tree = schema_from_arrow(keys, schema)
        props: dict[str, Any] = {"schema": tree.to_json()}
        if properties:
            props["properties"] = {str(k): str(v) for k, v in properties.items()}
        if partition_by:
            if list(partition_by) != keys.names[: len(partition_by)]:
                raise SchemaError(
                    f"partition_by={list(partition_by)} must be a prefix of the key columns {keys.names}, e.g. "
                    f"{keys.names[:1]}"
                )
            props["partition_keys"] = len(partition_by)
        record = TableRecord(name, f"{name}-{new_id()[:8]}", time.time_ns() // 1000, seal_json(json.dumps(props)))
        try:
            self.warehouse.metastore.create_table(record)
        except TableExistsError:
            if not exist_ok:
                raise
            table = self.table(name)
            if not table.key_schema.equals(keys):
                raise SchemaError(
                    f"table {name!r} exists with key schema ({_keys(table.key_schema)}), not ({_keys(keys)}): "
                    "open it with table(), or pick another name"
                ) from None
            return table
        return Table(TableLog(self.warehouse, record))

    def table(self, name: str, branch: str | None = None) -> Table:
        """Open an existing table; raises `TableNotFoundError`. `branch` (or a name `"t@x"`):
        open branch `x` of table `t` instead (`Table.branch`; `BranchNotFoundError`)."""
        if branch is None:
            name, branch = split_name(name)
        table = Table(TableLog(self.warehouse, self.warehouse.metastore.get_table(name)))
        return table if branch is None else Table(open_branch(table.log, branch))

    def __getitem__(self, name: str) -> Table:
        return self.table(name)

    def list_tables(self) -> list[str]:
        """Names of the warehouse's tables, sorted."""
        return [r.name for r in self.warehouse.metastore.list_tables() if not is_branch_record(r)]

    def drop_table(self, name: str) -> None:
        """Forget a table, its branches and their files. Handles to it raise
        `TableNotFoundError` from then on; a table created later under the same name is a
        different table."""
        ms = self.warehouse.metastore
        rec = ms.drop_table(name)
        for branch in drop_all(ms, rec):
            self.warehouse.storage.delete_prefix(branch.id)  # the metastore's own objects of its log, if any
        self.warehouse.storage.delete_prefix(rec.id)

    def scan(self, *columns: Any, where: Any = None, **kwargs: Any) -> Scan:
        """The spec/001 form: `catalog.scan(t["audio.bytes"], where=t["silence_ratio"] < 0.1)`."""
        tables = {c.table.id: c.table for c in columns if isinstance(c, TableColumn)}
        if len(tables) != 1:
            raise ExpressionError("catalog.scan needs column references of exactly one table: t['column']")
        table = next(iter(tables.values()))
        return table.scan(*columns, where=where, **kwargs)


def _keys(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema) or "none"
