"""Polars over Conch: `conch.engines.polars.scan(table) -> pl.LazyFrame`, with work pushed into the scan.

Built on Polars' IO-plugin interface (`polars.io.plugins.register_io_source`), which hands the
source what the query needs: the projected columns, a predicate and a row limit. Each becomes
part of one Conch scan:

- **projection**: top-level names are key columns, columns and column groups (structs), so a
  query that never touches `audio` never reads its blobs;
- **predicate**: translated into a Conch `where` (evaluated on fresh records, pushed into the
  fragments where legal) and a key range on the first key column; terms Conch cannot evaluate
  stay with Polars, and Polars' whole predicate is applied to what the scan returns (see
  `conch.engines.polars_expr`);
- **n_rows**: the scan's `limit` when the predicate was pushed whole (or there is none).

The frame reads one table version: the newest commit when `scan` is called (or `asof`), so
collecting it twice gives the same rows even while writers commit.

>>> lf = conch.engines.polars.scan("warehouse/audio")  # doctest: +SKIP
>>> lf.filter(pl.col("silence_ratio") < 0.1).select("id", "audio_length").collect()  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from conch.api.snapshot import Snapshot
from conch.api.table import Table
from conch.engines.polars_expr import PolarsTranslator, Pushdown
from conch.engines.source import ScanSpec, resolve_snapshot
from conch.model.deps import optional_import
from conch.scan import Scan
from conch.scan.columns import narrowest_column


def scan(
    source: Table | Snapshot | str | os.PathLike[str],
    *,
    level: str | None = None,
    asof: int | datetime | None = None,
    since: int | datetime | None = None,
    keys: Any = None,
    on_scan: Callable[[Scan], None] | None = None,
) -> Any:
    """A `pl.LazyFrame` over a table (or `'<warehouse>/<table>'`, or a `Snapshot`: frames of
    several levels of one snapshot read the same version), one row per fresh record.

    `level` reads a child level (its full key columns first); `asof`/`since`/`keys` narrow the
    scan as in `Table.scan`. `on_scan` is called with each Conch `Scan` after it ran, to see
    what was pushed (`scan.plan.filter`) and read (`scan.metrics()`).
    """
    pl = optional_import("polars")
    plugins = optional_import("polars.io.plugins")
    base = resolve_snapshot(source, asof).scan(level=level, since=since, keys=keys)  # one version for every collect
    spec = ScanSpec.from_scan(base)
    out_schema = base.schema
    key_fields = base.plan.key_fields
    key_names = [f.name for f in key_fields]
    top = {f.name for f in out_schema} - set(key_names)
    translator = PolarsTranslator({c.path: c.type for c in base.plan.columns}, key_fields)
    polars_schema = pl.from_arrow(out_schema.empty_table()).schema

    def source_fn(
        with_columns: list[str] | None, predicate: Any, n_rows: int | None, batch_size: int | None
    ) -> Iterator[Any]:
        pushed = translator.translate(predicate) if predicate is not None else Pushdown(None, True)
        needed = set(with_columns or top) | (set(predicate.meta.root_names()) if predicate is not None else set())
        groups = tuple(sorted(n for n in needed if n in top)) or (narrowest_column(base.plan.columns),)
        conch_scan = spec.rescan(*groups, where=pushed.where, limit=n_rows if pushed.exact else None)
        remaining = n_rows
        for batch in conch_scan.to_record_batches():
            df = pl.from_arrow(batch)
            if predicate is not None:
                df = df.filter(predicate)  # the whole predicate: the pushed part is only implied by it
            if with_columns is not None:
                df = df.select(with_columns)
            if remaining is not None:
                df = df.head(remaining)
                remaining -= df.height
            if df.height:
                yield df
            if remaining == 0:
                break
        if on_scan is not None:
            on_scan(conch_scan)

    return plugins.register_io_source(
        source_fn,
        schema=polars_schema,
        explain_name="conch",
        explain_detail=f"{spec.table_name} level={spec.level or '<root>'} asof={spec.asof}",
    )
