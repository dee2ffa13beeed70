"""The frame both kinds of index file share: 8 magic bytes, the payload's length (u64 LE), the
payload (a serialised vector index, or a tar of a tantivy index), then the run's keys as an
Arrow IPC stream. Reading checks the commit's checksum and the magic first."""

from __future__ import annotations

import struct

import pyarrow as pa

from conch.errors import CorruptFileError
from conch.files.integrity import verify
from conch.files.manifest import IndexFile
from conch.files.storage import Storage

TEXT_SUFFIX = ".ctx2"  # a text index file of the current format (`conch.search.textfiles`)


def read_frame(storage: Storage, f: IndexFile, magic: bytes, what: str) -> tuple[memoryview, pa.Table, int]:
    """`(payload, keys, file size)` of index file `f`; `CorruptFileError` naming it when its
    checksum or its magic is wrong."""
    data = storage.read(f.path)
    if f.checksum:
        verify(data, f.checksum, f.path)
    if data[:8] != magic:
        raise CorruptFileError(f"{what} {f.path} does not start with {magic!r}")
    (n,) = struct.unpack("<Q", data[8:16])
    view = memoryview(data)
    return view[16 : 16 + n], pa.ipc.open_stream(pa.py_buffer(view[16 + n :])).read_all(), len(data)
