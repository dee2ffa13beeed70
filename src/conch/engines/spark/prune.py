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

>>> df = conch.engines.spark.sql(spark, "select count(*) from lineitem where l_quantity < 24",
...                      {"lineitem": "wh/lineitem"})  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from conch.engines.spark.common import Location, open_table, option
from conch.scan.columns import narrowest_column

_SCAN = "DataSourceV2ScanRelation"
_ATTR = "org.apache.spark.sql.catalyst.expressions.AttributeReference"


def sql(spark: Any, query: str, tables: Mapping[str, str], **options: str) -> Any:
    """`spark.sql(query)` with each name of `tables` (view name -> `<warehouse>/<table>`) a
    temporary view over that Conch table, reading only the columns the query uses. `options`
    are the source's reading options for every table (`asof`, `metastore`, ...)."""
    paths = {name: str(path) for name, path in tables.items()}
    opts: dict[str, dict[str, str]] = {}
    keys: dict[str, set[str]] = {}
    narrowest: dict[str, str | None] = {}
    for name, path in paths.items():
        opts[name] = dict(options)
        table = open_table(Location.from_options({**options, "path": path}))
        if option(options, "asof") is None:  # both plannings read one pinned state per table
            opts[name]["asof"] = str(table.state().time)
        scan = table.scan(level=option(options, "level"))
        keys[name] = {f.name for f in scan.plan.key_fields}
        narrowest[name] = narrowest_column(scan.plan.columns) if scan.plan.columns else None
        _frame(spark, path, opts[name]).createOrReplaceTempView(name)
    needed = used_columns(spark.sql(query))
    for name, path in paths.items():
        cols = needed.get(path)
        if cols is None:  # not read by a scan Spark planned: the whole table stays
            continue
        cheap = narrowest[name]
        if cheap is not None and all(c in keys[name] for c in cols):  # keys only: one cheap column too
            cols = [*cols, cheap]
        _frame(spark, path, {**opts[name], "columns": ",".join(cols)}).createOrReplaceTempView(name)
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
