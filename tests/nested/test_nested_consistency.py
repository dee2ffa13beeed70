"""One behaviour for both orders and both APIs (issue 8 item 14): select/where in any order, row
selection by keys in any order, and the core scan's time bounds on nested scans."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import conch
from conch import _
from nested_fixtures import make_recordings


@pytest.fixture
def t(catalog: conch.Catalog) -> conch.Table:
    return make_recordings(catalog)


def test_select_then_where_is_where_then_select(t: conch.Table) -> None:
    clips, scenes = t.scenes.clips, t.scenes
    spec = {"d": _.duration, "loc": scenes.location, "n": _.detections.count()}
    for pred in [_.duration > 16, scenes.location == "downtown", _.detections.confidence.mean() > 0.8]:
        a = clips.select(**spec).where(pred).scan().to_arrow()
        b = clips.where(pred).select(**spec).scan().to_arrow()
        assert a.equals(b) and a.num_rows > 0
    twice = clips.select(d=_.duration).where(_.duration > 16).where(scenes.location == "highway")
    assert twice.scan().to_arrow(keys=False).to_pylist() == [{"d": 20.0}]


def test_row_selection_takes_keys_in_any_order_like_the_core(t: conch.Table) -> None:
    want = t.scenes[["s1", "s2"]].select(loc=_.location).scan().to_arrow()
    for keys in (["s2", "s1"], ["s2", "s1", "s2", "s9"], pa.array(["s2", "s1"])):
        assert t.scenes[keys].select(loc=_.location).scan().to_arrow().equals(want)
    table = pa.table({"scenes": ["s2", "s1", "s1"], "scenes.clips": ["c3", "c2", "c1"]})
    got = t.scenes.clips[table].select(d=_.duration).scan().to_arrow(keys=False)["d"].to_pylist()
    assert got == [30.0, 15.0, 20.0]  # key order, as the core's keys= returns
    core = t.scan("duration", level="scenes.clips", keys=[("s2", "c3"), ("s1", "c2"), ("s1", "c1")]).to_pylist()
    assert [r["duration"] for r in core] == got


def test_nested_scan_takes_since_and_asof(tmp_path: Path) -> None:
    t = make_recordings(conch.connect(tmp_path, maintenance=conch.Policy(auto=False)))  # history() indexes commits
    first = t.history()[0]
    t.scenes["s1"].location = "uptown"
    t.scenes["s3"] = {"location": "park"}
    second = t.history()[-1]
    since = t.scenes.scan(since=t.history()[1].time).to_arrow()
    core = t.scan("location", level="scenes", since=t.history()[1].time).to_pylist()
    assert since.column("location").to_pylist() == [r["location"] for r in core] == ["uptown", "park"]
    old = t.scenes.select(loc=_.location).scan(asof=first.time).to_arrow(keys=False)["loc"].to_pylist()
    assert old == ["downtown", "highway"]
    expr = t.scenes.location.scan(asof=second.time, since=second.time).to_arrow()
    assert expr.column("location").to_pylist() == ["park"]
