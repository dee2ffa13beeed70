"""The user-facing lazy objects of spec/002: `Path` (a level), `Expr` (a value per row), `_`.

>>> scenes = t.scenes; clips = scenes.clips                                  # doctest: +SKIP
>>> clips.select(duration=_.duration, location=scenes.location,              # doctest: +SKIP
...              confidence_mean=_.detections.confidence.mean()).scan().to_arrow()

Nothing is read until `.scan()` (or `.to_py()`). Each object wraps one immutable node
(`conch.nested.nodes`); every method returns a new object, and level errors (siblings, unrelated
branches, unreduced children) are raised while the expression is built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa

from conch.errors import ColumnNotFoundError, ExpressionError, InvalidKeyError, LevelError
from conch.expr import tree as core_expr
from conch.model.keys import key_array, key_table, sorted_unique
from conch.model.schema import join_path
from conch.nested import nodes as N
from conch.nested.deferred import Deferred, resolve
from conch.nested.lower import lift, lower, lower_value
from conch.nested.nodes import Agg, Binary, Domain, Node, RekeyDomain, TableHandle, Unary, is_ancestor, level_name


class NoSuchName(ColumnNotFoundError, AttributeError):
    """An attribute names no child level, column, group or key of a level."""


# ----- node conversion --------------------------------------------------------------------------
def to_node(v: Any, at: Path | None = None) -> Node:
    if isinstance(v, Expr):
        return v.node
    if isinstance(v, core_expr.Expr):  # `t["x"] > 1`: the same filter, on the level at hand
        if at is None:
            raise ExpressionError(f"{v!r} combines with a nested expression only inside select()/where()")
        return to_node(lift(v, at))
    if isinstance(v, Path):
        return N.Group(v.domain, "")
    if isinstance(v, Node):
        return v
    if isinstance(v, RekeyPath | Regrouped | Deferred):
        raise LevelError(f"{v!r} is not a value; reduce it, e.g. .count() or .<field>.mean()")
    return N.Lit(v)


def _root_keyed(*nodes: Node) -> bool:
    for n in nodes:
        d = N.node_domain(n)
        if isinstance(d, Domain):
            return len(d.table.key_schema) > 0
    return False


def bind(n: Node, at: Domain) -> Node:
    """Bind the outermost unbound reductions to the level `at` of a select/where."""
    if isinstance(n, Agg):
        if n.target is None and n.operand.level != at.level and is_ancestor(at.level, n.operand.level):
            return replace(n, target=at)
        return n
    if isinstance(n, Binary):
        left, right = bind(n.left, at), bind(n.right, at)
        return Binary.make(n.op, left, right, _root_keyed(left, right))
    if isinstance(n, Unary):
        return Unary(n.op, bind(n.operand, at))
    return n


def check_at(n: Node, at: Domain) -> None:
    """`n` must have `at`'s level or an ancestor's (which broadcasts)."""
    if is_ancestor(n.level, at.level):
        return
    if is_ancestor(at.level, n.level):
        raise LevelError(
            f"'{level_name(n.level)}' is below '{at.name}': reduce {N.render(n)} to '{at.name}' first "
            "(e.g. .mean(), .count(), .list())"
        )
    N.deeper(at.level, n.level, len(at.table.key_schema) > 0)


def at_level(v: Any, at: Domain) -> Node:
    n = bind(to_node(resolve(v, Path(at)), Path(at)), at)
    check_at(n, at)
    return n


def narrowed(domain: Domain, predicate: Any) -> Domain:
    """`domain` with one more row filter: the rule of `Path.where` and `Query.where`."""
    return replace(domain, filters=(*domain.filters, at_level(predicate, domain)))


# ----- expressions ------------------------------------------------------------------------------
def _binop(op: str, reflected: bool = False) -> Callable[[Expr, Any], Any]:
    def f(self: Expr, other: Any) -> Any:
        if isinstance(other, Deferred | RekeyPath):
            return NotImplemented
        if op in ("&", "|") and isinstance(other, core_expr.Expr):
            return NotImplemented  # the core side lowers this one: `t.x < 0 & t["id"] > 1` is a core filter
        o = to_node(other)
        left, right = (o, self.node) if reflected else (self.node, o)
        return Expr(Binary.make(op, left, right, _root_keyed(left, right)))

    return f


class Expr:
    """A value per row of a level. Operators broadcast ancestors; reductions go up a level.

    >>> (detections.ts - clips.start_time).level                            # doctest: +SKIP
    'scenes.clips.detections'
    """

    __slots__ = ("node",)
    node: Node

    def __init__(self, node: Node) -> None:
        object.__setattr__(self, "node", node)

    @property
    def level(self) -> str:
        return self.node.level

    def __repr__(self) -> str:
        return f"<{N.render(self.node)} @ {self.level or '<root>'}>"

    def __bool__(self) -> bool:
        raise ExpressionError("a Conch expression has no truth value; use & | ~ instead of and/or/not")

    def __conch_expr__(self) -> core_expr.Expr:
        """This row filter as the `conch.expr.tree` tree every `where=` takes (`nested.lower`):
        `t.x > 1` is the same filter as `t["x"] > 1`."""
        return lower(self.node)

    __hash__ = object.__hash__
    __add__, __radd__ = _binop("+"), _binop("+", True)
    __sub__, __rsub__ = _binop("-"), _binop("-", True)
    __mul__, __rmul__ = _binop("*"), _binop("*", True)
    __truediv__, __rtruediv__ = _binop("/"), _binop("/", True)
    __floordiv__, __rfloordiv__ = _binop("//"), _binop("//", True)
    __mod__, __pow__ = _binop("%"), _binop("**")
    __and__, __rand__ = _binop("&"), _binop("&", True)
    __or__, __ror__ = _binop("|"), _binop("|", True)
    __eq__ = _binop("==")
    __ne__ = _binop("!=")
    __lt__, __le__ = _binop("<"), _binop("<=")
    __gt__, __ge__ = _binop(">"), _binop(">=")

    def __neg__(self) -> Expr:
        return Expr(Unary("neg", self.node))

    def __invert__(self) -> Expr:
        return Expr(Unary("not", self.node))

    def __abs__(self) -> Expr:
        return Expr(Unary("abs", self.node))

    def floor(self) -> Expr:
        return Expr(Unary("floor", self.node))

    def ceil(self) -> Expr:
        return Expr(Unary("ceil", self.node))

    def is_null(self) -> Expr:
        return Expr(Unary("is_null", self.node))

    def is_not_null(self) -> Expr:
        return Expr(Unary("not", Unary("is_null", self.node)))

    def isin(self, values: Any) -> Expr:
        """True where the value is one of `values` (null stays null): `t.id.isin([1, 3])`, the
        same filter as `t["id"].isin([1, 3])`."""
        return Expr(Binary.make("in", self.node, N.Lit(tuple(values))))

    def matches(self, query: str) -> Expr:
        """True where the text matches a full-text `query` (null where the text is null):
        `t.caption.matches("red car")`, the same filter as `t["caption"].matches("red car")`
        (`conch.expr.textmatch`)."""
        from conch.expr.textmatch import check_query

        return Expr(Binary.make("matches", self.node, N.Lit(check_query(query))))

    def len(self) -> Expr:
        """Length of a list (or string/binary) column, at the same level."""
        return Expr(Unary("len", self.node))

    def explode(self) -> Expr:
        """A list column as a child level (`$idx` = position): the inverse of `.list()`."""
        if not self._is_list():
            raise LevelError(f"{N.render(self.node)} is not a list column; only lists explode")
        return Expr(N.Explode(self.node))

    def __getattr__(self, name: str) -> Expr:
        n = self.node
        if name.startswith("_") or not isinstance(n, N.Group):
            raise AttributeError(name)
        return _member(n.domain, join_path(n.path, name))

    # --- reductions -------------------------------------------------------------------------
    def _is_list(self) -> bool:
        n = self.node
        return isinstance(n, N.Field) and (pa.types.is_list(n.type) or pa.types.is_large_list(n.type))

    def _agg(self, func: str) -> Expr:
        operand = N.Explode(self.node) if self._is_list() else self.node
        return Expr(Agg(func, operand))

    def count(self) -> Expr:
        """Number of non-null values per parent row (of a list column: its elements)."""
        return self._agg("count")

    def sum(self) -> Expr:
        return self._agg("sum")

    def mean(self) -> Expr:
        return self._agg("mean")

    def min(self) -> Expr:
        return self._agg("min")

    def max(self) -> Expr:
        return self._agg("max")

    def first(self) -> Expr:
        return self._agg("first")

    def last(self) -> Expr:
        return self._agg("last")

    def list(self) -> Expr:
        """The values per parent row, as a list (materialised per parent)."""
        return self._agg("list")

    def any(self) -> Expr:
        return self._agg("any")

    def all(self) -> Expr:
        return self._agg("all")

    def per(self, target: Path) -> Expr:
        """Bind a reduction's level: `detections.confidence.mean().per(clips)` is one per clip.

        >>> scenes.select(total=clips.detections.confidence.mean().per(clips).sum())  # doctest: +SKIP
        """
        n = self.node
        if not isinstance(n, Agg):
            raise LevelError(f".per() binds a reduction; {N.render(n)} is not one (add .mean(), .sum(), ...)")
        d = (target if isinstance(target, Path) else root_path(target, "")).domain  # a Table: its root level
        if n.operand.level == d.level or not is_ancestor(d.level, n.operand.level):
            raise LevelError(f"cannot reduce '{level_name(n.operand.level)}' per '{d.name}': it is not above it")
        return Expr(replace(n, target=d))

    def window(self, frame: tuple[int, int]) -> WindowSpec:
        """Rows `frame[0]..frame[1]` around each row, never crossing a parent boundary.

        >>> frames.rgb.window(frame=(-2, 0)).list()                           # doctest: +SKIP
        """
        lo, hi = frame
        if lo > hi:
            raise ExpressionError(f"window frame {frame} is empty: the start must not be after the end")
        return WindowSpec(self.node, int(lo), int(hi))

    # --- execution ----------------------------------------------------------------------------
    def _home(self) -> Domain:
        from conch.nested.exec import home

        h = home(self.node)
        if not isinstance(h, Domain):
            raise LevelError(f"{N.render(self.node)} has no level to evaluate at")
        return h

    def scan(self, asof: Any = None, since: Any = None) -> Any:
        """Select this expression at its own level."""
        from conch.nested.query import Query

        if isinstance(self.node, N.Explode):
            from conch.nested.query import ExplodeScan

            return ExplodeScan(self.node, asof, since)
        d = self._home()
        name = self.node.path.rpartition(".")[2] if isinstance(self.node, N.Field) else "value"
        return Query(d, {name: at_level(self, d)}, narrowed).scan(asof=asof, since=since)

    def to_arrow(self) -> pa.Table:
        return self.scan().to_arrow()

    def to_py(self) -> Any:
        """The value(s): one Python value when every level on the path is scalar-indexed.

        >>> t.scenes["s1"].clips["c1"].duration.to_py()                      # doctest: +SKIP
        30.0
        """
        d = self._home()
        col = self.scan().to_arrow().column(-1).to_pylist()
        if _fully_bound(d):
            if len(col) != 1:
                raise InvalidKeyError(f"no record at {d.describe()}")
            return col[0]
        return col

    def explain(self) -> str:
        return self.scan().explain()


class WindowSpec:
    """`expr.window(frame=(a, b))`: choose the reduction to slide."""

    __slots__ = ("hi", "lo", "node")

    def __init__(self, node: Node, lo: int, hi: int) -> None:
        self.node, self.lo, self.hi = node, lo, hi

    def _w(self, func: str) -> Expr:
        return Expr(N.Window(func, self.node, self.lo, self.hi))

    def count(self) -> Expr:
        return self._w("count")

    def sum(self) -> Expr:
        return self._w("sum")

    def mean(self) -> Expr:
        return self._w("mean")

    def min(self) -> Expr:
        return self._w("min")

    def max(self) -> Expr:
        return self._w("max")

    def first(self) -> Expr:
        return self._w("first")

    def last(self) -> Expr:
        return self._w("last")

    def list(self) -> Expr:
        return self._w("list")

    def any(self) -> Expr:
        return self._w("any")

    def all(self) -> Expr:
        return self._w("all")


def _fully_bound(d: Domain) -> bool:
    return d.bound == len(d.table.schema.tree.key_names(d.level)) and d.keys is None


# ----- levels -------------------------------------------------------------------------------------
def _member(d: Domain, name: str) -> Any:
    """A child level, column, group or `id` of the level of `d`."""
    schema = d.table.state().schema
    full = join_path(d.level, name)
    if "." not in name and full in schema.levels:
        return Path(Domain(d.table, full, parent=d, pins=d.pins, keys=d.keys))
    if schema.has_column(full) and schema.column(full).level == d.level:
        return Expr(N.Field(d, name, schema.column(full).type))
    if any(c.path.startswith(name + ".") for c in schema.columns_of(d.level)):
        return Expr(N.Group(d, name))
    if name in ("id", "$") and d.level:
        return Expr(N.Key(d))
    root_keys = {f.name: f for f in schema.key_fields("")}
    if name in root_keys and isinstance(d, Domain):  # `t.cultivar`: every level's rows carry it
        return Expr(N.Field(d, name, root_keys[name].type, key=True))
    known = (
        list(root_keys)
        + [lvl.name for lvl in schema.children(d.level)]
        + sorted({c.path.split(".")[0] for c in schema.columns_of(d.level)})
    )
    raise NoSuchName(
        f"level {d.level or '<root>'!r} has no key, child level, column or group {name!r}; it has: {', '.join(known)}"
    )


class Path:
    """A lazy reference to the rows of one level: `t.scenes.clips`, `t.scenes["s1"].clips`.

    >>> clips = t.scenes.clips                                                # doctest: +SKIP
    >>> clips.select(duration=_.duration).scan().to_arrow()                  # doctest: +SKIP
    """

    __slots__ = ("domain",)
    domain: Domain

    def __init__(self, domain: Domain) -> None:
        object.__setattr__(self, "domain", domain)

    def __repr__(self) -> str:
        return f"<level {self.domain.describe()} of {self.domain.table.name}>"

    @property
    def level(self) -> str:
        return self.domain.level

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _member(self.domain, name)

    def col(self, name: str) -> Any:
        """A member whose name is shadowed by a method (`path.col("count")`)."""
        return _member(self.domain, name)

    # --- queries ----------------------------------------------------------------------------
    def select(self, *args: Any, **kwargs: Any) -> Any:
        """Output fields, one row per row of this level; empty = every field of the level.

        >>> frames.select(rgb=_.rgb, meta={"dur": clips.duration}).scan()     # doctest: +SKIP
        """
        from conch.nested.query import Query

        spec: dict[str, Any] = {}
        for a in args:
            if isinstance(a, dict):
                spec.update(a)
            elif isinstance(a, Expr) and isinstance(a.node, N.Field | N.Group):
                spec[a.node.path.rpartition(".")[2] or a.node.domain.name] = a
            elif isinstance(a, Path):
                spec[a.domain.name] = a
            else:
                raise TypeError(f"positional select() arguments are dicts, fields or levels; name {a!r} with a keyword")
        spec.update(kwargs)
        if not args and not kwargs:
            tree = self.domain.table.state().schema.value_type(self.domain.level)
            spec = {f.name: _member(self.domain, f.name) for f in tree}
        return Query(self.domain, _nodes(spec, self.domain), narrowed)

    def scan(self, asof: Any = None, since: Any = None) -> Any:
        """Every field of the level; `asof` / `since` bound commit times as in `Table.scan`."""
        return self.select().scan(asof=asof, since=since)

    def to_arrow(self) -> pa.Table:
        return self.scan().to_arrow()

    def explain(self) -> str:
        return self.select().explain()

    def where(self, predicate: Any) -> Path:
        """The same level with fewer rows: `clips.where(_.duration > 10)`.

        Predicates may read ancestors (broadcast) and reduced children; filtered levels can be
        reused, navigated (`long_clips.frames`) and reduced (`clips.select(n=hi.count())`).
        """
        return Path(narrowed(self.domain, predicate))

    def count(self) -> Expr:
        """Rows per parent row (in a select: per row of the select level)."""
        return Expr(Agg("count", N.Rows(self.domain)))

    def regroup(self, key: Any) -> Regrouped:
        """Map each row to a bucket key of a sibling level; follow with `.rekey(target)`."""
        return Regrouped(self.domain, at_level(key, self.domain))

    def to_py(self) -> Any:
        """The record (a dict) when fully indexed, else a list of records."""
        rows = self.scan().to_arrow(keys=False).to_pylist()
        if _fully_bound(self.domain):
            if len(rows) != 1:
                raise InvalidKeyError(f"no record at {self.domain.describe()}")
            return rows[0]
        return rows

    # --- row selection ------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Path:
        """Pin the leftmost unbound key(s): a scalar; a tuple, one value per key column in order
        (`t.photos["color", "astronaut"]` is `t.photos["color"]["astronaut"]`); a list of values
        of one key column (any order) or a key table (a seek). A key with no record selects no
        rows (`to_py()` of a fully indexed path raises `InvalidKeyError`)."""
        d = self.domain
        fields = d.table.state().schema.key_fields(d.level)
        p = d.bound
        if p >= len(fields):
            raise InvalidKeyError(f"{d.describe()} is fully indexed; there is no key left to select")
        if isinstance(key, tuple):  # a composite key: one value per key column
            names = [f.name for f in fields[p:]]
            if len(key) > len(names):
                raise InvalidKeyError(
                    f"{d.describe()}[{', '.join(map(repr, key))}]: {len(key)} key values for the {len(names)} key "
                    f"column(s) left ({', '.join(names)}); a list selects several values of one column"
                )
            path = self
            for value in key:
                path = path[value]
            return path
        if isinstance(key, pa.RecordBatch):
            key = pa.Table.from_batches([key])
        if isinstance(key, pa.Table):
            names = [f.name for f in fields]
            given = [n for n in names if n in key.column_names]
            if not given or names[: p + len(given)][p:] != given:
                raise InvalidKeyError(f"a key table for {d.describe()} needs leading key columns from {names[p:]}")
            table = key.select(given)
        elif isinstance(key, list):  # Python values convert only exactly (5.5 is no uint64 key)
            table = pa.table({fields[p].name: key_array(key, fields[p])})
        elif isinstance(key, np.ndarray | pa.Array | pa.ChunkedArray):
            table = pa.table({fields[p].name: key})
        else:
            if d.keys is None:
                return Path(replace(d, pins=(*d.pins, key)))
            table = pa.table({fields[p].name: pa.repeat(pa.scalar(key), d.keys.num_rows)})
        if d.keys is not None:
            if table.num_rows != d.keys.num_rows:
                raise InvalidKeyError("select keys at one level at a time: pass a key table for several levels")
            joined = d.keys
            for name, col in zip(table.column_names, table.columns):
                joined = joined.append_column(name, col)
            table = joined
        elif d.pins:
            pins = pa.table({f.name: pa.repeat(pa.scalar(v), table.num_rows) for f, v in zip(fields, d.pins)})
            for name, col in zip(table.column_names, table.columns):
                pins = pins.append_column(name, col)
            table = pins
        # Like the core's `keys=`: any order, repeats ignored; the domain holds them sorted.
        table = sorted_unique(key_table(table, fields[: table.num_columns]))
        return Path(replace(d, keys=table, pins=()))

    def __setitem__(self, key: Any, value: Any) -> None:
        """Upsert one record: `t.scenes["s3"] = {"location": "park", "clips": [...]}`."""
        from conch.nested.writes import write_record

        write_record(self[key].domain, value)

    def __setattr__(self, name: str, value: Any) -> None:
        """Batch-write a child level (`...clips["c1"].frames = pa.table(...)`) or one field."""
        from conch.nested.writes import write_member

        write_member(self.domain, name, value)


def _nodes(spec: dict[str, Any], at: Domain) -> dict[str, Any]:
    return {k: _nodes(v, at) if isinstance(v, dict) else at_level(v, at) for k, v in spec.items()}


class Regrouped:
    """`level.regroup(key=expr)`: rows mapped to bucket keys; `.rekey(target)` assigns them."""

    __slots__ = ("key", "source")

    def __init__(self, source: Domain, key: Node) -> None:
        self.source, self.key = source, key

    def rekey(self, target: Path) -> RekeyPath:
        t = target.domain
        parent = N.parent_level(t.level)
        if not t.level or not is_ancestor(parent, self.source.level) or is_ancestor(t.level, self.source.level):
            raise LevelError(
                f"cannot rekey '{self.source.name}' onto '{t.name}': the target must be a sibling level "
                "under a shared parent (its key is the bucket)"
            )
        return RekeyPath(RekeyDomain(self.source, self.key, t))


class RekeyPath:
    """Source rows in the target's key domain: reduce them (`.count()`, `.<field>.mean()`)."""

    __slots__ = ("domain",)
    domain: RekeyDomain

    def __init__(self, domain: RekeyDomain) -> None:
        self.domain = domain

    def __getattr__(self, name: str) -> Expr:
        if name.startswith("__"):
            raise AttributeError(name)
        src = self.domain.source
        m = _member(src, name)
        if not isinstance(m, Expr) or not isinstance(m.node, N.Field):
            raise NoSuchName(f"{name!r} is not a column of '{src.name}'")
        return Expr(N.Field(self.domain, name, m.node.type))

    def count(self) -> Expr:
        return Expr(Agg("count", N.Rows(self.domain)))


def root_member(table: TableHandle, name: str) -> Any:
    """`t.<name>`: a key column, child level, column or group of the table's root (the nested
    API's entry)."""
    return _member(Domain(table, ""), name)


def root_path(table: TableHandle, level: str = "") -> Path:
    """The rows of `level` (default the root) as a `Path`: `t.select(...)` / `t.where(...)`."""
    p = Path(Domain(table, ""))
    for part in level.split(".") if level else ():
        p = p.col(part)
    return p


def as_value(v: Any, table: TableHandle, level: str | None) -> Any:
    """An update's new value: a nested expression (`t.price * 2`, `_.price * 2`) lowered to a
    `conch.expr.tree` tree on `level`'s records; anything else unchanged."""
    if isinstance(v, Deferred):
        v = v.resolve(root_path(table, level or ""))
    if isinstance(v, Expr):
        return lower_value(v.node, level or "")
    return v


def as_filter(where: Any, table: TableHandle, level: str | None) -> Any:
    """A `where=` argument as a `conch.expr.tree` tree: core trees as they are, nested expressions
    lowered, `_` resolved against the scanned level first. Anything else is returned unchanged
    (the scan names it in its error)."""
    if isinstance(where, Deferred):
        where = where.resolve(root_path(table, level or ""))
    if isinstance(where, Expr):
        return where.__conch_expr__()
    return where
