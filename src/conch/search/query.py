"""`search`: the k nearest fresh records of a table version (DESIGN §6a, issue 31).

Every run (key space) of the index's level gives *sources* of candidates: its index files where
they are built and current (`conch.search.runs`; one source per part of the run), else the run's vectors searched exactly (numpy), so
a write is searchable at once. A candidate says only "this key may be near": its distance is
recomputed from the key's **fresh** record, taken from the whole snapshot through a scan with
`keys=` (and the `where` filter, applied exactly on fresh records). A key whose vector a newer
run overwrote gets its fresh vector's distance, a deleted key or a key whose fresh vector is null
is not in the scan, a key found by several runs appears once.

Completeness is the threshold rule: each source answers its `k_s` nearest in distance order, so a
row it did not return is no nearer than the last one it did. While some source's last distance
is not beyond the k-th best fresh distance found (for some query), that source may hide a nearer
fresh record: it is asked again for twice as many. With exact sources (flat indexes and unindexed
runs) the result is the exact top-k of the fresh records; with approximate ones (HNSW, IVF) it is
as good as the structure's recall, and never holds a stale or deleted vector.

A selective `where` (at most `PREFILTER_ROWS` passing records) is applied first: the passing fresh
records are scanned and searched exactly (pre-filtering), so a filtered search has recall 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from conch.errors import InvalidArgumentError
from conch.files.manifest import IndexDef, KeySpace, extent, overlaps
from conch.scan.metrics import ScanMetrics
from conch.scan.result import ScanResult
from conch.search import definitions, runs, vectors

PREFILTER_ROWS = 100_000
FIRST_FETCH = 2  # a source is first asked for FIRST_FETCH × k rows


@dataclass
class SearchPlan:
    """What a search did (`SearchResult.explain`)."""

    index: str
    metric: str
    queries: int
    k: int
    sources: list[str] = field(default_factory=list)
    prefiltered: int | None = None
    rounds: int = 0
    candidates: int = 0
    dropped: int = 0


class _Source:
    """One run's candidates in distance order: `fetch(q, n)` → (distances, key rows)."""

    def __init__(
        self, keys: pa.Table, rows: int, structure: Any = None, exact: np.ndarray | None = None, alone: bool = False
    ) -> None:
        self.keys, self.rows, self.structure, self.exact = keys, rows, structure, exact
        self.alone = alone  # no other run can hide its cells: its candidates are fresh as they are

    def fetch(self, queries: np.ndarray, n: int, definition: IndexDef, options: dict[str, Any]) -> tuple[Any, Any]:
        if self.exact is not None:
            d = vectors.exact_distances(queries, self.exact, definition.metric)
            if n < d.shape[1]:
                part = np.argpartition(d, n - 1, axis=1)[:, :n]
                order = np.take_along_axis(part, np.argsort(np.take_along_axis(d, part, 1), axis=1), 1)
            else:
                order = np.argsort(d, axis=1, kind="stable")
            return np.take_along_axis(d, order, 1), order
        vectors.tune(self.structure, options, n)
        return vectors.search(self.structure, queries, n, definition.metric)


def search(
    source: Any,
    query: Any,
    k: int = 10,
    column: str | None = None,
    where: Any = None,
    columns: Sequence[str] | None = None,
) -> SearchResult:
    """The `k` nearest fresh records to `query` (one vector, or a matrix: k per query)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidArgumentError(f"k={k!r}: a positive integer")
    state = source.state
    d = definitions.for_column(state, column, "vector")
    col = next(c for c in state.schema.columns if c.id == d.column_id)
    queries, single = vectors.queries_matrix(query, d.dim)
    queries = vectors.prepare(queries, d.metric)
    key_names = state.schema.key_names(col.level)
    wanted = list(columns) if columns is not None else [c.path for c in state.schema.columns if c.level == col.level]
    read = list(dict.fromkeys([*wanted, col.path]))
    plan = SearchPlan(d.name, d.metric, len(queries), k)
    fresh = _Fresh(source, read, col.path, col.level, where, key_names, d)
    if where is not None:
        passing = _prefilter(source, read, where, col.level)
        if passing is not None:
            plan.prefiltered = passing.num_rows
            fresh.add(passing)
            best = [fresh.top(queries[i], list(fresh.rows), k) for i in range(len(queries))]
            return _result(fresh, best, key_names, wanted, single, plan)
    opts = vectors.json_options(d)
    sources = []
    of_runs = runs.runs_of(state, d)
    loaded = runs.load_all(source.log.files.storage, [f for _, files in of_runs for f in files])
    for ks, files in of_runs:
        alone = where is None and not hiders(state, ks, col.level)
        for f in files:  # a run's parts hold disjoint keys: each is a source of its own
            sources.append(_Source(loaded[f.id].keys, f.rows, structure=loaded[f.id].structure, alone=alone))
        if files:
            what, held = f"{opts['index']} index files {', '.join(f.id for f in files)}", sum(f.rows for f in files)
        else:
            run = runs.read_run(source, ks, d)
            sources.append(_Source(run.keys, len(run.vectors), exact=run.vectors, alone=alone))
            what, held = "no index file, searched exactly", len(run.vectors)
        trust = "its cells are fresh (no newer run or tombstone)" if alone else "candidates checked on fresh records"
        plan.sources.append(f"run {ks.id} ({held} vectors): {what}; {trust}")
    asked = [min(s.rows, FIRST_FETCH * k) for s in sources]
    known: list[dict[tuple[Any, ...], float]] = [{} for _ in queries]  # fresh for sure: the index's distance
    maybe: list[set[tuple[Any, ...]]] = [set() for _ in queries]  # to check on fresh records
    while True:
        plan.rounds += 1
        last: list[np.ndarray] = []
        for s, n in zip(sources, asked):
            if n == 0:
                last.append(np.full(len(queries), np.inf))
                continue
            dist, rows = s.fetch(queries, n, d, opts)
            keys = _tuples(s.keys, rows)
            for i in range(len(queries)):
                got = [(kt, dd) for kt, dd, r in zip(keys[i], dist[i].tolist(), rows[i]) if r >= 0]
                if s.alone:
                    known[i].update(got)
                else:
                    maybe[i].update(kt for kt, _ in got)
            # a structure that returned fewer than asked has nothing more to give that query
            last.append(np.where(rows[:, -1] >= 0, dist[:, -1], np.inf))
        fresh.fetch({kt for m in maybe for kt in m})
        best = [fresh.top(queries[i], maybe[i], k, known[i]) for i in range(len(queries))]
        kth = np.array([b[-1][0] if len(b) == k else np.inf for b in best])
        more = False
        for j, s in enumerate(sources):
            if asked[j] < s.rows and bool(np.any(last[j] <= kth + 1e-4 * np.maximum(1, np.abs(kth)))):
                asked[j] = min(s.rows, 2 * asked[j])
                more = True
        if not more:
            break
    plan.candidates = len(fresh.asked) + sum(len(kn) for kn in known)
    plan.dropped = fresh.missing
    if any(c not in key_names for c in wanted):  # the projected columns of the results, from fresh records
        fresh.fetch({kt for b in best for _, kt in b})
    return _result(fresh, best, key_names, wanted, single, plan)


def _prefilter(source: Any, read: list[str], where: Any, level: str) -> pa.Table | None:
    """The fresh records passing `where` with the read columns, streamed; None once more than
    `PREFILTER_ROWS` pass (the search then filters candidates instead)."""
    batches, rows = [], 0
    reader = source.scan(*read, where=where, level=level).to_record_batches()
    for batch in reader:
        rows += batch.num_rows
        if rows > PREFILTER_ROWS:
            return None
        batches.append(batch)
    return pa.Table.from_batches(batches, schema=reader.schema)


def hiders(state: Any, run: KeySpace, level: str) -> bool:
    """Whether any other run may hide a cell of `run`: a data run of its level or a tombstone of
    its level or an ancestor's whose newest cell is not older than `run`'s oldest, over its keys."""
    oldest = run.min_time or run.time
    ancestors = {lvl.path for lvl in state.schema.ancestry(level)} | {level}
    span = extent(run)
    return any(
        ks.id != run.id
        and ks.time >= oldest
        and ((ks.kind == "data" and ks.level == level) or (ks.kind == "tombstone" and ks.level in ancestors))
        and (ks.kind == "tombstone" or overlaps(extent(ks), span))
        for ks in state.key_spaces.values()
    )


def _tuples(keys: pa.Table, rows: np.ndarray) -> list[list[tuple[Any, ...]]]:
    flat = rows.reshape(-1)
    taken = keys.take(pa.array(np.where(flat >= 0, flat, 0)))
    tuples = list(zip(*(taken.column(i).to_pylist() for i in range(taken.num_columns))))
    w = rows.shape[1]
    return [tuples[i * w : (i + 1) * w] for i in range(rows.shape[0])]


class _Fresh:
    """Fresh records of candidate keys, taken once each through `source.scan(keys=...)`."""

    def __init__(
        self, source: Any, read: list[str], vector: str, level: str, where: Any, key_names: list[str], d: IndexDef
    ) -> None:
        self.source, self.read, self.vector, self.level, self.where = source, read, vector, level, where
        self.key_names, self.definition = key_names, d
        self.key_schema = pa.schema(source.state.schema.key_fields(level))
        self.rows: dict[tuple[Any, ...], int] = {}  # key → row of `tables` (concatenated)
        self.tables: list[pa.Table] = []
        self.vectors = np.zeros((0, d.dim), dtype=np.float32)
        self.asked: set[tuple[Any, ...]] = set()
        self.missing = 0
        self.metrics = ScanMetrics()

    def fetch(self, keys: set[tuple[Any, ...]]) -> None:
        new = keys - self.asked
        if not new:
            return
        self.asked |= new
        table = pa.Table.from_pylist([dict(zip(self.key_names, kt)) for kt in sorted(new)], schema=self.key_schema)
        scan = self.source.scan(*self.read, where=self.where, keys=table, level=self.level)
        got = scan.to_arrow()
        self.metrics = scan.metrics()
        before = len(self.rows)
        self.add(got)
        self.missing += len(new) - (len(self.rows) - before)

    def add(self, table: pa.Table) -> None:
        table = table.filter(table.column(self.vector).is_valid())
        start = sum(t.num_rows for t in self.tables)
        keys = zip(*(table.column(n).to_pylist() for n in self.key_names))
        for i, kt in enumerate(keys):
            self.rows[kt] = start + i
        self.tables.append(table)
        self.vectors = np.concatenate([self.vectors, vectors.as_matrix(table.column(self.vector), self.definition.dim)])

    def top(
        self, query: np.ndarray, keys: Any, k: int, known: dict[tuple[Any, ...], float] | None = None
    ) -> list[tuple[float, tuple[Any, ...]]]:
        """The k nearest of `keys` that have fresh records and of `known` (key → distance, fresh
        for sure): (distance, key), nearest first, each key once."""
        ranked = dict(known or {})
        have = [(kt, self.rows[kt]) for kt in keys if kt in self.rows]
        if have:
            rows = np.array([r for _, r in have])
            dist = vectors.exact_distances(query[None, :], self.vectors[rows], self.definition.metric)[0]
            ranked.update(zip((kt for kt, _ in have), dist.tolist()))
        return sorted((dd, kt) for kt, dd in ranked.items())[:k]


def _result(
    fresh: _Fresh,
    best: list[list[tuple[float, tuple[Any, ...]]]],
    key_names: list[str],
    wanted: list[str],
    single: bool,
    plan: SearchPlan,
) -> SearchResult:
    values = [c for c in wanted if c not in key_names]
    found = [kt for b in best for _, kt in b]
    if values:
        table = pa.concat_tables(fresh.tables, promote_options="permissive") if fresh.tables else None
        if table is None:
            schema = fresh.source.scan(*values, level=fresh.level).schema
            table = pa.table({c: pa.array([], schema.field(c).type) for c in [*key_names, *values]})
        out = table.select([*key_names, *values]).take(pa.array([fresh.rows[kt] for kt in found], pa.int64()))
    else:
        out = pa.Table.from_pylist([dict(zip(key_names, kt)) for kt in found], schema=fresh.key_schema)
    out = out.add_column(len(key_names), "_distance", pa.array([dd for b in best for dd, _ in b], pa.float32()))
    if not single:
        out = out.add_column(0, "_query", pa.array([i for i, b in enumerate(best) for _ in b], pa.int32()))
    return SearchResult(out, plan, fresh.metrics)


class SearchResult(ScanResult):
    """The result of `search` / `search_text`: nearest first (per query for a matrix, with a
    `_query` column), the key columns, `_distance` (or `_score`) and the projected columns;
    Arrow, pandas, Polars like any scan result (`conch.scan.result.ScanResult`)."""

    def __init__(self, table: pa.Table, plan: Any, metrics: ScanMetrics) -> None:
        self._table, self._plan, self._metrics = table, plan, metrics

    def to_record_batches(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self._table.schema, self._table.to_batches())

    @property
    def schema(self) -> pa.Schema:
        return self._table.schema

    def explain(self) -> str:
        p = self._plan
        if isinstance(p, SearchPlan):
            lines = [f"search index {p.index!r} ({p.metric}): {p.queries} queries, k={p.k}"]
            if p.prefiltered is not None:
                lines.append(f"  where passes {p.prefiltered} fresh records: searched exactly (pre-filter)")
            lines += [f"  {s}" for s in p.sources]
            lines.append(f"  {p.rounds} rounds; {p.candidates} candidate keys, {p.dropped} stale, deleted or filtered")
            return "\n".join(lines)
        return str(p)

    def metrics(self) -> ScanMetrics:
        """What the last fresh-record scan read."""
        return self._metrics
