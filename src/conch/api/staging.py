"""`StagingFace`: what engines that write a table from many processes need of it, as `Table`
methods, so no engine reaches into `Table.log` (the table log is the core's, not a face).

Spark's writer stages fragments in executor tasks and commits their operations once on the
driver; Spark's compaction rewrites key ranges in tasks and commits per task; the streaming
sink reads the log's entries for exactly-once batches and stages deletes. Each needs: where the
table's files go (`files`), the warehouse's storage to clean up a failed job's files
(`storage`), the write options and key-space cache, committing a transaction staged elsewhere
(`commit`), the one "stage, then commit" sequence (`transact`), the log's entries, a version
from a number, tag or time, and compaction's plan / execute / commit steps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from conch.api.changes import resolve_version
from conch.files.keycache import KeyCache
from conch.files.layout import TableFiles
from conch.files.manifest import TableState
from conch.files.storage.base import Storage
from conch.log.tablelog import TableLog
from conch.log.txn import Commit
from conch.log.wal import Entry, Transaction
from conch.log.warehouse import Connection
from conch.maintain.compaction import CompactionTask, Policy, Staged, commit, execute, plan_tasks, with_cuts
from conch.model.budget import WriteOptions
from conch.model.keys import EncodedRange


class StagingFace:
    """The writing engines' face of a `Table` (module doc); `Table` inherits it."""

    log: TableLog

    @property
    def files(self) -> TableFiles:
        """Where this table's files go: writers stage key spaces and fragments here."""
        return self.log.files

    @property
    def connection(self) -> Connection:
        """How the warehouse is reached (what tasks in other processes reopen it with)."""
        return self.log.warehouse.connection

    @property
    def storage(self) -> Storage:
        """The warehouse's storage (a failed job removes the files it wrote through it)."""
        return self.log.storage

    @property
    def write_options(self) -> WriteOptions:
        """The warehouse's write options (`connect(write_options=...)`)."""
        return self.log.warehouse.write_options

    @property
    def key_cache(self) -> KeyCache:
        """The warehouse's key-space cache (decoded keys of runs)."""
        return self.log.key_cache

    @property
    def maintenance_policy(self) -> Policy:
        """The warehouse's maintenance policy (`connect(maintenance=...)`)."""
        return self.log.warehouse.maintenance

    def staging(self) -> contextlib.AbstractContextManager[None]:
        """Around writing a transaction's files, which are durable when it exits
        (`conch.log.tablelog.TableLog.staging`)."""
        return self.log.staging()

    def commit(self, txn: Transaction, maintain: bool = True) -> Commit:
        """Commit a transaction whose files were staged elsewhere (other processes' tasks);
        `maintain=False`: without the policy's automatic compaction after it."""
        return self.log.commit(txn, maintain=maintain)

    def transact(
        self, stage: Callable[[], Transaction], serial: bool = False, attempts: int = 1, what: str = ""
    ) -> Commit:
        """Stage a transaction, then commit it (`conch.log.tablelog.TableLog.transact`)."""
        return self.log.transact(stage, serial, attempts, what)

    def entries(self, after: int = 0, upto: int | None = None) -> Iterator[tuple[int, int, Entry]]:
        """The log's entries `(seq, time, entry)` in (after, upto]: what each commit did."""
        return self.log.entries(after, upto)

    def resolve_version(self, version: Any, what: str) -> int:
        """A version from a number, a tag name or a time (`conch.api.changes.resolve_version`)."""
        return resolve_version(self.log, version, what)

    def compaction_tasks(self, policy: Policy, force: bool = False) -> list[CompactionTask]:
        """The compaction tasks `policy` asks for now (`force`: a major of every component)."""
        return plan_tasks(self.log, policy, force)

    def cut_compaction(self, task: CompactionTask, version: int, policy: Policy) -> CompactionTask:
        """`task` with its output boundaries chosen over version `version` (a forced major's:
        every executor writing a part of it cuts where `Table.compact()` would)."""
        return with_cuts(self.log, self.log.state_at(version=version), task, policy)

    def stage_compaction(
        self, task: CompactionTask, version: int, within: EncodedRange | None = None, policy: Policy | None = None
    ) -> Staged:
        """Write `task`'s outputs over version `version` (keys in `within` only), uncommitted."""
        state: TableState = self.log.state_at(version=version)
        return execute(self.log, state, task, within, policy=policy)

    def commit_compaction(self, task: CompactionTask, parts: Sequence[Staged], base_seq: int = -1) -> Commit:
        """Commit the staged parts of one compaction task (a lost input: `CommitConflictError`)."""
        return commit(self.log, task, parts, base_seq)
