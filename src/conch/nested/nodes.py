"""Immutable expression and domain nodes of the nested-level API (spec/002, DESIGN §7).

A *domain* is a set of rows at one level: the level's records, narrowed by key bindings
(`t.scenes["s1"]`) and filters (`.where()`). An *expression node* computes one value per row of
its *level*, which every node knows when it is built: a field has its domain's level, a scalar
operation the deepest level of its operands (ancestors broadcast), a reduction its target level.

Levels are dotted paths ("scenes.clips.frames"). Derived row domains that are not stored levels —
the rows of a `regroup().rekey()` or of an `.explode()` — get a *pseudo-level* below the level they
hang from ("scenes.clips.frames.~detections"), so the ancestor rules below apply to them unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from conch.errors import LevelError
from conch.files.manifest import TableState
from conch.model.schema import Schema

AGGREGATES = ("count", "sum", "mean", "min", "max", "first", "last", "list", "any", "all")


# ----- levels -----------------------------------------------------------------------------------
def parent_level(level: str) -> str:
    """The level above `level` ("" is the root)."""
    return level.rpartition(".")[0]


def level_name(level: str) -> str:
    return level.rpartition(".")[2].lstrip("~") or "<root>"


def is_ancestor(anc: str, level: str) -> bool:
    """True when `anc` is `level` itself or a level above it."""
    return anc == "" or anc == level or level.startswith(anc + ".")


def common_ancestor(a: str, b: str) -> str:
    pa_, pb = a.split("."), b.split(".")
    out = []
    for x, y in zip(pa_, pb):
        if x != y:
            break
        out.append(x)
    return ".".join(out)


def deeper(a: str, b: str, root_keyed: bool = False) -> str:
    """The level of an operation on operands at levels `a` and `b`: the deeper one, which must be
    a descendant of the other. Raises `LevelError` naming both sides otherwise."""
    if is_ancestor(a, b):
        return b
    if is_ancestor(b, a):
        return a
    lca = common_ancestor(a, b)
    na, nb = level_name(a), level_name(b)
    if lca == "" and not root_keyed:
        raise LevelError(f"'{na}' and '{nb}' share no ancestor path")
    if parent_level(a) == parent_level(b):
        raise LevelError(f"cannot combine '{na}' and '{nb}' — they are siblings")
    raise LevelError(
        f"cannot combine '{na}' and '{nb}' — they are on different branches under '{level_name(lca)}';"
        " reduce one of them to a shared ancestor first"
    )


# ----- domains ----------------------------------------------------------------------------------
class SchemaView(Protocol):
    """A table's schema as the table layer shows it (`conch.api.table.TableSchema`)."""

    @property
    def tree(self) -> Schema: ...


class TableHandle(Protocol):
    """What the nested API reads and writes through. `conch.api.table.Table` is one: the layer
    above hands itself down, so this layer names the little it needs instead of importing it."""

    name: str

    @property
    def schema(self) -> SchemaView: ...

    @property
    def key_schema(self) -> pa.Schema: ...

    def state(self) -> TableState: ...

    def snapshot(self, asof: Any = None, version: Any = None) -> Any: ...

    def write(
        self, data: Any = None, level: str | None = None, evolve: bool | None = None, progress: bool | None = None
    ) -> Any: ...


@dataclass(frozen=True, slots=True, eq=False)
class Domain:
    """Rows of `level`: its records whose keys match the binding, whose ancestors are in `parent`,
    and that pass every filter.

    The binding is a prefix of the level's full key: `pins` (scalar values, `t.scenes["s1"]`) or
    `keys` (an Arrow table of leading key columns, one row per selected prefix, sorted).
    """

    table: TableHandle
    level: str
    parent: Domain | None = None
    filters: tuple[Node, ...] = ()
    pins: tuple[Any, ...] = ()
    keys: pa.Table | None = None

    @property
    def name(self) -> str:
        return level_name(self.level)

    @property
    def bound(self) -> int:
        """How many leading key columns are bound."""
        return self.keys.num_columns if self.keys is not None else len(self.pins)

    @property
    def restricted(self) -> bool:
        """Does any domain on the path filter rows (beyond key bindings, which are seeks)?"""
        d: Domain | None = self
        while d is not None:
            if d.filters:
                return True
            d = d.parent
        return False

    def describe(self) -> str:
        s = self.level or "<root>"
        if self.pins:
            s += "[" + ", ".join(repr(p) for p in self.pins) + "]"
        if self.keys is not None:
            s += f"[{self.keys.num_rows} keys]"
        return s


@dataclass(frozen=True, slots=True, eq=False)
class RekeyDomain:
    """Rows of `source` assigned to buckets of `target` by the monotone `key` (regroup/rekey)."""

    source: Domain
    key: Node
    target: Domain

    @property
    def level(self) -> str:
        return f"{self.target.level}.~{self.source.name}"

    @property
    def name(self) -> str:
        return self.source.name


AnyDomain = Domain | RekeyDomain


# ----- expression nodes -------------------------------------------------------------------------
class Node:
    """Base of expression nodes. Subclasses are frozen dataclasses with a `level` property."""

    __slots__ = ()

    @property
    def level(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True, slots=True, eq=False)
class Field(Node):
    """A column of a domain: `path` is relative to the level ("duration", "metadata.weather"),
    or a root key column's name (`key=True`: `t.cultivar`; every level's rows carry it)."""

    domain: AnyDomain
    path: str
    type: pa.DataType
    key: bool = False

    @property
    def level(self) -> str:
        return self.domain.level


@dataclass(frozen=True, slots=True, eq=False)
class Group(Node):
    """A column group as a struct (`scenes.metadata`), or the whole level (`frame=_`, path "")."""

    domain: Domain
    path: str

    @property
    def level(self) -> str:
        return self.domain.level


@dataclass(frozen=True, slots=True, eq=False)
class Key(Node):
    """The level's own key `$` (spec: `clips.id`)."""

    domain: Domain

    @property
    def level(self) -> str:
        return self.domain.level


@dataclass(frozen=True, slots=True, eq=False)
class Rows(Node):
    """One (true) value per row of a domain: what `domain.count()` counts."""

    domain: AnyDomain

    @property
    def level(self) -> str:
        return self.domain.level


@dataclass(frozen=True, slots=True, eq=False)
class Lit(Node):
    value: Any

    @property
    def level(self) -> str:
        return ""


@dataclass(frozen=True, slots=True, eq=False)
class Binary(Node):
    """Arithmetic, comparison or boolean operation; level = the deeper operand's level."""

    op: str
    left: Node
    right: Node
    _level: str = field(default="", repr=False)

    @staticmethod
    def make(op: str, left: Node, right: Node, root_keyed: bool = False) -> Binary:
        return Binary(op, left, right, deeper(left.level, right.level, root_keyed))

    @property
    def level(self) -> str:
        return self._level


@dataclass(frozen=True, slots=True, eq=False)
class Unary(Node):
    """neg, not, floor, ceil, abs, is_null, len (of a list column)."""

    op: str
    operand: Node

    @property
    def level(self) -> str:
        return self.operand.level


@dataclass(frozen=True, slots=True, eq=False)
class Explode(Node):
    """The elements of a list column as a child pseudo-level ("scenes.~tags")."""

    operand: Node

    @property
    def level(self) -> str:
        return f"{self.operand.level}.~{_leaf_name(self.operand)}"


@dataclass(frozen=True, slots=True, eq=False)
class Agg(Node):
    """A reduction of `operand` to `target` (an ancestor level). `target=None` is unbound: inside
    `select()` it binds to the select level, elsewhere it reduces to the operand's parent."""

    func: str
    operand: Node
    target: Domain | None = None

    @property
    def level(self) -> str:
        return self.target.level if self.target is not None else parent_level(self.operand.level)


@dataclass(frozen=True, slots=True, eq=False)
class Window(Node):
    """A sliding reduction over rows `lo..hi` relative to each row, within one parent group."""

    func: str
    operand: Node
    lo: int
    hi: int

    @property
    def level(self) -> str:
        return self.operand.level


def _leaf_name(n: Node) -> str:
    if isinstance(n, Field):
        return n.path.rpartition(".")[2]
    return "item"


def children(n: Node) -> tuple[Node, ...]:
    """Direct sub-expressions (domain filters and rekey keys are reached through `domains`)."""
    if isinstance(n, Binary):
        return (n.left, n.right)
    if isinstance(n, Unary | Explode | Agg | Window):
        return (n.operand,)
    return ()


def node_domain(n: Node) -> AnyDomain | None:
    if isinstance(n, Field | Group | Key | Rows):
        return n.domain
    return None


def render(n: Node) -> str:
    """A short human form of an expression, for plans and errors."""
    if isinstance(n, Field):
        return f"{n.domain.name}.{n.path}"
    if isinstance(n, Group):
        return f"{n.domain.name}.{n.path}" if n.path else n.domain.name
    if isinstance(n, Key):
        return f"{n.domain.name}.$"
    if isinstance(n, Rows):
        return n.domain.name
    if isinstance(n, Lit):
        return repr(n.value)
    if isinstance(n, Binary):
        return f"({render(n.left)} {n.op} {render(n.right)})"
    if isinstance(n, Unary):
        return f"{n.op}({render(n.operand)})"
    if isinstance(n, Explode):
        return f"{render(n.operand)}.explode()"
    if isinstance(n, Agg):
        per = f".per({n.target.name})" if n.target is not None else ""
        return f"{render(n.operand)}.{n.func}(){per}"
    if isinstance(n, Window):
        return f"{render(n.operand)}.window({n.lo}, {n.hi}).{n.func}()"
    return type(n).__name__
