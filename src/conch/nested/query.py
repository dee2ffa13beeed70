"""`Query` (a `select()`), `NestedScan` (its execution) and the plan it explains."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from conch.errors import ConchError
from conch.nested.exec import Executor
from conch.nested.explain import plan_tree
from conch.nested.nodes import Domain, Explode, Node, common_ancestor, parent_level, render
from conch.nested.stream import DEFAULT_CHUNK_ROWS, Source, chunks
from conch.scan import Scan, ScanMetrics, ScanResult


class Query:
    """Output fields at one level. `.scan()` runs it.

    >>> clips.select(duration=_.duration).scan().to_arrow()                  # doctest: +SKIP
    """

    def __init__(self, domain: Domain, outputs: dict[str, Any], narrow: Callable[[Domain, Any], Domain]) -> None:
        self.domain = domain
        self.outputs = outputs
        # How a predicate narrows a level (`Path.where`'s rule), handed down by the API layer
        # that builds queries, so this module never imports it back.
        self._narrow = narrow

    def scan(self, asof: Any = None, chunk_rows: int | None = None, since: Any = None) -> NestedScan:
        """Run the select. `asof` / `since` bound commit times as in `Table.scan` (cells outside
        are not considered at any level); `chunk_rows` caps the rows read per level per chunk."""
        return NestedScan(self, asof, chunk_rows, since)

    def where(self, predicate: Any) -> Query:
        """The same outputs over fewer rows: `level.select(...).where(p)` is
        `level.where(p).select(...)` (`_` in `p` is the select's level)."""
        return Query(self._narrow(self.domain, predicate), self.outputs, self._narrow)

    def to_arrow(self) -> pa.Table:
        return self.scan().to_arrow()

    def explain(self) -> str:
        return plan_tree(self.domain, self.outputs)

    def __repr__(self) -> str:
        return self.explain()


def _leaves(spec: dict[str, Any]) -> Iterator[Node]:
    for v in spec.values():
        if isinstance(v, dict):
            yield from _leaves(v)
        else:
            yield v


class NestedScan(ScanResult):
    """The result of a select: key columns of the level, then the fields (the `ScanResult`
    protocol: `pa.table(result)`, Polars, DuckDB, `count()`, `metrics()` work as on `Scan`).

    Execution streams (`conch.nested.stream`): the core scans of all levels are read in lockstep
    and cut into parent-aligned chunks of about `chunk_rows` rows each, every operator runs per
    chunk, and `to_record_batches()` / iteration yield each chunk's batches as they are computed.
    `to_arrow()` concatenates them (and keeps the result). `to_arrow(keys=False)` drops the key
    columns, giving exactly the tables printed in spec/002.
    """

    def __init__(self, query: Query, asof: Any = None, chunk_rows: int | None = None, since: Any = None) -> None:
        self.query = query
        self.asof = asof
        self.since = since
        self.chunk_rows = chunk_rows or DEFAULT_CHUNK_ROWS
        self._result: pa.Table | None = None
        self.chunks_run = 0  # chunks computed by the last run (for tests and explain)
        self.peak_rows: dict[str, int] = {}  # most rows of one level held by any chunk
        self._scans: list[Scan] = []  # the core scans of the last run

    def _evaluate(self, ex: Executor) -> pa.Table:
        q = self.query
        fr = ex.rows(q.domain)
        names = list(fr.key_names)
        cols = list(fr.keys)
        for name, v in q.outputs.items():
            names.append(name)
            cols.append(self._column(ex, v))
        return pa.Table.from_arrays(cols, names=names) if names else pa.table({})

    def _tables(self) -> Iterator[pa.Table]:
        """The result, one parent-aligned chunk at a time."""
        q = self.query
        ex = Executor(q.domain.table, self.asof, self.since)
        ex.collect_domain(q.domain)
        for n in _leaves(q.outputs):
            ex.collect(n)
        ex.reset({}, dry=True)
        self._evaluate(ex)  # plans the scans on empty inputs: which levels, which windows
        self._scans = [s for _d, scans in ex.sources.values() for s in scans]
        levels = [d.level for d, _scans in ex.sources.values()]
        levels += [parent_level(w) for w in ex.window_levels]
        cut = levels[0] if levels else ""
        for lvl in levels[1:]:
            cut = common_ancestor(cut, lvl)
        fields = ex.schema.key_fields(cut) if levels else []
        self.chunks_run = 0
        self.peak_rows = {}
        if not fields:  # nothing to cut by (a key-less root is read whole): one chunk
            ex.reset(None)
            self.chunks_run = 1
            yield self._evaluate(ex)
            return
        sources = {
            k: Source(_chain(scans), scans[0].schema, list(fields), self.chunk_rows)
            for k, (_d, scans) in ex.sources.items()
        }
        schema: pa.Schema | None = None
        for feed in chunks(sources):
            for k, part in feed.items():
                lvl = ex.sources[k][0].level
                self.peak_rows[lvl] = max(self.peak_rows.get(lvl, 0), part.num_rows)
            ex.reset(feed)
            t = self._evaluate(ex)
            self.chunks_run += 1
            if schema is None:
                schema = t.schema
            elif t.schema != schema:
                t = t.cast(schema)
            yield t

    def _column(self, ex: Executor, v: Any) -> pa.Array:
        if isinstance(v, dict):
            arrays = [self._column(ex, x) for x in v.values()]
            return pa.StructArray.from_arrays(arrays, names=list(v))
        return ex.value(v, self.query.domain)

    def _run(self) -> pa.Table:
        if self._result is None:
            parts = list(self._tables())
            self._result = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        return self._result

    # `progress` is accepted for the result protocol; a select is computed in one step, no bar.
    def to_arrow(self, keys: bool = True, progress: bool | None = None) -> pa.Table:
        t = self._run()
        if not keys:
            return t.drop_columns(t.column_names[: len(t.column_names) - len(self.query.outputs)])
        return t

    def to_pylist(self, keys: bool = True, progress: bool | None = None) -> list[dict[str, Any]]:
        return self.to_arrow(keys).to_pylist()

    def to_pandas(self, keys: bool = True, progress: bool | None = None) -> Any:
        return super().to_pandas() if keys else self.to_arrow(keys).to_pandas()

    def to_polars(self, keys: bool = True, progress: bool | None = None) -> Any:
        from conch.model.deps import optional_import

        return optional_import("polars").from_arrow(self.to_arrow(keys))

    def _batches(self, tables: Iterator[pa.Table]) -> Iterator[pa.RecordBatch]:
        for t in tables:
            yield from t.to_batches()

    def to_record_batches(self) -> pa.RecordBatchReader:
        """A streaming reader: each chunk's batches as soon as the chunk is computed."""
        tables = iter([self._result]) if self._result is not None else self._tables()
        first = next(tables)
        return pa.RecordBatchReader.from_batches(first.schema, self._batches(itertools.chain([first], tables)))

    @property
    def schema(self) -> pa.Schema:
        """The output schema (computes the result's first chunk)."""
        return self.to_record_batches().schema

    def metrics(self) -> ScanMetrics:
        """What the core scans of the last run read, summed."""
        if not self._scans:
            raise ConchError("the query has not run yet: call to_arrow() or iterate it first")
        return combined_metrics(self._scans)

    def explain(self) -> str:
        return self.query.explain()

    def __repr__(self) -> str:
        return repr(self.to_arrow(keys=False))


def combined_metrics(scans: list[Scan]) -> ScanMetrics:
    """The metrics of several core scans summed (scans that did not run count nothing)."""
    out = ScanMetrics()
    for s in scans:
        try:
            m = s.metrics()
        except ConchError:
            continue
        for name in (
            "key_spaces",
            "tombstones",
            "keys_merged",
            "keys_out",
            "fragments_considered",
            "fragments_read",
            "fragments_pruned_by_stats",
            "key_bytes_read",
            "rows_out",
            "bytes_out",
        ):
            setattr(out, name, getattr(out, name) + getattr(m, name))
        out.merge = ", ".join(x for x in dict.fromkeys([*out.merge.split(", "), m.merge]) if x)
        for g, gm in m.groups.items():
            mine = out.group(g)
            for f in gm.__dataclass_fields__:
                setattr(mine, f, getattr(mine, f) + getattr(gm, f))
    return out


def _chain(scans: list[Any]) -> Iterator[pa.RecordBatch]:
    """The batches of one or more key-ordered core scans (sorted, disjoint seeks) in order."""
    for s in scans:
        yield from s.to_record_batches()


class ExplodeScan(ScanResult):
    """The rows of an exploded list column: the list's level keys, `$idx`, the element."""

    def __init__(self, node: Explode, asof: Any = None, since: Any = None) -> None:
        self.node, self.asof, self.since = node, asof, since
        self._scans: list[Scan] = []

    def to_arrow(self, *, progress: bool | None = None) -> pa.Table:  # computed in one step: no bar
        from conch.nested.exec import home

        d = home(self.node)
        assert isinstance(d, Domain)
        ex = Executor(d.table, self.asof, self.since)
        ex.collect(self.node)
        out = ex.explode(self.node)
        self._scans = [s for _d, scans in ex.sources.values() for s in scans]
        return out

    def to_record_batches(self) -> pa.RecordBatchReader:
        t = self.to_arrow()
        return pa.RecordBatchReader.from_batches(t.schema, t.to_batches())

    @property
    def schema(self) -> pa.Schema:
        return self.to_arrow().schema

    def metrics(self) -> ScanMetrics:
        if not self._scans:
            raise ConchError("the explode has not run yet: call to_arrow() first")
        return combined_metrics(self._scans)

    def explain(self) -> str:
        return f"Explode {render(self.node)}"
