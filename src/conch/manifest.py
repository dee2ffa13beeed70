"""Table state: the schema and the live key spaces and fragments, replayed from the WAL.

The state at log sequence `seq` is the newest flushed snapshot at or before `seq` plus the WAL
entries after it (DESIGN §4). A WAL entry is a JSON document: `{"kind": ..., "ops": [...]}` with
operations `add_key_space`, `add_fragment`, `remove_key_space`, `remove_fragment`,
`add_columns` (schema changes) and `truncate` (an overwrite). Cells take the commit time of the
entry that added them, unless an operation carries its own `time` (compaction keeps original
times, DESIGN §6).

In memory the manifests are Arrow tables (`key_space_manifest`, `fragment_manifest`) so pruning
is vectorised over them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import pyarrow as pa

from conch.fragments import decode_stats
from conch.integrity import open_entry, seal_json
from conch.metastore.base import LogEntry
from conch.schema import Schema


@dataclass(frozen=True, slots=True)
class KeySpace:
    """One sorted run of unique keys of one level: the keys of one write (or a tombstone set)."""

    id: str
    level: str
    path: str
    rows: int
    min_key: str  # hex of the encoded key
    max_key: str
    kind: str = "data"  # "data" or "tombstone" (a tombstone hides its keys' subtrees)
    time: int = 0
    seq: int = 0
    lsm: int = 0
    compacted_at: int | None = None
    bytes: int = 0
    checksum: str = ""  # of the file; "" where the table was written before checksums


@dataclass(frozen=True, slots=True)
class Fragment:
    """Rows `[start, start + rows)` of one key space for one column group."""

    id: str
    level: str
    group: str
    key_space: str
    start: int
    rows: int
    path: str
    column_ids: tuple[int, ...]
    stats: str  # base64 Arrow IPC: min.<id>, max.<id>, nulls.<id>
    bytes: int = 0
    meta_bytes: int = 0
    format: str = "vortex"
    # `lsm` and `compacted_at` (here and on KeySpace) are set by compaction (DESIGN §6, not built
    # yet); every write is L0. The CLI shows them, as spec/001's manifest listings do.
    time: int = 0
    seq: int = 0
    lsm: int = 0
    compacted_at: int | None = None
    blob_columns: tuple[int, ...] = ()  # column ids stored out of line in `<path>.blobs`
    checksum: str = ""  # of the file(s); "" where the table was written before checksums

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Fragment:
        """From a WAL operation or a snapshot (JSON turns tuples into lists)."""
        return cls(**{**d, "column_ids": tuple(d["column_ids"]), "blob_columns": tuple(d.get("blob_columns", ()))})


@dataclass
class TableState:
    """Schema + live files of a table at one log sequence number."""

    schema: Schema
    seq: int = 0
    time: int = 0
    key_spaces: dict[str, KeySpace] = field(default_factory=dict)
    fragments: dict[str, Fragment] = field(default_factory=dict)

    def apply(self, entry: LogEntry) -> None:
        doc = open_entry(entry.entry, entry.seq, entry.time, self.seq, self.time)
        for op in doc["ops"]:
            kind = op["op"]
            if kind == "add_columns":
                self.schema = Schema.from_json(op["schema"])
            elif kind == "add_key_space":
                ks = KeySpace(**{k: v for k, v in op.items() if k != "op"})
                self.key_spaces[ks.id] = replace(ks, time=op.get("time") or entry.time, seq=entry.seq)
            elif kind == "add_fragment":
                fr = Fragment.from_dict({k: v for k, v in op.items() if k != "op"})
                self.fragments[fr.id] = replace(fr, time=op.get("time") or entry.time, seq=entry.seq)
            elif kind == "remove_key_space":
                self.key_spaces.pop(op["id"], None)
            elif kind == "remove_fragment":
                self.fragments.pop(op["id"], None)
            elif kind == "truncate":
                self.key_spaces.clear()
                self.fragments.clear()
            else:
                raise ValueError(f"unknown WAL operation {kind!r} at seq {entry.seq}")
        self.seq = entry.seq
        self.time = entry.time

    def replay(self, entries: Iterable[LogEntry]) -> TableState:
        for e in entries:
            self.apply(e)
        return self

    # ----- snapshots --------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(
            {
                "seq": self.seq,
                "time": self.time,
                "schema": self.schema.to_json(),
                "key_spaces": [asdict(k) for k in self.key_spaces.values()],
                "fragments": [asdict(f) for f in self.fragments.values()],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> TableState:
        d = json.loads(text)
        frags = {f["id"]: Fragment.from_dict(f) for f in d["fragments"]}
        return cls(
            schema=Schema.from_json(d["schema"]),
            seq=d["seq"],
            time=d["time"],
            key_spaces={k["id"]: KeySpace(**k) for k in d["key_spaces"]},
            fragments=frags,
        )

    def copy(self) -> TableState:
        return TableState(self.schema, self.seq, self.time, dict(self.key_spaces), dict(self.fragments))

    # ----- Arrow manifests --------------------------------------------------------------
    def key_space_manifest(self) -> pa.Table:
        rows = [asdict(k) for k in self.key_spaces.values()]
        return pa.Table.from_pylist(rows, schema=_KEY_SPACE_SCHEMA)

    def fragment_manifest(self, level: str | None = None, group: str | None = None) -> pa.Table:
        """Fragments (optionally of one level and group) with their per-column statistics."""
        frs = [
            f
            for f in self.fragments.values()
            if (level is None or f.level == level) and (group is None or f.group == group)
        ]
        base = pa.Table.from_pylist(
            [{k: v for k, v in asdict(f).items() if k != "stats"} for f in frs], schema=_FRAGMENT_SCHEMA
        )
        if not frs:
            return base
        batches = [pa.Table.from_batches([decode_stats(f.stats)]) for f in frs]
        stats = pa.concat_tables(batches, promote_options="permissive")
        for name in stats.column_names:
            base = base.append_column(name, stats.column(name))
        return base


_KEY_SPACE_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("level", pa.string()),
        ("path", pa.string()),
        ("rows", pa.int64()),
        ("min_key", pa.string()),
        ("max_key", pa.string()),
        ("kind", pa.string()),
        ("time", pa.int64()),
        ("seq", pa.int64()),
        ("lsm", pa.int64()),
        ("compacted_at", pa.int64()),
        ("bytes", pa.int64()),
        ("checksum", pa.string()),
    ]
)

_FRAGMENT_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("level", pa.string()),
        ("group", pa.string()),
        ("key_space", pa.string()),
        ("start", pa.int64()),
        ("rows", pa.int64()),
        ("path", pa.string()),
        ("column_ids", pa.list_(pa.int64())),
        ("bytes", pa.int64()),
        ("meta_bytes", pa.int64()),
        ("format", pa.string()),
        ("time", pa.int64()),
        ("seq", pa.int64()),
        ("lsm", pa.int64()),
        ("compacted_at", pa.int64()),
        ("blob_columns", pa.list_(pa.int64())),
        ("checksum", pa.string()),
    ]
)


def entry_json(kind: str, ops: list[dict[str, Any]], **extra: Any) -> str:
    return seal_json(json.dumps({"kind": kind, "ops": ops, **extra}, separators=(",", ":")))
