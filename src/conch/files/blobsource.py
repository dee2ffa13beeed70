"""Large values written as streams (`conch.Blob`): a value given as a path or a file object is
copied into its fragment's blob file in parts, never held whole in memory (docs/media.md).

How it travels through the write path without being read: `swap_sources` (called by
`conch.write.blobinputs` before the input becomes Arrow) replaces each `Blob` with a *token*, a
35-byte binary value naming the `Blob` in a registry of the writes running in this process. The
token is an ordinary binary value for sorting, chunking and splitting into levels. Where a
fragment is written, a blob column holding tokens is always stored out of line
(`has_sources`), and `write_blobs` streams each token's source into the blob file in
`PART_BYTES` parts, hashing it as it goes (the per-value xxh3 of the blob index); statistics of
such a column carry its null count only (`column_stats` would see tokens). On object storage the
blob file is then uploaded in multipart parts (`Storage.staged`), so memory holds one part at a
time whatever the value's size; the local scratch file holds the value once.

A token starts with a NUL byte and the text `conch-blob-source`, then the registry's random
nonce: a user's value equal to a live token would have to guess 64 random bits.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.errors import InvalidArgumentError

PART_BYTES = 8 << 20  # bytes copied at a time from a source into a blob file
MAX_VALUE_BYTES = (1 << 32) - 1  # a blob index stores lengths as uint32
_PREFIX = b"\x00conch-blob-source"
TOKEN_BYTES = len(_PREFIX) + 16


class Blob:
    """A value to write as a stream: the bytes of a file, read in parts when the write stores it.

    >>> t.write([{"id": 1, "video": conch.Blob.from_path("clip.mp4")}])  # doctest: +SKIP
    >>> with open("clip.mp4", "rb") as f:  # doctest: +SKIP
    ...     t.write([{"id": 2, "video": conch.Blob.from_file(f)}])

    A `pathlib.Path` or an open binary file given as a value is the same as `Blob.from_path` /
    `Blob.from_file` of it. A file object is read once, from its current position to its end.
    """

    __slots__ = ("_file", "_path", "size")

    def __init__(self, path: Path | None, file: IO[bytes] | None, size: int | None) -> None:
        self._path, self._file, self.size = path, file, size

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> Blob:
        """The bytes of the file at `path` (its size is taken now; it must not change until written)."""
        p = Path(path)
        if not p.is_file():
            raise InvalidArgumentError(f"Blob.from_path: {str(p)!r} is not a file")
        return cls(p, None, p.stat().st_size)

    @classmethod
    def from_file(cls, file: IO[bytes]) -> Blob:
        """The bytes of an open binary file object, from its position to its end."""
        if not callable(getattr(file, "read", None)) or isinstance(file, io.TextIOBase):
            raise InvalidArgumentError(f"Blob.from_file needs a binary file object, not {type(file).__name__}")
        size = None
        try:
            if file.seekable():
                here = file.tell()
                size = file.seek(0, io.SEEK_END) - here
                file.seek(here)
        except (OSError, AttributeError):
            size = None
        return cls(None, file, size)

    def __repr__(self) -> str:
        what = str(self._path) if self._path is not None else type(self._file).__name__
        return f"Blob({what}, {self.size if self.size is not None else '?'} bytes)"

    def parts(self) -> Iterator[bytes]:
        """The value's bytes, `PART_BYTES` at a time."""
        if self._path is not None:
            with open(self._path, "rb") as f:
                yield from _read_parts(f)
        else:
            assert self._file is not None
            yield from _read_parts(self._file)


def _read_parts(f: IO[bytes]) -> Iterator[bytes]:
    while part := f.read(PART_BYTES):
        yield part


def as_blob(value: Any) -> Blob | None:
    """`value` as a `Blob` if it is one, a `pathlib.Path` or a binary file object; else None."""
    if isinstance(value, Blob):
        return value
    if isinstance(value, Path):
        return Blob.from_path(value)
    if isinstance(value, io.IOBase) and not isinstance(value, io.TextIOBase) and value.readable():
        return Blob.from_file(value)  # type: ignore[arg-type]
    return None


class _Registry:
    """The blobs of the writes running in this process, by token."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.writes: dict[bytes, list[Blob]] = {}  # nonce -> the write's blobs (index = token's number)


_registry = _Registry()


class Sources:
    """The `Blob`s of one write: each gets a token while the write is `active`."""

    def __init__(self) -> None:
        self.nonce = os.urandom(8)
        self.blobs: list[Blob] = []

    def token(self, blob: Blob) -> bytes:
        self.blobs.append(blob)
        return _PREFIX + self.nonce + (len(self.blobs) - 1).to_bytes(8, "little")

    @contextmanager
    def active(self) -> Iterator[None]:
        """Tokens of this write resolve (`source`) while the block runs."""
        if not self.blobs:
            yield
            return
        self.open()
        try:
            yield
        finally:
            self.close()

    def open(self) -> None:
        """Tokens resolve from now until `close` (a writer that makes tokens as it goes opens
        once it has one: an empty registry keeps `token_rows` free)."""
        with _registry.lock:
            _registry.writes[self.nonce] = self.blobs

    def close(self) -> None:
        with _registry.lock:
            _registry.writes.pop(self.nonce, None)


def source(value: bytes) -> Blob | None:
    """The `Blob` a token names (None: `value` is no live token)."""
    if len(value) != TOKEN_BYTES or not value.startswith(_PREFIX):
        return None
    nonce, number = value[len(_PREFIX) : len(_PREFIX) + 8], int.from_bytes(value[len(_PREFIX) + 8 :], "little")
    with _registry.lock:
        blobs = _registry.writes.get(nonce)
    return blobs[number] if blobs is not None and number < len(blobs) else None


def token_rows(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Rows of a column holding live tokens (none unless a write with `Blob`s is running)."""
    if not _registry.writes or not (pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type)):
        return np.zeros(0, dtype=np.int64)
    lengths = pc.binary_length(col).to_numpy(zero_copy_only=False)
    candidates = np.flatnonzero(np.nan_to_num(lengths.astype(np.float64)) == TOKEN_BYTES)
    if not len(candidates):
        return candidates.astype(np.int64)
    values = col.take(pa.array(candidates)).to_pylist()
    return np.asarray([r for r, v in zip(candidates.tolist(), values, strict=True) if source(v) is not None], np.int64)


def has_sources(col: pa.Array | pa.ChunkedArray) -> bool:
    """Whether a column holds values to stream (it must then be stored out of line)."""
    return len(token_rows(col)) > 0


def source_bytes(col: pa.Array | pa.ChunkedArray) -> int:
    """The bytes the column's streamed values will take (unknown sizes count as `PART_BYTES`)."""
    rows = token_rows(col)
    if not len(rows):
        return 0
    blobs = [source(v) for v in col.take(pa.array(rows)).to_pylist()]
    return sum(b.size if b is not None and b.size is not None else PART_BYTES for b in blobs)
