"""Search: vector and full-text indexes kept by the LSM tree, answering with fresh records
(DESIGN §6a, docs/search.md). Above `scan` (fresh records are read through scans) and below
`api` (`Table.create_index`, `Table.search`, ... are thin calls into it)."""

from conch.search.build import build_indexes
from conch.search.definitions import create_index, describe, drop_index
from conch.search.query import SearchResult, search
from conch.search.text import search_text

__all__ = ["SearchResult", "build_indexes", "create_index", "describe", "drop_index", "search", "search_text"]
