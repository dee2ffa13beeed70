"""Cell values as HTML: image thumbnails, audio players with waveforms, tensor heat maps, folded
text, structs as compact field grids.

A page never carries a blob or a whole long text (`folding` cuts them in Arrow first): an image is
a thumbnail (at most `THUMB_PX` on its longer side, made with Pillow once per distinct image and
kept in a bounded cache; one the browser cannot show, such as TIFF, converted; a small one shown
at an integer multiple, pixelated) inlined as a data URI and linked to the full image at the blob
endpoint; audio is a waveform and a player whose source is
the blob endpoint (fetched on play). Waveforms and heat maps are SVG computed here with NumPy, so
the browser needs no script to draw them. `blob_url(path)` gives the blob endpoint of the value
at a column path (`image.png`), for blobs at any depth of a struct.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
from collections.abc import Callable
from html import escape
from typing import Any

import numpy as np

from conch.apps.previews import sniff, tensor_shape, waveform
from conch.model.lru import Lru

BlobUrl = Callable[[str], str]
THUMB_PX = 128  # a thumbnail's longer side
SMALL_IMAGE_BYTES = 12_000  # an image within THUMB_PX and this size is its own thumbnail
THUMB_CACHE = 1024  # thumbnails kept (each a few KB)
TEXT_FOLD = 120  # characters of a long text shown before it is unfolded
SHORT_TEXT = 40  # text up to this many characters is not wrapped
LONG_TOKEN = 24  # a word longer than this may wrap anywhere; shorter ones never break
LIST_SHOW = 50  # items of a long list shown
UPSCALE_TO = 96  # an image at most half this size is shown at an integer multiple (pixelated)
BROWSER_IMAGES = {"image/png", "image/jpeg", "image/gif", "image/webp"}  # others: converted
HEAT_CELLS = 48  # a heat map shows at most this many rows and columns (strided)
STRUCT_TABLE_FIELDS = 3  # a struct of at most this many fields stays a small table; wider: a grid


def render(value: Any, blob_url: BlobUrl | None = None, path: str = "", size: Any = None) -> str:
    """One cell as HTML; `path` is the value's column path (for `blob_url`); `size` its twin from
    `folding.fold_rows` (the full length of a folded string or blob, at the same nesting)."""
    if value is None:
        return '<span class="null">null</span>'
    if isinstance(value, bytes):
        return render_blob(value, blob_url(path) if blob_url is not None else None, size)
    if isinstance(value, list):
        shape = tensor_shape(value)
        if shape is not None and len(shape) >= 1 and (len(shape) > 1 or shape[0] > 8):
            return render_tensor(np.asarray(value, dtype=np.float64), shape)
        if len(value) > 8:
            more = "" if len(value) <= LIST_SHOW else f", … {len(value) - LIST_SHOW} more"
            return (
                f'<details><summary>[{len(value)} items]</summary><span class="text long">'
                f"{escape(str(value[:LIST_SHOW]))}{more}</span></details>"
            )
        return escape(str(value))
    if isinstance(value, dict):
        return render_struct(value, blob_url, path, size if isinstance(size, dict) else {})
    if isinstance(value, str):
        return render_text(value, size if isinstance(size, int) else len(value))
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f'<span class="num">{value:.6g}</span>'
    if isinstance(value, int):
        return f'<span class="num">{value}</span>'
    return escape(str(value))


def render_text(text: str, chars: int) -> str:
    """Text of `chars` characters in all, of which `text` is the prefix a page may carry: short
    text as is, longer text folded to its first `TEXT_FOLD` characters and its size. Words are
    never broken; only a token too long for any cell (a URL, a hash) may wrap anywhere."""
    cls = "text long" if any(len(tok) > LONG_TOKEN for tok in text[: TEXT_FOLD * 2].split()) else "text"
    if chars <= SHORT_TEXT and "\n" not in text:
        cls += " short"  # a label or a short sentence stays one line: a wide table scrolls instead
    if chars <= TEXT_FOLD:
        return f'<span class="{cls}">{escape(text)}</span>'
    rest = f"… ({chars - len(text):,} more chars)" if chars > len(text) else ""
    return (
        f'<details class="fold"><summary><span class="{cls}">{escape(text[:TEXT_FOLD])}…</span> '
        f'<span class="muted">({chars:,} chars)</span></summary>'
        f'<span class="text long">{escape(text)}{rest}</span></details>'
    )


def render_struct(value: dict[str, Any], blob_url: BlobUrl | None, path: str, sizes: dict[str, Any]) -> str:
    """A struct: up to `STRUCT_TABLE_FIELDS` fields as a small table; wider ones as a grid of
    `name value` cells that wraps into columns (a 13-field group is a few lines, not 13 rows).
    Blobs, tensors and long text take a whole line of the grid."""

    def sub(k: str) -> str:
        return f"{path}.{k}" if path else k

    if len(value) <= STRUCT_TABLE_FIELDS:
        rows = "".join(
            f"<tr><th>{escape(k)}</th><td>{render(v, blob_url, sub(k), sizes.get(k))}</td></tr>"
            for k, v in value.items()
        )
        return f'<table class="nested">{rows}</table>'
    cells = []
    for k, v in value.items():
        wide = isinstance(v, (bytes, dict, list)) or (isinstance(v, str) and len(v) > 40)
        cells.append(
            f'<div class="kv{" wide" if wide else ""}"><span class="k">{escape(k)}</span>'
            f'<span class="v">{render(v, blob_url, sub(k), sizes.get(k))}</span></div>'
        )
    return f'<div class="struct">{"".join(cells)}</div>'


def render_blob(blob: bytes, blob_url: str | None, size: int | None = None) -> str:
    """A blob as a thumbnail, a waveform and player, or its description; each a link to the blob.
    `size` is its full size when `blob` is only its head (`folding.BLOB_HEAD`): then it is named
    from its header and linked, not drawn."""
    whole = size is None or size <= len(blob)
    info = sniff(blob)
    if not whole:
        info = dataclasses.replace(info, size=size or len(blob), seconds=None)
    label = f'<div class="blob-info">{escape(info.describe())}</div>'
    if info.kind == "image" and whole:
        thumb = thumbnail(blob)
        if thumb is not None:
            mime, data, w, h = thumb
            scale = max(1, UPSCALE_TO // max(w, h, 1))
            img = (
                f'<img class="thumb{" upscaled" if scale > 1 else ""}" alt="{escape(info.describe())}" '
                f'width="{w * scale}" height="{h * scale}" '
                f'src="data:{mime};base64,{base64.b64encode(data).decode()}">'
            )
            if blob_url:
                img = f'<a class="full" href="{escape(blob_url)}" target="_blank" title="full image">{img}</a>'
            return img + label
    if info.kind == "audio" and whole:
        wave = waveform_svg(blob)
        player = f'<audio controls preload="none" src="{escape(blob_url)}"></audio>' if blob_url else ""
        return f'<div class="audio">{wave}{player}{label}</div>'
    if blob_url:
        return f'<a class="blob" href="{escape(blob_url)}">{escape(info.describe())}</a>'
    return f'<span class="blob">{escape(info.describe())}</span>'


# (thumbnail,): a value that makes no thumbnail (None) is remembered too
_thumbs: Lru[bytes, tuple[tuple[str, bytes, int, int] | None]] = Lru(max_entries=THUMB_CACHE)


def thumbnail(blob: bytes) -> tuple[str, bytes, int, int] | None:
    """`(mime, bytes, width, height)` of a thumbnail of an image blob, at most `THUMB_PX` on its
    longer side (a small image is its own), or None when Pillow is missing or cannot decode it.
    Computed once per distinct image (a bounded LRU cache keyed by the image's digest)."""
    digest = hashlib.blake2b(blob, digest_size=16).digest()
    return _thumbs.get_or_make(digest, lambda: (_make_thumbnail(blob),))[0]


def _make_thumbnail(blob: bytes) -> tuple[str, bytes, int, int] | None:
    try:
        from PIL import Image
    except ImportError:
        return None
    info = sniff(blob)
    try:
        with Image.open(io.BytesIO(blob)) as img:
            w, h = img.size
            small = w <= THUMB_PX and h <= THUMB_PX
            if small and len(blob) <= SMALL_IMAGE_BYTES and info.mime in BROWSER_IMAGES:
                return info.mime, blob, w, h
            if not small:
                img.draft("RGB", (THUMB_PX * 2, THUMB_PX * 2))  # JPEG: decode at a reduced scale
            img.thumbnail((THUMB_PX, THUMB_PX))
            out = _displayable(img)
            buf = io.BytesIO()
            if small:  # a small image the browser cannot show (TIFF, BMP): lossless, every pixel
                out.save(buf, format="PNG", optimize=True)
                return "image/png", buf.getvalue(), out.width, out.height
            out.save(buf, format="WEBP", quality=80, method=4)
            return "image/webp", buf.getvalue(), out.width, out.height
    except Exception:
        return None


def _displayable(img: Any) -> Any:
    """The first frame of `img` as 8-bit RGB or RGBA: 16-bit and float images (TIFF, PNG) are
    stretched from their own minimum to maximum."""
    from PIL import Image

    if img.mode in ("I", "F") or img.mode.startswith("I;16"):
        arr = np.asarray(img, dtype=np.float64)
        lo, hi = float(arr.min()), float(arr.max())
        scaled = (arr - lo) * (255.0 / (hi - lo)) if hi > lo else np.zeros_like(arr)
        img = Image.fromarray(scaled.astype(np.uint8), "L")
    alpha = img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info)
    return img.convert("RGBA" if alpha else "RGB")


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
