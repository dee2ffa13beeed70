"""Property test: nested reductions, broadcasts and windows agree with a naive Python model."""

from __future__ import annotations

import tempfile
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch
from conch import _

FRAME = pa.struct([("$", pa.uint64()), ("y", pa.int64())])
CLIP = pa.struct([("$", pa.uint64()), ("x", pa.float64()), ("frames", pa.list_(FRAME))])
SCENE = pa.struct([("$", pa.string()), ("s", pa.string()), ("clips", pa.list_(CLIP))])

ys = st.lists(st.one_of(st.none(), st.integers(-50, 50)), max_size=6)
clips_st = st.lists(st.tuples(st.floats(-10, 10, allow_nan=False), ys), max_size=4)
scenes_st = st.dictionaries(st.text("abc", min_size=1, max_size=3), clips_st, min_size=1, max_size=4)


# hypothesis builds a table per example: they live in one directory removed when the worker exits
SCRATCH = tempfile.TemporaryDirectory(prefix="conch-nested-")


def build(data: dict[str, list[tuple[float, list[int | None]]]], split: bool = False, compact: int = 0) -> conch.Table:
    """The table holding `data`: one write, or (`split`) one write per scene, each followed by
    the default policy's automatic compaction; `compact` > 0: then a major compaction cutting
    ranges of at most that many root keys (every level is cut where its root key is)."""
    cat = conch.connect(tempfile.mkdtemp(dir=SCRATCH.name))
    t = cat.create_table("n", [], pa.schema([("scenes", pa.list_(SCENE))]))
    scenes = [
        {
            "$": k,
            "s": k.upper(),
            "clips": [
                {"$": i, "x": x, "frames": [{"$": j, "y": y} for j, y in enumerate(frames)]}
                for i, (x, frames) in enumerate(clips)
            ],
        }
        for k, clips in data.items()
    ]
    for part in [[s] for s in scenes] if split else [scenes]:
        t.write(pa.table({"scenes": pa.array([part], pa.list_(SCENE))}))
    if compact:
        t.compact(policy=conch.Policy(max_l1_rows=compact))
    return t


def agg(func: str, vals: list[Any]) -> Any:
    nn = [v for v in vals if v is not None]
    if func == "count":
        return len(nn)
    if func == "list":
        return vals
    if func == "first":
        return vals[0] if vals else None
    if func == "last":
        return vals[-1] if vals else None
    if not nn:
        return None
    return {"sum": sum, "min": min, "max": max, "mean": lambda v: sum(v) / len(v)}[func](nn)


def close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(a - b) < 1e-9
    return a == b


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes_st, st.integers(-3, 0), st.integers(0, 3), st.booleans(), st.sampled_from([0, 0, 1, 3]))
def test_reductions_broadcast_windows_match_model(data: Any, lo: int, hi: int, split: bool, compact: int) -> None:
    t = build(data, split, compact)
    scenes = t.scenes
    clips = scenes.clips
    frames = clips.frames
    funcs = ["count", "sum", "mean", "min", "max", "first", "last", "list"]
    # Reductions of frames per clip, and of frames per scene (two levels at once).
    per_clip = clips.select(**{f: getattr(_.frames.y, f)() for f in funcs}).scan().to_pylist()
    expect = [(k, i, frames_) for k in sorted(data) for i, (_x, frames_) in enumerate(data[k])]
    assert len(per_clip) == len(expect)
    for row, (k, i, vals) in zip(per_clip, expect):
        assert (row["scenes"], row["scenes.clips"]) == (k, i)
        for f in funcs:
            assert close(row[f], agg(f, vals)), (f, row[f], vals)
    per_scene = scenes.select(n=_.clips.frames.count(), s=_.clips.frames.y.sum(), c=_.clips.count()).scan().to_pylist()
    for row, k in zip(per_scene, sorted(data)):
        allv = [y for _x, fr in data[k] for y in fr]
        assert row["n"] == len(allv) and row["s"] == agg("sum", allv) and row["c"] == len(data[k])
    # Broadcast of scene and clip fields, and windows within each clip.
    out = frames.select(
        s=scenes.s,
        x=clips.x,
        ws=frames.y.window(frame=(lo, hi)).sum(),
        wl=frames.y.window(frame=(lo, hi)).list(),
        wm=frames.y.window(frame=(lo, hi)).max(),
    ).scan()
    rows = out.to_pylist()
    expect_rows = [(k, x, fr, j) for k in sorted(data) for (x, fr) in data[k] for j in range(len(fr))]
    assert len(rows) == len(expect_rows)
    for row, (k, x, fr, j) in zip(rows, expect_rows):
        window = fr[max(0, j + lo) : j + hi + 1]
        assert row["s"] == k.upper() and row["x"] == x
        assert row["wl"] == window
        assert row["ws"] == agg("sum", window) and row["wm"] == agg("max", window)
