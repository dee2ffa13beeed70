"""Every code block of spec/002, run against the `recordings` table, with the printed results."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

import conch
from conch import _
from conch.errors import LevelError
from conch.nested import RegroupError

sys.path.insert(0, str(Path(__file__).parents[1]))
from nested_fixtures import make_recordings


@pytest.fixture
def t(catalog: conch.Catalog) -> conch.Table:
    return make_recordings(catalog)


def rounded(col: list[float | None], n: int = 3) -> list[float | None]:
    return [None if v is None else round(v, n) for v in col]


def test_schema_tree(t: conch.Table) -> None:
    text = str(t.schema)
    assert text.startswith("recordings\n├── scenes {$: utf8}\n│   ├── location: utf8")
    assert "│   │   ├── frames {$: u64}" in text
    assert "└── models {$: utf8}\n    ├── name: utf8\n    └── config: struct" in text


def test_navigation_is_lazy_and_levels(t: conch.Table) -> None:
    scenes = t.scenes
    clips = scenes.clips
    frames, detections = clips.frames, clips.detections
    assert scenes.location.level == "scenes"
    assert clips.duration.level == "scenes.clips"
    assert detections.confidence.level == "scenes.clips.detections"
    assert scenes.metadata.weather.level == "scenes"
    assert frames.rgb.level == "scenes.clips.frames"
    assert (clips.duration * 2).level == "scenes.clips"
    assert (detections.confidence * 100).level == "scenes.clips.detections"
    assert (detections.ts - clips.start_time).level == "scenes.clips.detections"
    assert clips.select(avg_conf=_.detections.confidence.mean()).domain.level == "scenes.clips"


def test_select_self_fields(t: conch.Table) -> None:
    clips = t.scenes.clips
    out = clips.select(duration=_.duration, camera=_.camera).scan().to_arrow()
    assert out.column_names == ["scenes", "scenes.clips", "duration", "camera"]
    assert out.select(["duration", "camera"]).to_pylist() == [
        {"duration": 30.0, "camera": "front"},
        {"duration": 15.0, "camera": "front"},
        {"duration": 20.0, "camera": "rear"},
    ]


def test_select_broadcast_and_reduce(t: conch.Table) -> None:
    scenes = t.scenes
    clips = scenes.clips
    out = (
        clips.select(
            duration=_.duration,
            location=scenes.location,
            confidence_mean=_.detections.confidence.mean(),
        )
        .scan()
        .to_arrow(keys=False)
    )
    assert out["duration"].to_pylist() == [30.0, 15.0, 20.0]
    assert out["location"].to_pylist() == ["downtown", "downtown", "highway"]
    assert rounded(out["confidence_mean"].to_pylist()) == [0.85, 0.92, 0.78]


def test_projection_forms(t: conch.Table) -> None:
    scenes = t.scenes
    clips = scenes.clips
    frames = clips.frames
    everything = frames.select().scan().to_arrow(keys=False)
    assert everything.column_names == ["rgb", "depth"]
    kw = frames.select(rgb=_.rgb, dur=clips.duration).scan().to_arrow(keys=False)
    assert kw.to_pylist()[2] == {"rgb": b"f2", "dur": 15.0}
    whole = frames.select(frame=_).scan().to_arrow(keys=False)
    assert whole["frame"].to_pylist()[0] == {"rgb": b"f0", "depth": b"d0"}
    nested = frames.select({"image": _.rgb, "meta": {"dur": clips.duration, "loc": scenes.location}}).scan()
    assert nested.to_arrow(keys=False).to_pylist()[3] == {"image": b"f3", "meta": {"dur": 20.0, "loc": "highway"}}
    group = scenes.select(meta=scenes.metadata, weather=scenes.metadata.weather).scan().to_arrow(keys=False)
    assert group.to_pylist()[1] == {"meta": {"weather": "rain", "lighting": "dusk"}, "weather": "rain"}


def test_implicit_broadcasting(t: conch.Table) -> None:
    scenes = t.scenes
    clips = scenes.clips
    frames = clips.frames
    out = frames.select(rgb=_.rgb, duration=clips.duration, location=scenes.location).scan().to_arrow(keys=False)
    assert out.to_pydict() == {
        "rgb": [b"f0", b"f1", b"f2", b"f3"],
        "duration": [30.0, 30.0, 15.0, 20.0],
        "location": ["downtown", "downtown", "downtown", "highway"],
    }


def test_sibling_and_unrelated_errors(t: conch.Table) -> None:
    clips = t.scenes.clips
    frames, detections = clips.frames, clips.detections
    with pytest.raises(LevelError, match=r"^cannot combine 'frames' and 'detections' — they are siblings$"):
        frames.select(rgb=_.rgb, label=detections.label)
    with pytest.raises(LevelError, match=r"^'clips' and 'models' share no ancestor path$"):
        clips.select(dur=_.duration, name=t.models.name)
    with pytest.raises(LevelError, match="they are siblings"):
        frames.rgb == detections.label  # noqa: B015
    with pytest.raises(LevelError, match="reduce"):
        clips.select(c=_.detections.confidence)


def test_reductions(t: conch.Table) -> None:
    clips = t.scenes.clips
    out = (
        clips.select(
            total_frames=_.frames.count(),
            avg_conf=_.detections.confidence.mean(),
            dur_list=_.detections.ts.list(),
            min_conf=_.detections.confidence.min(),
            max_conf=_.detections.confidence.max(),
            first_label=_.detections.label.first(),
        )
        .scan()
        .to_arrow(keys=False)
    )
    assert out["total_frames"].to_pylist() == [2, 1, 1]
    assert rounded(out["avg_conf"].to_pylist()) == [0.85, 0.92, 0.78]
    assert out["dur_list"].to_pylist() == [[0.05, 0.15, 0.25], [0.05, 0.5, 0.6, 0.7, 0.8], [0.02, 0.08, 0.3]]
    assert rounded(out["min_conf"].to_pylist()) == [0.8, 0.7, 0.75]
    assert rounded(out["max_conf"].to_pylist()) == [0.9, 0.99, 0.8]
    assert out["first_label"].to_pylist() == ["car", "pedestrian", "car"]
    last_any_all = clips.select(
        last=_.detections.label.last(),
        any_hi=(_.detections.confidence > 0.95).any(),
        all_hi=(_.detections.confidence > 0.7).all(),
        audio=_.audio.count(),
    )
    assert last_any_all.scan().to_arrow(keys=False).to_pydict() == {
        "last": ["bicycle", "car", "car"],
        "any_hi": [False, True, False],
        "all_hi": [True, False, True],
        "audio": [2, 1, 0],
    }


def test_reductions_compose_with_per(t: conch.Table) -> None:
    scenes = t.scenes
    mean_per_clip = scenes.clips.detections.confidence.mean()  # unbound
    assert mean_per_clip.level == "scenes.clips"
    total_per_scene = mean_per_clip.per(scenes.clips).sum()  # clips → scenes
    assert total_per_scene.level == "scenes"
    out = scenes.select(total_mean=total_per_scene).scan().to_arrow(keys=False)
    assert rounded(out["total_mean"].to_pylist()) == [1.77, 0.78]
    dur = scenes.select(total_dur=_.clips.duration.sum(), frames=_.clips.frames.count()).scan().to_arrow(keys=False)
    assert dur.to_pydict() == {"total_dur": [45.0, 20.0], "frames": [3, 1]}


def test_filtering(t: conch.Table) -> None:
    clips = t.scenes.clips
    detections = clips.detections
    long_clips = clips.where(_.duration > 10)
    assert long_clips.select(duration=_.duration).scan().to_arrow(keys=False)["duration"].to_pylist() == [
        30.0,
        15.0,
        20.0,
    ]
    assert clips.where(_.duration > 16).select(d=_.duration).scan().to_arrow(keys=False)["d"].to_pylist() == [
        30.0,
        20.0,
    ]

    def labels(path: conch.nested.Path) -> list[tuple[str, int, str]]:
        rows = path.select(label=_.label).scan().to_pylist()
        return [(r["scenes.clips"], r["scenes.clips.detections"], r["label"]) for r in rows]

    high_conf_cars = detections.where((_.confidence > 0.8) & (_.label == "car"))
    assert labels(high_conf_cars) == [("c1", 0, "car"), ("c2", 1, "car"), ("c2", 2, "car"), ("c2", 4, "car")]
    cars_or_peds = detections.where((_.label == "car") | (_.label == "pedestrian"))
    assert len(labels(cars_or_peds)) == 10
    not_bicycles = detections.where(~(_.label == "bicycle"))
    assert ("c1", 2, "bicycle") not in labels(not_bicycles) and len(labels(not_bicycles)) == 10
    high_conf = detections.where(_.confidence > 0.9)
    cnt = clips.select(cnt=high_conf.count()).scan().to_arrow(keys=False)
    assert cnt["cnt"].to_pylist() == [0, 4, 0]
    # Filters compose with navigation and with ancestors.
    front = clips.where(_.camera == "front")
    assert front.frames.select(rgb=_.rgb).scan().to_arrow(keys=False)["rgb"].to_pylist() == [b"f0", b"f1", b"f2"]
    busy = clips.where(_.detections.count() > 3)
    assert busy.select(c=_.id).scan().to_arrow(keys=False)["c"].to_pylist() == ["c2"]


def test_lists_and_child_levels(t: conch.Table) -> None:
    scenes = t.scenes
    detections = scenes.clips.detections
    clips = scenes.clips
    out = clips.select(
        s=detections.confidence.sum(), l=detections.confidence.list(), c=detections.confidence.count()
    ).scan()
    res = out.to_arrow(keys=False)
    assert rounded(res["s"].to_pylist()) == [2.55, 4.6, 2.34]
    assert [len(x) for x in res["l"].to_pylist()] == [3, 5, 3]
    assert res["c"].to_pylist() == [3, 5, 3]
    assert scenes.tags.level == "scenes"
    assert scenes.tags.len().level == "scenes"
    assert scenes.tags.explode().level == "scenes.~tags"
    tags = scenes.select(n=scenes.tags.len(), c=scenes.tags.count(), lst=scenes.tags.list()).scan()
    assert tags.to_arrow(keys=False).to_pydict() == {
        "n": [2, 1],
        "c": [2, 1],
        "lst": [["urban", "day"], ["fast"]],
    }
    exploded = scenes.tags.explode().scan().to_arrow()
    assert exploded.to_pydict() == {"scenes": ["s1", "s1", "s2"], "$idx": [0, 1, 0], "item": ["urban", "day", "fast"]}


def test_windows(t: conch.Table) -> None:
    clips = t.scenes.clips
    frames, detections = clips.frames, clips.detections
    w = frames.rgb.window(frame=(-2, 0)).list()
    assert w.level == "scenes.clips.frames"
    out = frames.select(w=w).scan().to_arrow(keys=False)
    # Windows never cross a parent: frame 0 of c2 does not see c1's frames.
    assert out["w"].to_pylist() == [[b"f0"], [b"f0", b"f1"], [b"f2"], [b"f3"]]
    roll = detections.confidence.window(frame=(-2, 2)).mean()
    assert roll.level == "scenes.clips.detections"
    res = detections.select(r=roll).scan().to_arrow(keys=False)["r"].to_pylist()
    assert rounded(res) == [0.85, 0.85, 0.85, 0.883, 0.91, 0.92, 0.975, 0.973, 0.78, 0.78, 0.78]


def test_regroup_rekey(t: conch.Table) -> None:
    clips = t.scenes.clips
    detections = clips.detections
    frames = clips.frames
    frame_idx = (detections.ts * clips.fps).floor()
    resampled = detections.regroup(key=frame_idx).rekey(frames)
    out = frames.select(rgb=_.rgb, avg_conf=resampled.confidence.mean(), det_count=resampled.count()).scan().to_arrow()
    assert out["scenes.clips"].to_pylist() == ["c1", "c1", "c2", "c3"]  # the spec's `$` column
    assert out["rgb"].to_pylist() == [b"f0", b"f1", b"f2", b"f3"]
    assert rounded(out["avg_conf"].to_pylist()) == [0.90, 0.85, 0.70, 0.775]
    assert out["det_count"].to_pylist() == [1, 1, 1, 2]
    with pytest.raises(RegroupError, match="monotonically non-decreasing"):
        bad = detections.regroup(key=-detections.ts * 10).rekey(frames)
        frames.select(n=bad.count()).scan().to_arrow()
    with pytest.raises(LevelError):
        detections.regroup(key=frame_idx).rekey(clips)


def test_execution_plan_example(t: conch.Table) -> None:
    clips = t.scenes.clips
    detections, frames = clips.detections, clips.frames
    dts = detections.where(detections.label == "pedestrian")
    resampled = dts.regroup(key=(dts.ts * clips.fps).floor()).rekey(frames)
    q = frames.select(rgb=_.rgb, pedestrians=resampled.label.list(), clip_id=clips.id, duration=clips.duration)
    out = q.scan().to_arrow(keys=False)
    assert out.to_pydict() == {
        "rgb": [b"f0", b"f1", b"f2", b"f3"],
        "pedestrians": [[], ["pedestrian"], ["pedestrian"], ["pedestrian"]],
        "clip_id": ["c1", "c1", "c2", "c3"],
        "duration": [30.0, 30.0, 15.0, 20.0],
    }
    plan = q.explain()
    assert plan.splitlines()[0] == "Output(rgb, pedestrians, clip_id, duration) @ scenes.clips.frames"
    for op in (
        "Scan(frames)",
        "Scan(clips)",
        "Scan(detections)",
        "Rekey(target=frames)",
        "Regroup(key=",
        "Reduce(agg=list)",
    ):
        assert op in plan
    assert "filter detections.label == 'pedestrian' pushed into scan" in plan.replace("(", "").replace(")", "")


def test_row_selection(t: conch.Table) -> None:
    scenes = t.scenes
    s1_clips = t.scenes["s1"].clips
    out = s1_clips.select(duration=_.duration, location=scenes.location).scan().to_arrow(keys=False)
    assert out.to_pydict() == {"duration": [30.0, 15.0], "location": ["downtown", "downtown"]}
    assert t.scenes["s1"].location.to_py() == "downtown"
    assert t.scenes["s1"].clips["c1"].duration.to_py() == 30.0
    assert t.scenes["s1"].clips["c1"].frames[0].to_py() == {"rgb": b"f0", "depth": b"d0"}
    picked = t.scenes[["s1", "s2", "s5"]]
    assert picked.select(loc=_.location).scan().to_arrow(keys=False)["loc"].to_pylist() == ["downtown", "highway"]
    sel = t.scenes.clips[pa.table({"scenes": ["s1", "s1", "s2"], "scenes.clips": ["c1", "c2", "c3"]})]
    assert sel.select(d=_.duration).scan().to_arrow(keys=False)["d"].to_pylist() == [30.0, 15.0, 20.0]
    sub = t.scenes.clips[pa.table({"scenes": ["s1", "s2"], "scenes.clips": ["c2", "c3"]})].frames
    assert sub.select(rgb=_.rgb).scan().to_arrow(keys=False)["rgb"].to_pylist() == [b"f2", b"f3"]
    # Any order and repeats, like the core's keys= (issue 8 item 14): rows come back in key order.
    unsorted = t.scenes[["s2", "s1", "s2"]].select(loc=_.location).scan().to_arrow(keys=False)
    assert unsorted["loc"].to_pylist() == ["downtown", "highway"]
    # A seek: the plan shows the pinned prefix.
    assert "seek prefix ('s1',)" in s1_clips.select(d=_.duration).explain()


def test_writes(t: conch.Table) -> None:
    t.scenes["s3"] = {
        "location": "park",
        "metadata": {"weather": "sunny", "lighting": "natural"},
        "clips": [
            {
                "$": "c10",
                "camera": "front",
                "start_time": 0.0,
                "duration": 60.0,
                "frames": [{"rgb": b"f10", "depth": b"d10"}],
                "detections": [{"label": "car", "confidence": 0.9, "ts": 0.5}],
                "audio": [{"pcm": b"a10", "level_db": -20.0}],
            },
        ],
    }
    assert t.scenes["s3"].location.to_py() == "park"
    assert t.scenes["s3"].metadata.weather.to_py() == "sunny"
    assert t.scenes["s3"].clips["c10"].frames[0].rgb.to_py() == b"f10"
    n = sum(c.kind == "write" for c in t.history())
    with t.write() as w:
        w.scenes["s1"].location = "downtown_v2"
        w.scenes["s1"].clips["c1"].duration = 45.0
    assert sum(c.kind == "write" for c in t.history()) == n + 1  # committed once (compactions aside)
    assert t.scenes["s1"].location.to_py() == "downtown_v2"
    assert t.scenes["s1"].clips["c1"].duration.to_py() == 45.0
    assert t.scenes["s1"].clips["c1"].camera.to_py() == "front"  # upsert keeps other cells
    t.scenes["s1"].clips["c1"].frames = pa.table({"rgb": [b"f20", b"f21", b"f22"], "depth": [b"d20", b"d21", b"d22"]})
    assert t.scenes["s1"].clips["c1"].frames.select(rgb=_.rgb).scan().to_arrow(keys=False)["rgb"].to_pylist() == [
        b"f20",
        b"f21",
        b"f22",
    ]
    t.scenes["s2"].clips["c3"].audio = [{"$": 5, "pcm": b"x", "level_db": -1.0}]
    assert t.scenes["s2"].clips["c3"].audio[5].level_db.to_py() == -1.0
    t.scenes["s2"].location = "highway_2"
    assert t.scenes["s2"].location.to_py() == "highway_2"
