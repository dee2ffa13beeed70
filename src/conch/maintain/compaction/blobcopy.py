"""Large blob values copied between blob files in parts during a rewrite (issue 33).

A rewrite reads its inputs through the scan (`rewrite.py`), which hands back each value's bytes:
a table of 300 MB videos would hold whole values (and their copies) in memory. Instead the
rewrite's scan reads its binary columns with `ScanOptions(blob_refs=...)`: a value of at least
`STREAM_BYTES` comes back as a reference to where it is stored (`conch.files.blobfile`), a
shorter one as its bytes (read as before, coalesced: per-value work only for the big ones).
Each reference becomes a stream source (`conch.files.blobsource`, the path `conch.Blob` values
take on a write): the output fragment's `write_blobs` copies it `PART_BYTES` at a time from the
input blob file, read through a `BlobFile`, so every 64 KiB block it reads is checked against the
input's block table, and the output blob file gets its own block table and per-value hashes as
any written one. Memory holds one part per value at a time, whatever the value's size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import pyarrow as pa
import pyarrow.compute as pc

from conch.files.blobfile import REF, from_tagged
from conch.files.blobsource import PART_BYTES, Blob, Sources
from conch.files.format import column_name
from conch.files.manifest import TableState
from conch.files.storage import Storage
from conch.model.budget import ScanOptions
from conch.scan.plan import ScanPlan

STREAM_BYTES = PART_BYTES  # values this long or longer are streamed; shorter ones read whole

_copying: ContextVar[tuple[Storage, Sources] | None] = ContextVar("conch_blob_copy", default=None)


class StoredValue(Blob):
    """A stored value as a stream source: its `BlobFile` opened afresh each time it is read."""

    __slots__ = ("_storage", "_tagged")

    def __init__(self, storage: Storage, tagged: bytes, size: int) -> None:
        super().__init__(None, None, size)
        self._storage, self._tagged = storage, tagged

    def __repr__(self) -> str:
        return f"StoredValue({from_tagged(self._tagged, self._storage)!r})"

    def parts(self) -> Iterator[bytes]:
        f = from_tagged(self._tagged, self._storage)
        assert f is not None
        with f:  # each read is verified block by block, and the file is closed once copied
            while part := f.read(PART_BYTES):
                yield part


@contextmanager
def streamed_values(storage: Storage) -> Iterator[None]:
    """Within the block, `as_sources` turns references into sources the writes of this thread
    copy from `storage`."""
    sources = Sources()
    token = _copying.set((storage, sources))
    try:
        yield
    finally:
        sources.close()
        _copying.reset(token)


def _binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def ref_options(scan: ScanOptions, plan: ScanPlan, view: TableState) -> ScanOptions:
    """`scan` reading the big values of the plan's binary columns stored out of line in some
    input fragment as references (module doc); columns stored inline everywhere as before."""
    if _copying.get() is None:
        return scan
    out_of_line = {i for f in view.fragments.values() for i in f.blob_columns}
    refs = frozenset(column_name(c.id) for c in plan.columns if _binary(c.type) and c.id in out_of_line)
    return dataclasses.replace(scan, blob_refs=refs, blob_ref_min_bytes=STREAM_BYTES) if refs else scan


def as_sources(t: pa.Table, plan: ScanPlan, scan: ScanOptions) -> pa.Table:
    """The flattened output `t` (columns by path) of a scan with `scan = ref_options(...)`, each
    tagged value of its `blob_refs` columns back to its bytes, each reference a stream source's
    token."""
    copying = _copying.get()
    if copying is None:
        return t
    storage, sources = copying
    for c in plan.columns:
        if column_name(c.id) not in scan.blob_refs or c.path not in t.column_names:
            continue
        tagged = t.column(c.path).combine_chunks()
        values = pc.binary_replace_slice(tagged, 0, 1, b"")  # (binary_slice fails in Arrow 26)
        is_ref = pc.fill_null(pc.equal(pc.binary_slice(tagged, 0, 1), pa.scalar(bytes([REF]), tagged.type)), False)
        if pc.any(is_ref).as_py():
            refs = tagged.filter(is_ref).to_pylist()
            tokens = []
            for r in refs:
                f = from_tagged(r, storage)
                assert f is not None
                tokens.append(sources.token(StoredValue(storage, r, f.size)))
            sources.open()
            values = pc.replace_with_mask(values, is_ref, pa.array(tokens, values.type))
        t = t.set_column(t.column_names.index(c.path), c.path, values)
    return t
