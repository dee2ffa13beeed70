"""`TableLike`: what the table operations built on scans and writes (`update`, `delete_where`,
`enrich`, `changes`) need of the table they are handed. `conch.api.table.Table` is one; it
imports those modules, so they name the little they use instead of importing it."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Protocol

from conch.api.snapshot import Snapshot
from conch.files.manifest import TableState
from conch.log.tablelog import TableLog
from conch.log.txn import Commit


class TableLike(Protocol):
    """A table handle (`conch.api.table.Table`)."""

    name: str
    log: TableLog

    def state(self) -> TableState: ...

    def snapshot(self, asof: int | str | datetime | None = None, version: int | str | None = None) -> Snapshot: ...

    def history(self, kind: str | Iterable[str] | None = None) -> list[Commit]: ...
