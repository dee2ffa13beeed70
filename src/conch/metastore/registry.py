"""Metastore backends by URI scheme (STYLE: backends come from a registry).

`sqlite:///abs/path/_catalog.sqlite` is the embedded default, and a local warehouse's default
metastore is the SQLite file inside it. A new backend (`postgresql://`, `http://`) is one class
implementing `Metastore` plus one `register_metastore` call.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from conch.errors import WarehouseError
from conch.metastore.base import Metastore
from conch.metastore.sqlite import SqliteMetastore

MetastoreFactory = Callable[[str, bool], Metastore]  # (uri, create now) -> metastore
EMBEDDED_NAME = "_catalog.sqlite"


def _sqlite(uri: str, create: bool) -> Metastore:
    path = urlsplit(uri).path if uri.startswith("sqlite://") else uri
    return SqliteMetastore(path, create=create)


_FACTORIES: dict[str, MetastoreFactory] = {"sqlite": _sqlite}


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
    """The metastore a warehouse uses when none is given: the SQLite file inside a local
    warehouse. Object stores get theirs (a WAL of put-if-absent objects) with their backend."""
    if "://" in storage_uri:
        raise WarehouseError(f"no embedded metastore for {storage_uri!r} yet: pass metastore='<uri>' to connect()")
    return f"sqlite://{storage_uri.rstrip('/')}/{EMBEDDED_NAME}"
