"""The one scan result protocol, shared by `Scan`, nested queries and exploded lists.

A result is lazy until consumed. `to_record_batches()` is the primitive (a streaming
`pyarrow.RecordBatchReader`); everything else is derived from it here, once:

- `__arrow_c_stream__` (the Arrow PyCapsule stream interface): `pa.table(scan)`,
  `pl.DataFrame(scan)` and `duckdb.sql("select ... from scan")` read a result directly, streamed
  (`pl.from_arrow(scan)` gives a struct Series, Polars' rule for stream objects);
- `to_arrow()`, `to_pandas()`, `to_polars()`, `to_pylist()`, iteration over record batches;
- `count()` (subclasses count cheaper where they can: `Scan.count` reads keys only).

The materialising conversions take `progress=`: a rows-and-bytes bar on a terminal
(`conch.model.progress`) for scans that run longer than a second, `False` never, `True` at once.

Subclasses give `to_record_batches`, `schema`, `explain` and `metrics`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from conch.model.deps import optional_import
from conch.model.progress import Progress, scan_delay
from conch.scan.metrics import ScanMetrics


class ScanResult:
    """Base class of scan results: subclasses implement `to_record_batches`, `schema`,
    `explain` and `metrics`; the conversions below are shared."""

    def to_record_batches(self) -> pa.RecordBatchReader:
        """A streaming reader: bounded memory, batches in key order."""
        raise NotImplementedError

    @property
    def schema(self) -> pa.Schema:
        """The output schema."""
        raise NotImplementedError

    def explain(self) -> str:
        """What the scan reads, step by step (and what the last run read, once it ran)."""
        raise NotImplementedError

    def metrics(self) -> ScanMetrics:
        """What the last run read."""
        raise NotImplementedError

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """The Arrow C stream of the result (PyCapsule interface), streamed from storage."""
        return self.to_record_batches().__arrow_c_stream__(requested_schema)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return iter(self.to_record_batches())

    def to_arrow(self, *, progress: bool | None = None) -> pa.Table:
        """The whole result as one Arrow table (materialised; stream with `to_record_batches`).
        `progress`: a bar for long scans (module doc)."""
        reader = self.to_record_batches()
        with Progress("scanning", progress=progress, delay=scan_delay()) as bar:
            return pa.Table.from_batches(list(bar.track(reader)), schema=reader.schema)

    def to_pandas(self, *, progress: bool | None = None) -> Any:
        """The result as a pandas DataFrame (needs `conch[pandas]`)."""
        optional_import("pandas")
        return self.to_arrow(progress=progress).to_pandas()

    def to_polars(self, *, progress: bool | None = None) -> Any:
        """The result as a Polars DataFrame (needs `conch[polars]`)."""
        pl = optional_import("polars")
        return pl.from_arrow(self.to_arrow(progress=progress))

    def to_pylist(self, *, progress: bool | None = None) -> list[dict[str, Any]]:
        """The result as a list of dicts, one per record."""
        return self.to_arrow(progress=progress).to_pylist()

    def count(self) -> int:
        """The number of records the result holds."""
        return sum(b.num_rows for b in self.to_record_batches())
