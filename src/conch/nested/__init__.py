"""Nested levels (spec/002): lazy navigation, `_`, select/where, broadcasting, reductions,
windows, regroup/rekey, row selection and writes over a table's tree of levels."""

from conch.nested.api import Expr, Path, RekeyPath, root_member
from conch.nested.deferred import Deferred, _
from conch.nested.exec import RegroupError
from conch.nested.query import NestedScan, Query
from conch.nested.writes import BatchWriter

__all__ = [
    "BatchWriter",
    "Deferred",
    "Expr",
    "NestedScan",
    "Path",
    "Query",
    "RegroupError",
    "RekeyPath",
    "_",
    "root_member",
]
