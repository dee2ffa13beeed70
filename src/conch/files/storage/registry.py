"""Storage backends by URI scheme (STYLE: backends come from a registry).

`connect("dir")` and `connect("file:///abs/dir")` are the embedded default (`LocalStorage`);
`memory://`, `s3://`, `gs://` and `az://` are object stores (`ObjectStorage`, the `s3` extra).
A new backend is one class implementing `Storage` plus one `register_storage` call; unknown
schemes fail naming the supported ones.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from conch.errors import StorageError, WarehouseError, WarehouseNotFoundError
from conch.files.storage.base import Storage
from conch.files.storage.local import LocalStorage

# (location without the scheme, create, options) -> storage. `create`: True makes the location
# now, False requires it to exist, None (the default of `connect`) creates it on the first write.
# `options`: backend configuration (object stores: endpoint, region, credentials, `allow_http`).
StorageFactory = Callable[[str, bool | None, Mapping[str, Any] | None], Storage]


def _local(location: str, create: bool | None, options: Mapping[str, Any] | None = None) -> Storage:
    if options:
        raise StorageError(f"storage options {sorted(options)} given for the local directory {location!r}")
    path = os.path.abspath(os.path.expanduser(location))
    if os.path.exists(path) and not os.path.isdir(path):
        raise WarehouseError(f"{path} is a file, not a warehouse directory: connect() to a directory")
    if not os.path.exists(path):
        if create is False:
            raise WarehouseNotFoundError(
                f"no warehouse at {path}: check the path, or create one with conch.connect({location!r}, create=True)"
            )
        if create:
            os.makedirs(path, exist_ok=True)
    return LocalStorage(path)


def _object(location: str, create: bool | None, options: Mapping[str, Any] | None = None) -> Storage:
    """An object store; buckets are made by their owners, so `create` has nothing to do here."""
    from conch.files.storage.objectstore import ObjectStorage

    return ObjectStorage(location, options)


_FACTORIES: dict[str, StorageFactory] = {"file": _local}
for _scheme in ("memory", "s3", "s3a", "gs", "az", "abfs", "abfss", "azure"):
    _FACTORIES[_scheme] = _object


def register_storage(scheme: str, factory: StorageFactory) -> None:
    """Make `connect("<scheme>://...")` use `factory(location, create, options)`."""
    _FACTORIES[scheme] = factory


def storage_schemes() -> list[str]:
    return sorted(_FACTORIES)


def split_uri(uri: str | os.PathLike[str]) -> tuple[str, str]:
    """`(scheme, location)`: a plain path is `file`; `file:///abs` → `("file", "/abs")`."""
    text = os.fspath(uri)
    if "://" not in text:
        return "file", text
    parts = urlsplit(text)
    if parts.scheme == "file":
        return "file", unquote(parts.netloc + parts.path)
    return parts.scheme, text


def storage_from_uri(
    uri: str | os.PathLike[str], create: bool | None = None, options: Mapping[str, Any] | None = None
) -> Storage:
    """The storage at a warehouse URI; raises `WarehouseError` naming the supported schemes."""
    scheme, location = split_uri(uri)
    factory = _FACTORIES.get(scheme)
    if factory is None:
        raise WarehouseError(
            f"unsupported warehouse URI {os.fspath(uri)!r}: supported are a local path or "
            f"{', '.join(s + '://' for s in storage_schemes())}"
        )
    return factory(location, create, options)
