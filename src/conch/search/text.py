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
query costs a tantivy search, the hits' keys and, for projected value columns, one `keys=` scan.

**`where` selects, it does not rescore** (as a filter clause in tantivy or Elasticsearch, and
Lance's pre-filtered full-text search): a record's score is its BM25 over the whole fresh corpus,
and the result is the `k` best of the records passing `where`. The hits are taken best first,
`4k` at a time and then four times as many, and their keys checked with one `scan(keys=...,
where=...)` per round until `k` pass or the query has no more hits: exact, since every record
after the last hit taken scores no better.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from conch.errors import InvalidArgumentError
from conch.files.manifest import IndexDef
from conch.scan.metrics import ScanMetrics
from conch.search import definitions, runs, textfiles
from conch.search.query import PREFILTER_ROWS, SearchResult, hiders

FIRST_HITS = 4  # with `where`, the first round checks FIRST_HITS × k hits; each next round 4× more


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
    corpus = _corpus(source, d, col)
    searcher = corpus.index.searcher()
    parsed = _parse(corpus.index, query)
    records = _Records(source, values or key_names[:1], col.level, key_names, where)
    if where is None:
        found = searcher.search(parsed, k).hits
        hits = list(zip((score for score, _ in found), corpus.keys_of([searcher.doc(addr) for _, addr in found])))
    else:
        hits = _filtered(corpus, searcher, parsed, k, records)
    if values:
        records.fetch([kt for _, kt in hits])
    plan = (
        f"search_text {query!r} on {col.full_path} (index {d.name!r}): BM25 by tantivy over {corpus.what}, "
        f"{searcher.num_docs} documents"
    )
    if where is not None:
        plan += f"; where checked on the fresh records of {len(records.asked)} hits"
        if records.passing is not None:
            plan += f", then against the {len(records.passing)} keys passing it"
    table = records.table(hits, key_names, values, state.schema.key_fields(col.level))
    table = table.add_column(len(key_names), "_score", pa.array([s for s, _ in hits], pa.float32()))
    return SearchResult(table, plan, records.metrics)


def _parse(index: Any, query: str) -> Any:
    try:
        return index.parse_query(query, ["text"])
    except ValueError as e:
        raise InvalidArgumentError(f"search_text query {query!r} does not parse: {e}") from e


def _filtered(corpus: textfiles.Corpus, searcher: Any, parsed: Any, k: int, records: _Records) -> list[Any]:
    """The `k` best hits whose fresh records pass `where` (module doc). After a first round that
    found fewer than `k`, the keys passing `where` are read once (when at most
    `query.PREFILTER_ROWS` pass) and later rounds check hits against them without a scan."""
    keys: dict[tuple[int, int], tuple[Any, ...]] = {}  # doc address → key: each doc read once
    n = FIRST_HITS * k
    while True:
        hits = searcher.search(parsed, n).hits
        new = [addr for _, addr in hits if (addr.segment_ord, addr.doc) not in keys]
        keys.update(zip(((a.segment_ord, a.doc) for a in new), corpus.keys_of([searcher.doc(a) for a in new])))
        ranked = [(score, keys[(addr.segment_ord, addr.doc)]) for score, addr in hits]
        if records.passing is None:
            records.fetch([kt for _, kt in ranked])
            passing = [(score, kt) for score, kt in ranked if kt in records.rows]
        else:
            passing = [(score, kt) for score, kt in ranked if kt in records.passing]
        if len(passing) >= k or len(hits) < n:
            return passing[:k]
        records.read_passing()
        n *= 4
        if records.passing:  # about 2k passing hits expected, at the share of documents passing
            n = max(n, math.ceil(2 * k * searcher.num_docs / len(records.passing)))


class _Records:
    """Fresh records of hit keys (with `where`), taken once each through `scan(keys=...)`."""

    def __init__(self, source: Any, read: list[str], level: str, key_names: list[str], where: Any) -> None:
        self.source, self.read, self.level, self.key_names, self.where = source, read, level, key_names, where
        self.key_schema = pa.schema(source.state.schema.key_fields(level))
        self.asked: set[tuple[Any, ...]] = set()
        self.rows: dict[tuple[Any, ...], int] = {}  # key → row of the concatenated tables
        self.tables: list[pa.Table] = []
        self.metrics = ScanMetrics()
        self.passing: set[tuple[Any, ...]] | None = None  # every key passing `where`, once read

    def read_passing(self) -> None:
        """Read the keys passing `where`, unless more than `PREFILTER_ROWS` do."""
        if self.passing is not None:
            return
        passing: set[tuple[Any, ...]] = set()
        for batch in self.source.scan(*self.key_names, where=self.where, level=self.level).to_record_batches():
            passing.update(zip(*(batch.column(n).to_pylist() for n in self.key_names)))
            if len(passing) > PREFILTER_ROWS:
                return
        self.passing = passing

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

    def table(self, hits: list[Any], key_names: list[str], values: list[str], key_fields: list[pa.Field]) -> pa.Table:
        """The hits' keys and projected columns, in rank order."""
        if not values:
            return pa.Table.from_pylist([dict(zip(key_names, kt)) for _, kt in hits], schema=pa.schema(key_fields))
        if not self.tables:
            schema = self.source.scan(*values, level=self.level).schema
            return pa.table({c: pa.array([], schema.field(c).type) for c in [*key_names, *values]})
        table = pa.concat_tables(self.tables, promote_options="permissive")
        return table.select([*key_names, *values]).take(pa.array([self.rows[kt] for _, kt in hits], pa.int64()))


CACHED_CORPORA = 8  # opened union indexes kept per process
_corpora: textfiles.Kept[textfiles.Corpus] = textfiles.Kept(
    CACHED_CORPORA, lambda old: old.remove()
)  # open files stay readable


def _corpus(source: Any, d: IndexDef, col: Any) -> textfiles.Corpus:
    """The opened tantivy index over the version's fresh corpus (module doc), kept per process."""
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

    return _corpora.get((d.column_id, *ident), make)


def _run_keys(source: Any, d: IndexDef, ks: Any, f: Any) -> pa.Table:
    """The keys of a run's cells of the index's column: its file's, else read from the run."""
    if f is not None:
        return textfiles.extract(source.log.files.storage, f).keys
    keys = source.state.schema.key_names(d.level)
    return runs.RunView(source, ks).scan(*keys, level=d.level).to_arrow()
