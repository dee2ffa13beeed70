"""`search_text`: fresh records ranked by BM25 (tantivy), issue 31.

The text index of this version is built at query time over the fresh records (the scan of the
text column with the `where` filter applied exactly), in tantivy's in-memory index, and tantivy
ranks them. Freshness is then trivially right (only fresh values are indexed) and the ranking is
tantivy's own BM25 over the fresh corpus: statistics (document counts and frequencies) are those
of the fresh records, which per-run files would get wrong once runs overlap. The cost is a scan of
the column per query; persisted per-run text files (merged statistics) are future work
(docs/search.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from conch.errors import InvalidArgumentError
from conch.model.deps import optional_import
from conch.search import definitions
from conch.search.query import SearchResult

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
    try:
        parsed = index.parse_query(query, ["text"])
    except ValueError as e:
        raise InvalidArgumentError(f"search_text query {query!r} does not parse: {e}") from e
    hits = searcher.search(parsed, k).hits
    rows = [searcher.doc(addr)["row"][0] for _, addr in hits]
    cols = [*key_names, *[c for c in wanted if c not in key_names]]
    table = pa.concat_tables(tables) if tables else scan.to_arrow()
    out = table.select(cols).take(pa.array(rows, pa.int64()))
    out = out.add_column(len(key_names), "_score", pa.array([s for s, _ in hits], pa.float32()))
    plan = f"search_text {query!r} on {col.full_path} (index {d.name!r}, BM25 by tantivy over {row} fresh records)"
    return SearchResult(out, plan, scan.metrics())
