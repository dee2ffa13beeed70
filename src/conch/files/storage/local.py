"""The embedded default: a table's files under one local directory."""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from conch.files.storage.base import FileInfo, new_id


def make_durable(path: str | os.PathLike[str]) -> None:
    """fsync a written file and its directory: a commit must never reference a file whose data
    or directory entry a power loss could take back."""
    _fsync(path)
    _fsync(os.path.dirname(os.fspath(path)), os.O_DIRECTORY)


def _fsync(path: str | os.PathLike[str], flags: int = 0) -> None:
    fd = os.open(path, os.O_RDONLY | flags)
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

    @staticmethod
    def writeback(fd: int, offset: int, length: int) -> None:
        """Start writing a range of a scratch file being written (`staged`) to disk, without
        waiting: the scratch file becomes the stored file, so the commit's fsync then waits only
        for what was written since (a 160 MB file written in 3 MB parts, a hint every 4 MB: fsync
        86-112 ms -> 3 ms, the whole write + fsync 0.22-0.27 s -> 0.17-0.18 s; issue 33).
        A hint (Linux `sync_file_range(SYNC_FILE_RANGE_WRITE)`): nothing elsewhere, and never
        what makes the file durable."""
        if _sync_file_range is not None:
            _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self._root = str(self.root)
        self._inside = os.path.join(self._root, "")
        self._batch = threading.local()  # `.files`: written in this thread's open batch, unsynced

    @property
    def uri(self) -> str:
        return self._root

    def __repr__(self) -> str:
        return f"LocalStorage({self.uri!r})"

    def _path(self, rel: str) -> str:
        # Lexical (no `realpath`): the ids below the root are Conch's own, and resolving every
        # path cost ~8 lstat calls per file a commit writes (docs/performance.md).
        p = os.path.normpath(os.path.join(self._root, rel))
        if p != self._root and not p.startswith(self._inside):
            raise ValueError(f"path {rel!r} leaves the storage root {self.uri}")
        return p

    def _prepare(self, rel: str) -> str:
        """The path of a file about to be written; creates its directory (durably: inside a
        `batch`, with the batch's other fsyncs, at once; else now)."""
        p = self._path(rel)
        parent = os.path.dirname(p)
        if not os.path.isdir(parent):
            missing = [str(d) for d in (Path(parent), *Path(parent).parents) if not d.exists()]
            os.makedirs(parent, exist_ok=True)
            pending: list[str] | None = getattr(self._batch, "dirs", None)
            if pending is not None:
                pending.extend(missing)
            else:
                for d in reversed(missing):
                    make_durable(d)  # the new directory's entry in its parent
        return p

    def open(self, path: str) -> LocalRangeReader:
        return LocalRangeReader(self._path(path))

    def read(self, path: str) -> bytes:
        with open(self._path(path), "rb") as f:
            return f.read()

    def write(self, path: str, data: bytes | bytearray | memoryview) -> None:
        with self.staged(path) as tmp, open(tmp, "wb") as f:
            f.write(data)

    def create(self, path: str, data: bytes | bytearray | memoryview) -> bool:
        p = self._prepare(path)
        tmp = _scratch_name(p)
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
        _fsync(os.path.dirname(p), os.O_DIRECTORY)  # the link (its data was fsynced above)
        return True

    @contextmanager
    def staged(self, path: str) -> Iterator[str]:
        p = self._prepare(path)
        tmp = _scratch_name(p)
        pending: list[str] | None = getattr(self._batch, "files", None)
        try:
            yield tmp
            if pending is None:
                _fsync(tmp)
            os.replace(tmp, p)
        except BaseException:
            with suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        if pending is not None:
            pending.append(p)  # a new file, unreferenced until the batch is synced and committed
        else:
            # The rename's directory entry. The data was fsynced before the rename, and the
            # rename moves the same inode: a second fsync of the file would flush nothing.
            _fsync(os.path.dirname(p), os.O_DIRECTORY)

    @contextmanager
    def batch(self) -> Iterator[None]:
        if getattr(self._batch, "files", None) is not None:
            yield  # nested: the outermost batch syncs
            return
        files: list[str] = []
        dirs: list[str] = []  # directories the batch created
        self._batch.files, self._batch.dirs = files, dirs
        try:
            yield
        finally:
            self._batch.files = self._batch.dirs = None
        _sync_together(files, dirs)

    def exists(self, path: str) -> bool:
        return os.path.exists(self._path(path))

    def size(self, path: str) -> int:
        return os.stat(self._path(path)).st_size

    def delete(self, path: str) -> None:
        with suppress(FileNotFoundError):
            os.unlink(self._path(path))

    def list(self, prefix: str = "") -> Iterator[FileInfo]:
        base = self._path(prefix) if prefix else self._root
        if not os.path.exists(base):
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


def _libc_sync_file_range() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        f = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    f.restype = ctypes.c_int
    return f


_sync_file_range = _libc_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of dirty pages, do not wait
_SYNC_THREADS = 8
_sync_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid that made it, pool)


def _sync_together(files: Sequence[str], dirs: Sequence[str] = ()) -> None:
    """fsync `files`, their directories and the parents of the new directories `dirs` (their
    entries) concurrently: ext4 (and most journaling file systems) commit concurrent fsyncs as
    one journal transaction, so a commit's files cost about one fsync's latency instead of two
    per file (measured: 4 fsyncs 8.5 ms in sequence, 1.5 ms at once, on this machine's ext4
    under load; a first write to a new table creates 5 directories: 10 fsyncs in sequence
    before, issue 33)."""
    global _sync_pool
    if not files and not dirs:
        return
    folders = dict.fromkeys([*map(os.path.dirname, files), *dirs, *map(os.path.dirname, dirs)])
    targets = [(f, 0) for f in files] + [(d, os.O_DIRECTORY) for d in folders]
    if _sync_pool is None or _sync_pool[0] != os.getpid():  # threads do not survive a fork
        _sync_pool = (os.getpid(), ThreadPoolExecutor(_SYNC_THREADS, thread_name_prefix="conch-fsync"))
    for done in [_sync_pool[1].submit(_fsync, path, flags) for path, flags in targets]:
        done.result()  # every one, before the WAL entry that references them is appended


def _scratch_name(p: str) -> str:
    """A hidden sibling of `p` to write before it appears atomically under its own name."""
    head, name = os.path.split(p)
    return os.path.join(head, f".{name}.{new_id()}.tmp")
