"""Metastores: where table names and each table's write-ahead log live (DESIGN §4).

`Metastore` is the interface; backends are chosen by URI scheme in `metastore.registry`.
"""

from conch.log.metastore.base import LogEntry, Metastore, TableRecord
from conch.log.metastore.registry import default_metastore_uri, metastore_from_uri, register_metastore
from conch.log.metastore.sqlite import SqliteMetastore

__all__ = [
    "LogEntry",
    "Metastore",
    "SqliteMetastore",
    "TableRecord",
    "default_metastore_uri",
    "metastore_from_uri",
    "register_metastore",
]
