"""The inspector's pages over HTTP (issue 32, item 5): a page never carries a whole cell, long
column names and wide tables keep the layout, small images are upscaled, TIFF is converted."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from starlette.testclient import TestClient

import conch
from conch.apps.ui import values
from conch.apps.ui.app import create_app
from conch.apps.ui.folding import BLOB_HEAD, BLOB_PREVIEW_MAX, TEXT_KEEP, fold_rows
from media_fixtures import png

HUGE = 100 << 20  # a 100 MB caption
LONG_NAME = "n" * 5000


def tiff(pages: int = 3, size: tuple[int, int] = (40, 30), mode: str = "RGB") -> bytes:
    """A multi-page TIFF made with Pillow (the first page red-ish, distinct per page)."""
    frames = [Image.new(mode, size, (200, 30 * i, 40) if mode == "RGB" else 1000 * (i + 1)) for i in range(pages)]
    buf = io.BytesIO()
    frames[0].save(buf, format="TIFF", save_all=True, append_images=frames[1:])
    return buf.getvalue()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    wh = str(tmp_path_factory.mktemp("pages") / "w")
    cat = conch.connect(wh, maintenance=conch.Policy(auto=False))
    huge = cat.create_table("huge", [("id", pa.int64())])
    huge.write(
        [
            {"id": 1, "caption": "word " * (HUGE // 5), "blob": b"\x00" * (BLOB_PREVIEW_MAX + 1)},
            {"id": 2, "caption": "short", "blob": b"tiny"},
        ]
    )
    wide = cat.create_table("wide", [("id", pa.int64())])
    wide.write(
        [{"id": i, LONG_NAME: i * 1.25, **{f"measure_{j}_mm": 1234567.891 + j for j in range(16)}} for i in range(3)]
    )
    imgs = cat.create_table("imgs", [("id", pa.int64())])
    digit = Image.fromarray((np.arange(28 * 28).reshape(28, 28) % 256).astype(np.uint8), "L")
    buf = io.BytesIO()
    digit.save(buf, format="PNG")
    imgs.write(
        [{"id": 1, "digit": buf.getvalue(), "scan": tiff()}, {"id": 2, "digit": png(1), "scan": tiff(mode="I;16")}]
    )
    return TestClient(create_app(wh))


def test_a_100_mb_cell_makes_a_small_page(client: TestClient) -> None:
    """The scan page of a table with a 100 MB string and an 8 MB blob stays under 100 KB: the
    text is a prefix and its size, the blob a link with its size (the page was 314 MB)."""
    r = client.get("/t/huge/scan")
    assert r.status_code == 200
    assert len(r.content) < 100_000
    assert f"({HUGE // 5 * 5:,} chars)" in r.text  # the whole text's size, folded
    assert "binary 8.4MB" in r.text  # the blob's size, not its bytes
    link = re.search(r'<a class="blob" href="(/t/huge/blob\?[^"]*col=blob[^"]*)"', r.text)
    assert link is not None
    blob = client.get(link.group(1).replace("&amp;", "&"))
    assert blob.status_code == 200 and len(blob.content) == BLOB_PREVIEW_MAX + 1  # the link gives it whole


def test_long_column_names_are_cut_and_numbers_never_break(client: TestClient) -> None:
    page = client.get("/t/wide/scan").text
    results = page[page.index('id="results"') : page.index("</table>", page.index('id="results"'))]
    assert LONG_NAME not in results  # its header is cut to NAME_SHOWN characters (explain() names it whole)
    assert '<span class="colname" title="' + "n" * 200 + '…">' in page
    assert '<span class="num">1.25</span>' in page and '<span class="num">1.23457e+06</span>' in page
    css = client.get("/static/style.css").text
    scan_td = re.search(r"table\.scan td \{([^}]*)\}", css)
    assert scan_td is not None and "anywhere" not in scan_td.group(1)  # words and numbers are not broken
    assert re.search(r"\.num \{[^}]*white-space: nowrap", css)
    assert re.search(r"th \.colname \{[^}]*text-overflow: ellipsis", css)


def _images(page: str) -> list[tuple[str, int, int, bytes]]:
    found = re.findall(r'<img class="([^"]*)"[^>]*width="(\d+)" height="(\d+)" src="data:[^;]+;base64,([^"]+)"', page)
    return [(cls, int(w), int(h), base64.b64decode(data)) for cls, w, h, data in found]


def test_small_images_are_upscaled_and_tiff_is_converted(client: TestClient) -> None:
    page = client.get("/t/imgs/scan").text
    imgs = _images(page)
    assert len(imgs) == 4, page  # two digits, two TIFFs: none 'binary'
    assert "binary" not in page
    digit = next(i for i in imgs if Image.open(io.BytesIO(i[3])).size == (28, 28))
    assert digit[0] == "thumb upscaled" and (digit[1], digit[2]) == (84, 84)  # 3× (pixelated by CSS)
    tiffs = [i for i in imgs if Image.open(io.BytesIO(i[3])).size == (40, 30)]
    assert len(tiffs) == 2 and all(Image.open(io.BytesIO(i[3])).format == "PNG" for i in tiffs)
    first = Image.open(io.BytesIO(tiffs[0][3])).convert("RGB")
    assert first.getpixel((0, 0)) == (200, 0, 40)  # the first page, every pixel
    assert page.count('<div class="blob-info">TIFF, ') == 2
    css = client.get("/static/style.css").text
    assert re.search(r"img\.thumb\.upscaled \{[^}]*image-rendering: pixelated", css)


@settings(deadline=None, max_examples=60)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {
                    "text": st.one_of(st.none(), st.text(max_size=TEXT_KEEP * 2 // 3) | st.just("é" * (TEXT_KEEP + 7))),
                    "tags": st.one_of(
                        st.none(), st.lists(st.one_of(st.none(), st.text(max_size=5) | st.just("x" * 2000)))
                    ),
                    "blob": st.one_of(st.none(), st.binary(max_size=20)),
                    "n": st.integers(-5, 5),
                }
            ),
        ),
        max_size=6,
    ),
    st.integers(0, 3),
)
def test_fold_rows_matches_a_model(rows: list[Any], offset: int) -> None:
    """Model: each string is its first TEXT_KEEP characters and its twin its length, each blob
    itself and its twin its size, at any depth, also for a sliced (offset) Arrow array."""
    table = pa.table({"s": pa.array(rows, type=_ROW)}).slice(min(offset, len(rows)))
    folded, sizes = fold_rows(table)
    for rec, size, want in zip(folded, sizes, rows[min(offset, len(rows)) :], strict=True):
        assert rec["s"] == _model(want) and size["s"] == _model_sizes(want)


_ROW = pa.struct([("text", pa.string()), ("tags", pa.list_(pa.string())), ("blob", pa.binary()), ("n", pa.int64())])


def _model(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _model(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_model(x) for x in v]
    return v[:TEXT_KEEP] if isinstance(v, str) else v


def _model_sizes(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _model_sizes(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_model_sizes(x) for x in v]
    return len(v) if isinstance(v, str | bytes) else None


def test_big_blobs_are_cut_to_their_head_and_named_from_it() -> None:
    big_png = png(2, (64, 64))
    padded = big_png + b"\x00" * (BLOB_PREVIEW_MAX + 10 - len(big_png))
    folded, sizes = fold_rows(pa.table({"b": pa.array([padded, b"ab", None], pa.large_binary())}))
    assert len(folded[0]["b"]) == BLOB_HEAD and folded[0]["b"] == padded[:BLOB_HEAD]
    assert [s["b"] for s in sizes] == [len(padded), 2, None] and folded[1]["b"] == b"ab"
    html = values.render(folded[0]["b"], lambda p: "/blob", "b", sizes[0]["b"])
    assert "<img" not in html and "PNG 64×64, 8.4MB" in html and 'href="/blob"' in html


def test_tiff_previews_with_pillow(tmp_path: Path) -> None:
    """A TIFF (`multipage.tif`) was 'binary': it is an image, its thumbnail a PNG of page one."""
    blob = tiff(pages=2, size=(300, 200))
    assert values.sniff(blob).format == "TIFF" and values.sniff(blob).kind == "image"
    thumb = values.thumbnail(blob)
    assert thumb is not None and thumb[0] == "image/webp" and (thumb[2], thumb[3]) == (128, 85)
    small = values.thumbnail(tiff(size=(20, 10), mode="I;16"))
    assert small is not None and small[0] == "image/png" and (small[2], small[3]) == (20, 10)
