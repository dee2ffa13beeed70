"""The embedded default: a table's files under one local directory."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from conch.storage.base import FileInfo, new_id


def make_durable(path: str | os.PathLike[str]) -> None:
    """fsync a written file and its directory: a commit must never reference a file whose data
    or directory entry a power loss could take back."""
    for target, flags in ((path, os.O_RDONLY), (os.path.dirname(os.fspath(path)), os.O_RDONLY | os.O_DIRECTORY)):
        fd = os.open(target, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class LocalRangeReader:
    """Ranged reads of one local file. It holds no descriptor between calls (Vortex coalesces a
    scan's reads into a few large ones), so thousands of open readers never approach the
    process's descriptor limit; `read_into` uses one descriptor for the whole batch of ranges
    and reads each straight into the caller's buffer (one `preadv`, no copy of its own)."""

    __slots__ = ("_path", "_size")

    def __init__(self, path: str) -> None:
        self._path = path
        self._size = os.path.getsize(path)  # FileNotFoundError for a missing file

    def size(self) -> int:
        return self._size

    def read_at(self, offset: int, length: int) -> bytes:
        fd = os.open(self._path, os.O_RDONLY)
        try:
            return os.pread(fd, length, offset)
        finally:
            os.close(fd)

    def read_into(self, offsets: Sequence[int], lengths: Sequence[int], out: memoryview) -> int:
        fd = os.open(self._path, os.O_RDONLY)
        pos = 0
        try:
            for offset, length in zip(offsets, lengths, strict=True):
                got = os.preadv(fd, [out[pos : pos + length]], offset)
                pos += got
                if got < length:  # the file ends early: the caller names the damage
                    break
            return pos
        finally:
            os.close(fd)

    def close(self) -> None:
        pass


class LocalStorage:
    """Files under one local directory (`connect("dir")`, `connect("file:///dir")`)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()

    @property
    def uri(self) -> str:
        return str(self.root)

    def __repr__(self) -> str:
        return f"LocalStorage({self.uri!r})"

    def _path(self, rel: str) -> Path:
        p = (self.root / rel).resolve()
        if p != self.root and self.root not in p.parents:
            raise ValueError(f"path {rel!r} leaves the storage root {self.uri}")
        return p

    def _prepare(self, rel: str) -> Path:
        """The path of a file about to be written; creates its directory (durably)."""
        p = self._path(rel)
        if not p.parent.exists():
            missing = [d for d in (p.parent, *p.parent.parents) if not d.exists()]
            p.parent.mkdir(parents=True, exist_ok=True)
            for d in reversed(missing):
                make_durable(d)  # the new directory's entry in its parent
        return p

    def open(self, path: str) -> LocalRangeReader:
        return LocalRangeReader(str(self._path(path)))

    def read(self, path: str) -> bytes:
        return self._path(path).read_bytes()

    def write(self, path: str, data: bytes | bytearray | memoryview) -> None:
        with self.staged(path) as tmp, open(tmp, "wb") as f:
            f.write(data)

    def create(self, path: str, data: bytes | bytearray | memoryview) -> bool:
        p = self._prepare(path)
        tmp = p.with_name(f".{p.name}.{new_id()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, p)  # atomic, and fails if `p` exists: put-if-absent
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        make_durable(p)
        return True

    @contextmanager
    def staged(self, path: str) -> Iterator[str]:
        p = self._prepare(path)
        tmp = p.with_name(f".{p.name}.{new_id()}.tmp")
        try:
            yield str(tmp)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, p)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        make_durable(p)  # the rename

    def exists(self, path: str) -> bool:
        return self._path(path).exists()

    def size(self, path: str) -> int:
        return self._path(path).stat().st_size

    def delete(self, path: str) -> None:
        self._path(path).unlink(missing_ok=True)

    def list(self, prefix: str = "") -> Iterator[FileInfo]:
        base = self._path(prefix) if prefix else self.root
        if not base.exists():
            return
        for dirpath, _, files in os.walk(base):
            for name in files:
                full = Path(dirpath) / name
                try:
                    st = full.stat()
                except FileNotFoundError:  # removed while listing (a concurrent vacuum or rename)
                    continue
                yield FileInfo(str(full.relative_to(self.root)), st.st_size, st.st_mtime)

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self._path(prefix), ignore_errors=True)
