"""Storage backends by URI scheme: a path or `file://` is a local directory, `memory://`,
`s3://`, `gs://` and `az://` are object stores (the `s3` extra installs obstore).

>>> open_storage("/tmp/wh")  # doctest: +SKIP
LocalStorage('/tmp/wh')
>>> open_storage("s3://bucket/wh", {"endpoint": "http://127.0.0.1:9000"})  # doctest: +SKIP
ObjectStorage('s3://bucket/wh')
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from conch.errors import StorageError
from conch.storage.base import Storage
from conch.storage.local import LocalStorage

OBJECT_SCHEMES = ("memory", "s3", "s3a", "gs", "az", "abfs", "abfss", "azure")


def storage_scheme(uri: str | os.PathLike[str]) -> str:
    """`file` for a local path or `file://` URI, else the URI's scheme (lower case)."""
    text = os.fspath(uri)
    if "://" not in text:
        return "file"
    return urlsplit(text).scheme.lower()


def open_storage(uri: str | os.PathLike[str], options: Mapping[str, Any] | None = None) -> Storage:
    """The storage at `uri`; a local directory is created if missing. `options` configure
    object stores (endpoint, region, credentials, `allow_http`); they are refused for a local
    directory, where they would be silently meaningless."""
    scheme = storage_scheme(uri)
    text = os.fspath(uri)
    if scheme == "file":
        if options:
            raise StorageError(f"storage options {sorted(options)} given for the local directory {text!r}")
        path = text.removeprefix("file://")
        os.makedirs(path, exist_ok=True)
        return LocalStorage(path)
    if scheme in OBJECT_SCHEMES:
        from conch.storage.objectstore import ObjectStorage

        return ObjectStorage(text, options)
    raise StorageError(f"unsupported storage URI {text!r}: use a path, file://, {', '.join(OBJECT_SCHEMES)}")
