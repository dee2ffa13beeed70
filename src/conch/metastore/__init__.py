"""Metastores: where table names and each table's write-ahead log live (DESIGN §4).

`Metastore` is the interface; backends are chosen by URI in `open_metastore`.
"""

from conch.metastore.base import LogEntry, Metastore, TableRecord
from conch.metastore.sqlite import SqliteMetastore

__all__ = ["LogEntry", "Metastore", "SqliteMetastore", "TableRecord"]
