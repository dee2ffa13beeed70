"""`conch ui` in a real headless Chromium: every page loads, history and a scan are clicked through.

The server is the real CLI (`conch ui`) in a subprocess on a free loopback port; the browser is
Debian's `chromium` (installed by `.ci/install-chromium.sh`) driven by Playwright. Screenshots
go to `$CONCH_SCREENSHOTS` (default: the test's tmp dir) and must not be blank.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from PIL import Image, ImageStat

import conch
from media_fixtures import FEATURES, make_first_hour, make_media, photo
from nested_fixtures import make_recordings

CHROMIUM = "/usr/bin/chromium"
pytestmark = [
    pytest.mark.xdist_group("browser"),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="run .ci/install-chromium.sh (make installs it)"),
]
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def ui_server(warehouse: str) -> Iterator[str]:
    """`conch ui` on `warehouse` in a subprocess on a free loopback port, until it answers; its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "conch.apps.cli", "--warehouse", warehouse, "ui", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(url + "/", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"conch ui exited: {proc.stdout.read() if proc.stdout else ''}") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextlib.contextmanager
def chromium_page(profile: Path) -> Iterator[Any]:
    """A page of Debian's headless Chromium (Playwright), 1280 × 900, 60 s timeouts."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, args=ARGS, headless=True, viewport={"width": 1280, "height": 900}
        )
        pg = ctx.new_page()
        pg.set_default_timeout(60_000)
        yield pg
        ctx.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    wh = str(tmp_path_factory.mktemp("ui") / "w")
    # The pages are checked run by run and commit by commit: no automatic compaction commits.
    cat = conch.connect(wh, maintenance=conch.Policy(auto=False))
    make_media(cat)
    make_recordings(cat)
    make_first_hour(cat)
    make_huge_and_wide(cat)
    rec = cat.table("recordings")  # a tag and a branch (the overview lists them)
    rec.tag("labelled")
    rec.branch("relabel")
    with ui_server(wh) as url:
        yield url


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    profile = tmp_path_factory.mktemp("chromium-profile")
    with chromium_page(profile) as pg:
        yield pg


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = Path(os.environ.get("CONCH_SCREENSHOTS") or tmp_path_factory.mktemp("shots"))
    out.mkdir(parents=True, exist_ok=True)
    return out


def snap(page: Any, shots: Path, name: str) -> Path:
    """Save a full-page screenshot and check it is not blank (pixels vary, not one flat colour)."""
    path = shots / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    img = Image.open(path).convert("L")
    assert img.size[0] >= 800 and img.size[1] >= 400
    assert ImageStat.Stat(img).stddev[0] > 10, f"{name} looks blank"
    colours = len(Image.open(path).convert("RGB").resize((200, 200)).getcolors(maxcolors=40_000) or ())
    assert colours > 20, f"{name} has only {colours} colours"
    return path


def test_tables_and_overview_lsm_tree(server: str, page: Any, shots: Path) -> None:
    page.goto(server + "/")
    assert page.locator("#tables tr").count() == 6  # header + huge + media + penguins + recordings + scans
    snap(page, shots, "01-tables")
    page.click("text=media")
    page.wait_for_selector("svg.lsm")
    # 3 writes + 1 delete: 4 key spaces (one of deletions) at L0, fragments under them
    assert page.locator("svg.lsm g.ks").count() == 3
    assert page.locator("svg.lsm g.ks-del").count() == 1
    assert page.locator("svg.lsm g.frag").count() >= 4
    assert "L0 (4 runs)" in (page.locator("svg.lsm").text_content() or "")
    assert page.locator("ul.tree li.group").count() >= 3  # root, image, audio groups
    snap(page, shots, "02-overview")


def test_history_time_travel(server: str, page: Any, shots: Path) -> None:
    page.goto(server + "/t/media")
    assert page.locator("svg.timeline a.commit").count() == 4
    page.locator("svg.timeline a.commit circle").first.click()  # as of commit 1: metadata only
    page.wait_for_selector(".asof")
    assert page.locator("svg.lsm g.ks").count() == 1 and page.locator("svg.lsm g.ks-del").count() == 0
    snap(page, shots, "03-asof-commit1")
    page.click("nav.tabs >> text=scan")
    assert "asof=" in page.url
    heads = page.locator("#results > tbody > tr > th").all_inner_texts()
    assert heads == ["id", "score", "label"]  # nothing of the later writes
    assert page.locator("#results > tbody > tr").count() == 7  # 6 rows: the delete is later
    page.click("nav.tabs >> text=manifests")
    assert page.locator("table.manifest").count() >= 1
    snap(page, shots, "04-manifests-asof")


def test_scan_previews_and_key_lookup(server: str, page: Any, shots: Path) -> None:
    page.goto(server + "/t/media/scan")
    assert page.locator("#results > tbody > tr").count() == 6  # 5 records after the delete
    imgs = page.locator("img.thumb")
    assert imgs.count() == 5
    assert page.evaluate("Array.from(document.images).every(i => i.complete && i.naturalWidth === 48)")
    assert page.locator("audio").count() == 5 and page.locator("svg.wave polyline").count() == 5
    assert page.locator("svg.heat").count() == 5 and "tensor 16×16" in page.inner_text("#results")
    assert page.locator("details.fold").count() == 5
    assert "PNG 48×32" in page.inner_text("#results") and "WAV 0.50s 8000Hz mono" in page.inner_text("#results")
    assert "merge key spaces" in page.inner_text("pre.explain")
    assert page.locator("table.metrics tr").count() > 5
    snap(page, shots, "05-scan-previews")
    page.fill("input[name=where]", "score between 0.1 and 0.3 and label like 'item%'")
    page.fill("input[name=columns]", "score, image.png")
    page.click("#run")
    _wait_for_first_column(page, ["1", "2", "3"])
    page.fill("input[name=where]", "")
    page.fill("input[name=key]", "4")
    page.click("#run")
    _wait_for_first_column(page, ["4"])
    snap(page, shots, "06-scan-filter-key")


def test_nested_levels_navigable(server: str, page: Any, shots: Path) -> None:
    page.goto(server + "/t/recordings/scan?level=scenes")
    assert page.locator("#results > tbody > tr > td:first-child").all_inner_texts() == ["s1", "s2"]
    page.locator("a.child", has_text="clips").first.click()
    assert page.locator("#results > tbody > tr > td:nth-child(2)").all_inner_texts() == ["c1", "c2"]
    assert "s1" in page.inner_text(".crumb")
    page.locator("a.child", has_text="frames").first.click()
    assert page.locator("#results > tbody > tr").count() == 3  # frames 0 and 1 of s1/c1
    snap(page, shots, "07-nested-frames")
    page.goto(server + "/t/recordings")
    assert page.locator("svg.lsm").count() >= 5  # root, scenes, clips, frames, detections, ...
    snap(page, shots, "08-nested-overview")


def test_tags_and_branches_are_shown(server: str, page: Any, shots: Path) -> None:
    page.goto(server + "/t/recordings")
    assert page.locator("#tags td.tag").all_inner_texts() == ["labelled"]
    assert page.locator("#branches td.branch").all_inner_texts() == ["relabel"]
    page.locator("#tags a.asof-link").click()  # the tagged version
    page.wait_for_selector(".asof")
    page.goto(server + "/t/recordings")
    page.click("#branches >> text=relabel")
    page.wait_for_selector(".branch-of")
    assert "/t/recordings@relabel" in page.url
    assert "branch relabel of table recordings" in page.inner_text(".branch-of")
    assert page.locator("svg.lsm").count() >= 5  # the branch's state: the table's files
    assert page.locator("svg.timeline a.commit").count() == 1  # its version 1, the base
    snap(page, shots, "08b-branch-overview")
    assert page.locator("aside li", has_text="relabel").count() == 0  # branches are not listed as tables


def test_errors_render_as_pages(server: str, page: Any) -> None:
    resp = page.goto(server + "/t/nope")
    assert resp.status == 404 and "no table 'nope'" in page.inner_text(".error")
    resp = page.goto(server + "/t/media/scan?where=score+%3E")
    assert resp.status == 400 and "cannot parse filter" in page.inner_text(".error")


# ----- issue 21: the first hour (13 photos, 24-bit audio, a 13-field struct, an expired history) ----
WIDE = {"width": 1400, "height": 900}
PAGE_BYTES = 200_000  # the 13-row scan page: was 1.6 MB of full images as base64


def _load(page: Any, url: str) -> tuple[int, int]:
    """Load `url`; (bytes of every response the page fetched, the HTML's bytes)."""
    sizes: list[int] = []

    def count(resp: Any) -> None:
        with contextlib.suppress(Exception):  # a redirect or an aborted media request has no body
            sizes.append(len(resp.body()))

    page.on("response", count)
    try:
        resp = page.goto(url)
        page.wait_for_load_state("networkidle")
    finally:
        page.remove_listener("response", count)
    return sum(sizes), len(resp.body())


def _no_overflow(page: Any, content: bool = False) -> None:
    """The page is no wider than the window; with `content`, nothing in it needs a horizontal
    scroll either (no table wider than its box)."""
    scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= inner, f"the page overflows: {scroll} px wide in a {inner} px window"
    if content:
        boxes = page.evaluate(
            "Array.from(document.querySelectorAll('section, section .scroll')).map(e => [e.scrollWidth, e.clientWidth])"
        )
        assert all(w <= c for w, c in boxes), f"content wider than its box: {boxes}"


def test_first_hour_scan_page_is_light_and_fits(server: str, page: Any, shots: Path) -> None:
    page.set_viewport_size(WIDE)
    try:
        total, html = _load(page, server + "/t/scans/scan")
        assert page.locator("#results > tbody > tr").count() == 14  # header + 13
        assert total < PAGE_BYTES and html < PAGE_BYTES, (total, html)
        # real thumbnails: bounded, each linked to its full image
        sizes = page.evaluate("Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
        assert len(sizes) == 13 and all(ok and 0 < w <= 128 and 0 < h <= 128 for ok, w, h in sizes), sizes
        href = page.locator("a.full").first.get_attribute("href")
        full = urllib.request.urlopen(server + href, timeout=30).read()
        assert full.startswith(b"\x89PNG") and full in [photo(i) for i in range(13)]
        # 24-bit WAV: a waveform each, the player fetches the blob only on play
        assert page.locator("svg.wave polyline").count() == 13
        assert page.locator("audio[src^='data:']").count() == 0
        # a 13-field struct: a compact grid, not 13 table rows
        assert page.locator(".struct").count() == 13
        assert all(n in page.inner_text(".struct >> nth=0") for n in FEATURES)
        heights = page.evaluate(
            "Array.from(document.querySelectorAll('.struct')).map(e => e.getBoundingClientRect().height)"
        )
        assert max(heights) < 140, heights
        _no_overflow(page, content=True)
        snap(page, shots, "09-first-hour-scan-1400")
        for url in ("/t/scans", "/t/scans/manifests", "/t/recordings/scan?level=scenes.clips", "/t/media/scan", "/"):
            _load(page, server + url)
            _no_overflow(page, content=url.startswith("/t/scans"))
    finally:
        page.set_viewport_size({"width": 1280, "height": 900})


def test_expired_commits_are_marked_and_not_links(server: str, page: Any, shots: Path) -> None:
    page.set_viewport_size(WIDE)
    try:
        page.goto(server + "/t/scans")
        assert page.locator("svg.timeline g.commit.expired").count() == 3  # versions 1-3 expired
        assert page.locator("svg.timeline a.commit").count() == 3  # versions 4, 5 and the expire's own commit
        assert page.locator("svg.timeline line.horizon").count() == 1
        note = page.inner_text(".horizon-note")
        assert "version #4" in note and "3 older commits" in note
        page.click("details.history summary")
        assert page.locator("details.history tr.expired").count() == 3
        assert page.locator("details.history tr.expired a").count() == 0
        _no_overflow(page)
        snap(page, shots, "10-first-hour-horizon")
        # an old bookmark: the error names the horizon and links to it
        page.locator("svg.timeline a.commit circle").first.click()
        page.wait_for_selector(".asof")
        asof = int(page.url.split("asof=")[1])
        resp = page.goto(server + f"/t/scans?asof={asof - 1}")
        assert resp.status == 400 and "horizon" in page.inner_text(".error")
        page.click("text=view as of the horizon")
        assert page.locator("svg.lsm").count() >= 1 and page.locator(".error").count() == 0
    finally:
        page.set_viewport_size({"width": 1280, "height": 900})


# ----- issue 32 item 5: whole cells, long names, wide tables ---------------------------------------
HUGE_CHARS = 20 << 20  # a 20 MB caption (the was 300 MB: a 314 MB page, 67 s to load)


def make_huge_and_wide(cat: conch.Catalog) -> None:
    """`huge`: a 20 MB caption and a 5,000-character column name; `penguins`: 17 columns of
    measurements and words, as the Palmer penguins table."""
    huge = cat.create_table("huge", [("id", pa.int64())])
    huge.write([{"id": 1, "caption": "word " * (HUGE_CHARS // 5), "n" * 5000: 1.5}, {"id": 2, "caption": "short"}])
    penguins = cat.create_table("penguins", [("id", pa.int64())])
    cols = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "year", "delta_15_n", "delta_13_c"]
    penguins.write(
        [
            {
                "id": i,
                "species": ["Adelie", "Chinstrap", "Gentoo"][i % 3],
                "island": ["Torgersen", "Biscoe", "Dream"][i % 3],
                "sex": "female" if i % 2 else "male",
                "study_name": "PAL0708",
                "clutch_completion": "Yes",
                "comments": "Nest never observed with full clutch.",
                **{c: 1000.123456 * (i + 1) + j for j, c in enumerate(cols)},
                **{f"sample_{j}": 123456789 + i * 7 + j for j in range(3)},
            }
            for i in range(20)
        ]
    )


def test_huge_cells_long_names_and_wide_tables(server: str, page: Any, shots: Path) -> None:
    page.set_viewport_size(WIDE)
    try:
        total, html = _load(page, server + "/t/huge/scan")
        assert total < PAGE_BYTES and html < PAGE_BYTES, (total, html)  # a prefix and the size, not 20 MB
        assert f"({HUGE_CHARS // 5 * 5:,} chars)" in page.inner_text("#results")
        _no_overflow(page)  # the 5,000-character name is one ellipsized line in a scroll box
        head = page.evaluate("document.querySelector('#results th .colname').getBoundingClientRect().height")
        assert head < 40, head
        snap(page, shots, "11-huge-scan")
        _load(page, server + "/t/penguins/scan")
        _no_overflow(page)
        # no number and no word is broken: each is one line box, and rows stay one line high
        broken = page.evaluate(
            "Array.from(document.querySelectorAll('#results .num, #results .text'))"
            ".filter(e => !/\\s/.test(e.textContent.trim()))"
            ".filter(e => e.getClientRects().length > 1 || e.getBoundingClientRect().height > 30)"
            ".map(e => e.textContent)"
        )
        assert broken == [], broken
        rows = page.evaluate(
            "Array.from(document.querySelectorAll('#results tr')).slice(1).map(r => r.getBoundingClientRect().height)"
        )
        snap(page, shots, "12-penguins-scan")
        assert len(rows) == 20 and max(rows) < 60, rows
    finally:
        page.set_viewport_size({"width": 1280, "height": 900})


def _wait_for_first_column(page: Any, expected: list[str]) -> None:
    """Wait until the results' first column reads `expected` (a run replaces the page: reading
    right after the click raced the new page on a loaded machine), then check it; a page that
    never shows it fails with playwright's timeout naming the wait."""
    cells = "#results > tbody > tr > td:first-child"
    page.wait_for_function(
        "([sel, want]) => JSON.stringify([...document.querySelectorAll(sel)].map(c => c.innerText.trim())) === want",
        arg=[cells, json.dumps(expected, separators=(",", ":"))],
    )
    assert [c.strip() for c in page.locator(cells).all_inner_texts()] == expected
