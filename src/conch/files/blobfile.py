"""Stored values as files: `BlobFile`, a read-only seekable `io.RawIOBase` over one value that
reads only the byte ranges asked for (`Table.open_blob`, `Scan.blob_files`; docs/media.md).

**Where a value is.** A scan run with `ScanOptions(blob_refs=...)` gets, for those columns, a
*reference* per value instead of its bytes (`VortexFormat` builds them from the blob index it
reads anyway): a binary value starting with tag 1 and holding the blob file's path, the value's
offset, length and hash, and the digest of the blob file's block table. A value stored inline
(a fragment whose values averaged under `WriteOptions.large_value_bytes`) comes back as tag 0
and its bytes. So locating a value is the scan's own work (merge, fresh-cell location, take of
the index rows): `open_blob` adds no read path of its own.

**Integrity, per block.** A blob file ends with a block table (the xxh3 of every 64 KiB block,
`conch.files.integrity.seal_file`) whose digest the fragment's verified footer records. A
`BlobFile` opens the blob file through a `VerifiedReader` (one read of the table: 8 bytes per
64 KiB of the blob file, checked against that digest) and each `read` is one ranged request of
the blocks covering the range (at most one extra partial block at each end), each block
checked: damage in a range read is a `CorruptFileError` naming the blob file. Blob files
written before block tables (no digest recorded) are verified per value instead: the whole value
is hashed once, streamed in parts, when it is first read.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from conch.errors import CorruptFileError, InvalidArgumentError
from conch.files.blobs import BLOB_SUFFIX, BlobIndex
from conch.files.blobsource import PART_BYTES
from conch.files.format import FileRef
from conch.files.integrity import BLOCK, PREFIX, BlockTable, VerifiedReader
from conch.files.storage import RangeReader, Storage
from conch.model.lru import Lru

INLINE, REF = 0, 1
_KEEP = 4 * BLOCK  # a read of at most this many bytes of blocks is kept for the next reads
# tag, offset, length, value hash, flags (1: hash recorded, 2: block table recorded), table hash
_REF = struct.Struct("<BQQIBQ")


@dataclass(frozen=True, slots=True)
class BlobRef:
    """Where one stored value is: `path` (its blob file), `offset`, `length`, its recorded hash
    (None: not recorded) and the checksum of the blob file's block table ("": none)."""

    path: str
    offset: int
    length: int
    value_hash: int | None
    table_checksum: str


def ref_array(parts: Sequence[tuple[FileRef, BlobIndex]], table_checksum: Callable[[FileRef], str]) -> pa.Array:
    """References (tag 1) to the values `parts` point at, file after file, as one binary array."""
    out: list[bytes | None] = []
    for ref, idx in parts:
        blob_sum = table_checksum(ref)
        flags = (1 if idx.hashes is not None else 0) | (2 if blob_sum else 0)
        table_hash = int(blob_sum[len(PREFIX) :], 16) if blob_sum else 0
        path = (ref.path + BLOB_SUFFIX).encode()
        hashes = idx.hashes.tolist() if idx.hashes is not None else [0] * len(idx.offsets)
        for o, n, ok, h in zip(idx.offsets.tolist(), idx.lengths.tolist(), idx.valid.tolist(), hashes, strict=True):
            out.append(_REF.pack(REF, o, n, int(h), flags, table_hash) + path if ok else None)
    return pa.array(out, pa.binary())


def tag_inline(col: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A binary column's values, each with tag 0 in front (nulls stay null)."""
    t = col.type
    return pc.binary_join_element_wise(pa.scalar(b"\x00", t), col, pa.scalar(b"", t))


def from_tagged(value: bytes | None, storage: Storage) -> BlobFile | None:
    """The `BlobFile` of a tagged value of a `blob_refs` scan (None for a null)."""
    if value is None:
        return None
    if value[:1] == bytes([INLINE]):
        return BlobFile(None, BlobRef("<inline value>", 1, len(value) - 1, None, ""), inline=value)
    if value[:1] != bytes([REF]) or len(value) < _REF.size:
        raise InvalidArgumentError("not a value of a blob_refs scan (a reference or a tagged inline value)")
    _, offset, length, h, flags, table_hash = _REF.unpack_from(value)
    ref = BlobRef(
        value[_REF.size :].decode(),
        offset,
        length,
        h if flags & 1 else None,
        f"{PREFIX}{table_hash:016x}" if flags & 2 else "",
    )
    return BlobFile(storage, ref)


# Verified block tables of blob files by (path, table checksum), up to 16 MB of hashes (a Python
# int per block): opening a value of a blob file opened before reads no table (on object storage:
# one request less). The checksum is the table's own, so a table kept is the file's.
_tables: Lru[tuple[str, str], BlockTable] = Lru(max_weight=16 << 20, weight=lambda t: 36 * len(t.hashes), keep=1)


class _Counted:
    """A `RangeReader` that counts the requests and bytes read through it."""

    def __init__(self, inner: RangeReader) -> None:
        self.inner, self.requests, self.bytes = inner, 0, 0

    def size(self) -> int:
        return self.inner.size()

    def read_at(self, offset: int, length: int) -> bytes:
        data = self.inner.read_at(offset, length)
        self.requests += 1
        self.bytes += len(data)
        return data

    def read_into(self, offsets: Sequence[int], lengths: Sequence[int], out: memoryview) -> int:
        got = self.inner.read_into(offsets, lengths, out)
        self.requests += 1
        self.bytes += got
        return got

    def close(self) -> None:
        self.inner.close()


class BlobFile(io.RawIOBase):
    """One stored value as a read-only, seekable binary file (`io.RawIOBase`).

    Each `read(n)` is one ranged read of storage (see the module doc for what is verified);
    nothing is read before the first `read`. `bytes_read` and `requests` say what it read from
    storage so far (the block table included). Wrap it in `io.BufferedReader` for many small
    reads.

    >>> with t.open_blob(7, "video") as f:  # doctest: +SKIP
    ...     f.seek(500 << 20)
    ...     chunk = f.read(1 << 20)
    """

    def __init__(self, storage: Storage | None, ref: BlobRef, inline: bytes | None = None) -> None:
        super().__init__()
        self._storage, self.ref, self._inline = storage, ref, inline
        self._pos = 0
        self._reader: RangeReader | VerifiedReader | None = None
        self._counted: _Counted | None = None
        self._blocks: tuple[int, memoryview] | None = None  # (first byte, data) of the last small read

    @property
    def name(self) -> str:
        """The blob file holding the value (`<inline value>` for one stored in its fragment)."""
        return self.ref.path

    @property
    def size(self) -> int:
        """The value's length in bytes."""
        return self.ref.length

    @property
    def bytes_read(self) -> int:
        return self._counted.bytes if self._counted is not None else 0

    @property
    def requests(self) -> int:
        return self._counted.requests if self._counted is not None else 0

    def __repr__(self) -> str:
        return f"BlobFile({self.ref.path!r}, {self.ref.length} bytes at {self.ref.offset})"

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        self._check_open()
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence {whence!r}")
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        self._check_open()
        end = self.size if size is None or size < 0 else min(self.size, self._pos + size)
        if end <= self._pos:
            return b""
        data = self._range(self._pos, end - self._pos)
        self._pos = end
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        data = self.read(len(memoryview(buffer)))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        super().close()

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on a closed BlobFile")

    def _range(self, start: int, n: int) -> bytes:
        """Bytes `start..start+n` of the value, verified (module doc). Reads whole 64 KiB blocks
        (what verifying costs anyway) and keeps the last small read's blocks: a decoder's run of
        small reads (headers, chunk tags) costs one request, not one each."""
        if self._inline is not None:
            return self._inline[self.ref.offset + start : self.ref.offset + start + n]
        lo, hi = self.ref.offset + start, self.ref.offset + start + n
        cached = self._blocks
        if cached is not None and cached[0] <= lo and hi <= cached[0] + len(cached[1]):
            return bytes(cached[1][lo - cached[0] : hi - cached[0]])
        reader = self._open()
        first, end = lo // BLOCK * BLOCK, min(-(-hi // BLOCK) * BLOCK, reader.size())
        got = reader.read_at(first, end - first)
        if len(got) != end - first or end < hi:
            raise CorruptFileError(f"{self.ref.path} is damaged: shorter than its index says")
        if isinstance(got, bytes) and (lo, hi) == (first, end):
            return got  # a read of whole blocks: the bytes read, not a copy (1 MB: ~1 ms less)
        data = memoryview(got)
        self._blocks = (first, data) if end - first <= _KEEP else None
        return bytes(data[lo - first : hi - first])

    def _open(self) -> RangeReader | VerifiedReader:
        if self._reader is not None:
            return self._reader
        assert self._storage is not None
        try:
            self._counted = _Counted(self._storage.open(self.ref.path))
        except FileNotFoundError as e:
            raise CorruptFileError(f"{self.ref.path} is missing: the table references it") from e
        reader: RangeReader | VerifiedReader = self._counted
        if self.ref.table_checksum:
            key = (self.ref.path, self.ref.table_checksum)
            verified = VerifiedReader(self._counted, self.ref.path, self.ref.table_checksum, _tables.get(key))
            _tables.put(key, verified.table())
            reader = verified
        elif self.ref.value_hash is not None:
            self._verify_whole()
        self._reader = reader
        return reader

    def _verify_whole(self) -> None:
        """Hash the whole value, streamed (a blob file without a block table: module doc)."""
        assert self._counted is not None
        h = xxhash.xxh3_64()
        for pos in range(0, self.size, PART_BYTES):
            part = self._counted.read_at(self.ref.offset + pos, min(PART_BYTES, self.size - pos))
            h.update(part)
        if h.intdigest() & 0xFFFFFFFF != self.ref.value_hash:
            raise CorruptFileError(
                f"{self.ref.path} is damaged: the value at bytes {self.ref.offset}..{self.ref.offset + self.size} "
                "does not match its recorded checksum; restore the file from a copy or a backup"
            )
