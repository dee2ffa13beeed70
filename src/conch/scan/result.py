"""The one scan result protocol, shared by `Scan`, nested queries and exploded lists.

A result is lazy until consumed. `to_record_batches()` is the primitive (a streaming
`pyarrow.RecordBatchReader`); everything else is derived from it here, once:

- `__arrow_c_stream__` (the Arrow PyCapsule stream interface): `pa.table(scan)`,
  `pl.DataFrame(scan)` and `duckdb.sql("select ... from scan")` read a result directly, streamed
  (`pl.from_arrow(scan)` gives a struct Series, Polars' rule for stream objects);
- `to_arrow()`, `to_pandas()`, `to_polars()`, `to_pylist()`, iteration over record batches;
- `count()` (subclasses count cheaper where they can: `Scan.count` reads keys only).

Subclasses give `to_record_batches`, `schema`, `explain` and `metrics`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from conch._deps import optional_import
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

    def to_arrow(self) -> pa.Table:
        """The whole result as one Arrow table (materialised; stream with `to_record_batches`)."""
        return self.to_record_batches().read_all()

    def to_pandas(self) -> Any:
        """The result as a pandas DataFrame (needs `conch[pandas]`)."""
        optional_import("pandas")
        return self.to_arrow().to_pandas()

    def to_polars(self) -> Any:
        """The result as a Polars DataFrame (needs `conch[polars]`)."""
        pl = optional_import("polars")
        return pl.from_arrow(self.to_arrow())

    def to_pylist(self) -> list[dict[str, Any]]:
        """The result as a list of dicts, one per record."""
        return self.to_arrow().to_pylist()

    def count(self) -> int:
        """The number of records the result holds."""
        return sum(b.num_rows for b in self.to_record_batches())
