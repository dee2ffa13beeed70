"""The schema tree (DESIGN §1): levels, column groups and columns with stable ids.

A table is a tree. The root is a *level* keyed by the table's key schema; a field of Arrow type
`list<struct<$: K, ...>>` declares a *child level* keyed by its parent's full key plus `$`.
Within a level every struct node is a *column group* (the level's own fields form the root group
`""`), and every other field is a *column*: a leaf, always nullable, with a numeric id that files
store instead of its name.

Naming, used everywhere (scans, manifests, the CLI):
- a level is named by the dotted path of its list fields: `""` (root), `"scenes"`,
  `"scenes.clips"`;
- a column by the dotted path from the table root: `"audio.bytes"`, `"scenes.clips.camera"`;
- the key columns of a level are the root key names followed by one column per child level,
  named by the level path (`"scenes"`, `"scenes.clips"`), as in spec/002's key tables.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from conch.errors import ColumnNotFoundError, KeyTypeError, SchemaError

CHILD_KEY = "$"
RESERVED_PREFIX = "__"


@dataclass(frozen=True, slots=True)
class Column:
    """A leaf of the schema tree."""

    id: int
    level: str
    path: str  # dotted path within the level: "bytes" or "audio.bytes"
    type: pa.DataType

    @property
    def group(self) -> str:
        """The column group: the dotted struct path within the level ("" for the level root)."""
        return self.path.rpartition(".")[0]

    @property
    def name(self) -> str:
        return self.path.rpartition(".")[2]

    @property
    def full_path(self) -> str:
        return join_path(self.level, self.path)


@dataclass(frozen=True, slots=True)
class Level:
    """A keyed set of records: the root, or a `list<struct<$: K>>` child."""

    path: str
    parent: str | None
    own_key: tuple[pa.Field, ...]

    @property
    def name(self) -> str:
        return self.path.rpartition(".")[2]


def join_path(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def is_child_level_type(t: pa.DataType) -> bool:
    """`list<struct<$: K, ...>>` declares a child level (DESIGN §1)."""
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    value = t.value_type
    return pa.types.is_struct(value) and value.get_field_index(CHILD_KEY) >= 0


def normalize_type(t: pa.DataType) -> pa.DataType:
    """One canonical Arrow type per logical type: views and large variants become plain ones."""
    if pa.types.is_string_view(t) or pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_large_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return pa.list_(normalize_type(t.value_type))
    if pa.types.is_list(t):
        return pa.list_(normalize_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(normalize_type(f.type)) for f in t])
    if pa.types.is_dictionary(t):
        return normalize_type(t.value_type)
    return t


def check_key_type(name: str, t: pa.DataType) -> pa.DataType:
    """Key columns: (u)int8..64, float16/32/64, timestamp, binary, utf8 (DESIGN §1)."""
    t = normalize_type(t)
    ok = (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_binary(t)
        or pa.types.is_string(t)
    )
    if not ok:
        raise KeyTypeError(
            f"key column {name!r} has type {t}; keys must be integers, floats, timestamps, binary or utf8"
        )
    return t


def parse_key_schema(key_schema: Any) -> pa.Schema:
    """Accept a `pyarrow.Schema`, a list of `(name, type)` pairs (or `pa.Field`s), or a dict
    `{name: type}`; anything else (a bare name, `["id"]`) is a `SchemaError` naming the entry."""
    if isinstance(key_schema, pa.Schema):
        fields = list(key_schema)
    elif isinstance(key_schema, Mapping):
        fields = [pa.field(n, as_arrow_type(n, t)) for n, t in key_schema.items()]
    elif isinstance(key_schema, Iterable) and not isinstance(key_schema, str | bytes):
        fields = []
        for item in key_schema:
            if isinstance(item, pa.Field):
                fields.append(item)
            elif isinstance(item, tuple | list) and len(item) == 2 and isinstance(item[0], str):
                name, t = item
                fields.append(pa.field(name, as_arrow_type(name, t)))
            else:  # a bare name ("id") would unpack into ("i", "d"): a float64 key named "i"
                raise SchemaError(
                    f"key_schema entry {item!r} is not a (name, type) pair: give each key column a type, "
                    'e.g. [("id", pa.uint64())], or pass a pyarrow.Schema'
                )
    else:
        raise KeyTypeError(f"key_schema must be a pyarrow.Schema, list or dict, got {key_schema!r}")
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise SchemaError(f"key_schema has duplicate column names: {names}")
    for n in names:
        if not n or n.startswith(RESERVED_PREFIX) or "." in n or n == CHILD_KEY:
            raise SchemaError(f"invalid key column name {n!r}: no dots, '$' or leading '__'")
    return pa.schema([pa.field(f.name, check_key_type(f.name, f.type), nullable=False) for f in fields])


def as_arrow_type(name: str, t: Any) -> pa.DataType:
    """An Arrow type from an Arrow type, a numpy dtype (`np.uint64`, `"uint64"`) or an alias."""
    if isinstance(t, pa.DataType):
        return t
    try:
        return pa.from_numpy_dtype(np.dtype(t))
    except (TypeError, pa.ArrowNotImplementedError):
        pass
    if isinstance(t, str):
        try:
            return pa.type_for_alias(t)
        except ValueError:
            pass
    raise KeyTypeError(f"column {name!r}: {t!r} is not a type; use a pyarrow type such as pa.uint64() or a numpy dtype")


@dataclass(frozen=True)
class Schema:
    """The immutable schema tree of a table. Changes return a new `Schema`."""

    key_schema: pa.Schema
    levels: Mapping[str, Level]
    columns: tuple[Column, ...]
    next_column_id: int = 1  # legacy: ids of tables created before hashed ids (see `column_id_for`)
    dropped_ids: frozenset[int] = frozenset()  # ids of dropped columns: never reused
    _by_path: dict[str, Column] = field(default_factory=dict, compare=False, repr=False)
    # level → its key fields, worked out on first use (a take asked for them nine times)
    _key_fields: dict[str, tuple[pa.Field, ...]] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_path.update({c.full_path: c for c in self.columns})

    # ----- construction -----------------------------------------------------------------
    @classmethod
    def empty(cls, key_schema: pa.Schema) -> Schema:
        root = Level("", None, tuple(key_schema))
        return cls(key_schema, {"": root}, ())

    def extend(self, fields: Iterable[pa.Field], level: str = "") -> tuple[Schema, list[Column]]:
        """Add the columns and levels of `fields` (a schema subtree at `level`).

        Existing columns must keep their type; new ones get new ids. Returns the new schema and
        the columns it added. Raises `SchemaError` on a type change or a name clash.
        """
        levels = dict(self.levels)
        columns = list(self.columns)
        by_path = dict(self._by_path)
        next_id = self.next_column_id
        taken = {c.id for c in columns} | self.dropped_ids
        added: list[Column] = []
        kinds = self.path_kinds()
        for kind, lvl, path, t in _walk(fields, level, ""):
            if kind == "level":
                existing = levels.get(path)
                key_t = check_key_type(f"{path}.$", t)
                if existing is None:
                    _claim(kinds, path, "level")
                    levels[path] = Level(path, lvl, (pa.field(CHILD_KEY, key_t, nullable=False),))
                elif existing.own_key[0].type != key_t and not _castable(key_t, existing.own_key[0].type):
                    raise SchemaError(f"level {path!r} is keyed by {existing.own_key[0].type}, got {key_t}")
                continue
            full = join_path(lvl, path)
            t = normalize_type(t)
            groups = path.split(".")[:-1]
            for i in range(len(groups)):
                _claim(kinds, join_path(lvl, *groups[: i + 1]), "group")
            _claim(kinds, full, "column")
            col = by_path.get(full)
            if col is not None:
                if col.type != t and not _castable(t, col.type):
                    raise SchemaError(
                        f"column {full!r} has type {col.type}; cannot write {t} to it "
                        f"(cast the values to {col.type}, or write a new column)"
                    )
                continue
            check_value_type(full, t)
            col = Column(column_id_for(full, taken), lvl, path, t)
            taken.add(col.id)
            columns.append(col)
            by_path[full] = col
            added.append(col)
        if not added and len(levels) == len(self.levels):
            return self, []
        return Schema(self.key_schema, levels, tuple(columns), next_id, self.dropped_ids), added

    def rename_column(self, full_path: str, new_name: str) -> Schema:
        """The schema with a column renamed in place (same level and group, same id: files store
        ids, so this is metadata-only). `new_name` is a leaf name or a full path with the same
        parent. Raises `ColumnNotFoundError` or `SchemaError` (name taken, or a move)."""
        col = self.column(full_path)
        parent = full_path.rpartition(".")[0]
        new_full = new_name if "." in new_name else join_path(parent, new_name)
        if new_full.rpartition(".")[0] != parent:
            raise SchemaError(
                f"rename {full_path!r} to {new_name!r}: a rename keeps the column in its group; moving it to "
                "another group or level is not a rename"
            )
        leaf = new_full.rpartition(".")[2]
        if not leaf or leaf.startswith(RESERVED_PREFIX) or leaf == CHILD_KEY:
            raise SchemaError(f"invalid column name {leaf!r}: not empty, no leading '__', not '$'")
        groups = {c.full_path.rsplit(".", i)[0] for c in self.columns for i in range(1, c.full_path.count(".") + 1)}
        taken = self._by_path.keys() | self.levels.keys() | groups
        if new_full in taken or new_full in self.key_names(col.level):
            raise SchemaError(f"cannot rename {full_path!r} to {new_full!r}: that name is taken")
        renamed = Column(col.id, col.level, join_path(col.group, leaf), col.type)
        cols = tuple(renamed if c.id == col.id else c for c in self.columns)
        return Schema(self.key_schema, self.levels, cols, self.next_column_id, self.dropped_ids)

    def drop_columns(self, full_paths: Iterable[str]) -> Schema:
        """The schema without these columns (metadata-only: their cells stay in files but are
        never read again, and their ids are never reused). Raises `ColumnNotFoundError`."""
        ids = {self.column(p).id for p in full_paths}
        cols = tuple(c for c in self.columns if c.id not in ids)
        return Schema(self.key_schema, self.levels, cols, self.next_column_id, self.dropped_ids | ids)

    def path_kinds(self) -> dict[str, str]:
        """Every full path of the tree → "level", "group" or "column".

        A path is exactly one of these, forever: a table whose writes made one path both (before
        Conch refused that) is reported by `nest` with a typed error, never a wrong tree.
        """
        kinds = {lvl.path: "level" for lvl in self.levels.values() if lvl.path}
        for c in self.columns:
            parts = c.path.split(".")
            for i in range(1, len(parts)):
                kinds.setdefault(join_path(c.level, *parts[:i]), "group")
            kinds[c.full_path] = "column"
        return kinds

    # ----- lookups ----------------------------------------------------------------------
    def level(self, path: str) -> Level:
        try:
            return self.levels[path]
        except KeyError:
            known = ", ".join(repr(p) if p else "'' (the root)" for p in self.levels) or "none"
            raise SchemaError(f"no level {path!r}; levels: {known}") from None

    def key_fields(self, level: str) -> list[pa.Field]:
        """The full key of `level`, root key columns first, one column per child level."""
        known = self._key_fields.get(level)
        if known is not None:
            return list(known)
        out: list[pa.Field] = []
        for lvl in self.ancestry(level):
            if lvl.path == "":
                out.extend(lvl.own_key)
            else:
                out.append(pa.field(lvl.path, lvl.own_key[0].type, nullable=False))
        self._key_fields[level] = tuple(out)
        return out

    def key_names(self, level: str) -> list[str]:
        return [f.name for f in self.key_fields(level)]

    def ancestry(self, level: str) -> list[Level]:
        """Levels from the root down to `level` inclusive."""
        chain = []
        cur: str | None = level
        while cur is not None:
            lvl = self.level(cur)
            chain.append(lvl)
            cur = lvl.parent
        return chain[::-1]

    def children(self, level: str) -> list[Level]:
        return [lvl for lvl in self.levels.values() if lvl.parent == level]

    def is_ancestor(self, anc: str, level: str) -> bool:
        """True when `anc` is `level` or one of its ancestors."""
        return any(lvl.path == anc for lvl in self.ancestry(level))

    def column(self, full_path: str) -> Column:
        col = self._by_path.get(full_path)
        if col is None:
            raise ColumnNotFoundError(f"no column {full_path!r}; columns: {', '.join(sorted(self._by_path)) or 'none'}")
        return col

    def has_column(self, full_path: str) -> bool:
        return full_path in self._by_path

    def columns_of(self, level: str, group: str | None = None) -> list[Column]:
        return [c for c in self.columns if c.level == level and (group is None or c.group == group)]

    def groups(self, level: str) -> list[str]:
        return sorted({c.group for c in self.columns_of(level)})

    def resolve(self, selector: str) -> tuple[str, list[Column]]:
        """A column path or a group/level path → (level, its columns).

        `"audio.bytes"` → one column; `"audio"` → the columns of group `audio` and below;
        `"scenes.clips"` → the clips level's columns.
        """
        if selector in self._by_path:
            col = self._by_path[selector]
            return col.level, [col]
        if selector in self.levels:
            return selector, self.columns_of(selector)
        matches = [c for c in self.columns if c.full_path.startswith(selector + ".")]
        if matches:
            levels = {c.level for c in matches}
            top = min(levels, key=len)
            shallowest = [c for c in matches if c.level == top]
            return shallowest[0].level, shallowest
        raise ColumnNotFoundError(
            f"no column or group {selector!r}; columns: {', '.join(sorted(self._by_path)) or 'none'}"
        )

    # ----- Arrow views ------------------------------------------------------------------
    def value_type(self, level: str, group: str = "") -> pa.StructType:
        """The nested struct of a level's values below `group` (no child levels)."""
        prefix = group + "." if group else ""
        return struct_of(nest((c for c in self.columns_of(level) if c.path.startswith(prefix)), prefix))

    def arrow_schema(self) -> pa.Schema:
        """The whole tree as an Arrow schema: structs for groups, `list<struct<$>>` for levels."""
        return pa.schema(list(_level_fields(self, "")))

    # ----- serialization ----------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        fields = [pa.field(f"c{c.id}", c.type) for c in self.columns]
        level_fields = [pa.field(lvl.path or "__root", lvl.own_key[0].type) for lvl in self.levels.values() if lvl.path]
        return {
            "key_schema": _b64_schema(self.key_schema),
            "levels": [[lvl.path, lvl.parent] for lvl in self.levels.values() if lvl.path],
            "level_types": _b64_schema(pa.schema(level_fields)),
            "columns": [[c.id, c.level, c.path] for c in self.columns],
            "column_types": _b64_schema(pa.schema(fields)),
            "next_column_id": self.next_column_id,
            **({"dropped_ids": sorted(self.dropped_ids)} if self.dropped_ids else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Schema:
        key_schema = _unb64_schema(d["key_schema"])
        level_types = _unb64_schema(d["level_types"])
        col_types = _unb64_schema(d["column_types"])
        levels: dict[str, Level] = {"": Level("", None, tuple(key_schema))}
        for (path, parent), f in zip(d["levels"], level_types, strict=True):
            levels[path] = Level(path, parent, (pa.field(CHILD_KEY, f.type, nullable=False),))
        columns = tuple(
            Column(cid, lvl, path, f.type) for (cid, lvl, path), f in zip(d["columns"], col_types, strict=True)
        )
        return cls(key_schema, levels, columns, d["next_column_id"], frozenset(d.get("dropped_ids", ())))

    # ----- display ----------------------------------------------------------------------
    def render(self, table_name: str = "table") -> str:
        """The tree in the style of spec/002."""
        root = self.levels[""]
        head = table_name
        if root.own_key:
            head += " {" + ", ".join(f"{f.name}: {type_name(f.type)}" for f in root.own_key) + "}"
        lines = [head]
        lines.extend(_render_level(self, "", ""))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


def column_id_for(full_path: str, taken: set[int] | frozenset[int]) -> int:
    """A new column's id: a hash of its path, probing past ids in use or dropped.

    Two writers that add the same column concurrently pick the same id, and writers adding
    different columns pick different ones, so their commits rebase onto each other (DESIGN §4)
    although their files already name the columns by id.
    """
    n = 0
    while True:
        digest = hashlib.blake2b(f"{full_path}#{n}".encode(), digest_size=4).digest()
        cid = int.from_bytes(digest, "big") & 0x7FFFFFFF
        if cid >= 1 << 16 and cid not in taken:  # small ids: tables created with sequential ids
            return cid
        n += 1


def _castable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Values of `src` may be written to a `dst` column: checked (safe) casts between numbers."""
    if pa.types.is_null(src):
        return True
    numeric = (pa.types.is_integer, pa.types.is_floating)
    return any(f(src) for f in numeric) and any(f(dst) for f in numeric)


_ARTICLE = {"level": "a child level", "group": "a column group (struct)", "column": "a column"}


def _claim(kinds: dict[str, str], path: str, kind: str) -> None:
    """Record that `path` is a `kind`; `SchemaError` if it already is something else."""
    have = kinds.setdefault(path, kind)
    if have != kind:
        raise SchemaError(
            f"{path!r} is {_ARTICLE[have]} of the table; it cannot also be {_ARTICLE[kind]}. "
            f"Write it under another name (a path is a column, a group or a level, never two of them)"
        )


def check_value_type(path: str, t: pa.DataType) -> None:
    """Refuse value types Conch cannot store (`SchemaError`, before any file is written).

    Vortex 0.90 has no encoding for durations, intervals, unions or fixed-size binary; the
    message says which type to write instead.
    """
    bad = _unstorable(t)
    if bad is not None:
        raise SchemaError(f"column {path!r} has type {t}: {bad}")


def _unstorable(t: pa.DataType) -> str | None:
    if pa.types.is_duration(t):
        return "durations are not storable; write them as int64 (in the duration's unit)"
    if pa.types.is_interval(t):
        return "intervals are not storable; write months, days and nanoseconds as a struct of int columns"
    if pa.types.is_union(t):
        return "unions are not storable; write each alternative as its own nullable column"
    if pa.types.is_fixed_size_binary(t):
        return "fixed-size binary is not storable; write it as binary"
    if isinstance(t, pa.ExtensionType):
        return _unstorable(t.storage_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _unstorable(t.value_type)
    if pa.types.is_map(t):
        return _unstorable(t.key_type) or _unstorable(t.item_type)
    if pa.types.is_struct(t):
        return next((r for r in (_unstorable(f.type) for f in t) if r is not None), None)
    return None


def _walk(fields: Iterable[pa.Field], level: str, group: str) -> Iterator[tuple[str, str, str, pa.DataType]]:
    """Yield ("level", parent, level_path, key_type) and ("column", level, path, type)."""
    seen: set[str] = set()
    for f in fields:
        if not f.name or "." in f.name or f.name.startswith(RESERVED_PREFIX):
            raise SchemaError(f"invalid field name {f.name!r}: no dots, no leading '__', not empty")
        if f.name in seen:
            raise SchemaError(f"duplicate field {join_path(level, group, f.name)!r}")
        seen.add(f.name)
        t = f.type
        if is_child_level_type(t):
            if group:
                raise SchemaError(f"child level {f.name!r} must be declared on a level, not inside struct {group!r}")
            child = join_path(level, f.name)
            struct = t.value_type
            yield "level", level, child, struct.field(CHILD_KEY).type
            yield from _walk((s for s in struct if s.name != CHILD_KEY), child, "")
        elif pa.types.is_struct(t) and not isinstance(t, pa.ExtensionType):
            yield from _walk(list(t), level, join_path(group, f.name))
        else:
            yield "column", level, join_path(group, f.name), t


def nest(columns: Iterable[Column], prefix: str = "", clashes: bool = False) -> dict[str, Any]:
    """Columns as a tree of their dotted paths below `prefix` (groups → dicts, leaves → columns).

    A path that is both a column and a group (only in tables written before Conch refused that)
    raises `SchemaError` naming it; with `clashes=True` (for display) such a column is shown
    beside its group as `"<name> [column]"`.
    """
    cols = list(columns)
    groups = {c.path.rsplit(".", i)[0] for c in cols for i in range(1, c.path.count(".") + 1)}
    tree: dict[str, Any] = {}
    for c in cols:
        parts = c.path[len(prefix) :].split(".")
        if c.path in groups:
            if not clashes:
                raise SchemaError(
                    f"{c.full_path!r} is both a column and a column group (written by a Conch that did not "
                    f"refuse that); read them one at a time: scan({c.full_path!r}) and scan('{c.full_path}.<name>')"
                )
            parts[-1] += " [column]"
        node = tree
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = c
    return tree


def struct_of(tree: Mapping[str, Any]) -> pa.StructType:
    """The Arrow struct of a `nest` tree: groups become structs."""
    return pa.struct([pa.field(k, struct_of(v) if isinstance(v, dict) else v.type) for k, v in tree.items()])


def _level_fields(schema: Schema, level: str) -> Iterator[pa.Field]:
    yield from schema.value_type(level)
    for child in schema.children(level):
        struct = pa.struct(
            [pa.field(CHILD_KEY, child.own_key[0].type, nullable=False), *_level_fields(schema, child.path)]
        )
        yield pa.field(child.name, pa.list_(struct))


def _b64_schema(s: pa.Schema) -> str:
    return base64.b64encode(s.serialize().to_pybytes()).decode()


def _unb64_schema(s: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(s)))


_SHORT = {
    pa.int8(): "i8", pa.int16(): "i16", pa.int32(): "i32", pa.int64(): "i64",
    pa.uint8(): "u8", pa.uint16(): "u16", pa.uint32(): "u32", pa.uint64(): "u64",
    pa.float16(): "f16", pa.float32(): "f32", pa.float64(): "f64",
    pa.string(): "utf8", pa.binary(): "binary", pa.bool_(): "bool",
}  # fmt: skip


def type_name(t: pa.DataType) -> str:
    """Short type names as in the spec: `u64`, `utf8`, `tensor<u8>[H, W, 3]`, `list<utf8>`."""
    if t in _SHORT:
        return _SHORT[t]
    if isinstance(t, pa.FixedShapeTensorType):
        dims = ", ".join(str(d) for d in t.shape)
        return f"tensor<{type_name(t.value_type)}>[{dims}]"
    if pa.types.is_fixed_size_list(t):
        return f"{type_name(t.value_type)}[{t.list_size}]"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{type_name(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct"
    if pa.types.is_timestamp(t):
        return f"timestamp[{t.unit}{', ' + t.tz if t.tz else ''}]"
    return str(t)


def _render_level(schema: Schema, level: str, indent: str) -> Iterator[str]:
    entries: list[tuple[str, Any]] = []
    tree = nest(schema.columns_of(level), clashes=True)
    for name, node in tree.items():
        entries.append(("node", (name, node)))
    for child in schema.children(level):
        entries.append(("level", child))
    # spec/002 lists a level's scalars, then its child levels, then its structs.
    scalars = [e for e in entries if e[0] == "node" and isinstance(e[1][1], Column)]
    structs = [e for e in entries if e[0] == "node" and not isinstance(e[1][1], Column)]
    levels = [e for e in entries if e[0] == "level"]
    ordered = scalars + levels + structs
    for i, (kind, item) in enumerate(ordered):
        last = i == len(ordered) - 1
        branch, cont = ("└── ", "    ") if last else ("├── ", "│   ")
        if kind == "level":
            yield f"{indent}{branch}{item.name} {{$: {type_name(item.own_key[0].type)}}}"
            yield from _render_level(schema, item.path, indent + cont)
        else:
            yield from _render_node(item[0], item[1], indent, branch, cont)


def _render_node(name: str, node: Any, indent: str, branch: str, cont: str) -> Iterator[str]:
    if isinstance(node, Column):
        yield f"{indent}{branch}{name}: {type_name(node.type)}"
        return
    yield f"{indent}{branch}{name}: struct"
    items = list(node.items())
    for i, (k, v) in enumerate(items):
        last = i == len(items) - 1
        yield from _render_node(k, v, indent + cont, "└── " if last else "├── ", "    " if last else "│   ")


def schema_from_arrow(key_schema: pa.Schema, value_schema: pa.Schema | Sequence[pa.Field] | None) -> Schema:
    """A new table's schema from its key schema and an optional Arrow value schema."""
    schema = Schema.empty(key_schema)
    if value_schema is None:
        return schema
    fields = [f for f in value_schema if f.name not in key_schema.names]
    schema, _ = schema.extend(fields)
    return schema


def dumps(d: Any) -> str:
    return json.dumps(d, separators=(",", ":"))


def type_family(t: pa.DataType) -> str:
    """The family of an Arrow type (number, string, binary, timestamp, ..., or the type itself):
    what filters may compare with each other and what a DataFrame column may be written into."""
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return "list"
    if pa.types.is_map(t):
        return "map"
    if pa.types.is_struct(t):
        return "struct"
    if pa.types.is_null(t):
        return "null"
    return str(t)
