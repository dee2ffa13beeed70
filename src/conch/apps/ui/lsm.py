"""The LSM tree of one table state, drawn as SVG on the server.

Per level: one lane per LSM level (L0, L1, ...) of key spaces, each a bar over its key span; then,
per column group, the fragments drawn under the key space they belong to, at the rows they cover.
A key's position on the x axis is its encoded key's first 8 bytes, scaled between the level's
smallest and largest key: the order is exact, distances approximate. Colours: data key spaces
blue, deletions red; fragments dense (cover every row of their key space) green, sparse
(some rows) amber, masked (a key mask hides rows; written by compaction) hatched. `lsm` and
`compacted_at` come from the manifests: every run is L0 until compaction rewrites it.
"""

from __future__ import annotations

from html import escape
from typing import Any

from conch.files.manifest import KeySpace, TableState
from conch.model.key_text import key_text
from conch.model.keys import decode_key
from conch.model.progress import human_bytes

WIDTH = 900
LABEL = 150
LANE = 26


def _pos(hex_key: str) -> int:
    raw = bytes.fromhex(hex_key)[:8]
    return int.from_bytes(raw.ljust(8, b"\0"), "big")


def _when(us: int | None) -> str:
    from datetime import UTC, datetime

    if not us:
        return "never"
    return datetime.fromtimestamp(us / 1e6, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _bar_label(x0: float, w: float, y: int, text: str) -> str:
    """Inside the bar when it fits, else beside it (left of bars that end near the edge)."""
    if w >= 7 * len(text):
        return f'<text x="{x0 + 4:.1f}" y="{y}">{escape(text)}</text>'
    if x0 + w + 7 * len(text) < WIDTH:
        return f'<text x="{x0 + w + 4:.1f}" y="{y}">{escape(text)}</text>'
    return f'<text x="{x0 - 4:.1f}" y="{y}" text-anchor="end">{escape(text)}</text>'


def level_svg(state: TableState, level: str) -> str:
    """The SVG drawing of one level's key spaces and fragments."""
    schema = state.schema
    fields = schema.key_fields(level)
    spaces = sorted((k for k in state.key_spaces.values() if k.level == level), key=lambda k: (k.lsm, k.seq))
    if not spaces:
        return '<p class="muted">no key spaces at this level (nothing written, or everything compacted away)</p>'
    lo = min(_pos(k.min_key) for k in spaces)
    hi = max(_pos(k.max_key) for k in spaces)
    span = max(hi - lo, 1)
    usable = WIDTH - LABEL - 10

    def x(hex_key: str) -> float:
        return LABEL + (_pos(hex_key) - lo) / span * usable

    def extent(k: KeySpace) -> tuple[float, float]:
        x0, x1 = x(k.min_key), x(k.max_key)
        return x0, max(x1 - x0, 8.0)

    parts: list[str] = []
    y = 20
    lo_text = key_text(decode_key(bytes.fromhex(min(k.min_key for k in spaces)), fields))
    hi_text = key_text(decode_key(bytes.fromhex(max(k.max_key for k in spaces)), fields))
    room = max(8, (WIDTH - LABEL - 30) // 2 // 7)  # characters each end label has (~7 px each): no overlap
    for at, anchor, text in ((LABEL, "start", lo_text), (WIDTH - 10, "end", hi_text)):
        short = text if len(text) <= room else text[: room - 1] + "…"
        parts.append(
            f'<text x="{at}" y="12" class="axis" text-anchor="{anchor}"><title>{escape(text)}</title>{escape(short)}</text>'
        )
    lanes: dict[int, list[KeySpace]] = {}
    for k in spaces:
        lanes.setdefault(k.lsm, []).append(k)
    row_of: dict[str, tuple[int, KeySpace]] = {}
    parts.append(f'<text x="4" y="{y + 10}" class="section">key spaces</text>')
    y += 16
    for lsm, members in sorted(lanes.items()):
        # Overlapping runs of one LSM level stack in sub-lanes so each stays visible.
        sub_ends: list[float] = []
        placed: list[tuple[int, KeySpace]] = []
        for k in members:
            x0, w = extent(k)
            sub = next((i for i, end in enumerate(sub_ends) if end < x0), None)
            if sub is None:
                sub_ends.append(x0 + w)
                sub = len(sub_ends) - 1
            else:
                sub_ends[sub] = x0 + w
            placed.append((sub, k))
        parts.append(f'<text x="4" y="{y + 15}" class="lane">L{lsm} ({len(members)} runs)</text>')
        for sub, k in placed:
            x0, w = extent(k)
            ky = y + sub * LANE
            row_of[k.id] = (ky, k)
            cls = "ks-del" if k.kind == "tombstone" else "ks"
            span_text = f"{key_text(decode_key(bytes.fromhex(k.min_key), fields))} .. {key_text(decode_key(bytes.fromhex(k.max_key), fields))}"
            tip = (
                f"key space {k.id} ({'deletions' if k.kind == 'tombstone' else 'data'})\nL{k.lsm}, {k.rows} keys, "
                f"{human_bytes(k.bytes)}\nkeys {span_text}\ncommitted {_when(k.time)} (seq {k.seq})\n"
                f"compacted {_when(k.compacted_at)}"
            )
            parts.append(
                f'<g class="{cls}" data-id="{k.id}"><title>{escape(tip)}</title>'
                f'<rect x="{x0:.1f}" y="{ky}" width="{w:.1f}" height="{LANE - 6}" rx="3"/>'
                + _bar_label(
                    x0, w, ky + 14, f"{k.rows} keys · seq {k.seq}{' (deletions)' if k.kind == 'tombstone' else ''}"
                )
                + "</g>"
            )
        y += LANE * max(1, len(sub_ends)) + 6
    for group in schema.groups(level):
        frags = [f for f in state.fragments.values() if f.level == level and f.group == group]
        parts.append(
            f'<text x="4" y="{y + 14}" class="section">group {escape(group or "(root)")}: {len(frags)} fragments</text>'
        )
        y += 20
        covered: dict[str, int] = {}
        for f in frags:
            covered[f.key_space] = covered.get(f.key_space, 0) + f.rows
        for f in sorted(frags, key=lambda f: (f.seq, f.start)):
            owner = row_of.get(f.key_space)
            if owner is None:
                continue
            ky, k = owner
            x0, w = extent(k)
            fx = x0 + w * f.start / max(k.rows, 1)
            fw = max(w * f.rows / max(k.rows, 1), 3.0)
            kind = "masked" if f.mask else "dense" if covered.get(k.id, 0) >= k.rows else "sparse"
            tip = (
                f"fragment {f.id} ({kind})\nrows {f.start}..{f.start + f.rows} of key space {k.id}\n"
                f"{human_bytes(f.bytes)} (metadata {human_bytes(len(f.stats))}), L{f.lsm}\n"
                f"committed {_when(f.time)} (seq {f.seq})\ncompacted {_when(f.compacted_at)}"
            )
            parts.append(
                f'<g class="frag frag-{kind}" data-id="{f.id}"><title>{escape(tip)}</title>'
                f'<rect x="{fx:.1f}" y="{y}" width="{fw:.1f}" height="14" rx="2"/></g>'
            )
            y += 16
        y += 8
    legend = (
        f'<g class="legend" transform="translate(4,{y + 4})">'
        '<rect class="ks" x="0" y="0" width="12" height="10"/><text x="16" y="9">data keys</text>'
        '<rect class="ks-del" x="90" y="0" width="12" height="10"/><text x="106" y="9">deletions</text>'
        '<rect class="frag-dense" x="180" y="0" width="12" height="10"/><text x="196" y="9">dense fragment</text>'
        '<rect class="frag-sparse" x="300" y="0" width="12" height="10"/><text x="316" y="9">sparse</text>'
        '<rect class="frag-masked" x="370" y="0" width="12" height="10"/><text x="386" y="9">masked</text>'
        "</g>"
    )
    height = y + 24
    return (
        f'<svg class="lsm" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="LSM tree of level {escape(level or "root")}">'
        + "".join(parts)
        + legend
        + "</svg>"
    )


def summary(state: TableState) -> dict[str, Any]:
    """Counts for the overview: key spaces by LSM level, fragments, bytes."""
    by_lsm: dict[int, int] = {}
    for k in state.key_spaces.values():
        by_lsm[k.lsm] = by_lsm.get(k.lsm, 0) + 1
    return {
        "key_spaces": len(state.key_spaces),
        "fragments": len(state.fragments),
        "bytes": sum(f.bytes for f in state.fragments.values()) + sum(k.bytes for k in state.key_spaces.values()),
        "by_lsm": by_lsm,
    }
