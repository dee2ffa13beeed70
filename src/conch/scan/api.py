"""`Scan`: a lazy scan; results as Arrow, pandas or Polars, streamed in key order."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from conch._deps import optional_import
from conch.errors import ConchError, CorruptFileError, InvalidArgumentError
from conch.scan.execute import ScanExecutor, ScanMetrics, output_schema
from conch.scan.plan import ScanPlan, plan_scan
from conch.schema import join_path

if TYPE_CHECKING:
    from conch.table import Table


class Scan:
    """A scan of fresh records. Build with `Table.scan`; nothing is read until a `to_*` call."""

    def __init__(
        self,
        table: Table,
        columns: tuple[Any, ...],
        where: Any = None,
        keys: Any = None,
        asof: int | datetime | None = None,
        since: int | datetime | None = None,
        level: str | None = None,
        limit: int | None = None,
    ) -> None:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise InvalidArgumentError(f"limit must be a non-negative number of rows, got {limit!r}")
        self.table = table
        state = table.state_at(asof)
        self._plan = plan_scan(state, columns, where=where, keys=keys, asof=asof, since=since, level=level)
        self._limit = limit
        self._metrics: ScanMetrics | None = None

    @property
    def plan(self) -> ScanPlan:
        """The plan: level, columns, filter, and the key spaces and fragments it will consider."""
        return self._plan

    @property
    def schema(self) -> pa.Schema:
        """The output schema: key columns, then projected columns nested by group."""
        return output_schema(self._plan.schema, self._plan.level, self._plan.columns)

    def _executor(self) -> ScanExecutor:
        cat = self.table.catalog
        ex = ScanExecutor(self._plan, cat.format, cat.key_cache, limit=self._limit)
        self._metrics = ex.metrics
        return ex

    def _batches(self, ex: ScanExecutor) -> Iterator[pa.RecordBatch]:
        """The executor's batches, with a file that vanished reported as a typed error."""
        try:
            yield from ex.batches()
        except FileNotFoundError as e:
            raise CorruptFileError(
                f"table {self.table.name!r}: file {e.filename} is missing although a commit references it; "
                "see `conch history` and restore the file, or drop the table"
            ) from e

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self._batches(self._executor())

    def to_record_batches(self) -> pa.RecordBatchReader:
        """A streaming reader: bounded memory, batches in key order."""
        ex = self._executor()
        return pa.RecordBatchReader.from_batches(ex.output_schema(), self._batches(ex))

    def to_arrow(self) -> pa.Table:
        """The whole result as one Arrow table (materialised; stream with `to_record_batches`)."""
        ex = self._executor()
        return pa.Table.from_batches(list(self._batches(ex)), schema=ex.output_schema())

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
        """The number of records the scan returns (streams the batches)."""
        return sum(b.num_rows for b in self)

    def metrics(self) -> ScanMetrics:
        """What the last run of this scan read (fragments, rows and bytes per group)."""
        if self._metrics is None:
            raise ConchError("the scan has not run yet: call to_arrow() or iterate it first")
        return self._metrics

    def explain(self) -> str:
        """The plan: what is read at each step and what was pruned before reading."""
        p = self._plan
        schema = p.schema
        lines = [f"Scan {self.table.name} level={p.level or '<root>'}"]
        if p.asof is not None or p.since is not None:
            lines.append(f"  time filter: since={p.since} asof={p.asof}")
        if p.key_predicate is not None:
            lines.append(f"  key filter: {p.key_predicate}")
        lines.append(
            f"  1. merge key spaces: {len(p.key_spaces)} considered"
            f" (pruned: {p.pruned.get('key_spaces_time', 0)} by time, {p.pruned.get('key_spaces_span', 0)} by key span),"
            f" {len(p.tombstones)} tombstone sets"
        )
        step = 2
        if p.filter is not None:
            groups = sorted({c.group for c in p.filter_columns})
            n_frs = sum(len(p.fragments.get(g, [])) for g in groups)
            names = ", ".join(join_path(p.level, g) or "<root>" for g in groups)
            lines.append(
                f"  {step}. row mask: filter {p.filter!r} on fresh cells of {names}: {n_frs} fragments;"
                " stats pruning, then pushed into the Vortex scan where typed (→ ordinals), else on fresh records"
            )
            step += 1
        for g in sorted({c.group for c in p.columns}):
            cols = [c.path for c in p.columns if c.group == g]
            lines.append(
                f"  {step}. take {join_path(p.level, g) or '<root>'} {cols}: {len(p.fragments.get(g, []))} fragments,"
                " rows by key mask"
            )
        lines.append(f"  output: {', '.join(schema.key_names(p.level) + [c.path for c in p.columns])} (sorted by key)")
        if self._metrics is not None:
            lines.append("  last run:")
            lines += [f"    {line}" for line in self._metrics.render()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.explain()
