"""The storage protocol: where a table's files live, addressed by relative paths (DESIGN §3).

Every file is written once under a fresh id and never changed, so readers need no locks, a
cached footer or index never goes stale, and a failed writer leaves only unreferenced files,
which `vacuum` removes. Storage hands out *readers and writers*, never local paths: the rest of
Conch works the same on a local directory (the embedded default) and on object storage.

A backend is one class implementing `Storage`; `conch.files.storage.registry` maps URI schemes to
backends. Errors: a missing file is `FileNotFoundError` from the backend; callers that read
committed files turn it into `CorruptFileError` naming the file (a committed file never
disappears by design).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


def new_id() -> str:
    """A fresh file id: random, so concurrent writers never collide."""
    return uuid.uuid4().hex[:16]


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One stored file: its path relative to the storage root, size in bytes, and modification
    time (seconds since the epoch; vacuum's grace period compares against it)."""

    path: str
    size: int
    mtime: float


@runtime_checkable
class RangeReader(Protocol):
    """Random access to one immutable file. Also a `vortex.io.ReadBytesAt` (`size`, `read_at`),
    so Vortex reads fragments through it."""

    def size(self) -> int:
        """The file's length in bytes."""
        ...

    def read_at(self, offset: int, length: int) -> bytes:
        """`length` bytes from `offset` (fewer only at the end of the file)."""
        ...

    def read_into(self, offsets: Sequence[int], lengths: Sequence[int], out: memoryview) -> int:
        """Many reads at once, laid end to end into `out` (writable, at least `sum(lengths)`
        bytes): no intermediate buffer per range. Returns the bytes read; fewer than asked only
        when the file ends early (the caller reports the damage). Backends issue the ranges
        concurrently where that pays (object storage); callers coalesce adjacent ranges."""
        ...

    def close(self) -> None:
        """Release the reader's handle, if it holds one."""
        ...


class Storage(Protocol):
    """A flat namespace of immutable files under one root (a directory or a bucket prefix)."""

    @property
    def uri(self) -> str:
        """Where the files live (`/abs/dir`, `s3://bucket/prefix`, `memory://...`)."""
        ...

    def open(self, path: str) -> RangeReader:
        """A ranged reader over an existing file; raises `FileNotFoundError`."""
        ...

    def read(self, path: str) -> bytes:
        """A whole file; raises `FileNotFoundError`."""
        ...

    def write(self, path: str, data: bytes | bytearray | memoryview) -> None:
        """Write a whole file atomically and durably: readers see all of it or nothing, and once
        this returns a crash cannot take it back. Overwrites an existing file."""
        ...

    def create(self, path: str, data: bytes | bytearray | memoryview) -> bool:
        """Conditional create (put-if-absent): write `data` durably only if no file exists at
        `path`; returns False (writing nothing) if one does. The primitive an object-store WAL
        commits with."""
        ...

    def staged(self, path: str) -> AbstractContextManager[str]:
        """For writers that can only write to a local file (the Vortex writer): yields a local
        scratch path; on a clean exit its contents become `path` atomically and durably, on an
        exception nothing appears at `path`. The scratch path is no address of the stored
        file: never keep it."""
        ...

    def batch(self) -> AbstractContextManager[None]:
        """Around writing one transaction's new files (`TableLog.staging`): the files this
        thread writes inside (`write`, `staged`) become durable together when the block exits
        cleanly, not each before its call returns, so a backend that syncs per file can sync
        them at once (a local directory issues the fsyncs concurrently: the file system's
        journal commits them as one). On an exception they may never become durable: they are
        unreferenced, and vacuum removes them. Only for new files (fresh ids): an overwrite
        inside a batch could lose both versions in a crash. Batches nest (the outermost syncs)."""
        ...

    def exists(self, path: str) -> bool:
        """Whether a file exists at `path`."""
        ...

    def size(self, path: str) -> int:
        """A file's size in bytes; raises `FileNotFoundError`."""
        ...

    def delete(self, path: str) -> None:
        """Delete a file; a missing file is not an error (vacuum races other vacuums)."""
        ...

    def list(self, prefix: str = "") -> Iterator[FileInfo]:
        """Every file under `prefix` (recursively). Files may vanish while listing."""
        ...

    def delete_prefix(self, prefix: str) -> None:
        """Delete every file under `prefix` (dropping a table)."""
        ...
