"""Spark SQL over Conch tables with column pruning: `conch.engines.spark.sql(spark, query, tables)`.

PySpark 4.3's Python data sources get no column pruning (`DataSourceReader` has `pushFilters`
only; SPARK-51713's `pruneColumns` is not in 4.3), so a `spark.read.format("conch")` scan moves
every column of every row through the Python workers into the JVM, even for a query that needs
two of sixteen. The `columns` option prunes, but must be written by hand per query.

`sql()` writes it: it registers each table as a temporary view over the whole table, lets
Spark's optimizer plan the query once (no data is read: planning asks each source only for its
schema and reader), reads from the optimized plan, subqueries included, which columns of each
scan anything above it references, registers the views again with exactly those `columns`, and
returns `spark.sql(query)` over them. Results are the same rows (only unused columns are left
out); a table used several times (self-joins, subqueries) reads the union of its uses' columns.

Filters go the same way: the Filter Spark's optimizer puts directly above each scan is translated
where it can be exactly (`conch.engines.spark.catalyst`) and fixed into the view's `where` option,
so Conch prunes fragments and filters inside the Vortex scan (on fresh records) before rows cross
into the JVM. Spark keeps its own Filter on top, so the pushed part only has to keep a superset
of Spark's rows. A table used several times gets the OR of its uses' filters (key and value
terms separately, as `where` takes them), or none if one use has none.

>>> df = conch.engines.spark.sql(spark, "select count(*) from lineitem where l_quantity < 24",
...                      {"lineitem": "wh/lineitem"})  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from conch.engines.spark.catalyst import Translator, scan_filters
from conch.engines.spark.common import Location, open_table, option
from conch.expr.syntax import to_text
from conch.expr.tree import Expr, Or, columns
from conch.scan.columns import narrowest_column
from conch.scan.filter import and_all

_SCAN = "DataSourceV2ScanRelation"
_ATTR = "org.apache.spark.sql.catalyst.expressions.AttributeReference"


def sql(spark: Any, query: str, tables: Mapping[str, str], **options: str) -> Any:
    """`spark.sql(query)` with each name of `tables` (view name -> `<warehouse>/<table>`) a
    temporary view over that Conch table, reading only the columns the query uses. `options`
    are the source's reading options for every table (`asof`, `metastore`, ...)."""
    paths = {name: str(path) for name, path in tables.items()}
    opts: dict[str, dict[str, str]] = {}
    keys: dict[str, set[str]] = {}
    types: dict[str, dict[str, pa.DataType]] = {}
    narrowest: dict[str, str | None] = {}
    for name, path in paths.items():
        opts[name] = dict(options)
        table = open_table(Location.from_options({**options, "path": path}))
        if option(options, "asof") is None:  # both plannings read one pinned state per table
            opts[name]["asof"] = str(table.state().time)
        scan = table.scan(level=option(options, "level"))
        keys[name] = {f.name for f in scan.plan.key_fields}
        types[path] = {**{c.path: c.type for c in scan.plan.columns}, **{f.name: f.type for f in scan.plan.key_fields}}
        narrowest[name] = narrowest_column(scan.plan.columns) if scan.plan.columns else None
        _frame(spark, path, opts[name]).createOrReplaceTempView(name)
    planned = spark.sql(query)
    needed = used_columns(planned)
    wheres = used_filters(planned, types, {paths[n]: k for n, k in keys.items()})
    for name, path in paths.items():
        cols = needed.get(path)
        if cols is None:  # not read by a scan Spark planned: the whole table stays
            continue
        cheap = narrowest[name]
        if cheap is not None and all(c in keys[name] for c in cols):  # keys only: one cheap column too
            cols = [*cols, cheap]
        read = {**opts[name], "columns": ",".join(cols)}
        if path in wheres:
            own = option(read, "where")
            read["where"] = f"({own}) and {wheres[path]}" if own else wheres[path]
        _frame(spark, path, read).createOrReplaceTempView(name)
    return spark.sql(query)


def used_columns(df: Any) -> dict[str, list[str]]:
    """Per Conch table path scanned by `df`'s optimized plan (subqueries included): the columns
    of its output that some operator references (empty for a scan only counted)."""
    plan = df._jdf.queryExecution().optimizedPlan()
    plans = [plan, *_seq(plan.subqueriesAll())]
    referenced: set[int] = set()
    for p in plans:
        for node in json.loads(p.toJSON()):
            if not node["class"].endswith(_SCAN):
                referenced |= set(_expr_ids(node))
    out: dict[str, list[str]] = {}
    for p in plans:
        for leaf in _seq(p.collectLeaves()):
            if leaf.getClass().getSimpleName() != _SCAN:
                continue
            path = leaf.relation().options().get("path")
            if path is None:
                continue
            attrs = [(a.name(), a.exprId().id()) for a in _seq(leaf.output())]
            have = out.setdefault(path, [])
            have += [n for n, i in attrs if i in referenced and n not in have]
    return out


def used_filters(
    df: Any, types: Mapping[str, Mapping[str, pa.DataType]], keys: Mapping[str, set[str]]
) -> dict[str, str]:
    """Per Conch table path scanned by `df`'s optimized plan: a `where` option (text) that keeps
    every row each of its scans' Filter keeps, where there is one. `types`: each path's column
    types; `keys`: its key columns."""
    plan = df._jdf.queryExecution().optimizedPlan()
    plans = [plan, *_seq(plan.subqueriesAll())]
    conditions = {}
    for p in plans:
        conditions.update(scan_filters(json.loads(p.toJSON())))
    tz = str(df.sparkSession.conf.get("spark.sql.session.timeZone"))
    uses: dict[str, list[list[Expr]]] = {}
    for p in plans:
        for leaf in _seq(p.collectLeaves()):
            path = leaf.relation().options().get("path") if leaf.getClass().getSimpleName() == _SCAN else None
            if path is None or path not in types:
                continue
            attrs = {int(a.exprId().id()): str(a.name()) for a in _seq(leaf.output())}
            cond = conditions.get(next(iter(attrs))) if attrs else None
            terms = Translator(attrs, dict(types[path]), tz).terms(cond) if cond is not None else []
            uses.setdefault(path, []).append(terms)
    out = {}
    for path, per_use in uses.items():
        where = _either(per_use, keys.get(path, set()))
        if where is not None:
            out[path] = to_text(where)
    return out


def _either(uses: list[list[Expr]], keys: set[str]) -> Expr | None:
    """A filter true wherever one use's terms all are: per side (key terms, value terms, as the
    `where` option splits them; terms mixing both are left out) the OR of the uses' ANDs, if every
    use has a term on that side."""
    parts: list[Expr] = []
    for side in ("keys", "values"):
        sides = [[t for t in terms if _side(t, keys) == side] for terms in uses]
        if not sides or not all(sides):
            continue
        texts: dict[str, Expr] = {}
        for use in sides:
            e = and_all(use)
            assert e is not None
            texts.setdefault(to_text(e), e)
        either: Expr | None = None
        for e in texts.values():
            either = e if either is None else Or(either, e)
        assert either is not None
        parts.append(either)
    return and_all(parts)


def _side(term: Expr, keys: set[str]) -> str | None:
    """Which part of the `where` option evaluates `term`: "keys", "values", or None (mixed)."""
    used = set(columns(term))
    if used <= keys:
        return "keys"
    return None if used & keys else "values"


_FRAMES: dict[tuple[Any, ...], Any] = {}  # (session, path, options) -> DataFrame, oldest first
_MAX_FRAMES = 256


def _frame(spark: Any, path: str, options: Mapping[str, str]) -> Any:
    """The DataFrame reading `path` with `options` (which pin `asof`): made once per session and
    options, since each `load()` costs Spark a Python worker round trip for the schema, and a
    DataFrame pinned to the same commit reads the same state."""
    key = (str(spark._jsparkSession.sessionUUID()), path, tuple(sorted(options.items())))
    df = _FRAMES.get(key)
    if df is None:
        df = _reader(spark, options).load(path)
        _FRAMES[key] = df
        if len(_FRAMES) > _MAX_FRAMES:
            del _FRAMES[next(iter(_FRAMES))]
    return df


def _reader(spark: Any, options: Mapping[str, str]) -> Any:
    r = spark.read.format("conch")
    for k, v in options.items():
        r = r.option(k, v)
    return r


def _seq(s: Any) -> list[Any]:
    return [s.apply(i) for i in range(s.size())]


def _expr_ids(value: Any) -> Iterator[int]:
    """Every AttributeReference's expression id a plan node's JSON references (not the outputs of
    scans, which subquery plans embedded in expressions also carry)."""
    if isinstance(value, dict):
        if str(value.get("class", "")).endswith((_SCAN, "DataSourceV2Relation")):
            return  # a scan's own output (also inside a subquery's plan embedded in an expression)
        if value.get("class") == _ATTR and isinstance(value.get("exprId"), dict):
            yield int(value["exprId"]["id"])
        for v in value.values():
            yield from _expr_ids(v)
    elif isinstance(value, list):
        for v in value:
            yield from _expr_ids(v)
