"""Metastore backends by URI scheme (STYLE: backends come from a registry), and the warehouse
(storage + metastore) `connect()` opens.

| `connect(uri, metastore=...)` | storage | metastore |
|---|---|---|
| `"dir"`, `"file:///dir"` | local directory | SQLite file `<dir>/_catalog.sqlite` |
| `"s3://b/p"`, `"gs://..."`, `"az://..."`, `"memory://n"` | object store | WAL as objects in the same store (no service) |
| any, `metastore="postgresql://..."` | as above | PostgreSQL (the `postgres` extra) |
| any, `metastore="http://host:port"` | as above | a `conch serve` server (`token=`) |
| `"http://host:port"` | the storage the server advertises | that server |
| any, `metastore="storage"` | as above | WAL as objects in the warehouse storage, even a local one |

A new backend is one class implementing `Metastore` plus one `register_metastore` call.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from conch.errors import WarehouseError
from conch.files.storage.base import Storage
from conch.files.storage.registry import storage_from_uri
from conch.log.metastore.base import Metastore
from conch.log.metastore.sqlite import SqliteMetastore

MetastoreFactory = Callable[[str, bool], Metastore]  # (uri, create now) -> metastore
EMBEDDED_NAME = "_catalog.sqlite"


def _sqlite(uri: str, create: bool) -> Metastore:
    path = urlsplit(uri).path if uri.startswith("sqlite://") else uri
    return SqliteMetastore(path, create=create)


def _postgres(uri: str, create: bool) -> Metastore:
    from conch.log.metastore.postgres import PostgresMetastore

    return PostgresMetastore(uri)


def _http(uri: str, create: bool) -> Metastore:
    from conch.log.metastore.http import HttpMetastore

    return HttpMetastore(uri)  # the token: CONCH_TOKEN, or connect(..., token=...)


_FACTORIES: dict[str, MetastoreFactory] = {
    "sqlite": _sqlite,
    "postgresql": _postgres,
    "postgres": _postgres,
    "http": _http,
    "https": _http,
}


def register_metastore(scheme: str, factory: MetastoreFactory) -> None:
    """Make `connect(..., metastore="<scheme>://...")` use `factory(uri, create)`."""
    _FACTORIES[scheme] = factory


def metastore_schemes() -> list[str]:
    return sorted(_FACTORIES)


def metastore_from_uri(uri: str, create: bool = False) -> Metastore:
    """The metastore at `uri`; raises `WarehouseError` naming the supported schemes."""
    scheme = urlsplit(uri).scheme if "://" in uri else ""
    factory = _FACTORIES.get(scheme)
    if factory is None:
        raise WarehouseError(
            f"unsupported metastore URI {uri!r}: supported schemes are {', '.join(s + '://' for s in metastore_schemes())}"
        )
    return factory(uri, create)


def default_metastore_uri(storage_uri: str) -> str:
    """The metastore a local warehouse uses when none is given: the SQLite file inside it
    (object stores keep a WAL of put-if-absent objects instead: `open_warehouse`)."""
    if "://" in storage_uri:
        raise WarehouseError(f"no embedded SQLite metastore for {storage_uri!r}: pass metastore='<uri>' to connect()")
    return f"sqlite://{storage_uri.rstrip('/')}/{EMBEDDED_NAME}"


def open_warehouse(
    uri: str | os.PathLike[str],
    create: bool | None = None,
    metastore: str | Metastore | None = None,
    token: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> tuple[Storage, Metastore]:
    """The storage and metastore of the warehouse at `uri` (see the module table)."""
    text = os.fspath(uri)
    if text.startswith(("http://", "https://")):  # a `conch serve` server: data on its storage
        if metastore is not None:
            raise WarehouseError(
                f"{text} is a metastore server: give it as the warehouse URI or as metastore=, not both"
            )
        from conch.log.metastore.http import HttpMetastore

        server = HttpMetastore(text, token=token)
        return storage_from_uri(server.warehouse, create, storage_options), server
    storage = storage_from_uri(text, create, storage_options)
    if metastore is not None and not isinstance(metastore, str):
        return storage, metastore
    if metastore == "storage" or (metastore is None and "://" in storage.uri):
        from conch.log.metastore.objectstore import ObjectStoreMetastore

        return storage, ObjectStoreMetastore(storage)
    if token is not None and metastore is not None and metastore.startswith(("http://", "https://")):
        from conch.log.metastore.http import HttpMetastore

        return storage, HttpMetastore(metastore, token=token)
    return storage, metastore_from_uri(metastore or default_metastore_uri(storage.uri), create=bool(create))
