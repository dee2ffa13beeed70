"""Writes through the nested API (spec/002 "Writing Data"). All writes are upserts.

- `t.scenes["s3"] = {...}`: one record with nested groups (dicts) and child levels (lists of
  dicts with `$`); one commit.
- `t.scenes["s1"].clips["c1"].frames = pa.table(...)` / list of dicts: a batch of child rows.
- `with t.write() as w: w.scenes["s1"].location = "x"`: scalar assignments, batched into one
  nested write and committed once when the block exits without an exception.

Child records of an integer-keyed level may omit `$`: they are then keyed by their position in
the list (0, 1, 2, ...), which matches how spec/002 writes frames without ids. Values are typed by
the table's schema; fields not in the schema extend it (their type is inferred).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from conch.errors import InvalidKeyError, SchemaError
from conch.model.schema import CHILD_KEY, Schema, join_path
from conch.nested.nodes import Domain, TableHandle
from conch.write.blobinputs import swap_sources


def _schema(table: TableHandle) -> Schema:
    return table.state().schema


def _fill_keys(schema: Schema, level: str, rec: dict[str, Any]) -> dict[str, Any]:
    """Copy of `rec` whose child records all carry `$` (position for integer-keyed levels)."""
    out = dict(rec)
    for child in schema.children(level):
        items = out.get(child.name)
        if not isinstance(items, list):
            continue
        filled = []
        for i, r in enumerate(items):
            if not isinstance(r, dict):
                raise SchemaError(f"records of level {child.path!r} must be dicts, got {r!r}")
            r = _fill_keys(schema, child.path, r)
            if CHILD_KEY not in r:
                if not pa.types.is_integer(child.own_key[0].type):
                    raise InvalidKeyError(f"records of level {child.path!r} need a '$' key ({child.own_key[0].type})")
                r = {CHILD_KEY: i, **r}
            filled.append(r)
        out[child.name] = filled
    return out


def _type_of(schema: Schema, level: str, group: str, rows: list[dict[str, Any]]) -> pa.StructType:
    """The Arrow struct type of the fields present in `rows` (records of `level`, inside `group`)."""
    names: list[str] = []
    for r in rows:
        names.extend(k for k in r if k not in names)
    fields = []
    for name in names:
        values = [r[name] for r in rows if name in r]
        path = join_path(group, name)
        full = join_path(level, path)
        if name == CHILD_KEY and not group:
            fields.append(pa.field(CHILD_KEY, schema.level(level).own_key[0].type))
        elif not group and full in schema.levels:
            items = [x for v in values if isinstance(v, list) for x in v]
            fields.append(pa.field(name, pa.list_(_type_of(schema, full, "", items))))
        elif schema.has_column(full):
            fields.append(pa.field(name, schema.column(full).type))
        elif any(c.path.startswith(path + ".") for c in schema.columns_of(level)) or (
            all(isinstance(v, dict) for v in values if v is not None) and any(isinstance(v, dict) for v in values)
        ):
            sub = [v for v in values if isinstance(v, dict)]
            fields.append(pa.field(name, _type_of(schema, level, path, sub)))
        else:
            fields.append(pa.field(name, pa.array(values).type))
    return pa.struct(fields)


def rows_table(schema: Schema, level: str, rows: list[dict[str, Any]]) -> pa.Table:
    """Records of `level` (with their full key columns) as an Arrow table typed by the schema."""
    keys = {f.name: f for f in schema.key_fields(level)}
    rows = [_fill_keys(schema, level, r) for r in rows]
    values = [{k: v for k, v in r.items() if k not in keys} for r in rows]
    vt = _type_of(schema, level, "", values)
    key_fields = [keys[n] for n in keys if any(n in r for r in rows)]
    t = pa.struct([*key_fields, *vt])
    try:
        return pa.Table.from_struct_array(pa.array(rows, type=t))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        raise _type_error(schema, level, t, rows) from e


def _type_error(schema: Schema, level: str, t: pa.StructType, rows: list[dict[str, Any]]) -> SchemaError:
    """A `SchemaError` naming the field whose values do not have the schema's type."""
    for f in t:
        values = [r.get(f.name) for r in rows]
        try:
            pa.array(values, type=f.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
            where = join_path(level, f.name) if f.name not in schema.key_names(level) else f"key {f.name}"
            bad = next((v for v in values if v is not None), None)
            return SchemaError(
                f"{where!r} has type {f.type}; cannot write {bad!r} ({type(bad).__name__}) to it ({e}); "
                "a column's type never changes: write a value of that type, or a new column"
            )
    return SchemaError(f"records of level {level or '<root>'!r} do not match the schema's types {t}")


def _write(table: TableHandle, rows: list[dict[str, Any]], arrow: Callable[[Any], pa.Table], level: str) -> Any:
    """Write `rows` made Arrow by `arrow`: values given as files (`conch.Blob`, a `Path`, a
    binary file object) are streamed, as by `Table.write` (`conch.write.blobinputs`)."""
    swapped, sources = swap_sources(rows)
    with sources.active():
        return table.write(arrow(swapped), level=level)


def _key_row(d: Domain) -> dict[str, Any]:
    names = _schema(d.table).key_names(d.level)
    if d.keys is not None or len(d.pins) != len(names):
        raise InvalidKeyError(f"{d.describe()}: index every level with one key to write a record there")
    return dict(zip(names, d.pins))


def write_record(d: Domain, value: Any) -> None:
    """`path[key] = {...}`: upsert one record (and its nested children) at `d`'s level."""
    if not isinstance(value, dict):
        raise SchemaError(f"a record is written as a dict of fields, got {type(value).__name__}")
    schema = _schema(d.table)
    row = {**_key_row(d), **{k: v for k, v in value.items() if k != CHILD_KEY}}
    _write(d.table, [row], lambda rows: rows_table(schema, d.level, rows), d.level)


def write_member(d: Domain, name: str, value: Any) -> None:
    """`path.<child> = rows` (a batch of child rows) or `path.<field> = value` (one cell)."""
    schema = _schema(d.table)
    child = join_path(d.level, name)
    if child in schema.levels:
        if isinstance(value, list):
            _write(d.table, value, lambda rows: child_rows(schema, d, child, rows), child)
        else:
            d.table.write(child_rows(schema, d, child, value), level=child)
        return
    row = {**_key_row(d), name: value}
    _write(d.table, [row], lambda rows: rows_table(schema, d.level, rows), d.level)


def child_rows(schema: Schema, d: Domain, child: str, value: Any) -> pa.Table:
    """A batch of rows of level `child` under the fully indexed record `d`."""
    keys = _key_row(d)
    ktype = schema.level(child).own_key[0].type
    if isinstance(value, pa.RecordBatch):
        value = pa.Table.from_batches([value])
    if isinstance(value, pa.Table):
        n = value.num_rows
        if CHILD_KEY in value.column_names:
            value = value.rename_columns([child if c == CHILD_KEY else c for c in value.column_names])
        elif pa.types.is_integer(ktype):
            value = value.append_column(child, pa.array(range(n), ktype))
        else:
            raise InvalidKeyError(f"rows of level {child!r} need a '$' column ({ktype})")
        for i, (k, v) in enumerate(keys.items()):
            value = value.add_column(i, k, pa.repeat(pa.scalar(v), n))
        return value
    if isinstance(value, list):
        parent = {**keys, child.rpartition(".")[2]: value}
        table = rows_table(schema, d.level, [parent])
        return _explode_child(table, child.rpartition(".")[2], list(keys), child)
    raise SchemaError(f"write a level as a pyarrow Table or a list of dicts, got {type(value).__name__}")


def _explode_child(t: pa.Table, name: str, keys: list[str], child: str) -> pa.Table:
    import pyarrow.compute as pc

    lists = t.column(name).combine_chunks()
    flat = pc.list_flatten(lists)
    parents = pc.list_parent_indices(lists)
    cols = {k: t.column(k).take(parents) for k in keys}
    for f in flat.type:
        cols[child if f.name == CHILD_KEY else f.name] = flat.field(f.name)
    return pa.table(cols)


# ----- batched scalar writes ----------------------------------------------------------------------
class BatchWriter:
    """`with t.write() as w:` — assignments are collected and committed once on exit.

    >>> with t.write() as w:                                                  # doctest: +SKIP
    ...     w.scenes["s1"].location = "downtown_v2"
    ...     w.scenes["s1"].clips["c1"].duration = 45.0
    """

    def __init__(self, table: TableHandle) -> None:
        self._table = table
        self._root: dict[str, Any] = {}
        self._roots: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.commit: Any = None

    def __enter__(self) -> BatchWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.flush()

    def __getattr__(self, name: str) -> _WritePath:
        if name.startswith("_"):
            raise AttributeError(name)
        return _WritePath(self, "", (), "").__getattr__(name)

    def _record(self, level: str, pins: tuple[Any, ...]) -> dict[str, Any]:
        """The (nested) pending record of `level` at full key `pins`, created on demand."""
        schema = _schema(self._table)
        chain = schema.ancestry(level)
        nroot = len(schema.key_schema)
        rec = self._roots.setdefault(tuple(pins[:nroot]), dict(zip(schema.key_schema.names, pins[:nroot])))
        for i, lvl in enumerate(chain[1:]):
            key = pins[nroot + i]
            items = rec.setdefault(lvl.name, [])
            found = next((r for r in items if r[CHILD_KEY] == key), None)
            if found is None:
                found = {CHILD_KEY: key}
                items.append(found)
            rec = found
        return rec

    def set(self, level: str, pins: tuple[Any, ...], path: str, value: Any) -> None:
        schema = _schema(self._table)
        if len(pins) != len(schema.key_names(level)):
            raise InvalidKeyError(f"assign to fully indexed paths: {level!r} needs {schema.key_names(level)}")
        rec = self._record(level, pins)
        *groups, leaf = path.split(".")
        for g in groups:
            rec = rec.setdefault(g, {})
        rec[leaf] = value

    def flush(self) -> Any:
        """Commit the pending assignments (one commit); called on exit of the `with` block."""
        if not self._roots:
            return None
        schema = _schema(self._table)
        rows = list(self._roots.values())
        self._roots = {}
        self.commit = _write(self._table, rows, lambda rows: rows_table(schema, "", rows), "")
        return self.commit


class _WritePath:
    __slots__ = ("_group", "_level", "_pins", "_w")
    _w: BatchWriter
    _level: str
    _pins: tuple[Any, ...]
    _group: str

    def __init__(self, w: BatchWriter, level: str, pins: tuple[Any, ...], group: str) -> None:
        object.__setattr__(self, "_w", w)
        object.__setattr__(self, "_level", level)
        object.__setattr__(self, "_pins", pins)
        object.__setattr__(self, "_group", group)

    def __getattr__(self, name: str) -> _WritePath:
        if name.startswith("_"):
            raise AttributeError(name)
        schema = _schema(self._w._table)
        child = join_path(self._level, name)
        if not self._group and child in schema.levels:
            return _WritePath(self._w, child, self._pins, "")
        return _WritePath(self._w, self._level, self._pins, join_path(self._group, name))

    def __getitem__(self, key: Any) -> _WritePath:
        return _WritePath(self._w, self._level, (*self._pins, key), self._group)

    def __setattr__(self, name: str, value: Any) -> None:
        self._w.set(self._level, self._pins, join_path(self._group, name), value)

    def __setitem__(self, key: Any, value: dict[str, Any]) -> None:
        for k, v in value.items():
            if k != CHILD_KEY:
                self._w.set(self._level, (*self._pins, key), k, v)
