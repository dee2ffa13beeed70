"""Where a table's files live: a directory tree addressed by relative paths (DESIGN §3).

Every file is written once under a fresh id and never changed, so readers need no locks and a
failed writer leaves only unreferenced files, which `vacuum` removes. The embedded default is a
local directory.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def new_id() -> str:
    """A fresh file id: random, so concurrent writers never collide."""
    return uuid.uuid4().hex[:16]


@dataclass(frozen=True, slots=True)
class FileInfo:
    path: str  # relative to the storage root
    size: int
    mtime: float


def make_durable(path: str | os.PathLike[str]) -> None:
    """fsync a written file and its directory: a commit must never reference a file whose data
    or directory entry a power loss could take back."""
    for target, flags in ((path, os.O_RDONLY), (os.path.dirname(os.fspath(path)), os.O_RDONLY | os.O_DIRECTORY)):
        fd = os.open(target, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class LocalStorage:
    """Files under one local directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()

    @property
    def uri(self) -> str:
        return str(self.root)

    def abspath(self, rel: str) -> str:
        return str(self.root / rel)

    def prepare(self, rel: str) -> str:
        """The absolute path of a file about to be written; creates its directory (durably)."""
        p = self.root / rel
        if not p.parent.exists():
            missing = [d for d in (p.parent, *p.parent.parents) if not d.exists()]
            p.parent.mkdir(parents=True, exist_ok=True)
            for d in missing:
                make_durable(d)  # the new directory's entry in its parent
        return str(p)

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a whole file atomically (temp file + rename)."""
        p = Path(self.prepare(rel))
        tmp = p.with_name(f".{p.name}.{new_id()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
        make_durable(p)  # the rename

    def read_bytes(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()

    def exists(self, rel: str) -> bool:
        return (self.root / rel).exists()

    def size(self, rel: str) -> int:
        return (self.root / rel).stat().st_size

    def delete(self, rel: str) -> None:
        (self.root / rel).unlink(missing_ok=True)

    def list(self, prefix: str = "") -> Iterator[FileInfo]:
        base = self.root / prefix
        if not base.exists():
            return
        for dirpath, _, files in os.walk(base):
            for name in files:
                full = Path(dirpath) / name
                st = full.stat()
                yield FileInfo(str(full.relative_to(self.root)), st.st_size, st.st_mtime)

    def remove_tree(self, prefix: str) -> None:
        import shutil

        shutil.rmtree(self.root / prefix, ignore_errors=True)
