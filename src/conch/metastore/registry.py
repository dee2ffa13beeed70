"""Metastores by URI, and the warehouse (storage + metastore) `connect()` opens.

| `connect(uri, metastore=...)` | storage | metastore |
|---|---|---|
| `"dir"`, `"file:///dir"` | local directory | SQLite file `<dir>/_catalog.sqlite` |
| `"s3://b/p"`, `"gs://..."`, `"az://..."`, `"memory://n"` | object store | WAL as objects in the same store (no service) |
| any, `metastore="postgresql://..."` | as above | PostgreSQL (the `postgres` extra) |
| any, `metastore="http://host:port"` | as above | a `conch serve` server |
| `"http://host:port"` | the storage the server advertises | that server |
| any, `metastore="storage"` | as above | WAL as objects in the warehouse storage, even a local one |
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from conch.errors import ConchError
from conch.metastore.base import Metastore
from conch.storage.base import Storage
from conch.storage.local import LocalStorage
from conch.storage.registry import open_storage

HTTP_SCHEMES = ("http://", "https://")
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_metastore(spec: str | Metastore | None, storage: Storage, token: str | None = None) -> Metastore:
    """The metastore named by `spec` for a warehouse on `storage` (see the module table)."""
    if spec is not None and not isinstance(spec, str):
        return spec
    if spec is None:
        if isinstance(storage, LocalStorage):
            from conch.metastore.sqlite import SqliteMetastore

            return SqliteMetastore(Path(storage.uri) / "_catalog.sqlite")
        spec = "storage"
    if spec == "storage":
        from conch.metastore.objectstore import ObjectStoreMetastore

        return ObjectStoreMetastore(storage)
    if spec.startswith(POSTGRES_SCHEMES):
        from conch.metastore.postgres import PostgresMetastore

        return PostgresMetastore(spec)
    if spec.startswith(HTTP_SCHEMES):
        from conch.metastore.http import HttpMetastore

        return HttpMetastore(spec, token=token)
    if spec.startswith("sqlite://") or "://" not in spec:
        from conch.metastore.sqlite import SqliteMetastore

        return SqliteMetastore(spec.removeprefix("sqlite://"))
    raise ConchError(
        f"unsupported metastore {spec!r}: use a SQLite path, 'storage', postgresql://..., or http(s)://host:port"
    )


def open_warehouse(
    uri: str | os.PathLike[str],
    metastore: str | Metastore | None = None,
    token: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> tuple[Storage, Metastore]:
    """The storage and metastore of the warehouse at `uri` (see the module table)."""
    text = os.fspath(uri)
    if text.startswith(HTTP_SCHEMES):
        if metastore is not None:
            raise ConchError(f"{text} is a metastore server: give it as the warehouse URI or as metastore=, not both")
        from conch.metastore.http import HttpMetastore

        server = HttpMetastore(text, token=token)
        return open_storage(server.warehouse, storage_options), server
    storage = open_storage(text, storage_options)
    return storage, open_metastore(metastore, storage, token)
