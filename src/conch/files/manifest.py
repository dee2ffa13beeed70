"""Table state: the schema and the live key spaces and fragments at one log sequence number.

`KeySpace` and `Fragment` are the manifest records, declared once here: the WAL operations
carry them (`conch.log.wal`), snapshots store them, and their Arrow manifest schemas are derived
from these dataclasses (`key_space_manifest`, `fragment_manifest`), so pruning is vectorised.

A `TableState` is immutable: its maps are read-only views, and replaying log entries
(`conch.log.wal.replay`) returns a new state. It can be handed out freely.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa

from conch.errors import CorruptFileError
from conch.files.format import decode_stats
from conch.model.schema import Schema


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
    checksum: str = ""  # "" = not recorded (tables written before integrity checks)
    # A compacted run holds cells of a window of commit times `[min_time, time]` (0: just `time`;
    # DESIGN §6): it takes its newest input's `time`, and `min_time` is its oldest.
    min_time: int = 0


def subtree_end(key: bytes) -> bytes | None:
    """The least byte string above every key that starts with `key` (None: no such bound). A
    child key's encoding starts with its parent's (`conch.model.keys`), so `[key, subtree_end(key))`
    holds a key and its whole subtree, and no other key of its level (prefix-free encoding)."""
    k = key.rstrip(b"\xff")
    return k[:-1] + bytes([k[-1] + 1]) if k else None


def extent(ks: KeySpace) -> tuple[bytes, bytes | None]:
    """`[lo, hi)` holding a run's keys and the subtrees of its largest key (hi None: unbounded):
    two runs whose extents are disjoint share no key, nor a key and a descendant of it."""
    return bytes.fromhex(ks.min_key), subtree_end(bytes.fromhex(ks.max_key))


def overlaps(a: tuple[bytes, bytes | None], b: tuple[bytes, bytes | None]) -> bool:
    """Whether two extents (`extent`) intersect."""
    return (b[1] is None or a[0] < b[1]) and (a[1] is None or b[0] < a[1])


@dataclass(frozen=True, slots=True)
class Fragment:
    """Rows of one key space for one column group: `[start, start + rows)`, file row i = fragment
    row i (dense); or, with a `mask` file (`conch.files.masks`), the `rows` key-space rows from `start`
    that the mask lists (sparse), at the file rows it lists (masked: several fragments may share
    one data file, each with its own `column_ids` and mask)."""

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
    format: str = "vortex"
    # `lsm` and `compacted_at` (here and on KeySpace) are set by compaction (`conch.maintain.compaction`):
    # a write is L0, a major compaction's output L1. The CLI shows them, as spec/001's listings do.
    time: int = 0
    seq: int = 0
    lsm: int = 0
    compacted_at: int | None = None
    blob_columns: tuple[int, ...] = ()  # column ids stored out of line in `<path>.blobs`
    checksum: str = ""  # "" = not recorded (tables written before integrity checks)
    mask: str = ""  # path of the mask file; "" = dense
    mask_checksum: str = ""  # digest of the mask file's bytes (`conch.files.integrity.digest`)


@dataclass(frozen=True, slots=True)
class IndexDef:
    """A search index declared on a column (`Table.create_index`, `conch.search`): table metadata
    committed through the WAL, so time travel knows which indexes existed. `options` is JSON (the
    index structure and its parameters, `conch.search.definitions`)."""

    name: str
    level: str
    column: str  # the column's path when the index was created (display; `column_id` is the truth)
    column_id: int
    kind: str  # "vector" or "text"
    metric: str = ""  # vector: "cosine", "l2" or "dot"
    dim: int = 0
    options: str = "{}"
    time: int = 0
    seq: int = 0


@dataclass(frozen=True, slots=True)
class IndexFile:
    """An immutable index over the cells of one run (key space) for one index: built from the
    run's `fragments` (a search treats it as stale when the run's fragments of the column change),
    checksummed like fragments, dropped with its run or its index and then removed by vacuum."""

    id: str
    index: str  # the `IndexDef.name`
    key_space: str
    path: str
    rows: int
    fragments: tuple[str, ...]
    bytes: int = 0
    checksum: str = ""
    time: int = 0
    seq: int = 0


R = TypeVar("R", KeySpace, Fragment, IndexDef, IndexFile)
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in (KeySpace, Fragment, IndexDef, IndexFile)}


def record_from_dict(cls: type[R], d: Mapping[str, Any]) -> R:
    """A manifest record from a WAL operation or a snapshot. JSON turns tuples into lists, and
    fields that older versions wrote and this one dropped (`meta_bytes`) are ignored."""
    names = {f.name for f in dataclasses.fields(cls)}
    kw = {k: v for k, v in d.items() if k in names}
    for k in ("column_ids", "blob_columns", "fragments"):
        if k in kw:
            kw[k] = tuple(kw[k])
    return cls(**kw)


def record_to_dict(record: KeySpace | Fragment | IndexDef | IndexFile) -> dict[str, Any]:
    """A record's fields by name. Records are flat (numbers, strings, tuples of ints), so this is
    a shallow read: `dataclasses.asdict` deep-copies every value, which cost a commit ~0.3 ms."""
    return {name: getattr(record, name) for name in _FIELDS[type(record)]}


class FrozenMap(Mapping[str, Any]):
    """A read-only dict view that can be pickled (a state travels to Spark tasks)."""

    __slots__ = ("_d",)

    def __init__(self, d: Mapping[str, Any] | None = None) -> None:
        self._d: dict[str, Any] = dict(d) if d is not None else {}

    def __getitem__(self, k: str) -> Any:
        return self._d[k]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, k: object) -> bool:
        return k in self._d

    def get(self, k: str, default: Any = None) -> Any:
        return self._d.get(k, default)

    def values(self) -> Any:
        return self._d.values()

    def items(self) -> Any:
        return self._d.items()

    def keys(self) -> Any:
        return self._d.keys()

    def __repr__(self) -> str:
        return f"FrozenMap({self._d!r})"

    def __getstate__(self) -> dict[str, Any]:
        return self._d

    def __setstate__(self, d: dict[str, Any]) -> None:
        self._d = d


@dataclass(frozen=True, slots=True)
class TableState:
    """Schema + live files of a table at one log sequence number (immutable)."""

    schema: Schema
    seq: int = 0
    time: int = 0
    key_spaces: Mapping[str, KeySpace] = field(default_factory=FrozenMap)
    fragments: Mapping[str, Fragment] = field(default_factory=FrozenMap)
    # The time-travel horizon (µs, a commit time; 0 = none): states as of earlier times are
    # expired (`Table.expire`, `conch.maintain.expire`).
    horizon: int = 0
    # Tags (`Table.tag`): name → version; tagged versions outlive `expire` and `vacuum`.
    tags: Mapping[str, int] = field(default_factory=FrozenMap)
    # Search indexes (`conch.search`): name → definition, and index file id → the file of one run.
    indexes: Mapping[str, IndexDef] = field(default_factory=FrozenMap)
    index_files: Mapping[str, IndexFile] = field(default_factory=FrozenMap)

    # ----- snapshots --------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(
            {
                "seq": self.seq,
                "time": self.time,
                "schema": self.schema.to_json(),
                "key_spaces": [record_to_dict(k) for k in self.key_spaces.values()],
                "fragments": [record_to_dict(f) for f in self.fragments.values()],
                "horizon": self.horizon,
                "tags": dict(self.tags.items()),
                "indexes": [record_to_dict(i) for i in self.indexes.values()],
                "index_files": [record_to_dict(i) for i in self.index_files.values()],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | bytes, path: str = "<snapshot>") -> TableState:
        """A snapshot file's state; damage is `CorruptFileError` naming `path`."""
        try:
            d = json.loads(text)
            return cls(
                schema=Schema.from_json(d["schema"]),
                seq=int(d["seq"]),
                time=int(d["time"]),
                key_spaces=FrozenMap({k["id"]: record_from_dict(KeySpace, k) for k in d["key_spaces"]}),
                fragments=FrozenMap({f["id"]: record_from_dict(Fragment, f) for f in d["fragments"]}),
                horizon=int(d.get("horizon", 0)),
                tags=FrozenMap({str(k): int(v) for k, v in d.get("tags", {}).items()}),
                indexes=FrozenMap({i["name"]: record_from_dict(IndexDef, i) for i in d.get("indexes", [])}),
                index_files=FrozenMap({i["id"]: record_from_dict(IndexFile, i) for i in d.get("index_files", [])}),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptFileError(f"snapshot {path} is damaged ({type(e).__name__}: {e})") from e

    # ----- Arrow manifests --------------------------------------------------------------
    def key_space_manifest(self) -> pa.Table:
        rows = [record_to_dict(k) for k in self.key_spaces.values()]
        return pa.Table.from_pylist(rows, schema=KEY_SPACE_MANIFEST)

    def fragment_manifest(self, level: str | None = None, group: str | None = None) -> pa.Table:
        """Fragments (optionally of one level and group) with their per-column statistics."""
        frs = [
            f
            for f in self.fragments.values()
            if (level is None or f.level == level) and (group is None or f.group == group)
        ]
        base = pa.Table.from_pylist(
            [{k: v for k, v in record_to_dict(f).items() if k != "stats"} for f in frs], schema=FRAGMENT_MANIFEST
        )
        if not frs:
            return base
        batches = [pa.Table.from_batches([decode_stats(f.stats)]) for f in frs]
        stats = pa.concat_tables(batches, promote_options="permissive")
        for name in stats.column_names:
            base = base.append_column(name, stats.column(name))
        return base


_ARROW_TYPES = {
    "str": pa.string(),
    "int": pa.int64(),
    "int | None": pa.int64(),
    "tuple[int, ...]": pa.list_(pa.int64()),
}


def _manifest_schema(cls: type, skip: tuple[str, ...] = ()) -> pa.Schema:
    """The Arrow schema of a manifest, derived from its record dataclass."""
    return pa.schema([(f.name, _ARROW_TYPES[str(f.type)]) for f in dataclasses.fields(cls) if f.name not in skip])


KEY_SPACE_MANIFEST = _manifest_schema(KeySpace)
FRAGMENT_MANIFEST = _manifest_schema(Fragment, skip=("stats",))  # stats become per-column columns
