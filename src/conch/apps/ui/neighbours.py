"""The inspector's search (issue 31): a record's nearest neighbours as a grid, and a JSON endpoint.

`/t/{name}/neighbours?key=<hex>&level=&column=&k=&asof=` shows the record and its `k` nearest
fresh records by a vector index of its level (`Table.search` with the record's own vector; the
record itself is left out): each a card with its first image (a thumbnail, like the scan page's),
its key, distance and first text, linking to its own neighbours, so one can walk the space.

`/t/{name}/search?...` answers JSON for programs: `key=<hex>` (neighbours of a record), `vector=`
(a JSON list) or `text=` (BM25, `search_text`), with `k`, `column`, `where` (the filter syntax),
`columns`, `level`, `asof`. Rows are JSON values: blobs are replaced by their size, long strings
folded like the pages' (`folding`), so an answer never carries a whole cell.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any
from urllib.parse import urlencode

import pyarrow as pa

import conch
from conch.apps.ui.folding import fold_rows
from conch.apps.ui.values import render, render_text
from conch.errors import InvalidArgumentError
from conch.expr.syntax import parse
from conch.model.key_text import key_text
from conch.model.keys import decode_key, encode_key

DEFAULT_K = 12
MAX_K = 200


def _q(**params: Any) -> str:
    clean = {k: v for k, v in params.items() if v not in (None, "")}
    return "?" + urlencode(clean) if clean else ""


def _k(p: dict[str, str]) -> int:
    try:
        k = int(p.get("k") or DEFAULT_K)
    except ValueError:
        raise InvalidArgumentError(f"k={p.get('k')!r}: a whole number") from None
    if not 1 <= k <= MAX_K:
        raise InvalidArgumentError(f"k={k}: between 1 and {MAX_K}")
    return k


def vector_index(t: conch.Table, level: str, column: str | None, asof: int | None) -> Any:
    """The vector index of `level` (named by `column`, index name or column, when several)."""
    found = [
        i
        for i in t.indexes(asof=asof).values()
        if i.kind == "vector" and i.level == level and column in (None, "", i.name, i.column)
    ]
    if not found:
        raise InvalidArgumentError(f"level {level or '(root)'!r} has no vector index{f' {column!r}' if column else ''}")
    return found[0]


def neighbours_of(t: conch.Table, p: dict[str, str]) -> tuple[Any, tuple[Any, ...], pa.Table, pa.Table]:
    """(index, key, the record, its `k` nearest other fresh records with `_distance`)."""
    asof = int(p["asof"]) if p.get("asof") else None
    level = p.get("level", "")
    d = vector_index(t, level, p.get("column"), asof)
    fields = t.state_at(asof).schema.key_fields(level)
    key = decode_key(bytes.fromhex(p["key"]), fields)
    record = t.scan(keys=[key], asof=asof, level=level or None).to_arrow()
    if not record.num_rows:
        raise InvalidArgumentError(f"no record {key_text(key)} in {t.name!r}")
    vector = record.column(d.column)[0].as_py()
    if vector is None:
        raise InvalidArgumentError(f"record {key_text(key)} has no {d.column!r} vector")
    k = _k(p)
    where = parse(p["where"]) if p.get("where") else None
    found = t.search(vector, k=k + 1, column=d.name, where=where, asof=asof).to_arrow()
    names = [f.name for f in fields]
    mine = [tuple(r[n] for n in names) != key for r in found.select(names).to_pylist()]
    return d, key, record, found.filter(pa.array(mine)).slice(0, k)


def _first(rec: dict[str, Any], want: type, path: str = "") -> tuple[str, Any] | None:
    """The first value of type `want` in a record, at any struct depth: (its path, it)."""
    for name, value in rec.items():
        here = f"{path}.{name}" if path else name
        if isinstance(value, want):
            return here, value
        if isinstance(value, dict):
            inner = _first(value, want, here)
            if inner is not None:
                return inner
    return None


def _at(sizes: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        sizes = sizes.get(part) if isinstance(sizes, dict) else None  # type: ignore[assignment]
    return sizes


def card(
    name: str,
    level: str,
    d: Any,
    rec: dict[str, Any],
    sizes: dict[str, Any],
    key: tuple[Any, ...],
    p: dict[str, str],
    distance: float | None,
) -> str:
    """One record of the grid: image, key (a link to its neighbours), distance, first text."""
    fields_hex = p["_hex"]
    asof = p.get("asof")

    def blob_url(path: str) -> str:
        return f"/t/{name}/blob{_q(level=level, key=fields_hex, col=path, asof=asof)}"

    image = _first({k: v for k, v in rec.items() if k != d.column}, bytes)
    text = _first({k: v for k, v in rec.items() if k != d.column}, str)
    picture = (
        render(image[1], blob_url, image[0], _at(sizes, image[0])) if image else '<div class="noimg">no image</div>'
    )
    caption = render_text(text[1], len(text[1])) if text else ""
    href = f"/t/{name}/neighbours{_q(level=level, key=fields_hex, column=d.name, k=p.get('k'), asof=asof)}"
    dist = f'<span class="dist">{distance:.4g}</span>' if distance is not None else '<span class="dist">query</span>'
    return (
        f'<figure class="nn">{picture}<figcaption><a class="nnkey" href="{escape(href)}">{escape(key_text(key))}</a>'
        f' {dist}<div class="nntext">{caption}</div></figcaption></figure>'
    )


def neighbours_body(t: conch.Table, name: str, p: dict[str, str]) -> str:
    d, key, record, found = neighbours_of(t, p)
    level = p.get("level", "")
    fields = t.state_at(int(p["asof"]) if p.get("asof") else None).schema.key_fields(level)
    names = [f.name for f in fields]
    cards = []
    rows, sizes = fold_rows(record)
    cards.append(card(name, level, d, rows[0], sizes[0], key, {**p, "_hex": p["key"]}, None))
    grid = []
    recs, rec_sizes = fold_rows(found.drop_columns(["_distance"]))
    for rec, size, dist in zip(recs, rec_sizes, found.column("_distance").to_pylist(), strict=True):
        kt = tuple(rec[n] for n in names)
        grid.append(card(name, level, d, rec, size, kt, {**p, "_hex": encode_key(kt, fields).hex()}, dist))
    return (
        f'<p class="muted">the {len(grid)} nearest fresh records to {escape(key_text(key))} by index '
        f"{escape(d.name)!s} ({escape(d.metric)} on {escape(d.column)})</p>"
        f'<div class="nn-query">{cards[0]}</div><div class="nn-grid" id="neighbours">{"".join(grid)}</div>'
    )


def _json_value(v: Any) -> Any:
    if isinstance(v, bytes):
        return {"blob_bytes": len(v)}
    if isinstance(v, dict):
        return {k: _json_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json_value(x) for x in v]
    if isinstance(v, float | int | str | bool) or v is None:
        return v
    return str(v)


def search_json(t: conch.Table, p: dict[str, str]) -> dict[str, Any]:
    """The JSON endpoint's answer (module doc)."""
    asof = int(p["asof"]) if p.get("asof") else None
    k = _k(p)
    where = parse(p["where"]) if p.get("where") else None
    columns = [c.strip() for c in p.get("columns", "").split(",") if c.strip()] or None
    if p.get("key"):
        _, _, _, found = neighbours_of(t, p)
        plan = f"neighbours of key {p['key']}"
    elif p.get("vector"):
        try:
            vector = json.loads(p["vector"])
        except ValueError:
            raise InvalidArgumentError("vector= must be a JSON list of numbers") from None
        result = t.search(vector, k=k, column=p.get("column") or None, where=where, columns=columns, asof=asof)
        found, plan = result.to_arrow(), result.explain()
    elif p.get("text"):
        result = t.search_text(p["text"], column=p.get("column") or None, k=k, where=where, columns=columns, asof=asof)
        found, plan = result.to_arrow(), result.explain()
    else:
        raise InvalidArgumentError("say what to search: key=<hex key>, vector=[...] or text=...")
    rows, _ = fold_rows(found)
    return {"rows": [_json_value(r) for r in rows], "explain": plan}
