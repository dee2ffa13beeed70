"""The inspector's pages for a new user's table (issue 21): bytes per page and width at 1,400 px.

`python bench/ui_pages.py`: builds the first-hour warehouse of the browser tests (13 photos of
~96 KB, 24-bit WAVs, a 13-field struct group, an expired history: `tests/media_fixtures.py`),
renders each page with the `conch` on the path, and loads it in headless Chromium (if
installed) at 1,400 × 900 to read `document.documentElement.scrollWidth`. Writes
bench/results/ui_pages.json. Run it with another checkout's `src` first on PYTHONPATH to compare
(the fixtures come from this checkout).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))

import conch
from conch.apps.ui.app import Inspector
from media_fixtures import make_first_hour, make_media

RESULTS = Path(__file__).parent / "results"
CHROMIUM = "/usr/bin/chromium"
PAGES = {
    "tables": lambda ins: ins.tables(),
    "scans overview": lambda ins: ins.overview("scans", None),
    "scans manifests": lambda ins: ins.manifests("scans", None),
    "scans scan (13 rows)": lambda ins: ins.scan("scans", {}),
    "media scan": lambda ins: ins.scan("media", {}),
}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        wh = str(Path(tmp) / "w")
        cat = conch.connect(wh, maintenance=conch.Policy(auto=False))
        make_media(cat)
        make_first_hour(cat)
        ins = Inspector(wh)
        css = (resources.files("conch.apps.ui") / "static" / "style.css").read_text()
        html = {name: render(ins) for name, render in PAGES.items()}
        widths = _widths(
            {
                n: h.replace('<link rel="stylesheet" href="/static/style.css">', f"<style>{css}</style>")
                for n, h in html.items()
            }
        )
    rows = [{"page": n, "bytes": len(h.encode()), "widths_at_1400": widths.get(n)} for n, h in html.items()]
    print(f"conch from {Path(conch.__file__).parent}")
    for r in rows:
        w = r["widths_at_1400"] or {}
        print(
            f"  {r['page']:<24} {r['bytes'] / 1000:10.1f} KB   document {w.get('document')} px, "
            f"content {w.get('content')} px in a {w.get('section')} px section"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ui_pages.json").write_text(
        json.dumps({"conch": str(Path(conch.__file__).parent), "pages": rows}, indent=2)
    )


# the document's width, and the widest content of the page's section (a table wider than the
# section scrolls inside it: the page fits, but the table needs a horizontal scroll)
WIDTHS = """(() => {
  const s = document.querySelector('section');
  const inner = [s, ...document.querySelectorAll('section .scroll')].map(e => e.scrollWidth);
  return {document: document.documentElement.scrollWidth, content: Math.max(...inner), section: s.clientWidth};
})()"""


def _widths(pages: dict[str, str]) -> dict[str, dict[str, int]]:
    if not os.path.exists(CHROMIUM):
        return {}
    from playwright.sync_api import sync_playwright

    out = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"], headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        for name, html in pages.items():
            page.set_content(html)
            out[name] = page.evaluate(WIDTHS)
        browser.close()
    return out


if __name__ == "__main__":
    main()
