"""Where a table's files go (DESIGN §3): key spaces, fragments and snapshots under the table's
directory, each under a fresh id."""

from __future__ import annotations

from conch.files.format import FragmentFormat
from conch.files.storage import Storage, new_id
from conch.model.schema import join_path


class TableFiles:
    """Where one table's files go, and how they are written. `partition_keys`: how many leading
    key columns form the partitioning key (spec/003): a run is cut where it changes, so no key
    space or fragment spans two partitions."""

    def __init__(self, storage: Storage, table_id: str, fmt: FragmentFormat, partition_keys: int = 0) -> None:
        self.storage = storage
        self.table_id = table_id
        self.format = fmt
        self.partition_keys = partition_keys

    def key_space_path(self, ks_id: str) -> str:
        return f"{self.table_id}/keys/{ks_id}{self.format.suffix}"

    def fragment_path(self, level: str, group: str, frag_id: str) -> str:
        gdir = join_path(level, group) or "_root"
        return f"{self.table_id}/cg/{gdir}/{frag_id}{self.format.suffix}"

    def snapshot_path(self, seq: int) -> str:
        return f"{self.table_id}/meta/{seq:012d}-{new_id()}.json"
