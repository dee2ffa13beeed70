"""The write-ahead log: typed operations, entries, their one JSON codec, replay and the
conflict rules of DESIGN §4, all in one place.

Every producer (Python writes and deletes, schema changes, Spark jobs, flush, vacuum, and
compaction next) builds a `Transaction` of operations; `TableLog.commit` appends it as one
`Entry` with a compare-and-swap on the log sequence number, and on a lost race calls `rebase`
to decide whether the newer entries invalidate it.

Entry format (JSON, `"v": 2`): `{"v", "kind", "summary", "ops": [{"op": name, ...}], "extra"}`.
Entries written before the format had a version (`v` absent) are still read: the same ops,
`cutoff_us` and `rows` at the top level.

Cells take the commit time of the entry that added them, unless an added record carries its own
`time` (a compaction's output takes its newest input's time, never the compaction's commit time,
DESIGN §6; `conch.maintain.compaction`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conch.errors import CommitConflictError, ConchError, CorruptFileError
from conch.files.integrity import open_entry, open_json, seal_json
from conch.files.manifest import (
    Fragment,
    FrozenMap,
    IndexDef,
    IndexFile,
    KeySpace,
    TableState,
    extent,
    overlaps,
    record_from_dict,
    record_to_dict,
)
from conch.log.metastore.base import LogEntry
from conch.model.schema import Schema

FORMAT_VERSION = 2

# A file's mtime comes from the file system's coarse clock (up to a few ms behind `time.time()`),
# so the vacuum rule compares times with this much slack, in the safe direction on both sides.
CLOCK_SLACK_US = 20_000


# ----- operations -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AddKeySpace:
    """A sorted run of keys (a tombstone set when `key_space.kind == "tombstone"`)."""

    key_space: KeySpace


@dataclass(frozen=True, slots=True)
class RemoveKeySpace:
    id: str


@dataclass(frozen=True, slots=True)
class AddFragment:
    fragment: Fragment


@dataclass(frozen=True, slots=True)
class RemoveFragment:
    id: str


@dataclass(frozen=True, slots=True)
class SetSchema:
    """The whole schema after added columns or levels (what a write or `mergeSchema` adds)."""

    schema: Schema


@dataclass(frozen=True, slots=True)
class RenameColumn:
    """Rename a column in place (metadata-only: files store column ids)."""

    column_id: int
    new_name: str


@dataclass(frozen=True, slots=True)
class DropColumns:
    """Forget columns (metadata-only; their ids are never reused)."""

    column_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Truncate:
    """Remove every key space and fragment (an overwrite)."""


@dataclass(frozen=True, slots=True)
class VacuumCutoff:
    """A vacuum deletes unreferenced files older than this (µs since the epoch)."""

    cutoff_us: int


@dataclass(frozen=True, slots=True)
class RegisterSnapshot:
    """A flushed snapshot of the state at `seq` (changes no state; makes the file referenced)."""

    seq: int
    path: str


@dataclass(frozen=True, slots=True)
class AddDisplacementMap:
    """A compaction's displacement map (`conch.maintain.compaction.displacement`): changes no state;
    makes the file referenced, with its size and checksum."""

    path: str
    bytes: int = 0
    checksum: str = ""
    runs: int = 0


@dataclass(frozen=True, slots=True)
class SetHorizon:
    """Expire time travel before `horizon_us` (a commit time): states as of earlier times are no
    longer readable and vacuum may reclaim the files only they referenced. Replay keeps the
    maximum, so the horizon never moves back and concurrent expires commute."""

    horizon_us: int


@dataclass(frozen=True, slots=True)
class SetTag:
    """Name version `seq` (`Table.tag`): changes no data; `expire` keeps the version readable and
    `vacuum` keeps its files while the tag exists. Tags live in the log (kind `"tag"`), so every
    metastore backend stores them with no table or method of its own, snapshots carry them, and a
    tag is as durable and ordered as any commit."""

    name: str
    seq: int


@dataclass(frozen=True, slots=True)
class RemoveTag:
    """Forget a tag (`Table.untag`); a later `vacuum` reclaims what only it kept."""

    name: str


@dataclass(frozen=True, slots=True)
class AddIndex:
    """Declare a search index (`Table.create_index`, `conch.search`); replay gives it its time."""

    index: IndexDef


@dataclass(frozen=True, slots=True)
class DropIndex:
    """Forget an index and its files (a later `vacuum` removes them)."""

    name: str


@dataclass(frozen=True, slots=True)
class AddIndexFile:
    """An index file of one run (`conch.search.build`); replay drops it with its run."""

    file: IndexFile


@dataclass(frozen=True, slots=True)
class RemoveIndexFile:
    id: str


Op = (
    AddKeySpace
    | RemoveKeySpace
    | AddFragment
    | RemoveFragment
    | SetSchema
    | RenameColumn
    | DropColumns
    | Truncate
    | VacuumCutoff
    | RegisterSnapshot
    | AddDisplacementMap
    | SetHorizon
    | SetTag
    | RemoveTag
    | AddIndex
    | DropIndex
    | AddIndexFile
    | RemoveIndexFile
)

_NAMES: dict[type, str] = {
    AddKeySpace: "add_key_space",
    RemoveKeySpace: "remove_key_space",
    AddFragment: "add_fragment",
    RemoveFragment: "remove_fragment",
    SetSchema: "add_columns",  # its name in entries written before rename/drop existed
    RenameColumn: "rename_column",
    DropColumns: "drop_columns",
    Truncate: "truncate",
    VacuumCutoff: "vacuum_cutoff",
    RegisterSnapshot: "register_snapshot",
    AddDisplacementMap: "add_displacement_map",
    SetHorizon: "set_horizon",
    SetTag: "set_tag",
    RemoveTag: "remove_tag",
    AddIndex: "add_index",
    DropIndex: "drop_index",
    AddIndexFile: "add_index_file",
    RemoveIndexFile: "remove_index_file",
}
_TYPES = {name: t for t, name in _NAMES.items()}


@dataclass(frozen=True, slots=True)
class Entry:
    """One commit's operations. `extra`: what history shows besides (`rows` per level,
    `added_columns` paths)."""

    kind: str
    ops: tuple[Op, ...]
    summary: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def added_columns(self) -> tuple[str, ...]:
        return tuple(self.extra.get("added_columns", ()))


# ----- codec ----------------------------------------------------------------------------------
def encode_op(op: Op) -> dict[str, Any]:
    name = _NAMES[type(op)]
    if isinstance(op, AddKeySpace | AddFragment):
        rec = record_to_dict(op.key_space if isinstance(op, AddKeySpace) else op.fragment)
        del rec["seq"]  # set by replay
        if not rec["time"]:
            del rec["time"]  # cells take the commit's time
        return {"op": name, **rec}
    if isinstance(op, AddIndex | AddIndexFile):
        rec = record_to_dict(op.index if isinstance(op, AddIndex) else op.file)
        del rec["seq"], rec["time"]  # set by replay
        return {"op": name, **rec}
    if isinstance(op, SetSchema):
        return {"op": name, "schema": op.schema.to_json()}
    if isinstance(op, DropColumns):
        return {"op": name, "column_ids": list(op.column_ids)}
    return {"op": name, **{f.name: getattr(op, f.name) for f in dataclasses.fields(op)}}


def decode_op(d: Mapping[str, Any]) -> Op:
    t = _TYPES.get(d.get("op", ""))
    if t is None:
        raise ConchError(f"unknown WAL operation {d.get('op')!r}: the entry was written by a newer Conch; upgrade")
    body = {k: v for k, v in d.items() if k != "op"}
    if t is AddKeySpace:
        return AddKeySpace(record_from_dict(KeySpace, body))
    if t is AddFragment:
        return AddFragment(record_from_dict(Fragment, body))
    if t is AddIndex:
        return AddIndex(record_from_dict(IndexDef, body))
    if t is AddIndexFile:
        return AddIndexFile(record_from_dict(IndexFile, body))
    if t is SetSchema:
        return SetSchema(Schema.from_json(body["schema"]))
    if t is DropColumns:
        return DropColumns(tuple(body["column_ids"]))
    op: Op = t(**body)
    return op


def encode(entry: Entry) -> str:
    doc: dict[str, Any] = {"v": FORMAT_VERSION, "kind": entry.kind, "summary": entry.summary}
    doc["ops"] = [encode_op(op) for op in entry.ops]
    if entry.extra:
        doc["extra"] = dict(entry.extra)
    return seal_json(json.dumps(doc, separators=(",", ":")))  # the digest of its content first


def decode(text: str, where: str = "log entry") -> Entry:
    """An entry from its (sealed) JSON; reads every format version up to `FORMAT_VERSION`.
    A changed entry is `CorruptFileError` naming `where` (`conch.files.integrity`)."""
    return decode_doc(open_json(text, where), where)


def decode_doc(d: Any, where: str = "log entry") -> Entry:
    """An entry from its parsed JSON document."""
    try:
        version = d.get("v", 1)
        if version > FORMAT_VERSION:
            raise ConchError(f"{where} has format version {version}; this Conch reads up to {FORMAT_VERSION}: upgrade")
        ops = [decode_op(o) for o in d["ops"]]
        if version == 1:  # untyped entries: vacuum cutoff and extras at the top level
            if d.get("cutoff_us") is not None:
                ops.append(VacuumCutoff(int(d["cutoff_us"])))
            extra = {k: v for k, v in d.items() if k not in ("kind", "ops", "summary", "cutoff_us")}
        else:
            extra = d.get("extra", {})
        return Entry(d.get("kind", "write"), tuple(ops), d.get("summary", ""), extra)
    except ConchError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CorruptFileError(f"{where} is damaged ({type(e).__name__}: {e})") from e


# ----- replay ---------------------------------------------------------------------------------
def apply(state: TableState, entry: Entry, seq: int, time: int) -> TableState:
    """The state after committing `entry` as number `seq` at `time` (pure: `state` is unchanged)."""
    return _Replay(state).apply(entry, seq, time).state()


def replay(state: TableState, entries: Iterable[LogEntry]) -> TableState:
    """The state after the log entries, in order (copies the maps once, not per entry)."""
    r = _Replay(state)
    for e in entries:
        # verified: its seal, and that it follows the previous entry (seq + 1, a later time)
        doc = open_entry(e.entry, e.seq, e.time, r.seq, r.time)
        r.apply(decode_doc(doc, f"WAL entry {e.seq} (a metastore row)"), e.seq, e.time)
    return r.state()


class _Replay:
    def __init__(self, state: TableState) -> None:
        self.schema = state.schema
        self.seq, self.time = state.seq, state.time
        # from `items()`: `dict(mapping)` would call the read-only view's `__getitem__` per key
        self.key_spaces = dict(state.key_spaces.items())
        self.fragments = dict(state.fragments.items())
        self.horizon = state.horizon
        self.tags = dict(state.tags.items())
        self.indexes = dict(state.indexes.items())
        self.index_files = dict(state.index_files.items())

    def apply(self, entry: Entry, seq: int, time: int) -> _Replay:
        removed = False
        for op in entry.ops:
            if isinstance(op, AddKeySpace):
                ks = op.key_space
                self.key_spaces[ks.id] = dataclasses.replace(ks, time=ks.time or time, seq=seq)
            elif isinstance(op, AddFragment):
                fr = op.fragment
                self.fragments[fr.id] = dataclasses.replace(fr, time=fr.time or time, seq=seq)
            elif isinstance(op, RemoveKeySpace):
                self.key_spaces.pop(op.id, None)
                removed = True
            elif isinstance(op, RemoveFragment):
                self.fragments.pop(op.id, None)
            elif isinstance(op, Truncate):
                self.key_spaces.clear()
                self.fragments.clear()
                self.index_files.clear()
            elif isinstance(op, SetSchema | RenameColumn | DropColumns):
                self.schema = apply_schema_op(self.schema, op)
            elif isinstance(op, SetHorizon):
                self.horizon = max(self.horizon, op.horizon_us)
            elif isinstance(op, SetTag):
                self.tags[op.name] = op.seq
            elif isinstance(op, RemoveTag):
                self.tags.pop(op.name, None)
            elif isinstance(op, AddIndex):
                self.indexes[op.index.name] = dataclasses.replace(op.index, time=time, seq=seq)
            elif isinstance(op, DropIndex):
                self.indexes.pop(op.name, None)
                self.index_files = {i: f for i, f in self.index_files.items() if f.index != op.name}
            elif isinstance(op, AddIndexFile):
                if op.file.key_space in self.key_spaces and op.file.index in self.indexes:
                    self.index_files[op.file.id] = dataclasses.replace(op.file, time=time, seq=seq)
            elif isinstance(op, RemoveIndexFile):
                self.index_files.pop(op.id, None)
        if removed and self.index_files:
            # an index file lives as long as its run (a move re-adds the run under its id and
            # keeps it); a compaction's output gets its own from `conch.search.build.build_indexes`
            self.index_files = {i: f for i, f in self.index_files.items() if f.key_space in self.key_spaces}
        self.seq, self.time = seq, time
        return self

    def state(self) -> TableState:
        return TableState(
            self.schema,
            self.seq,
            self.time,
            FrozenMap(self.key_spaces),
            FrozenMap(self.fragments),
            self.horizon,
            FrozenMap(self.tags),
            FrozenMap(self.indexes),
            FrozenMap(self.index_files),
        )


def apply_schema_op(schema: Schema, op: SetSchema | RenameColumn | DropColumns) -> Schema:
    if isinstance(op, SetSchema):
        return op.schema
    if isinstance(op, RenameColumn):
        col = next(c for c in schema.columns if c.id == op.column_id)
        return schema.rename_column(col.full_path, op.new_name)
    paths = [c.full_path for c in schema.columns if c.id in op.column_ids]
    return schema.drop_columns(paths)


# ----- transactions and the conflict rules ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Transaction:
    """What a producer asks to commit.

    `ops`: the operations (a schema *addition* is not among them: it is `schema` over
    `base_schema`, rebased onto whatever schema is current at commit). `files`: the files the
    ops reference that this transaction wrote (checked against vacuums). `started_us`: before
    the first of them was written. `base_seq`: the log sequence it was staged on (-1: unknown,
    then only the entries after the first attempt's state are checked).
    """

    kind: str
    ops: tuple[Op, ...] = ()
    summary: str = ""
    base_seq: int = -1
    base_schema: Schema | None = None
    schema: Schema | None = None
    files: tuple[str, ...] = ()
    started_us: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)
    serial: bool = False  # derived from the table's contents at base_seq (a delete by filter)

    @property
    def changes_schema(self) -> bool:
        return self.schema is not None and self.base_schema is not None and self.schema is not self.base_schema


def conflicts(txn: Transaction, newer: Sequence[Entry], current: TableState) -> str | None:
    """Why `txn` cannot commit on top of `current`, whose log holds `newer` since `txn` was
    staged (None: it can, after `rebase`). DESIGN §4's rules:

    - blind upserts and deletes never conflict: commit time orders them; a `serial`
      transaction (a delete by filter) conflicts with any newer commit that may change data;
    - a vacuum whose cutoff is later than the transaction's start may have deleted its files;
    - removed inputs (compaction) must still be live: a transaction removing key spaces or
      fragments conflicts only if one of them was removed meanwhile (compaction then re-plans);
    - schema additions that commute (the same column with the same type, disjoint new columns
      or levels) rebase; a real clash (the same path with another type or id, a column against
      a group or level, a renamed or dropped column) conflicts.
    """
    changed = [e for e in newer if e.kind not in ("flush", "vacuum", "expire", "tag", "index")]
    if txn.serial and changed:
        return f"it was derived from the table as of version {txn.base_seq}, and a {changed[0].kind} committed since"
    if txn.files:
        for e in newer:
            for op in e.ops:
                if isinstance(op, VacuumCutoff) and op.cutoff_us > txn.started_us - CLOCK_SLACK_US:
                    return (
                        "a vacuum ran with a grace period shorter than this transaction took and may have removed "
                        "its files"
                    )
    gone = [
        op.id
        for op in txn.ops
        if (isinstance(op, RemoveKeySpace) and op.id not in current.key_spaces)
        or (isinstance(op, RemoveFragment) and op.id not in current.fragments)
    ]
    if gone:
        return f"its inputs {gone[:3]} were removed by a concurrent commit"
    placed = _placed_over(txn, newer, current)
    if placed:
        return f"a concurrent compaction placed L1 runs {placed[:3]} over the keys of its outputs"
    mark = txn.extra.get("stream")  # a streaming sink's micro-batch commits once (`conch.engines.spark.streaming`)
    if mark is not None and any(e.extra.get("stream") == mark for e in newer):
        return f"micro-batch {mark} was committed concurrently"
    own_indexes = {op.index.name for op in txn.ops if isinstance(op, AddIndex)}  # a branch's seed adds both
    own_runs = {op.key_space.id for op in txn.ops if isinstance(op, AddKeySpace)}
    for op in txn.ops:
        if isinstance(op, SetTag) and op.name in current.tags:
            return f"tag {op.name!r} was created concurrently (version {current.tags[op.name]})"
        if isinstance(op, RemoveTag) and op.name not in current.tags:
            return f"tag {op.name!r} was removed concurrently"
        if isinstance(op, AddIndex) and op.index.name in current.indexes:
            return f"index {op.index.name!r} was created concurrently"
        if isinstance(op, DropIndex) and op.name not in current.indexes:
            return f"index {op.name!r} was dropped concurrently"
        if isinstance(op, AddIndexFile) and op.file.index not in current.indexes and op.file.index not in own_indexes:
            return f"index {op.file.index!r} was dropped concurrently"
        if (
            isinstance(op, AddIndexFile)
            and op.file.key_space not in current.key_spaces
            and op.file.key_space not in own_runs
        ):
            return f"run {op.file.key_space} of its index file was compacted away concurrently"
    try:
        _rebased_schema(txn, current.schema)
    except _Clash as e:
        return str(e)
    return None


def _placed_over(txn: Transaction, newer: Sequence[Entry], current: TableState) -> list[str]:
    """L1 runs that newer compactions added, still live, overlapping `txn`'s L1 outputs (L1 runs
    of one level are disjoint: a compaction planned before a concurrent one moved or wrote L1
    runs over its range plans again). Its own inputs are not counted: it removes them."""
    outs = [extent(op.key_space) for op in txn.ops if isinstance(op, AddKeySpace) and op.key_space.lsm >= 1]
    if not outs:
        return []
    mine = {op.key_space.id for op in txn.ops if isinstance(op, AddKeySpace)}
    mine |= {op.id for op in txn.ops if isinstance(op, RemoveKeySpace)}
    return [
        op.key_space.id
        for e in newer
        if e.kind == "compact"
        for op in e.ops
        if isinstance(op, AddKeySpace)
        and op.key_space.lsm >= 1
        and op.key_space.id not in mine
        and op.key_space.id in current.key_spaces
        and any(overlaps(extent(op.key_space), o) for o in outs)
    ]


def rebase(txn: Transaction, current: TableState, newer: Sequence[Entry], table: str) -> Entry:
    """The entry that commits `txn` on top of `current`; raises `CommitConflictError` naming the
    rule it breaks (see `conflicts`)."""
    why = conflicts(txn, newer, current)
    if why is not None:
        raise CommitConflictError(f"table {table!r}: {why}; nothing was committed, try again")
    ops = txn.ops
    extra = dict(txn.extra)
    if txn.changes_schema:
        assert txn.base_schema is not None and txn.schema is not None
        schema = merge_additions(current.schema, txn.base_schema, txn.schema)  # checked by `conflicts`
        if schema != current.schema:
            ops = (SetSchema(schema), *ops)
        base_ids = {c.id for c in txn.base_schema.columns}
        extra["added_columns"] = [c.full_path for c in txn.schema.columns if c.id not in base_ids]
    return Entry(txn.kind, ops, txn.summary, extra)


class _Clash(Exception):
    pass


def _rebased_schema(txn: Transaction, current: Schema) -> Schema:
    """`current` plus what `txn` adds and renames/drops; raises `_Clash`."""
    schema = current
    if txn.changes_schema:
        assert txn.base_schema is not None and txn.schema is not None
        schema = merge_additions(current, txn.base_schema, txn.schema)
    for op in txn.ops:
        if isinstance(op, RenameColumn | DropColumns):
            missing = [i for i in _ids(op) if not any(c.id == i for c in schema.columns)]
            if missing:
                raise _Clash("a concurrent commit dropped the column it changes")
            try:
                schema = apply_schema_op(schema, op)
            except ConchError as e:
                raise _Clash(f"a concurrent schema change clashes with it ({e})") from e
    return schema


def _ids(op: RenameColumn | DropColumns) -> tuple[int, ...]:
    return (op.column_id,) if isinstance(op, RenameColumn) else op.column_ids


def merge_additions(current: Schema, base: Schema, mine: Schema) -> Schema:
    """`current` plus the columns and levels `mine` added over `base`; raises `_Clash`."""
    if current is base or current == base:
        return mine
    levels = dict(current.levels)
    columns = list(current.columns)
    by_path = {c.full_path: c for c in columns}
    groups = {c.full_path.rsplit(".", i)[0] for c in columns for i in range(1, c.full_path.count(".") + 1)}
    for path, lvl in mine.levels.items():
        if path in base.levels:
            continue
        have = levels.get(path)
        if have is None:
            if path in by_path or path in groups:
                raise _Clash(f"{path!r} became a column or group concurrently; it cannot be a child level")
            levels[path] = lvl
        elif have.own_key[0].type != lvl.own_key[0].type:
            raise _Clash(f"level {path!r} was added concurrently with key type {have.own_key[0].type}")
    taken = {c.id for c in columns} | current.dropped_ids
    base_ids = {c.id for c in base.columns}
    for c in mine.columns:
        if c.id in base_ids:
            continue
        same = by_path.get(c.full_path)
        if same is not None:
            if same.id != c.id or same.type != c.type:
                raise _Clash(f"column {c.full_path!r} was added concurrently as {same.type}; this write has {c.type}")
            continue
        prefixes = {c.full_path.rsplit(".", i)[0] for i in range(1, c.full_path.count(".") + 1)}
        if c.full_path in levels or c.full_path in groups or prefixes & by_path.keys():
            raise _Clash(f"column {c.full_path!r} clashes with a group, level or column added concurrently")
        if c.id in taken:
            raise _Clash(f"column {c.full_path!r}: its id was taken concurrently")
        columns.append(c)
        by_path[c.full_path] = c
        taken.add(c.id)
    return Schema(
        current.key_schema,
        levels,
        tuple(columns),
        max(current.next_column_id, mine.next_column_id),
        current.dropped_ids,
    )


def vacuum_cutoffs(entries: Iterable[Entry]) -> list[int]:
    return [op.cutoff_us for e in entries for op in e.ops if isinstance(op, VacuumCutoff)]


def referenced_paths(entry: Entry, blob_suffix: str) -> Iterable[str]:
    """Every file an entry references (fragments' blob and mask files included). Masked fragments
    share data files: a data file stays referenced while any fragment naming it is."""
    for op in entry.ops:
        if isinstance(op, AddKeySpace):
            yield op.key_space.path
        elif isinstance(op, AddFragment):
            yield op.fragment.path
            if op.fragment.blob_columns:
                yield op.fragment.path + blob_suffix
            if op.fragment.mask:
                yield op.fragment.mask
        elif isinstance(op, RegisterSnapshot | AddDisplacementMap):
            yield op.path
        elif isinstance(op, AddIndexFile):
            yield op.file.path
