"""Scans whose blob columns come back as files (`Scan.blob_files`, `Snapshot.open_blob`).

The scan runs as any other, with `ScanOptions(blob_refs=...)`: the take reads each value's
place (blob file, offset, length, hashes) instead of its bytes, and each is handed out as a
`conch.files.blobfile.BlobFile` that reads only the ranges asked for. Rows come in key order, a
batch of references at a time (bounded memory whatever the values' sizes).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import pyarrow as pa

from conch.errors import InvalidArgumentError, KeyNotFoundError
from conch.files.blobfile import BlobFile, from_tagged
from conch.files.format import column_name
from conch.model.schema import Column
from conch.scan.plan import ScanPlan


class Scan(Protocol):
    """What reading files needs of a `conch.scan.api.Scan` (which imports this module)."""

    @property
    def plan(self) -> ScanPlan: ...

    @property
    def source(self) -> Any: ...

    def with_options(self, options: Any = None, **changes: Any) -> Any: ...


def _blob_columns(scan: Scan, columns: Sequence[str]) -> list[Column]:
    projected = {c.path: c for c in scan.plan.columns}
    names = list(columns) or [p for p, c in projected.items() if _binary(c.type)]
    missing = [n for n in names if n not in projected]
    if missing:
        raise InvalidArgumentError(f"blob_files({missing}): project the column in the scan first")
    cols = [projected[n] for n in names]
    bad = [c.path for c in cols if not _binary(c.type)]
    if bad:
        raise InvalidArgumentError(f"values are read as files from binary columns; {bad} are not binary")
    filtered = {c.id for c in scan.plan.filter_columns}
    if any(c.id in filtered for c in cols):
        raise InvalidArgumentError("blob_files: a filter cannot read the columns it returns as files")
    return cols


def _binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def blob_files(scan: Scan, columns: Sequence[str] = ()) -> Iterator[dict[str, Any]]:
    """The rows of `scan` as dicts (keys, then columns nested by group, as `to_pylist`), the
    values of the binary `columns` (default: every projected binary column) as `BlobFile`s."""
    cols = _blob_columns(scan, columns)
    refs = frozenset(column_name(c.id) for c in cols)
    storage = scan.source.format.storage
    for batch in scan.with_options(blob_refs=refs).to_record_batches():
        for row in batch.to_pylist():
            for c in cols:
                *groups, leaf = c.path.split(".")
                at = row
                for g in groups:
                    at = at[g]
                at[leaf] = from_tagged(at[leaf], storage)
            yield row


def open_one(scan: Scan, column: str, key: Any) -> BlobFile:
    """The file of `column`'s value in the one row `scan` (a scan of `keys=[key]`) returns."""
    path = column
    for row in blob_files(scan, [column]):
        at: Any = row
        for part in path.split("."):
            at = at[part]
        if at is None:
            raise KeyNotFoundError(f"key {key!r} holds no value in {column!r} (null or never written)")
        assert isinstance(at, BlobFile)
        return at
    raise KeyNotFoundError(f"key {key!r} is not in table {scan.source.name!r} at this version")
