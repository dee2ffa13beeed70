"""`Query` (a `select()`), `NestedScan` (its execution) and the plan it explains."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from conch.nested.exec import Executor
from conch.nested.explain import plan_tree
from conch.nested.nodes import Domain, Explode, Node


class Query:
    """Output fields at one level. `.scan()` runs it.

    >>> clips.select(duration=_.duration).scan().to_arrow()                  # doctest: +SKIP
    """

    def __init__(self, domain: Domain, outputs: dict[str, Any]) -> None:
        self.domain = domain
        self.outputs = outputs

    def scan(self, asof: Any = None) -> NestedScan:
        return NestedScan(self, asof)

    def to_arrow(self) -> pa.Table:
        return self.scan().to_arrow()

    def explain(self) -> str:
        return plan_tree(self.domain, self.outputs)

    def __repr__(self) -> str:
        return self.explain()


def _leaves(spec: dict[str, Any]) -> Iterator[Node]:
    for v in spec.values():
        if isinstance(v, dict):
            yield from _leaves(v)
        else:
            yield v


class NestedScan:
    """The result of a select, computed on first use: key columns of the level, then the fields.

    `to_arrow(keys=False)` drops the key columns, giving exactly the tables printed in spec/002.
    """

    def __init__(self, query: Query, asof: Any = None) -> None:
        self.query = query
        self.asof = asof
        self._result: pa.Table | None = None

    def _run(self) -> pa.Table:
        if self._result is None:
            q = self.query
            ex = Executor(q.domain.table, self.asof)
            ex.collect_domain(q.domain)
            for n in _leaves(q.outputs):
                ex.collect(n)
            fr = ex.rows(q.domain)
            names = list(fr.key_names)
            cols = list(fr.keys)
            for name, v in q.outputs.items():
                names.append(name)
                cols.append(self._column(ex, v))
            self._result = pa.Table.from_arrays(cols, names=names) if names else pa.table({})
        return self._result

    def _column(self, ex: Executor, v: Any) -> pa.Array:
        if isinstance(v, dict):
            arrays = [self._column(ex, x) for x in v.values()]
            return pa.StructArray.from_arrays(arrays, names=list(v))
        return ex.value(v, self.query.domain)

    def to_arrow(self, keys: bool = True) -> pa.Table:
        t = self._run()
        if not keys:
            return t.drop_columns(t.column_names[: len(t.column_names) - len(self.query.outputs)])
        return t

    def to_pylist(self, keys: bool = True) -> list[dict[str, Any]]:
        return self.to_arrow(keys).to_pylist()

    def to_pandas(self, keys: bool = True) -> Any:
        return self.to_arrow(keys).to_pandas()

    def to_polars(self, keys: bool = True) -> Any:
        from conch._deps import optional_import

        return optional_import("polars").from_arrow(self.to_arrow(keys))

    def to_record_batches(self) -> pa.RecordBatchReader:
        t = self._run()
        return pa.RecordBatchReader.from_batches(t.schema, t.to_batches())

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return iter(self._run().to_batches())

    def explain(self) -> str:
        return self.query.explain()

    def __repr__(self) -> str:
        return repr(self.to_arrow(keys=False))


class ExplodeScan:
    """The rows of an exploded list column."""

    def __init__(self, node: Explode, asof: Any = None) -> None:
        self.node, self.asof = node, asof

    def to_arrow(self) -> pa.Table:
        from conch.nested.exec import home

        d = home(self.node)
        assert isinstance(d, Domain)
        ex = Executor(d.table, self.asof)
        ex.collect(self.node)
        return ex.explode(self.node)

    def to_pylist(self) -> list[dict[str, Any]]:
        return self.to_arrow().to_pylist()
