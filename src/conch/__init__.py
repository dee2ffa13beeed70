"""Conch: an open table format for large multimodal and ML datasets.

Keyed tables whose schema is a tree of column groups, stored as key-sorted Vortex fragments in an
LSM tree, committed through a table-wide write-ahead log, read with fresh-record semantics.

>>> import conch, pyarrow as pa                                         # doctest: +SKIP
>>> cat = conch.connect("warehouse")                                    # doctest: +SKIP
>>> t = cat.create_table("audio", [("id", pa.uint64())])               # doctest: +SKIP
>>> t.write([{"id": 1, "silence_ratio": 0.05, "audio": {"bytes": b"..."}}])  # doctest: +SKIP
>>> cat.scan(t["audio.bytes"], where=t["silence_ratio"] < 0.1).to_arrow()   # doctest: +SKIP
"""

from conch.api.catalog import Catalog, connect
from conch.api.changes import Changes
from conch.api.snapshot import Snapshot
from conch.api.table import Table, TableColumn
from conch.errors import (
    BranchNotFoundError,
    ColumnNotFoundError,
    CommitConflictError,
    CommitStateUnknownError,
    ConchError,
    CorruptFileError,
    DecodeError,
    DuplicateKeyError,
    EnrichError,
    ExpressionError,
    FilterSyntaxError,
    InexactKeyError,
    InvalidArgumentError,
    InvalidKeyError,
    KeyNotFoundError,
    KeyTypeError,
    LevelError,
    MissingDependencyError,
    SchemaError,
    TableExistsError,
    TableNotFoundError,
    TimeTravelError,
    WarehouseError,
    WarehouseNotFoundError,
)
from conch.expr.tree import Col, Expr
from conch.files.blobfile import BlobFile
from conch.files.blobsource import Blob
from conch.log.branches import Branch
from conch.log.txn import Commit
from conch.model.budget import WriteOptions
from conch.model.keys import KeyPrefix, KeyRange
from conch.model.policy import Policy
from conch.nested import _
from conch.scan import Scan, ScanMetrics

__version__ = "0.1.0"

__all__ = [
    "Blob",
    "BlobFile",
    "Branch",
    "BranchNotFoundError",
    "Catalog",
    "Changes",
    "Col",
    "ColumnNotFoundError",
    "Commit",
    "CommitConflictError",
    "CommitStateUnknownError",
    "ConchError",
    "CorruptFileError",
    "DecodeError",
    "DuplicateKeyError",
    "EnrichError",
    "Expr",
    "ExpressionError",
    "FilterSyntaxError",
    "InexactKeyError",
    "InvalidArgumentError",
    "InvalidKeyError",
    "KeyNotFoundError",
    "KeyPrefix",
    "KeyRange",
    "KeyTypeError",
    "LevelError",
    "MissingDependencyError",
    "Policy",
    "Scan",
    "ScanMetrics",
    "SchemaError",
    "Snapshot",
    "Table",
    "TableColumn",
    "TableExistsError",
    "TableNotFoundError",
    "TimeTravelError",
    "WarehouseError",
    "WarehouseNotFoundError",
    "WriteOptions",
    "_",
    "connect",
]
