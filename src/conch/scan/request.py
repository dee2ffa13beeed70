"""`ScanRequest`: one question asked of a table version, resolved once.

`Snapshot.scan(...)` is the one door: it turns a scan's arguments into a `ScanRequest` against
the snapshot's schema (`ScanRequest.resolve`): the level, the projected columns as full paths,
the filter lowered and cut into key terms and value terms (`conch.scan.filter.analyse`), the
`keys=` argument as a key predicate, `since` in µs, the row limit, and a split's key range.
Every record that carries a pinned scan carries a `Snapshot` and a `ScanRequest` and nothing
else: `Scan`, `Split`, the engines' `ScanSpec`, enrichment's `RangeJob`. A request is frozen,
plain data (it pickles with a split to any process) and needs no re-analysis there.

>>> req = t.snapshot().scan("x", where=t["x"] > 1).request  # doctest: +SKIP
>>> req.columns, req.value_terms  # doctest: +SKIP
(('x',), (Col('x') > 1,))
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from conch.errors import ColumnNotFoundError, InvalidArgumentError, LevelError
from conch.expr.tree import Expr
from conch.model.keys import EncodedRange, KeyPredicate, to_key_predicate
from conch.model.schema import Column, Schema, join_path
from conch.model.time import to_time
from conch.scan.filter import FilterTerms, analyse, and_all

__all__ = ["ScanRequest", "resolve_columns"]


@dataclass(frozen=True)
class ScanRequest:
    """A scan's arguments, resolved against one schema (module doc)."""

    level: str = ""
    columns: tuple[str, ...] = ()  # projected columns, full paths (empty: keys only)
    key_terms: tuple[Expr, ...] = ()  # filter terms over key columns only
    value_terms: tuple[Expr, ...] = ()  # every other filter term (full column paths)
    keys: KeyPredicate | None = None  # the `keys=` argument
    since: int | None = None  # the lower commit-time bound (µs)
    limit: int | None = None
    within: EncodedRange | None = None  # a split's key range (full-key encodings)

    @classmethod
    def resolve(
        cls,
        schema: Schema,
        columns: tuple[Any, ...] = (),
        where: Any = None,
        keys: Any = None,
        since: Any = None,
        level: str | None = None,
        limit: int | None = None,
    ) -> ScanRequest:
        """The request of `Snapshot.scan`'s arguments (`where` already lowered from `_`) against
        `schema`: typed errors for an unknown column or level, a filter of another level, a
        bad limit, an unparsable `since`."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise InvalidArgumentError(f"limit must be a non-negative number of rows, got {limit!r}")
        lvl, cols = resolve_columns(schema, level, columns)
        terms = analyse(where, schema, lvl)
        pred = to_key_predicate(keys, schema.key_fields(lvl)) if keys is not None else None
        return cls(
            level=lvl,
            columns=tuple(c.full_path for c in cols),
            key_terms=terms.key_terms,
            value_terms=terms.value_terms,
            keys=pred,
            since=to_time(since, "since"),
            limit=limit,
        )

    @property
    def filter(self) -> FilterTerms:
        """The filter's terms."""
        return FilterTerms(self.key_terms, self.value_terms)

    @property
    def where(self) -> Expr | None:
        """The whole filter (None: none)."""
        return and_all(self.key_terms + self.value_terms)

    def narrowed(self, r: EncodedRange) -> ScanRequest:
        """This request restricted to the keys whose encoding is in `r`."""
        return dataclasses.replace(self, within=r if self.within is None else self.within.intersect(r))

    def replace(self, **changes: Any) -> ScanRequest:
        """This request with some fields changed (`dataclasses.replace`)."""
        return dataclasses.replace(self, **changes)


def resolve_columns(schema: Schema, level: str | None, selectors: tuple[Any, ...]) -> tuple[str, list[Column]]:
    """Column selectors (paths, groups, `Col`s) → the scan level and its columns."""
    paths = [s.path if hasattr(s, "path") else s for s in selectors]
    if level is not None:
        schema.level(level)
    # key columns are always in the output: naming them selects nothing more
    keys = set(schema.key_names(level or ""))
    if paths and all(isinstance(p, str) and p in keys for p in paths):
        return level or "", []
    paths = [p for p in paths if not (isinstance(p, str) and p in keys and not schema.has_column(p))]
    if not paths:
        lvl = level or ""
        return lvl, schema.columns_of(lvl)
    out: list[Column] = []
    levels: set[str] = set()
    for p in paths:
        if not isinstance(p, str):
            raise ColumnNotFoundError(f"column selectors are paths like 'audio.bytes', got {p!r}")
        lvl, cols = _resolve_first(schema, [join_path(level, p), p] if level else [p])
        levels.add(lvl)
        out.extend(c for c in cols if c not in out)
    if level is not None:
        levels.add(level)
    if len(levels) > 1:
        raise LevelError(
            f"columns {paths} come from levels {sorted(levels)}; a scan reads one level "
            "(use the nested expression API to broadcast or reduce across levels)"
        )
    return levels.pop(), out


def _resolve_first(schema: Schema, candidates: list[str]) -> tuple[str, list[Column]]:
    """The first candidate path (relative to the level, then full) naming columns or a group;
    else the first candidate's error, which lists the known columns."""
    first: ColumnNotFoundError | None = None
    for cand in candidates:
        try:
            return schema.resolve(cand)
        except ColumnNotFoundError as e:
            first = first or e
    assert first is not None
    raise first
