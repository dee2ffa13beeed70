"""The error hierarchy: one root, `ConchError`, mixed with builtins where natural.

Every error names what was wrong (table, column, key, version) and, where it can, how to fix it.
A commit conflict and a commit whose outcome is unknown are different errors: the first is safe
to retry, the second needs the caller to look at the table's history first.
"""

from __future__ import annotations


class ConchError(Exception):
    """Root of every error Conch raises on purpose."""


class SchemaError(ConchError, ValueError):
    """A schema is malformed, or data does not match a table's schema."""


class ColumnNotFoundError(SchemaError, LookupError):
    """A column path names no column of the table."""


class KeyTypeError(ConchError, TypeError):
    """Key values do not have (and cannot be safely cast to) the key schema's types."""


class InvalidKeyError(ConchError, ValueError):
    """A key value is null, NaN, oversized, or otherwise not a valid key."""


class InexactKeyError(InvalidKeyError, KeyTypeError):
    """A key value that is not exactly a value of its key column's type: `5.5`, `-1` or `2**64`
    on a `uint64` key. Keys are never rounded, truncated or wrapped (a lookup of `5.5` would
    otherwise return key 5). Both an `InvalidKeyError` and a `KeyTypeError`."""


class DuplicateKeyError(InvalidKeyError):
    """One write holds the same key twice: the write's rows have no order to pick a winner."""


class ExpressionError(ConchError, TypeError):
    """An expression is malformed or misused: `and`/`or`/`if` on an expression (use `& | ~`),
    a non-expression passed as a filter, an empty window frame."""


class FilterSyntaxError(ConchError, ValueError):
    """A filter string (CLI `--where`, Spark options) could not be parsed."""


class LevelError(ConchError, ValueError):
    """Expressions from levels that cannot be combined (siblings, unrelated branches)."""


class KeyNotFoundError(ConchError, LookupError):
    """A key asked for by name (`Table.open_blob`) has no live record, or no value in the column."""


class TableNotFoundError(ConchError, LookupError):
    """No table of that name in the catalog."""


class BranchNotFoundError(TableNotFoundError):
    """A table has no branch of that name (`Table.branch`); a dropped branch's handle raises it
    as `TableNotFoundError`, as any dropped table's does."""


class TableExistsError(ConchError, ValueError):
    """A table of that name already exists."""


class CommitConflictError(ConchError):
    """A concurrent commit made this one invalid; nothing was committed, retrying is safe."""


class CommitStateUnknownError(ConchError):
    """The metastore did not say whether the commit happened; check `Table.history()`."""


class CorruptFileError(ConchError, OSError):
    """A data or metadata file is missing, truncated or not what the manifest says."""


class TimeTravelError(ConchError, ValueError):
    """A time-travel bound is malformed or older than what the table retains."""


class MissingDependencyError(ConchError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


# ----- input validation (h4) -------------------------------------------------------------------
class InvalidArgumentError(ConchError, ValueError):
    """An argument is out of its range or of the wrong kind (`scan(limit=-1)`)."""


# --- storage and metastore backends beyond one machine (issue 12) ---


class StorageError(ConchError, OSError):
    """A storage backend failed (unreachable, denied, misconfigured); the message names the
    operation and the object. A missing file is `FileNotFoundError` instead."""


class ConditionalWriteUnsupportedError(StorageError):
    """The store cannot write put-if-absent, so commits on it could silently overwrite each
    other: Conch refuses to use it as a metastore rather than risk a lost commit."""


class MetastoreUnavailableError(ConchError, ConnectionError):
    """The metastore (a server, a database) could not be reached or failed; nothing was
    changed by the request that raised this, except a commit, which raises
    `CommitStateUnknownError` instead."""


class AuthorizationError(ConchError, PermissionError):
    """The metastore refused the request: no token, an unknown token, or a token without the
    scope the request needs (read, write, admin)."""


class InvalidPathError(ConchError, ValueError):
    """A storage path is not a clean relative path (absolute, empty or `.`/`..` segments)."""


class InvalidNameError(ConchError, ValueError):
    """A table name or table id is not a safe identifier (letters, digits, `_ . -`; no path
    separators), so it could not address its own prefix of a warehouse."""


# ----- h1: warehouses and connections -----------------------------------------------------------
class WarehouseError(ConchError, ValueError):
    """A warehouse URI names no usable warehouse: an unsupported scheme, or a file where a
    directory should be."""


class WarehouseNotFoundError(WarehouseError, LookupError):
    """No warehouse at that location (and `connect(..., create=False)` was asked not to make one)."""


# ----- feeding models and engines (h7) ------------------------------------------------------------
class EnrichError(ConchError, ValueError):
    """An enrichment was given bad arguments, or its function returned something unusable."""


class DecodeError(ConchError, ValueError):
    """A value could not be decoded (by a `decode=` hook of `conch.engines.torch.dataset`: not an
    image Pillow opens, not a WAV file, an encoding the decoder does not read). Raised by a
    loader, it names the table, the key (as written in `t[key]`) and the column, which are also
    its `table`, `key` and `column` attributes (None when not known); `__cause__` is the hook's
    own error."""

    def __init__(
        self, message: str, *, table: str | None = None, key: object = None, column: str | None = None
    ) -> None:
        super().__init__(message)
        self.table, self.key, self.column = table, key, column

    def __reduce__(self) -> tuple[object, ...]:  # keeps the attributes through pickling (workers)
        return (_decode_error, (str(self), self.table, self.key, self.column))


def _decode_error(message: str, table: str | None, key: object, column: str | None) -> DecodeError:
    return DecodeError(message, table=table, key=key, column=column)
