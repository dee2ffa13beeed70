"""`explain()` output on fixed tables, compared with golden files in tests/golden/.

After an intended change to the explain text, regenerate the files and review the diff:

    CONCH_UPDATE_GOLDEN=1 .venv/bin/pytest tests/scan/test_explain_golden.py
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import conch
from conch import _

sys.path.insert(0, str(Path(__file__).parents[1]))
from nested_fixtures import make_recordings

GOLDEN = Path(__file__).parents[1] / "golden"
UPDATE = os.environ.get("CONCH_UPDATE_GOLDEN") == "1"


def _audio(cat: conch.Catalog) -> conch.Table:
    t = cat.create_table("audio", [("id", pa.uint64())])
    t.write({"id": list(range(100)), "score": [i / 100 for i in range(100)], "meta": [{"len": i} for i in range(100)]})
    t.write({"id": list(range(0, 100, 10)), "score": [1.0] * 10})
    t.delete([7])
    return t


def _bigger(cat: conch.Catalog) -> conch.Table:
    t = cat.create_table("runs", [("id", pa.uint64())])
    for i in range(4):
        t.write({"id": list(range(i * 50, i * 50 + 50)), "x": [float(i)] * 50, "y": [str(i)] * 50})
    return t


CASES: dict[str, Callable[[conch.Catalog], str]] = {
    "full_scan_planned": lambda c: _audio(c).scan().explain(),
    "filter_and_projection": lambda c: (lambda t: t.scan("meta.len", where=t["score"] < 0.5).explain())(_audio(c)),
    "key_filter_after_run": lambda c: (
        lambda t: (lambda s: (s.to_arrow(), s.explain())[1])(t.scan("x", where=(t["id"] >= 60) & (t["id"] < 75)))
    )(_bigger(c)),
    "streamed_after_run": lambda c: (lambda s: (s.to_arrow(), s.explain())[1])(_bigger(c).scan(limit=5)),
    "nested_select": lambda c: make_recordings(c).scenes.clips.select(d=_.duration).scan().explain(),
    "compacted": lambda c: (lambda t: (t.compact(), t.scan("x", where=t["x"] > 1.0).explain())[1])(_bigger(c)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_explain_matches_golden(tmp_path: Path, name: str) -> None:
    # automatic compaction off: the plans show the runs the writes made (a compacted table is
    # the case "compacted")
    catalog = conch.connect(tmp_path, maintenance=conch.Policy(auto=False))
    text = CASES[name](catalog) + "\n"
    path = GOLDEN / f"explain_{name}.txt"
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"no golden file {path}: run with CONCH_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), (
        f"explain() changed; if intended, regenerate: CONCH_UPDATE_GOLDEN=1 pytest {__file__}"
    )
