"""Streaming execution of a nested query in parent-aligned chunks (bounded memory).

Every level a query reads is one core scan (`Table.scan(...).to_record_batches()`), already sorted
by full key. The streams are consumed in lockstep and cut at key boundaries of the *cut level*: the
outermost level shared by every scanned level (for a window, its level's parent at most). A chunk
holds, for every stream, exactly the rows whose cut-level key prefix lies in `[previous bound,
bound)`; since a child's key extends its parent's, every parent is wholly inside one chunk together
with all of its descendants — so each operator (broadcast, reduction, window, regroup/rekey,
filters reading other levels) computed on a chunk gives exactly the rows of the unchunked run.

The bound of a chunk is the smallest cut prefix among the *last* buffered rows of the streams that
still have input: each such stream has buffered every row below it. A stream is pulled only when
its buffer is empty or wholly at the bound, so each holds at most one core batch (≤ `chunk_rows`
rows) plus the rows of one parent. `.list()` and windows therefore materialise per parent only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

DEFAULT_CHUNK_ROWS = 1 << 16


class Source:
    """One core scan's batches, buffered until a chunk bound says which rows to hand out."""

    __slots__ = ("_it", "_pending", "buf", "exhausted", "fields", "max_rows", "schema")

    def __init__(self, batches: Iterator[pa.RecordBatch], schema: pa.Schema, fields: list[pa.Field], max_rows: int):
        self._it = batches
        self._pending: pa.RecordBatch | None = None
        self.buf: list[pa.RecordBatch] = []
        self.exhausted = False
        self.schema = schema
        self.fields = fields  # the cut level's key fields: the leading key columns of every stream
        self.max_rows = max(1, max_rows)

    @property
    def rows(self) -> int:
        return sum(b.num_rows for b in self.buf)

    def pull(self) -> None:
        """Buffer the next (non-empty) batch, at most `max_rows` rows. Looks one batch ahead, so
        `exhausted` turns true as soon as the buffered rows are the last ones."""
        if self._pending is None:
            self._pending = self._next()
        b = self._pending
        if b is None:
            self.exhausted = True
            return
        self.buf.append(b.slice(0, self.max_rows))
        self._pending = b.slice(self.max_rows) if b.num_rows > self.max_rows else self._next()
        if self._pending is None:
            self.exhausted = True

    def _next(self) -> pa.RecordBatch | None:
        for b in self._it:
            if b.num_rows:
                return b
        return None

    def _prefix(self, b: pa.RecordBatch, i: int) -> tuple[Any, ...]:
        # Key values compare in Python as their order-preserving encoding does (ints, floats,
        # str by code point = UTF-8 bytes, bytes, timestamps; keys are never null or NaN).
        return tuple(b.column(j)[i].as_py() for j in range(len(self.fields)))

    def last(self) -> tuple[Any, ...]:
        b = self.buf[-1]
        return self._prefix(b, b.num_rows - 1)

    def take_below(self, bound: tuple[Any, ...] | None) -> pa.Table:
        """Hand out the buffered rows whose cut prefix is < `bound` (all when None)."""
        if bound is None:
            out, self.buf = self.buf, []
            return pa.Table.from_batches(out, schema=self.schema)
        out = []
        while self.buf:
            b = self.buf[0]
            if self._prefix(b, b.num_rows - 1) < bound:
                out.append(self.buf.pop(0))
                continue
            lo, hi = 0, b.num_rows  # first row with prefix >= bound (sorted): binary search
            while lo < hi:
                mid = (lo + hi) // 2
                if self._prefix(b, mid) < bound:
                    lo = mid + 1
                else:
                    hi = mid
            if lo:
                out.append(b.slice(0, lo))
                self.buf[0] = b.slice(lo)
            break
        return pa.Table.from_batches(out, schema=self.schema)


def chunks(sources: dict[Any, Source]) -> Iterator[dict[Any, pa.Table]]:
    """Parent-aligned chunks of all sources in lockstep (see the module doc). Yields at least one."""
    srcs = list(sources.items())
    emitted = False
    while True:
        for _k, s in srcs:
            if not s.exhausted and not s.buf:
                s.pull()
        open_ = [s for _k, s in srcs if not s.exhausted and s.buf]
        bound = min(s.last() for s in open_) if open_ else None
        part = {k: s.take_below(bound) for k, s in srcs}
        if bound is not None and not any(t.num_rows for t in part.values()):
            # Every open stream is wholly at the bound (one parent so far): read on.
            for s in open_:
                if s.last() == bound:
                    s.pull()
            continue
        if bound is None:
            if any(t.num_rows for t in part.values()) or not emitted:
                yield part
            return
        emitted = True
        yield part
