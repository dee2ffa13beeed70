"""`connect()` and `Catalog`: named tables in a warehouse (files + a metastore)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from conch.errors import ConchError, ExpressionError, TableExistsError
from conch.fragments import VortexFormat
from conch.integrity import seal_json
from conch.metastore import Metastore, TableRecord
from conch.metastore.registry import open_warehouse
from conch.metastore.sqlite import now_us
from conch.scan import Scan
from conch.scan.execute import KeyCache
from conch.schema import parse_key_schema, schema_from_arrow
from conch.storage import Storage, new_id
from conch.table import Table, TableColumn
from conch.write import WriteOptions

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")


def connect(
    uri: str | os.PathLike[str] = ".conch",
    write_options: WriteOptions | None = None,
    *,
    metastore: str | Metastore | None = None,
    token: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Catalog:
    """Open (or create) a warehouse. A path is the embedded default: files under it and an
    SQLite metastore in `<path>/_catalog.sqlite`. Zero set-up. `s3://`, `gs://`, `az://` and
    `memory://` keep files and the WAL on object storage (no service); `http://host:port` is a
    `conch serve` metastore (`token=` a bearer token); `metastore=` picks another metastore
    (`postgresql://...`); `storage_options` configure object stores (endpoint, credentials).

    >>> cat = conch.connect("/tmp/wh")  # doctest: +SKIP
    >>> cat = conch.connect("s3://bucket/wh", storage_options={"region": "eu-west-1"})  # doctest: +SKIP
    """
    storage, meta = open_warehouse(uri, metastore=metastore, token=token, storage_options=storage_options)
    return Catalog(storage, meta, write_options)


class Catalog:
    """Tables of one warehouse."""

    def __init__(self, storage: Storage, metastore: Metastore, write_options: WriteOptions | None = None) -> None:
        self.storage = storage
        self.metastore = metastore
        self.format = VortexFormat(storage)
        self.key_cache = KeyCache(self.format)
        self.write_options = write_options or WriteOptions()

    @property
    def uri(self) -> str:
        """The warehouse location (a local directory or an object-store URI)."""
        return self.storage.uri

    def __repr__(self) -> str:
        return f"Catalog({self.uri!r})"

    def create_table(
        self, name: str, key_schema: Any, schema: pa.Schema | None = None, exist_ok: bool = False
    ) -> Table:
        """Create a table. `key_schema`: a `pyarrow.Schema`, `[(name, type)]` or `{name: type}`
        (empty for a root that only holds child levels). `schema`: optional Arrow value schema;
        structs are column groups and `list<struct<$: K, ...>>` fields are child levels."""
        if not _NAME.match(name):
            raise ConchError(f"invalid table name {name!r}: letters, digits, '_', '.', '-'")
        keys = parse_key_schema(key_schema)
        if isinstance(schema, dict):
            schema = pa.schema(list(schema.items()))
        tree = schema_from_arrow(keys, schema)
        record = TableRecord(
            name, f"{name}-{new_id()[:8]}", now_us(), seal_json(json.dumps({"schema": tree.to_json()}))
        )
        try:
            self.metastore.create_table(record)
        except TableExistsError:
            if exist_ok:
                return self.table(name)
            raise
        return Table(self, record)

    def table(self, name: str) -> Table:
        """Open an existing table; raises `TableNotFoundError`."""
        return Table(self, self.metastore.get_table(name))

    def __getitem__(self, name: str) -> Table:
        return self.table(name)

    def list_tables(self) -> list[str]:
        """Names of the warehouse's tables, sorted."""
        return [r.name for r in self.metastore.list_tables()]

    def drop_table(self, name: str) -> None:
        """Forget a table and delete its files."""
        rec = self.metastore.drop_table(name)
        self.storage.delete_prefix(rec.id)

    def scan(self, *columns: Any, where: Any = None, **kwargs: Any) -> Scan:
        """The spec/001 form: `catalog.scan(t["audio.bytes"], where=t["silence_ratio"] < 0.1)`."""
        tables = {c.table.id: c.table for c in columns if isinstance(c, TableColumn)}
        if len(tables) != 1:
            raise ExpressionError("catalog.scan needs column references of exactly one table: t['column']")
        table = next(iter(tables.values()))
        return table.scan(*columns, where=where, **kwargs)
