"""`search_text`: fresh records ranked by BM25 (tantivy), issue 31.

Two paths, one ranking: tantivy's own BM25 over the fresh corpus.

- **From index files** (`textfiles`), when no `where` narrows the corpus and no run of the
  column can hide another's cell (no overlapping newer run, no tombstone: every indexed cell is
  fresh): one tantivy index over the segments of every run's file, plus segments built now for
  runs without a current file, so document counts, lengths and frequencies are summed over the
  whole corpus (global statistics, not per run).
- **Exact**, otherwise: the fresh records (the scan of the text column with `where` applied
  exactly) are indexed at query time in one in-memory tantivy index. Freshness is then trivially
  right, and the statistics are those of the fresh records, which per-run files would get wrong
  once runs overlap (a hidden cell still counts in its file's statistics). The cost is a scan of
  the column per query.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from conch.errors import InvalidArgumentError
from conch.files.manifest import IndexDef
from conch.model.deps import optional_import
from conch.search import build, definitions, runs, textfiles
from conch.search.query import SearchResult, hiders

WRITER_HEAP = 64 << 20  # tantivy's indexing buffer: memory stays bounded whatever the corpus size


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
    tantivy = optional_import("tantivy")
    state = source.state
    d = definitions.for_column(state, column, "text")
    col = next(c for c in state.schema.columns if c.id == d.column_id)
    key_names = state.schema.key_names(col.level)
    wanted = list(columns) if columns is not None else [c.path for c in state.schema.columns if c.level == col.level]
    read = list(dict.fromkeys([*wanted, col.path]))
    if where is None:
        found = _from_files(source, d, col, query, k)
        if found is not None:
            return _records(source, found, read, col.level, key_names, wanted)
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("text", stored=False)
    builder.add_unsigned_field("row", stored=True)
    index = tantivy.Index(builder.build())
    writer = index.writer(heap_size=WRITER_HEAP, num_threads=1)
    scan = source.scan(*read, where=where, level=col.level)
    tables = []
    row = 0
    for batch in scan.to_record_batches():
        texts = batch.column(batch.schema.get_field_index(col.path)).to_pylist()
        for i, text in enumerate(texts):
            if text is not None:
                writer.add_document(tantivy.Document(text=text, row=row + i))
        row += batch.num_rows
        tables.append(pa.Table.from_batches([batch]))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()
    parsed = _parse(index, query)
    hits = searcher.search(parsed, k).hits
    rows = [searcher.doc(addr)["row"][0] for _, addr in hits]
    cols = [*key_names, *[c for c in wanted if c not in key_names]]
    table = pa.concat_tables(tables) if tables else scan.to_arrow()
    out = table.select(cols).take(pa.array(rows, pa.int64()))
    out = out.add_column(len(key_names), "_score", pa.array([s for s, _ in hits], pa.float32()))
    plan = f"search_text {query!r} on {col.full_path} (index {d.name!r}, BM25 by tantivy over {row} fresh records)"
    return SearchResult(out, plan, scan.metrics())


def _parse(index: Any, query: str) -> Any:
    try:
        return index.parse_query(query, ["text"])
    except ValueError as e:
        raise InvalidArgumentError(f"search_text query {query!r} does not parse: {e}") from e


@dataclass
class _Found:
    hits: list[tuple[float, tuple[Any, ...]]]
    plan: str


def _from_files(source: Any, d: IndexDef, col: Any, query: str, k: int) -> _Found | None:
    """The top `k` from the union of the runs' text index files (module doc); None when some
    run could hide another's cell or no run has a file (the exact path answers)."""
    state = source.state
    text_runs = runs.runs_of(state, d)
    if not any(f is not None for _, f in text_runs):
        return None
    if any(hiders(state, ks, col.level) for ks, _ in text_runs):
        return None
    key_names = state.schema.key_names(col.level)
    files = sum(1 for _, f in text_runs if f is not None)
    # tantivy's own threads may still touch a query-time union's files while the directory is
    # removed ("Directory not empty", seen under load): drop the index first, and let a leftover
    # file not fail the search (it is in this query's temporary directory).
    with tempfile.TemporaryDirectory(prefix="conch-search-text-", ignore_cleanup_errors=True) as tmp:
        index, parts = _union(source, d, text_runs, tmp)
        searcher = index.searcher()
        documents = searcher.num_docs
        hits = []
        for score, addr in searcher.search(_parse(index, query), k).hits:
            doc = searcher.doc(addr)
            keys_of_run = parts[doc["run"][0]].keys
            row = doc["row"][0]
            hits.append((score, tuple(keys_of_run.column(n)[row].as_py() for n in key_names)))
        del searcher, index
    plan = (
        f"search_text {query!r} on {col.full_path} (index {d.name!r}): BM25 by tantivy over the segments of "
        f"{files} index files and {len(text_runs) - files} runs indexed now, {documents} documents, "
        "statistics summed over all (no run hides another's cell)"
    )
    return _Found(hits, plan)


_unions: OrderedDict[tuple[str, ...], tuple[Any, dict[str, textfiles.Extracted], str]] = OrderedDict()
_unions_lock = threading.Lock()
CACHED_UNIONS = 8  # opened union indexes of runs that all have files, per process


def _union(source: Any, d: IndexDef, text_runs: list[Any], tmp: str) -> tuple[Any, dict[str, textfiles.Extracted]]:
    """The tantivy index over every run's segments, and each run's part (its keys). Where every
    run has a file, the opened index is kept (keyed by the file ids: a new file is a new key)."""
    ids = tuple(f.id for _, f in text_runs if f is not None)
    whole = len(ids) == len(text_runs)
    if whole:
        with _unions_lock:
            hit = _unions.get(ids)
            if hit is not None:
                _unions.move_to_end(ids)
                return hit[0], hit[1]
    state = source.state
    storage = source.log.files.storage
    key_names = state.schema.key_names(d.level)
    parts: dict[str, textfiles.Extracted] = {}
    for ks, f in text_runs:
        if f is not None:
            parts[ks.id] = textfiles.extract(storage, f)
            continue
        directory = os.path.join(tmp, ks.id)
        os.mkdir(directory)
        keys: list[pa.Table] = []
        task = build.BuildTask(d.name, ks.id, ks.rows, state.seq)

        def docs(task: build.BuildTask = task, keys: list[pa.Table] = keys) -> Any:
            rows = 0
            for key_table, texts in build.cells(source, state, task):
                for i, text in enumerate(texts.to_pylist()):
                    yield rows + i, text
                rows += key_table.num_rows
                keys.append(key_table)

        textfiles.write_index(directory, ks.id, docs())
        table = pa.concat_tables(keys) if keys else pa.table({n: [] for n in key_names})
        parts[ks.id] = textfiles.extracted_dir(directory, table)
    merged = tempfile.mkdtemp(prefix="union-", dir=textfiles.cache_root()) if whole else os.path.join(tmp, "union")
    os.makedirs(merged, exist_ok=True)
    index = textfiles.union(list(parts.values()), merged)
    if whole:
        with _unions_lock:
            _unions[ids] = (index, parts, merged)
            while len(_unions) > CACHED_UNIONS:
                shutil.rmtree(_unions.popitem(last=False)[1][2], ignore_errors=True)  # open files stay readable
    return index, parts


def _records(
    source: Any, found: _Found, read: list[str], level: str, key_names: list[str], wanted: list[str]
) -> SearchResult:
    """The fresh records of the hits, in rank order, with `_score`."""
    key_schema = pa.schema(source.state.schema.key_fields(level))
    keys = pa.Table.from_pylist([dict(zip(key_names, kt)) for _, kt in found.hits], schema=key_schema)
    scan = source.scan(*read, keys=keys, level=level)
    table = scan.to_arrow()
    at = {kt: i for i, kt in enumerate(zip(*(table.column(n).to_pylist() for n in key_names)))}
    order = [at[kt] for _, kt in found.hits]
    cols = [*key_names, *[c for c in wanted if c not in key_names]]
    out = table.select(cols).take(pa.array(order, pa.int64()))
    out = out.add_column(len(key_names), "_score", pa.array([s for s, _ in found.hits], pa.float32()))
    return SearchResult(out, found.plan, scan.metrics())
