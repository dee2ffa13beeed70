"""`search_text`: fresh records ranked by BM25 (tantivy), issue 31.

**One ranking: tantivy's own BM25 over the fresh corpus of the table version** (every fresh,
non-null cell of the column), answered from one tantivy index over the *corpus* (`_corpus`):

- when no run of the column can hide another's cell (no overlapping newer run, no tombstone:
  `query.hiders`), the corpus is the union of every run's part: its index file's segments, or a
  segment built from its cells when it has no current file (`textfiles.run_part`);
- otherwise (and for an `asof` snapshot, whose time filter a run's file does not know) one
  part built from the fresh records themselves (`textfiles.fresh_part`), so a hidden or deleted
  cell never counts in the statistics.

Either way document counts, lengths and frequencies are summed over exactly the fresh corpus, so
scores equal tantivy's over that corpus indexed at once (tested). Every part is immutable (a file,
a run, or a table version), so the opened union is kept per process, keyed by its parts: a repeated
query costs a tantivy search, the hits' keys and, for projected columns other than the indexed
one, one `keys=` scan.

**`where` selects, it does not rescore** (as a filter clause in tantivy or Elasticsearch, and
Lance's pre-filtered full-text search): a record's score is its BM25 over the whole fresh corpus,
and the result is the `k` best of the records passing `where`. The keys passing `where` are read
once per table version and predicate (at most `query.PREFILTER_ROWS`; kept per process,
`_Passing`) and turned into the sorted rows of each part that pass. Then either

- the hits are taken best first, `4k` at a time (or as many as `2k` passing ones take at the
  share of documents passing) and then four times as many, and checked against those rows, until
  `k` pass or the query has no more hits: exact, since every record after the last hit taken
  scores no better; or, when that would take more than `PUSHDOWN_HITS` hits,
- tantivy filters: the query is `text AND (run = r AND row ∈ rows_r) OR ...` with the filter's
  score 0, so scores stay the text's and tantivy's own top `k` is the answer.

When more keys than `PREFILTER_ROWS` pass, the rounds check each round's hits with one
`scan(keys=..., where=...)` instead (most hits pass then).

**A hit's key** is its `row` (a fast field of the index, `textfiles`) in its part's keys; its
indexed column is read from the index (the part holds exactly the fresh cell); other projected
columns take one `scan(keys=...)`.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.errors import InvalidArgumentError
from conch.expr.tree import Expr
from conch.files.manifest import IndexDef
from conch.model.deps import optional_import
from conch.model.lru import Lru
from conch.model.sets import distinct
from conch.scan.metrics import ScanMetrics
from conch.search import definitions, runs, textfiles
from conch.search.query import PREFILTER_ROWS, SearchResult, hiders

FIRST_HITS = 4  # with `where`, the first round checks FIRST_HITS × k hits; each next round 4× more
PUSHDOWN_HITS = 16_384  # past this many hits to check, tantivy filters instead (a term-set query)
CACHED_PASSING = 8  # the rows passing a `where`, kept per (version, predicate)


def search_text(
    source: Any,
    query: str,
    column: str | None = None,
    k: int = 10,
    where: Any = None,
    columns: Sequence[str] | None = None,
) -> SearchResult:
    """The `k` fresh records whose `column` ranks best for `query` by BM25 (`_score`, best first)."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidArgumentError(f"search_text query {query!r}: a non-empty string")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidArgumentError(f"k={k!r}: a positive integer")
    state = source.state
    d = definitions.for_column(state, column, "text")
    col = next(c for c in state.schema.columns if c.id == d.column_id)
    key_names = state.schema.key_names(col.level)
    wanted = list(columns) if columns is not None else [c.path for c in state.schema.columns if c.level == col.level]
    values = [c for c in wanted if c not in key_names]
    ident, corpus = _corpus(source, d, col)
    parsed = _parse(corpus.index, query)
    records = _Records(source, values or key_names[:1], col.level, key_names, where)
    plan = (
        f"search_text {query!r} on {col.full_path} (index {d.name!r}): BM25 by tantivy over {corpus.what}, "
        f"{corpus.searcher.num_docs} documents"
    )
    if where is None:
        found = corpus.searcher.search(parsed, k, count=False).hits
    else:
        passing = _passing(source, ident, corpus, where, col.level, key_names)
        if passing is None:
            found = _checked(corpus, parsed, k, records)
            plan += f"; where checked on the fresh records of {len(records.asked)} hits"
        else:
            found, how = _selected(corpus, parsed, k, passing)
            plan += f"; where: {passing.keys} keys pass ({passing.documents} of the parts' rows), {how}"
    addresses = [a for _, a in found]
    keys = corpus.keys_of(*corpus.positions(addresses))
    hits = list(zip((score for score, _ in found), keys))
    key_fields = state.schema.key_fields(col.level)
    if values == [col.path]:  # the indexed column: the part holds the fresh cell
        table = pa.Table.from_arrays(
            [*_key_columns(keys, key_fields), pa.array(corpus.texts_of(addresses), col.type)],
            schema=pa.schema([*key_fields, pa.field(col.path, col.type)]),
        )
    elif values:
        records.fetch(keys)
        table = records.table(hits, key_names, values)
    else:
        table = pa.Table.from_arrays(_key_columns(keys, key_fields), schema=pa.schema(key_fields))
    table = table.add_column(len(key_names), "_score", pa.array([s for s, _ in hits], pa.float32()))
    return SearchResult(table, plan, records.metrics)


def _key_columns(keys: list[tuple[Any, ...]], fields: list[pa.Field]) -> list[pa.Array]:
    return [pa.array([kt[i] for kt in keys], f.type) for i, f in enumerate(fields)]


def _parse(index: Any, query: str) -> Any:
    try:
        return index.parse_query(query, ["text"])
    except ValueError as e:
        raise InvalidArgumentError(f"search_text query {query!r} does not parse: {e}") from e


@dataclasses.dataclass(frozen=True, slots=True)
class _Passing:
    """The documents of a corpus whose fresh records pass a `where`: each part's sorted rows."""

    rows: dict[str, np.ndarray]  # run → sorted rows passing
    keys: int  # keys passing (a record with a null text has no document)

    @property
    def documents(self) -> int:
        return sum(len(r) for r in self.rows.values())

    def admits(self, runs: list[str], ords: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Which documents at `(segment ordinals, rows)` pass (`runs`: a segment's part)."""
        out = np.zeros(len(rows), bool)
        for ordinal in distinct(ords).tolist():
            passing = self.rows.get(runs[ordinal])
            if passing is None or not len(passing):
                continue
            mine = np.flatnonzero(ords == ordinal)
            at = np.minimum(np.searchsorted(passing, rows[mine]), len(passing) - 1)
            out[mine] = passing[at] == rows[mine]
        return out

    def query(self, index: Any) -> Any:
        """A tantivy query matching exactly the passing documents."""
        tantivy = optional_import("tantivy")
        schema = index.schema
        clauses = [
            (
                tantivy.Occur.Should,
                tantivy.Query.boolean_query(
                    [
                        (tantivy.Occur.Must, tantivy.Query.term_query(schema, "run", run)),
                        (tantivy.Occur.Must, tantivy.Query.term_set_query(schema, "row", rows.tolist())),
                    ]
                ),
            )
            for run, rows in self.rows.items()
            if len(rows)
        ]
        return tantivy.Query.boolean_query(clauses)


def _selected(corpus: textfiles.Corpus, parsed: Any, k: int, passing: _Passing) -> tuple[list[Any], str]:
    """The `k` best hits among the passing documents (module doc) and how they were found."""
    if not passing.documents:
        return [], "no hit can pass"
    searcher = corpus.searcher
    n = max(FIRST_HITS * k, -(-2 * k * searcher.num_docs // passing.documents))
    if n > PUSHDOWN_HITS:
        tantivy = optional_import("tantivy")
        only = tantivy.Query.const_score_query(passing.query(corpus.index), 0.0)
        filtered = tantivy.Query.boolean_query([(tantivy.Occur.Must, parsed), (tantivy.Occur.Must, only)])
        return searcher.search(filtered, k, count=False).hits, "filtered by tantivy (a term set of their rows)"
    while True:
        hits = searcher.search(parsed, n, count=False).hits
        admitted = passing.admits(corpus.segment_runs, *corpus.positions([a for _, a in hits]))
        kept = [hits[i] for i in np.flatnonzero(admitted)[:k].tolist()]
        if len(kept) >= k or len(hits) < n:
            return kept[:k], f"the best {len(hits)} hits checked against their rows"
        n *= 4


def _checked(corpus: textfiles.Corpus, parsed: Any, k: int, records: _Records) -> list[Any]:
    """The `k` best hits whose fresh records pass `where`, checked best first with one
    `scan(keys=..., where=...)` per round (more than `PREFILTER_ROWS` keys pass)."""
    n = FIRST_HITS * k
    while True:
        hits = corpus.searcher.search(parsed, n, count=False).hits
        keys = corpus.keys_of(*corpus.positions([a for _, a in hits]))
        records.fetch(keys)
        kept = [hit for hit, kt in zip(hits, keys) if kt in records.rows]
        if len(kept) >= k or len(hits) < n:
            return kept[:k]
        n *= 4


_passing_kept: Lru[tuple[Any, ...], tuple[_Passing | None]] = Lru(max_entries=CACHED_PASSING)


def _passing(
    source: Any, corpus_ident: tuple[Any, ...], corpus: textfiles.Corpus, where: Any, level: str, key_names: list[str]
) -> _Passing | None:
    """The corpus's documents passing `where` (None: more than `PREFILTER_ROWS` keys pass), kept
    per table version, corpus and predicate when the predicate has a structural identity."""
    predicate = _predicate_identity(where)
    version = (source.table_id, source.seq, source.asof, source.connection.key)

    def make() -> _Passing | None:
        key_schema = pa.schema(source.state.schema.key_fields(level))
        batches, count = [], 0
        for batch in source.scan(*key_names, where=where, level=level).to_record_batches():
            count += batch.num_rows
            if count > PREFILTER_ROWS:
                return None
            batches.append(pa.Table.from_batches([batch]).select(key_names).cast(key_schema))
        wanted = pa.concat_tables(batches) if batches else key_schema.empty_table()
        rows: dict[str, np.ndarray] = {}
        for run, keys in corpus.keys.items():
            if keys.num_rows:
                rows[run] = _rows_in(keys.select(key_names).cast(key_schema), wanted)
        return _Passing(rows, count)

    if predicate is None:
        return make()
    return _passing_kept.get_or_make((version, corpus_ident, predicate), lambda: (make(),))[0]  # None is kept too


def _rows_in(keys: pa.Table, wanted: pa.Table) -> np.ndarray:
    """The sorted rows of `keys` that are in `wanted` (same key columns; each key once)."""
    if keys.num_columns == 1:  # a hash set of the wanted keys, probed by every row
        found = pc.is_in(keys.column(0), value_set=wanted.column(0).combine_chunks())
        return np.flatnonzero(found.to_numpy(zero_copy_only=False))
    numbered = keys.append_column("_row", pa.array(np.arange(keys.num_rows)))
    joined = numbered.join(wanted, keys=keys.column_names, join_type="inner")
    return np.sort(joined.column("_row").to_numpy())


_PLAIN = (str, int, float, bool, bytes, type(None), decimal.Decimal, datetime.date, datetime.time, datetime.timedelta)


def _predicate_identity(where: Any) -> Hashable | None:
    """A value equal for two predicates exactly when they are built alike (their node types,
    fields and literal values with their types), or None when a part has no such identity."""
    if isinstance(where, Expr) and dataclasses.is_dataclass(where):
        parts = [_predicate_identity(getattr(where, f.name)) for f in dataclasses.fields(where)]
        return None if any(p is None for p in parts) else (type(where).__qualname__, *parts)
    if isinstance(where, tuple):
        parts = [_predicate_identity(v) for v in where]
        return None if any(p is None for p in parts) else ("tuple", *parts)
    if isinstance(where, _PLAIN):
        return (type(where).__qualname__, where)
    return None


class _Records:
    """Fresh records of hit keys, taken once each through `scan(keys=..., where=...)`."""

    def __init__(self, source: Any, read: list[str], level: str, key_names: list[str], where: Any) -> None:
        self.source, self.read, self.level, self.key_names, self.where = source, read, level, key_names, where
        self.key_schema = pa.schema(source.state.schema.key_fields(level))
        self.asked: set[tuple[Any, ...]] = set()
        self.rows: dict[tuple[Any, ...], int] = {}  # key → row of the concatenated tables
        self.tables: list[pa.Table] = []
        self.metrics = ScanMetrics()

    def fetch(self, keys: list[tuple[Any, ...]]) -> None:
        new = sorted(set(keys) - self.asked)
        if not new:
            return
        self.asked.update(new)
        table = pa.Table.from_pylist([dict(zip(self.key_names, kt)) for kt in new], schema=self.key_schema)
        scan = self.source.scan(*self.read, where=self.where, keys=table, level=self.level)
        got = scan.to_arrow()
        self.metrics = scan.metrics()
        start = sum(t.num_rows for t in self.tables)
        for i, kt in enumerate(zip(*(got.column(n).to_pylist() for n in self.key_names))):
            self.rows[kt] = start + i
        self.tables.append(got)

    def table(self, hits: list[Any], key_names: list[str], values: list[str]) -> pa.Table:
        """The hits' keys and projected columns, in rank order (every hit was fetched)."""
        if not self.tables:
            schema = self.source.scan(*values, level=self.level).schema
            return pa.table({c: pa.array([], schema.field(c).type) for c in [*key_names, *values]})
        table = pa.concat_tables(self.tables, promote_options="permissive")
        return table.select([*key_names, *values]).take(pa.array([self.rows[kt] for _, kt in hits], pa.int64()))


CACHED_CORPORA = 8  # opened union indexes kept per process
_corpora: Lru[tuple[Any, ...], textfiles.Corpus] = Lru(
    max_entries=CACHED_CORPORA, on_evict=lambda old: old.remove()
)  # open files stay readable


def _corpus(source: Any, d: IndexDef, col: Any) -> tuple[tuple[Any, ...], textfiles.Corpus]:
    """The opened tantivy index over the version's fresh corpus (module doc), kept per process,
    with its identity."""
    state = source.state
    text_runs = [(ks, files[0] if files else None) for ks, files in runs.runs_of(state, d)]  # one file a run
    hidden = {ks.id for ks, _ in text_runs if source.asof is not None or hiders(state, ks, col.level)}
    alone = [(ks, f) for ks, f in text_runs if ks.id not in hidden]
    overlapped = [(ks, f) for ks, f in text_runs if ks.id in hidden]
    ident: tuple[Any, ...] = tuple(
        ("file", f.id) if f is not None else ("run", ks.id, runs.run_fragments(state, ks.id, d.column_id))
        for ks, f in sorted(alone, key=lambda r: r[0].id)
    )
    if overlapped:
        ident += (("fresh", source.asof, *textfiles.version_identity(state, d)),)

    def make() -> textfiles.Corpus:
        storage = source.log.files.storage
        directory = textfiles.new_directory()
        parts = [
            textfiles.extract(storage, f) if f is not None else textfiles.run_part(source, d, ks) for ks, f in alone
        ]
        files = sum(1 for _, f in alone if f is not None)
        what = f"the segments of {files} index files and {len(alone) - files} runs indexed now"
        if overlapped:
            held = [_run_keys(source, d, ks, f) for ks, f in overlapped]
            parts.append(textfiles.fresh_part(source, col, directory, [p.keys for p in parts], held))
            what += f", and the fresh records of the {len(overlapped)} runs another run or a delete may hide"
        return textfiles.union(parts, what, directory)

    ident = (d.column_id, *ident)
    return ident, _corpora.get_or_make(ident, make)


def _run_keys(source: Any, d: IndexDef, ks: Any, f: Any) -> pa.Table:
    """The keys of a run's cells of the index's column: its file's, else read from the run."""
    if f is not None:
        return textfiles.extract(source.log.files.storage, f).keys
    keys = source.state.schema.key_names(d.level)
    return runs.RunView(source, ks).scan(*keys, level=d.level).to_arrow()
