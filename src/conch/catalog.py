"""`connect()` and `Catalog`: named tables in a warehouse (files + a metastore)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from conch.errors import ConchError, ExpressionError, TableExistsError
from conch.fragments import VortexFormat
from conch.integrity import seal_json
from conch.metastore import Metastore, SqliteMetastore, TableRecord
from conch.metastore.sqlite import now_us
from conch.scan import Scan
from conch.scan.keyspace import KeyCache
from conch.schema import parse_key_schema, schema_from_arrow
from conch.storage import LocalStorage, new_id
from conch.table import Table, TableColumn
from conch.write import WriteOptions

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")


def connect(uri: str | os.PathLike[str] = ".conch", write_options: WriteOptions | None = None) -> Catalog:
    """Open (or create) a warehouse. A path is the embedded default: files under it and an
    SQLite metastore in `<path>/_catalog.sqlite`. Zero set-up.

    >>> cat = conch.connect("/tmp/wh")  # doctest: +SKIP
    """
    path = Path(os.fspath(uri))
    if "://" in str(uri) and not str(uri).startswith("file://"):
        raise ConchError(f"unsupported warehouse URI {uri!r}: use a local path")
    path = Path(str(path).removeprefix("file://"))
    path.mkdir(parents=True, exist_ok=True)
    storage = LocalStorage(path)
    return Catalog(storage, SqliteMetastore(path / "_catalog.sqlite"), write_options)


class Catalog:
    """Tables of one warehouse."""

    def __init__(self, storage: LocalStorage, metastore: Metastore, write_options: WriteOptions | None = None) -> None:
        self.storage = storage
        self.metastore = metastore
        self.format = VortexFormat(storage)
        self.key_cache = KeyCache(self.format)
        self.write_options = write_options or WriteOptions()

    @property
    def uri(self) -> str:
        """The warehouse location (a local directory)."""
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
