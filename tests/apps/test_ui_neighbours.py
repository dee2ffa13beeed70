"""The inspector's search (issue 31): a record's nearest neighbours as an image grid, and the JSON
search endpoint, over HTTP (Starlette's client) and in a real headless Chromium against `conch ui`.

The table holds 40 photos whose embeddings lie on a line (`emb = [i, 0, 0, 0]`), so the nearest
neighbours of record i are i±1, i±2, ... in that order: the grid's order is checked exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from starlette.testclient import TestClient

import conch
from conch.apps.ui.app import create_app
from conch.model.keys import encode_key
from media_fixtures import png

CHROMIUM = "/usr/bin/chromium"
N = 40


def make_photos(cat: conch.Catalog) -> conch.Table:
    t = cat.create_table("photos", [("id", pa.int64())])
    emb = np.zeros((N, 4), np.float32)
    emb[:, 0] = np.arange(N)
    t.write(
        pa.table(
            {
                "id": np.arange(N),
                "image": [png(i) for i in range(N)],
                "caption": [f"photo {i} {'red car' if i % 3 == 0 else 'blue tree'}" for i in range(N)],
                "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), 4),
            }
        )
    )
    t.create_index("emb", metric="l2")
    t.create_index("caption", kind="text")
    t.delete([21])  # a deleted record is never a neighbour
    return t


def hexkey(t: conch.Table, i: int) -> str:
    return encode_key((i,), t.state().schema.key_fields("")).hex()


def nearest(i: int, k: int) -> list[int]:
    live = [j for j in range(N) if j not in (i, 21)]
    return sorted(live, key=lambda j: (abs(j - i), j))[:k]


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    wh = str(tmp_path_factory.mktemp("nn") / "w")
    with conch.connect(wh, maintenance=conch.Policy(auto=False)) as cat:
        make_photos(cat)
    return wh


def test_search_endpoint_answers_json(warehouse: str) -> None:
    client = TestClient(create_app(warehouse))
    t = conch.connect(warehouse).table("photos")
    got = client.get("/t/photos/search", params={"key": hexkey(t, 20), "k": 4}).json()
    assert [r["id"] for r in got["rows"]] == nearest(20, 4) == [19, 18, 22, 17]
    assert got["rows"][0]["image"] == {"blob_bytes": len(png(19))}  # never the blob itself
    got = client.get("/t/photos/search", params={"vector": "[30.2, 0, 0, 0]", "k": 3, "columns": "caption"}).json()
    assert [r["id"] for r in got["rows"]] == [30, 31, 29] and "search index" in got["explain"]
    assert set(got["rows"][0]) == {"id", "_distance", "caption"}
    got = client.get("/t/photos/search", params={"text": "red car", "k": 50, "where": "id < 10"}).json()
    assert sorted(r["id"] for r in got["rows"]) == [0, 3, 6, 9]
    got = client.get("/t/photos/search", params={"key": hexkey(t, 5), "k": 3, "where": "caption matches 'red'"}).json()
    assert [r["id"] for r in got["rows"]] == [6, 3, 9]  # a text term inside the filter: 1, 2, 4 away
    bad = client.get("/t/photos/search", params={"vector": "[1, 2]"})
    assert bad.status_code == 400 and "4 dimensions" in bad.json()["message"]
    assert client.get("/t/photos/search").status_code == 400
    assert client.get("/t/photos/search", params={"key": hexkey(t, 1), "k": 0}).status_code == 400
    assert client.get("/t/nope/search", params={"text": "x"}).status_code == 404


def test_neighbours_page_and_scan_links(warehouse: str) -> None:
    client = TestClient(create_app(warehouse))
    t = conch.connect(warehouse).table("photos")
    page = client.get("/t/photos/neighbours", params={"key": hexkey(t, 20), "k": 6}).text
    assert page.count('<figure class="nn">') == 7  # the record and its 6 neighbours
    assert page.count('img class="thumb') == 7
    scan = client.get("/t/photos/scan").text
    assert scan.count('class="near"') == 20  # one link per row shown (the page's limit)
    assert client.get("/t/photos/neighbours", params={"key": hexkey(t, 21)}).status_code == 400  # deleted


@pytest.mark.xdist_group("browser")
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="run .ci/install-chromium.sh (make installs it)")
def test_neighbour_grid_in_chromium(warehouse: str, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright
    from test_ui_browser import ARGS, free_port, snap

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
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                time.sleep(0.1)
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                str(tmp_path / "profile"),
                executable_path=CHROMIUM,
                args=ARGS,
                headless=True,
                viewport={"width": 1280, "height": 900},
            )
            pg = ctx.new_page()
            pg.set_default_timeout(60_000)
            pg.goto(url + "/t/photos/scan?where=id%20%3D%2020")
            pg.click("a.near")  # from a scan row to its neighbours
            pg.wait_for_selector("#neighbours figure.nn")
            keys = pg.locator("#neighbours a.nnkey").all_inner_texts()
            assert [int(k) for k in keys] == nearest(20, 12)
            assert pg.evaluate("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
            boxes = [pg.locator("#neighbours figure.nn").nth(i).bounding_box() for i in range(3)]
            assert boxes[0]["y"] == boxes[1]["y"] == boxes[2]["y"]  # a grid: side by side, not a list
            snap(pg, Path(os.environ.get("CONCH_SCREENSHOTS") or tmp_path), "09-neighbours")
            pg.locator("#neighbours a.nnkey").first.click()  # walk on: the neighbours of 19
            pg.wait_for_url("**key=*")
            assert [int(k) for k in pg.locator("#neighbours a.nnkey").all_inner_texts()] == nearest(19, 12)
            ctx.close()
        answer = json.loads(urllib.request.urlopen(url + "/t/photos/search?text=tree&k=3").read())
        assert len(answer["rows"]) == 3
    finally:
        proc.terminate()
        proc.wait(timeout=30)
