"""DuckDB over Conch: SQL on a table with projections and filters pushed into the Conch scan.

>>> audio = conch.engines.duckdb.source("warehouse/audio")  # doctest: +SKIP
>>> duckdb.sql("select id, audio_length from audio where silence_ratio < 0.1").fetchall()  # doctest: +SKIP

**The mechanism.** DuckDB 2.0's Python package reads every Arrow-shaped object through a *source*
(`duckdb._sources.ArrowScanSource`): for each filter the optimizer would push into a scan it asks
`accepts(predicate)`, and it opens each stream with `stream(columns, filters)`, the projected
column indexes and the accepted predicates as a small tree (`Col`, `Lit`, comparisons, `AND`,
`OR`, `NOT`, `IS [NOT] NULL`, `IN`). An accepted predicate is dropped from DuckDB's plan, so
`accepts` says yes only where Conch computes exactly what DuckDB would:

- on value columns, the predicate becomes the scan's `where` (fresh records, three-valued logic,
  pushed into the fragments where legal). DuckDB orders NaN above every number, so float `x > c`
  becomes `~(x <= c)` (and `>=` likewise);
- on the first key column, comparisons the one key rule (`scan/filter`) states exactly become a key range and
  `IN` (single-column keys) exact keys: the scan skips key spaces and fragments outside them.

`rows()` gives DuckDB's optimizer the table's record count (the protocol's only statistic: it
takes no column min/max), so joins are planned as over Parquet, not as over one-row tables.

**Which filters Conch takes** (`push_filters`). DuckDB 2.0's join planner counts a filter's
selectivity only while the filter stays in its plan: a filter the source accepts leaves the scan's
estimate at the whole table (`rows()` is asked at bind time, before any filter is offered). Over
TPC-H that misplans joins on small tables (q21 at SF 1: 2.4× slower than with the filters
declined, `docs/engines.md`). By default (`push_filters=None`) Conch therefore takes value filters
only on tables storing at least `FILTER_MIN_BYTES`, where reading is the cost that a pushed filter
saves; key terms (a key range, an `IN` list on the key: a take instead of a scan) are taken on every
table. `push_filters=True` takes every filter it computes exactly, `False` none.

EXPLAIN shows accepted predicates under the scan node (`Filters:`); `on_scan` hands each Conch
scan to the caller, whose `plan.filter` and `metrics()` show what Conch evaluated and read.

**Why this and not the alternatives** (measured in `bench/loaders.py`, `docs/performance.md`,
`docs/engines.md`):
a `pyarrow.dataset.Dataset` look-alike (`scanner(columns=, filter=)`) is never offered filters
by DuckDB 2.0 unless it *is* a pyarrow Dataset; a plain `__arrow_c_stream__` producer (the scan
result protocol; also what this source serves to other consumers) gets neither projections nor
filters, so DuckDB reads every column of every row and filters afterwards.

`duckdb._sources` is DuckDB's internal module; if a future DuckDB moves it, `source()` falls back
to the plain stream (correct, without pushdown) and says so in `ConchSource.pushdown`.

The source reads one table version: the newest commit when `source()` is called (or `asof`).
"""

from __future__ import annotations

import datetime
import decimal
import itertools
import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from conch.api.snapshot import Snapshot
from conch.api.table import Table
from conch.engines.source import ScanSpec, resolve_snapshot
from conch.expr.tree import And, Cmp, Col, Expr, IsIn, IsNull, Lit, Not, Or
from conch.model.deps import optional_import
from conch.scan import Scan
from conch.scan.columns import narrowest_column
from conch.scan.filter import and_all, extract

duckdb = optional_import("duckdb")
try:
    from duckdb._sources import ArrowScanSource as _Base

    PUSHDOWN = True
except ImportError:  # pragma: no cover - a DuckDB without the source protocol: plain streams
    _Base = object  # type: ignore[misc, assignment]
    PUSHDOWN = False

_CMP = {"=": "==", "==": "==", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_INTS = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"}
_TIMESTAMPS = {"TIMESTAMP_S": 1_000_000, "TIMESTAMP_MS": 1_000, "TIMESTAMP": 1}  # step in µs
_TIMESTAMP_TZ = "TIMESTAMP WITH TIME ZONE"  # its constants are ints: µs since the epoch
_DECIMAL = re.compile(r"DECIMAL\((\d+),(\d+)\)")
FILTER_MIN_BYTES = 10 << 20  # stored bytes from which Conch takes value filters by default (module docstring)


class _Unpushable(Exception):
    """A predicate Conch cannot evaluate exactly as DuckDB would (DuckDB keeps it)."""


def source(
    table: Table | Snapshot | str | os.PathLike[str],
    *,
    level: str | None = None,
    asof: int | datetime.datetime | None = None,
    since: int | datetime.datetime | None = None,
    keys: Any = None,
    on_scan: Callable[[Scan], None] | None = None,
    push_filters: bool | None = None,
    compact_types: bool = True,
) -> ConchSource:
    """A table (or `'<warehouse>/<table>'`, or a `Snapshot`: sources of several levels of one
    snapshot read the same version) as an object DuckDB queries with pushdown.

    Use it as a Python variable in `duckdb.sql(...)`, or `register(con, name, src)`.
    `push_filters`: None (default) takes key terms always and value filters on tables storing at
    least `FILTER_MIN_BYTES`; True every filter Conch computes exactly; False none.
    `compact_types` (default True): scans reading no key column hand DuckDB dictionary-encoded
    strings as dictionaries and decimal(p <= 18) as decimal64 (same values; `ScanOptions.compact_types`).
    """
    base = resolve_snapshot(table, asof).scan(level=level, since=since, keys=keys)  # one version for every query
    return ConchSource(base, on_scan, push_filters, compact_types)


def register(con: Any, name: str, src: ConchSource) -> None:
    """Make `src` queryable as `name` on connection `con` (a view over the source)."""
    con.from_arrow(src).create_view(name, replace=True)


class ConchSource(_Base):
    """A Conch scan as a DuckDB source: projections and accepted filters become one Conch scan."""

    schema_is_stable = True  # pinned to one table version
    pull_under_gil = False

    def __init__(
        self,
        base: Scan,
        on_scan: Callable[[Scan], None] | None = None,
        push_filters: bool | None = None,
        compact_types: bool = True,
    ) -> None:
        if PUSHDOWN:
            super().__init__(self)
        self.spec = ScanSpec.from_scan(base)
        self.schema: pa.Schema = base.schema
        self.pushdown = PUSHDOWN
        self._on_scan = on_scan
        self.compact_types = compact_types
        fields = base.plan.key_fields
        self._keys = {f.name: f.type for f in fields}
        self._first_key = fields[0] if fields else None
        self._columns = {c.path: c.type for c in base.plan.columns}
        self._narrowest = narrowest_column(base.plan.columns)
        self._rows = sum(ks.rows for ks in base.plan.key_spaces)
        stored = sum(f.bytes for frags in base.plan.fragments.values() for f in frags)
        self.push_filters = stored >= FILTER_MIN_BYTES if push_filters is None else push_filters
        self._push_keys = push_filters is not False  # key terms: taken unless every filter is declined

    def __repr__(self) -> str:
        return f"ConchSource({self.spec.table_name!r}, level={self.spec.level!r}, asof={self.spec.asof})"

    # ----- the plain Arrow stream (no pushdown) ---------------------------------------------
    def __arrow_c_schema__(self) -> object:
        return self.schema.__arrow_c_schema__()

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self._reader(None, []).__arrow_c_stream__(requested_schema)

    # ----- DuckDB's source protocol ---------------------------------------------------------
    def rows(self) -> int | None:
        """The pinned scan's record count before any filter (DuckDB's cardinality estimate for
        join order and join type): its runs' rows, exact for a compacted table, an upper bound
        where runs overlap or hold tombstones."""
        return self._rows

    def accepts(self, predicate: Any) -> bool:
        """Does Conch evaluate `predicate` exactly as DuckDB would, and take it (`push_filters`)?
        Then DuckDB drops it."""
        if not self._push_keys:
            return False
        try:
            value_term = self._translate(predicate, _KeyBounds())
        except _Unpushable:
            return False
        return value_term is None or self.push_filters  # None: key terms only

    def stream(self, columns: Sequence[int] | None, filters: Sequence[Any]) -> tuple[object, bool]:
        """One Conch scan with the accepted `filters`, narrowed to the `columns` DuckDB reads."""
        names = None if columns is None else [self.schema.names[i] for i in columns]
        return self._reader(names, list(filters)).__arrow_c_stream__(), names is not None

    # ----- building the scan ------------------------------------------------------------------
    def _reader(self, names: list[str] | None, filters: list[Any]) -> pa.RecordBatchReader:
        out_schema = self.schema if names is None else pa.schema([self.schema.field(n) for n in names])
        keys = _KeyBounds()
        values: list[Expr] = []
        for f in filters:
            e = self._translate(f, keys)  # accepted before, so it translates
            if e is not None:
                values.append(e)
        wanted = [n for n in (names or self.schema.names) if n not in self._keys]
        # key terms and value terms as one filter: the scan's analysis (`conch.scan.filter`) turns
        # the key terms into a key range or exact keys, as for any other filter
        scan = self.spec.rescan(*(wanted or [self._narrowest]), where=and_all(keys.terms + values))
        if not any(n in self._keys for n in out_schema.names):  # DuckDB reads no key column
            # the streamed path then reads no keys, and hands compact types over (same values):
            # dictionary-encoded strings as dictionaries (no string materialisation; DuckDB groups
            # and hashes them by code), narrow decimals as decimal64 (cheaper to decode)
            scan = scan.with_options(with_keys=False, compact_types=self.compact_types)
        it = iter(scan.to_record_batches())
        first = next(it, None)
        if first is not None:
            # the stream's types are the first batch's (a string column dictionary-encoded in its
            # first fragment stays a dictionary): later batches are brought to them (same values)
            types = {f.name: f.type for f in first.schema}
            out_schema = pa.schema([f.with_type(types.get(f.name, f.type)) for f in out_schema])

        def batches() -> Iterator[pa.RecordBatch]:
            for b in itertools.chain((first,), it) if first is not None else ():
                b = b.select(out_schema.names)
                yield b if b.schema.equals(out_schema) else _conform(b, out_schema)
            if self._on_scan is not None:
                self._on_scan(scan)

        return pa.RecordBatchReader.from_batches(out_schema, batches())

    def _translate(self, node: Any, keys: _KeyBounds | None) -> Expr | None:
        """The Conch `where` term of an accepted predicate; terms on the first key column go into
        `keys` (allowed only under top-level ANDs: None there means a key term is unpushable)."""
        kind = type(node).__name__
        if kind == "Binary" and node.op in ("AND", "OR"):
            inner = keys if node.op == "AND" else None
            left, right = self._translate(node.left, inner), self._translate(node.right, inner)
            if left is None or right is None:
                return left if right is None else right
            return And(left, right) if node.op == "AND" else Or(left, right)
        if self._is_key_term(node):
            if keys is None:
                raise _Unpushable
            keys.add(node, self._first_key)
            return None
        if kind == "Binary" and node.op in _CMP:
            path, value = self._column(node.left), self._literal(node.right)
            op = _CMP[node.op]
            if pa.types.is_floating(self._columns[path]) and op in (">", ">="):
                return Not(Cmp("<=" if op == ">" else "<", Col(path), Lit(value)))  # NaN sorts last in DuckDB
            return Cmp(op, Col(path), Lit(value))
        if kind == "Unary" and node.op == "NOT":
            inner_e = self._translate(node.operand, None)
            assert inner_e is not None
            return Not(inner_e)
        if kind == "Postfix" and node.op in ("IS NULL", "IS NOT NULL"):
            e = IsNull(Col(self._column(node.operand)))
            return e if node.op == "IS NULL" else Not(e)
        if kind == "In":
            path = self._column(node.operand)
            if pa.types.is_floating(self._columns[path]):
                raise _Unpushable  # Conch's IN matches floats as Arrow's is_in (-0.0 is not 0.0), DuckDB's by `=`
            return IsIn(Col(path), tuple(self._literal(v) for v in node.values))
        raise _Unpushable

    def _is_key_term(self, node: Any) -> bool:
        first = self._first_key
        if first is None or type(node).__name__ not in ("Binary", "In"):
            return False
        operand = node.operand if type(node).__name__ == "In" else node.left
        if type(operand).__name__ != "Col" or tuple(operand.parts) != (first.name,):
            if type(operand).__name__ == "Col" and operand.parts[0] in self._keys:
                raise _Unpushable  # other key columns: DuckDB filters them
            return False
        if type(node).__name__ == "Binary" and node.op not in _CMP:
            return False
        if type(node).__name__ == "In" and len(self._keys) != 1:
            raise _Unpushable
        return True

    def _column(self, node: Any) -> str:
        if type(node).__name__ != "Col":
            raise _Unpushable
        path = ".".join(node.parts)
        if path not in self._columns:
            raise _Unpushable
        return path

    def _literal(self, node: Any) -> Any:
        if type(node).__name__ != "Lit" or not _exact(node.value, node.type):
            raise _Unpushable
        if node.type == _TIMESTAMP_TZ:  # an instant: Arrow compares it with any zone's column
            return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(microseconds=node.value)
        return node.value


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` with the types of `schema` (same values): strings dictionary-encoded or
    dictionaries decoded, decimals widened or narrowed."""
    arrays = []
    for a, f in zip(batch.columns, schema, strict=True):
        if a.type != f.type:
            a = a.dictionary_encode() if pa.types.is_dictionary(f.type) else a.cast(f.type)
            if a.type != f.type:  # dictionary_encode's indices are int32, as the scan's dictionaries
                a = a.cast(f.type)
        arrays.append(a)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class _KeyBounds:
    """Accepted predicates on the first key column, as Conch terms; the one rule
    (`scan/filter.extract`) turns them into a key range or exact keys."""

    def __init__(self) -> None:
        self.terms: list[Expr] = []

    def add(self, node: Any, field: pa.Field | None) -> None:
        """Take a key term only where the key filter states it exactly (DuckDB then drops it)."""
        assert field is not None
        col = Col(field.name)
        if type(node).__name__ == "In":
            term: Expr = IsIn(col, tuple(_key_literal(v) for v in node.values))
        else:
            term = Cmp(_CMP[node.op], col, Lit(_key_literal(node.right)))
        if extract(term, [field]).residual is not None:
            raise _Unpushable  # not exact (a literal that is not a key of this type, `!=`, ...)
        self.terms.append(term)


def _key_literal(node: Any) -> Any:
    if type(node).__name__ != "Lit" or not _exact(node.value, node.type):
        raise _Unpushable
    return node.value


def _exact(value: Any, type_text: str) -> bool:
    """Is a DuckDB constant exactly a value Conch compares the same way?"""
    if type_text == "BOOLEAN":
        return isinstance(value, bool)
    if type_text in _INTS:
        return isinstance(value, int) and not isinstance(value, bool)
    if type_text in ("FLOAT", "DOUBLE"):
        return isinstance(value, float) and value == value and abs(value) != float("inf")
    if type_text == "VARCHAR":
        return isinstance(value, str)
    if type_text == "BLOB":
        return isinstance(value, bytes)
    if type_text == "DATE":
        return isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)
    if type_text in _TIMESTAMPS:
        step = _TIMESTAMPS[type_text]
        return isinstance(value, datetime.datetime) and value.tzinfo is None and value.microsecond % step == 0
    if type_text == _TIMESTAMP_TZ:
        return isinstance(value, int) and not isinstance(value, bool)
    m = _DECIMAL.fullmatch(type_text)
    if m is not None and isinstance(value, decimal.Decimal) and value.is_finite():
        # the column's own type (DuckDB types a constant as its column): exact in decimal128(p, s)
        try:
            pa.scalar(value).cast(pa.decimal128(int(m[1]), int(m[2])))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return False
        return int(m[1]) <= 38
    return False
