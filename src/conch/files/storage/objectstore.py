"""Object storage through `obstore` (DESIGN §9): `memory://`, `s3://`, `gs://`, `az://`.

One class, `ObjectStorage`, implements the `Storage` protocol over any obstore store:

- ranged reads are `get_range` / `get_ranges` requests (the latter coalesces nearby ranges and
  runs up to ten requests concurrently, which is what a take over object storage needs);
- `create` is a conditional put (`If-None-Match: *`), the primitive the object-store metastore
  commits with; a store that cannot do it raises `ConditionalWriteUnsupportedError`;
- `staged` writes a local scratch file and uploads it, multipart when it is large;
- files are immutable by contract, so their sizes are cached (no HEAD per open of a hot file).

Credentials come from the usual environment variables (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`,
`GOOGLE_SERVICE_ACCOUNT`, `AZURE_STORAGE_ACCOUNT_NAME`, ...) or from explicit `options`
(obstore's config keys, e.g. `endpoint`, `region`, `access_key_id`, plus client options such
as `allow_http`). `memory://<name>` is a process-wide in-memory store per name: two `connect`s
of the same name in one process see the same files (tests, examples).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from conch.errors import ConditionalWriteUnsupportedError, InvalidPathError, StorageError
from conch.files.storage.base import FileInfo, new_id
from conch.model.deps import optional_import
from conch.model.lru import Lru

SCHEMES = ("memory", "s3", "s3a", "gs", "az", "abfs", "abfss", "azure")
MULTIPART_CHUNK = 8 * 1024 * 1024  # bytes per part of a multipart upload (S3's minimum is 5 MiB)
_CLIENT_KEYS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "default_headers",
        "http1_only",
        "http2_only",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "timeout",
        "user_agent",
    }
)
_memory_stores: dict[str, Any] = {}
_memory_lock = threading.Lock()


def _obstore() -> Any:
    return optional_import("obstore")


def _build_store(uri: str, options: Mapping[str, Any]) -> tuple[Any, str]:
    """The obstore store for the bucket/container of `uri`, and the key prefix inside it."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    store_mod = optional_import("obstore.store")
    prefix = parts.path.strip("/")
    if scheme == "memory":
        with _memory_lock:
            store = _memory_stores.setdefault(parts.netloc, store_mod.MemoryStore())
        return store, prefix
    if not parts.netloc:
        raise StorageError(f"storage URI {uri!r} names no bucket: use {scheme}://<bucket>/<prefix>")
    config = {k: v for k, v in options.items() if k not in _CLIENT_KEYS}
    client = {k: v for k, v in options.items() if k in _CLIENT_KEYS}
    endpoint = config.get("endpoint", os.environ.get("AWS_ENDPOINT_URL", ""))
    if str(endpoint).startswith("http://"):
        client.setdefault("allow_http", True)  # a local S3-compatible server
    try:
        if scheme in ("s3", "s3a"):
            return store_mod.S3Store(parts.netloc, client_options=client or None, **config), prefix
        if scheme == "gs":
            return store_mod.GCSStore(parts.netloc, client_options=client or None, **config), prefix
        # az://<container>/<prefix>; the account comes from options or AZURE_STORAGE_ACCOUNT_NAME
        return store_mod.AzureStore(parts.netloc, client_options=client or None, **config), prefix
    except Exception as e:  # obstore raises its own config errors (unknown key, bad value)
        raise StorageError(f"cannot configure storage {uri!r}: {e}") from e


class ObjectRangeReader:
    """Ranged reads of one immutable object: `get_range` for one, `get_ranges` for many."""

    __slots__ = ("_path", "_size", "_storage")

    def __init__(self, storage: ObjectStorage, path: str, size: int) -> None:
        self._storage = storage
        self._path = path
        self._size = size

    def size(self) -> int:
        return self._size

    def read_at(self, offset: int, length: int) -> bytes:
        length = min(length, self._size - offset)
        if length <= 0:
            return b""
        return bytes(self._storage._call("read", self._path, "get_range", start=offset, length=length))

    def read_into(self, offsets: Sequence[int], lengths: Sequence[int], out: memoryview) -> int:
        starts: list[int] = []
        sizes: list[int] = []
        for o, n in zip(offsets, lengths, strict=True):
            end = min(o + n, self._size)  # a range past the end is clipped to it...
            if end > o:
                starts.append(o)
                sizes.append(end - o)
            if end < o + n:
                break  # ...and is the last one read: the object ends early (the caller names the damage)
        if not starts:
            return 0
        got = self._storage._call("read", self._path, "get_ranges", starts=starts, lengths=sizes)
        pos = 0
        for part in got:
            m = memoryview(part)
            out[pos : pos + len(m)] = m
            pos += len(m)
        return pos

    def close(self) -> None:
        pass


class ObjectStorage:
    """Files under a prefix of an object store (`s3://bucket/prefix`, `memory://name`, ...).

    >>> storage = ObjectStorage("memory://demo")  # doctest: +SKIP
    >>> storage.create("a/x", b"1"), storage.create("a/x", b"2")  # doctest: +SKIP
    (True, False)
    """

    def __init__(self, uri: str, options: Mapping[str, Any] | None = None, scratch_dir: str | None = None) -> None:
        scheme = urlsplit(uri).scheme.lower()
        if scheme not in SCHEMES:
            raise StorageError(f"unsupported object storage URI {uri!r}: use one of {', '.join(SCHEMES)}")
        self._uri = uri.rstrip("/")
        self.options = dict(options or {})
        self._store, self._prefix = _build_store(uri, self.options)
        self._scratch = scratch_dir
        self._sizes: Lru[str, int] = Lru(max_entries=100_000)  # immutable files: size by path

    @property
    def uri(self) -> str:
        return self._uri

    def __repr__(self) -> str:
        return f"ObjectStorage({self._uri!r})"

    def _key(self, path: str) -> str:
        if path.startswith("/") or any(p in ("", ".", "..") for p in path.split("/")):
            raise InvalidPathError(f"invalid path {path!r} in {self._uri}: relative, no empty, '.' or '..' segments")
        return f"{self._prefix}/{path}" if self._prefix else path

    def _call(self, what: str, path: str, fn: str, *args: Any, **kwargs: Any) -> Any:
        """One obstore call on `path`; a missing file stays `FileNotFoundError`, every other
        failure becomes a `StorageError` naming the operation and the object."""
        obs = _obstore()
        try:
            return getattr(obs, fn)(self._store, self._key(path), *args, **kwargs)
        except FileNotFoundError:
            raise
        except obs.exceptions.BaseError as e:
            raise StorageError(f"{what} {self._uri}/{path} failed: {str(e).splitlines()[0]}") from e

    def _remember(self, path: str, size: int | None) -> None:
        if size is None:
            self._sizes.remove_if(lambda p: p == path)
        else:
            self._sizes.put(path, size)

    def open(self, path: str) -> ObjectRangeReader:
        return ObjectRangeReader(self, path, self.size(path))

    def read(self, path: str) -> bytes:
        data = bytes(self._call("read", path, "get").bytes())
        self._remember(path, len(data))
        return data

    def write(self, path: str, data: bytes | bytearray | memoryview) -> None:
        self._remember(path, None)
        self._call("write", path, "put", bytes(data), chunk_size=MULTIPART_CHUNK)
        self._remember(path, len(data))

    def create(self, path: str, data: bytes | bytearray | memoryview) -> bool:
        obs = _obstore()
        try:
            self._call("create", path, "put", bytes(data), mode="create", use_multipart=False)
        except (StorageError, NotImplementedError) as e:
            cause = e.__cause__ if isinstance(e, StorageError) else e
            if isinstance(cause, obs.exceptions.AlreadyExistsError | obs.exceptions.PreconditionError):
                return False
            if isinstance(cause, obs.exceptions.NotSupportedError | NotImplementedError):
                raise ConditionalWriteUnsupportedError(
                    f"{self._uri} does not support conditional writes (put-if-absent), which commits need: "
                    "enable them on the store (for S3-compatible stores: conditional_put='etag') or use "
                    "another metastore (connect(..., metastore='postgresql://...' or 'http://...'))"
                ) from e
            raise
        self._remember(path, len(data))
        return True

    @contextmanager
    def staged(self, path: str) -> Iterator[str]:
        self._key(path)  # validate before any work is done
        fd, tmp = tempfile.mkstemp(prefix=".conch-staged-", suffix=f"-{new_id()}", dir=self._scratch)
        os.close(fd)
        try:
            yield tmp
            size = os.path.getsize(tmp)
            self._remember(path, None)
            self._call("write", path, "put", Path(tmp), chunk_size=MULTIPART_CHUNK)
            self._remember(path, size)
        finally:
            Path(tmp).unlink(missing_ok=True)

    def batch(self) -> AbstractContextManager[None]:
        return nullcontext()  # every put is durable when it returns

    def exists(self, path: str) -> bool:
        try:
            self.size(path)
        except FileNotFoundError:
            return False
        return True

    def size(self, path: str) -> int:
        known = self._sizes.get(path)
        if known is not None:
            return known
        size = int(self._call("stat", path, "head")["size"])
        self._remember(path, size)
        return size

    def delete(self, path: str) -> None:
        self._remember(path, None)
        with suppress(FileNotFoundError):
            self._call("delete", path, "delete")

    def list(self, prefix: str = "") -> Iterator[FileInfo]:
        obs = _obstore()
        base = self._key(prefix.rstrip("/")) if prefix.strip("/") else self._prefix
        cut = len(self._prefix) + 1 if self._prefix else 0
        try:
            for chunk in obs.list(self._store, base or None, chunk_size=1000):
                for meta in chunk:
                    yield FileInfo(meta["path"][cut:], int(meta["size"]), meta["last_modified"].timestamp())
        except obs.exceptions.BaseError as e:
            raise StorageError(f"list {self._uri}/{prefix} failed: {str(e).splitlines()[0]}") from e

    def delete_prefix(self, prefix: str) -> None:
        if not prefix.strip("/"):
            raise StorageError(f"refusing to delete everything under {self._uri}: name a prefix")
        paths = [f.path for f in self.list(prefix)]
        for i in range(0, len(paths), 1000):
            batch = paths[i : i + 1000]
            for p in batch:
                self._remember(p, None)
            obs = _obstore()
            try:
                obs.delete(self._store, [self._key(p) for p in batch])
            except FileNotFoundError:
                pass
            except obs.exceptions.BaseError as e:
                raise StorageError(f"delete under {self._uri}/{prefix} failed: {str(e).splitlines()[0]}") from e
