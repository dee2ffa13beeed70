"""The text-match term of filters: `t["caption"].matches("red car")` (issue 31).

A record matches where its text matches `query` as tantivy's query parser reads it over that one
text (the default tokenizer: split on non-alphanumerics, lowercased; words are OR'd unless
`+word`, `AND`, quotes or `-word` say otherwise): exactly the records `search_text(query)` can
rank, with the same analysis. A null text is null (SQL). It is evaluated on assembled fresh
records, batch by batch (a batch's texts are indexed in memory and the query run over them), so
it filters `scan`, `search`, `search_text`, `delete`/`update` `where=` and the Spark `where`
option alike; it is never pushed into files or judged on fragment statistics.
"""

from __future__ import annotations

import functools
from typing import Any

import pyarrow as pa

from conch.errors import ExpressionError
from conch.model.deps import optional_import

WRITER_HEAP = 32 << 20  # tantivy's indexing buffer per evaluated batch


@functools.cache
def _schema() -> Any:
    tantivy = optional_import("tantivy")
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("text", stored=False)
    builder.add_unsigned_field("row", stored=True)
    return builder.build()


def check_query(query: Any) -> str:
    """`query` if it is a non-empty string tantivy parses, else `ExpressionError` naming it."""
    if not isinstance(query, str) or not query.strip():
        raise ExpressionError(f"matches() takes a non-empty query string, got {query!r}")
    index = optional_import("tantivy").Index(_schema())
    try:
        index.parse_query(query, ["text"])
    except ValueError as e:
        raise ExpressionError(f"matches({query!r}): the text query does not parse: {e}") from e
    return query


def match(texts: pa.Array | pa.ChunkedArray, query: str) -> pa.Array:
    """Per text: whether it matches `query` (null where the text is null)."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks else pa.array([], pa.string())
    if not (pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type)):
        raise ExpressionError(f"matches({query!r}) needs a string column, got {texts.type}")
    tantivy = optional_import("tantivy")
    index = tantivy.Index(_schema())
    values = texts.to_pylist()
    writer = index.writer(heap_size=WRITER_HEAP, num_threads=1)
    for row, text in enumerate(values):
        if text is not None:
            writer.add_document(tantivy.Document(text=text, row=row))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()
    hit = [False] * len(values)
    if searcher.num_docs:
        for _, addr in searcher.search(index.parse_query(query, ["text"]), searcher.num_docs).hits:
            hit[searcher.doc(addr)["row"][0]] = True
    return pa.array([None if v is None else h for v, h in zip(values, hit)], pa.bool_())
