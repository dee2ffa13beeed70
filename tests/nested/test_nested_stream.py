"""Streaming execution of nested queries: parent-aligned chunks give exactly the unchunked result,
and no chunk holds more than `chunk_rows` rows of a level beyond one parent's rows (bounded memory,
asserted on row counts, not timings)."""

from __future__ import annotations

import tempfile
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch
from conch import _

FRAME = pa.struct([("$", pa.uint64()), ("y", pa.int64()), ("z", pa.float64())])
DET = pa.struct([("$", pa.uint64()), ("ts", pa.float64()), ("c", pa.float32())])
CLIP = pa.struct([("$", pa.uint64()), ("x", pa.float64()), ("frames", pa.list_(FRAME)), ("dets", pa.list_(DET))])
SCENE = pa.struct([("$", pa.string()), ("s", pa.string()), ("clips", pa.list_(CLIP))])
WHOLE = 1 << 30  # one chunk

ys = st.lists(st.one_of(st.none(), st.integers(-50, 50)), max_size=6)
dets = st.lists(st.tuples(st.floats(0, 0.7, allow_nan=False), st.floats(0, 1, allow_nan=False)), max_size=4)
clips_st = st.lists(st.tuples(st.floats(-10, 10, allow_nan=False), ys, dets), max_size=4)
scenes_st = st.dictionaries(st.text("abcd", min_size=1, max_size=3), clips_st, min_size=1, max_size=6)


# hypothesis builds a table per example: they live in one directory removed when the worker exits
SCRATCH = tempfile.TemporaryDirectory(prefix="conch-nested-")


def build(data: dict[str, Any]) -> conch.Table:
    t = conch.connect(tempfile.mkdtemp(dir=SCRATCH.name)).create_table(
        "n", [], pa.schema([("scenes", pa.list_(SCENE))])
    )
    scenes = [
        {
            "$": k,
            "s": k.upper(),
            "clips": [
                {
                    "$": i,
                    "x": x,
                    "frames": [{"$": j, "y": y, "z": None if y is None else y / 7 + 0.1} for j, y in enumerate(frames)],
                    "dets": [{"$": j, "ts": ts, "c": c} for j, (ts, c) in enumerate(sorted(d))],
                }
                for i, (x, frames, d) in enumerate(clips)
            ],
        }
        for k, clips in data.items()
    ]
    t.write(pa.table({"scenes": pa.array([scenes], pa.list_(SCENE))}))
    return t


def queries(t: conch.Table) -> dict[str, Any]:
    scenes = t.scenes
    clips = scenes.clips
    frames, dts = clips.frames, clips.dets
    resampled = dts.regroup(key=(dts.ts * 10).floor()).rekey(frames)
    funcs = ["count", "sum", "mean", "min", "max", "first", "last", "list"]
    return {
        "broadcast_window": frames.select(
            s=scenes.s,
            x=clips.x,
            ws=_.y.window(frame=(-2, 1)).sum(),
            wl=_.y.window(frame=(-1, 0)).list(),
            wm=_.y.window(frame=(0, 2)).max(),
        ),
        "reduce": clips.select(
            **{f: getattr(_.frames.y, f)() for f in funcs},
            **{f"z{f}": getattr(_.frames.z, f)() for f in funcs},
            pos=frames.where(_.y > 0).count(),
        ),
        "compose": scenes.select(
            n=_.clips.frames.count(), per=clips.frames.y.mean().per(clips).sum(), dl=_.clips.dets.c.list()
        ),
        "regroup": frames.select(y=_.y, m=resampled.c.mean(), n=resampled.count(), l=resampled.ts.list()),
        "filter_by_child": clips.where(_.frames.count() > 1).select(x=_.x, s=scenes.s, f=_.frames.y.max()),
        "frames_only": frames.select(
            y=_.y,
            w=_.z.window(frame=(-1, 1)).mean(),
            ww=_.z.window(frame=(-20, 0)).sum(),
            m=_.z.window(frame=(-2, 0)).min(),
        ),
        "seek": t.scenes[sorted(t.scenes.select(s=_.s).scan().to_arrow().column(0).to_pylist())[::2]].clips.select(
            x=_.x, n=_.frames.count()
        ),
    }


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes_st, st.integers(1, 4))
def test_chunked_equals_unchunked(data: dict[str, Any], chunk_rows: int) -> None:
    t = build(data)
    frames_per_scene = max(sum(len(f) for _x, f, _d in clips) for clips in data.values())
    for name, q in queries(t).items():
        whole = q.scan(chunk_rows=WHOLE)
        expect = whole.to_arrow()
        if name != "seek":  # (a seek of several prefixes is one core scan per prefix)
            assert whole.chunks_run == 1, name
        s = q.scan(chunk_rows=chunk_rows)
        got = s.to_arrow()
        assert got.schema == expect.schema, name
        assert got.to_pylist() == expect.to_pylist(), name
        streamed = q.scan(chunk_rows=chunk_rows).to_record_batches().read_all()
        assert streamed.to_pylist() == expect.to_pylist(), name
        if name == "broadcast_window":
            # The scenes stream holds `chunk_rows` scenes, the frames stream `chunk_rows` frames
            # plus the rest of one scene's.
            assert s.peak_rows["scenes"] <= chunk_rows + 1
            assert s.peak_rows.get("scenes.clips.frames", 0) <= chunk_rows + frames_per_scene


def test_many_chunks_bounded_rows() -> None:
    data = {
        f"s{i:02d}": [(float(i), [i * 10 + j for j in range(7)], [(0.05 * j, 0.5) for j in range(3)])] * 3
        for i in range(40)
    }
    t = build(data)
    for name, q in queries(t).items():
        expect = q.scan(chunk_rows=WHOLE).to_arrow()
        s = q.scan(chunk_rows=16)
        batches = list(s)
        assert pa.Table.from_batches(batches).to_pylist() == expect.to_pylist(), name
        assert s.chunks_run > 1 and len(batches) > 1, name
        # 40 scenes × 3 clips × 7 frames = 840 frames; no chunk holds more than 16 + one scene's 21.
        assert max(s.peak_rows.values()) <= 16 + 21, (name, s.peak_rows)
