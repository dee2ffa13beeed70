"""Cell values as HTML: image thumbnails, audio players with waveforms, tensor heat maps, folded text.

Blobs up to `INLINE_BYTES` are inlined as data URIs (one request per page); larger ones are
described and linked to the blob endpoint. Waveforms and heat maps are SVG computed here with
NumPy, so the browser needs no script to draw them.
"""

from __future__ import annotations

import base64
from html import escape
from typing import Any

import numpy as np

from conch.previews import describe, sniff, tensor_shape, waveform

INLINE_BYTES = 1 << 20
TEXT_FOLD = 120
HEAT_CELLS = 48  # a heat map shows at most this many rows and columns (strided)


def render(value: Any, blob_url: str | None = None) -> str:
    """One cell as HTML."""
    if value is None:
        return '<span class="null">null</span>'
    if isinstance(value, bytes):
        return render_blob(value, blob_url)
    if isinstance(value, list):
        shape = tensor_shape(value)
        if shape is not None and len(shape) >= 1 and (len(shape) > 1 or shape[0] > 8):
            return render_tensor(np.asarray(value, dtype=np.float64), shape)
        if len(value) > 8:
            return f"<details><summary>[{len(value)} items]</summary>{escape(str(value))}</details>"
        return escape(str(value))
    if isinstance(value, dict):
        rows = "".join(f"<tr><th>{escape(k)}</th><td>{render(v, None)}</td></tr>" for k, v in value.items())
        return f'<table class="nested">{rows}</table>'
    if isinstance(value, str) and len(value) > TEXT_FOLD:
        return (
            f'<details class="fold"><summary>{escape(value[:TEXT_FOLD])}… '
            f'<span class="muted">({len(value)} chars)</span></summary>{escape(value)}</details>'
        )
    if isinstance(value, float):
        return f"{value:.6g}"
    return escape(str(value))


def render_blob(blob: bytes, blob_url: str | None) -> str:
    info = sniff(blob)
    label = f'<div class="blob-info">{escape(info.describe())}</div>'
    inline = len(blob) <= INLINE_BYTES
    src = f"data:{info.mime};base64,{base64.b64encode(blob).decode()}" if inline else blob_url
    if info.kind == "image" and src:
        return f'<img class="thumb" alt="{escape(info.describe())}" src="{escape(src)}">{label}'
    if info.kind == "audio":
        wave = waveform_svg(blob)
        player = f'<audio controls preload="none" src="{escape(src)}"></audio>' if src else ""
        return f'<div class="audio">{wave}{player}{label}</div>'
    if blob_url and not inline:
        return f'<a href="{escape(blob_url)}">{escape(describe(blob))}</a>'
    return f'<span class="blob">{escape(describe(blob))}</span>'


def waveform_svg(blob: bytes, width: int = 240, height: int = 48) -> str:
    """Peak envelope of a PCM WAV as an SVG polyline (empty for other audio)."""
    peaks = waveform(blob, points=width // 2)
    if peaks is None or peaks.size == 0:
        return ""
    mid = height / 2
    xs = np.linspace(0, width, peaks.size)
    top = " ".join(f"{x:.1f},{mid - p * mid:.1f}" for x, p in zip(xs, peaks, strict=True))
    bottom = " ".join(f"{x:.1f},{mid + p * mid:.1f}" for x, p in zip(xs[::-1], peaks[::-1], strict=True))
    return (
        f'<svg class="wave" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'xmlns="http://www.w3.org/2000/svg"><polyline points="{top} {bottom}"/></svg>'
    )


def render_tensor(arr: np.ndarray, shape: tuple[int, ...]) -> str:
    """A tensor by its shape, with a heat map of its first 2-D slice."""
    label = f'<div class="blob-info">tensor {"×".join(map(str, shape))}, min {arr.min():.3g}, max {arr.max():.3g}</div>'
    plane = arr.reshape(1, -1) if arr.ndim == 1 else arr.reshape(-1, arr.shape[-2], arr.shape[-1])[0]
    rs = max(1, -(-plane.shape[0] // HEAT_CELLS))
    cs = max(1, -(-plane.shape[1] // HEAT_CELLS))
    plane = plane[::rs, ::cs]
    lo, hi = float(plane.min()), float(plane.max())
    norm = (plane - lo) / (hi - lo) if hi > lo else np.zeros_like(plane)
    cell = 6 if arr.ndim > 1 else 4
    rects = []
    for (i, j), v in np.ndenumerate(norm):
        r, g, b = _viridis(float(v))
        rects.append(f'<rect x="{j * cell}" y="{i * cell}" width="{cell}" height="{cell}" fill="rgb({r},{g},{b})"/>')
    w, h = plane.shape[1] * cell, plane.shape[0] * cell
    svg = f'<svg class="heat" viewBox="0 0 {w} {h}" width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">{"".join(rects)}</svg>'
    return f'<div class="tensor">{svg}{label}</div>'


def _viridis(v: float) -> tuple[int, int, int]:
    stops = [(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)]
    pos = min(max(v, 0.0), 1.0) * (len(stops) - 1)
    i = min(int(pos), len(stops) - 2)
    t = pos - i
    a, b = stops[i], stops[i + 1]
    return (round(a[0] + (b[0] - a[0]) * t), round(a[1] + (b[1] - a[1]) * t), round(a[2] + (b[2] - a[2]) * t))
