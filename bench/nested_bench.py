"""Nested-level queries (spec/002) on Conch vs DuckDB SQL over the same data as Parquet.

Generates a recordings table (scenes → clips → frames / detections / audio), writes it to a Conch
table and to one Parquet file per level, then times side by side in one process:

  broadcast   scene and clip fields to every frame
  reduce      mean / count / list of detection confidences per clip
  window      rolling 5-frame mean of a frame field, within each clip
  regroup     detections bucketed onto frames (floor(ts * fps)), mean + count per frame

Both sides produce a key-sorted Arrow table. Times are the best of `--repeat` runs after a warm-up.

    python bench/nested_bench.py                      # 1k scenes × 10 clips × 300 frames
    python bench/nested_bench.py --scenes 100         # quicker
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import conch
from conch import _


def generate(n_scenes: int, n_clips: int, n_frames: int, n_dets: int, n_audio: int) -> dict[str, pa.Table]:
    rng = np.random.default_rng(0)
    sid = np.array([f"s{i:05d}" for i in range(n_scenes)])
    scenes = pa.table({"scene": sid, "location": rng.choice(["downtown", "highway", "park"], n_scenes)})
    cs = np.repeat(sid, n_clips)
    cid = np.tile(np.array([f"c{i:03d}" for i in range(n_clips)]), n_scenes)
    nc = len(cs)
    clips = pa.table(
        {
            "scene": cs,
            "clip": cid,
            "camera": rng.choice(["front", "rear"], nc),
            "duration": np.full(nc, n_frames / 10.0),
            "fps": np.full(nc, 10.0),
        }
    )

    def child(n: int, key: str) -> dict[str, Any]:
        return {
            "scene": np.repeat(cs, n),
            "clip": np.repeat(cid, n),
            key: pa.array(np.tile(np.arange(n, dtype=np.uint64), nc)),
        }

    frames = pa.table({**child(n_frames, "frame"), "brightness": rng.random(nc * n_frames, dtype=np.float32)})
    ts = np.sort(rng.random((nc, n_dets)) * (n_frames / 10.0), axis=1).ravel()
    dets = pa.table(
        {
            **child(n_dets, "det"),
            "label": rng.choice(["car", "pedestrian", "bicycle"], nc * n_dets),
            "confidence": rng.random(nc * n_dets, dtype=np.float32),
            "ts": ts,
        }
    )
    audio = pa.table({**child(n_audio, "chunk"), "level_db": rng.random(nc * n_audio, dtype=np.float32) * -40})
    return {"scenes": scenes, "clips": clips, "frames": frames, "detections": dets, "audio": audio}


LEVEL_KEYS = {
    "scenes": ["scene"],
    "clips": ["scene", "clip"],
    "frames": ["scene", "clip", "frame"],
    "detections": ["scene", "clip", "det"],
    "audio": ["scene", "clip", "chunk"],
}
CONCH_LEVEL = {
    "scenes": "scenes",
    "clips": "scenes.clips",
    "frames": "scenes.clips.frames",
    "detections": "scenes.clips.detections",
    "audio": "scenes.clips.audio",
}


def to_conch(root: Path, data: dict[str, pa.Table]) -> conch.Table:
    def struct(*fields: tuple[str, pa.DataType]) -> pa.DataType:
        return pa.list_(pa.struct(list(fields)))

    schema = pa.schema(
        [
            (
                "scenes",
                struct(
                    ("$", pa.string()),
                    ("location", pa.string()),
                    (
                        "clips",
                        struct(
                            ("$", pa.string()),
                            ("camera", pa.string()),
                            ("duration", pa.float64()),
                            ("fps", pa.float64()),
                            ("frames", struct(("$", pa.uint64()), ("brightness", pa.float32()))),
                            (
                                "detections",
                                struct(
                                    ("$", pa.uint64()),
                                    ("label", pa.string()),
                                    ("confidence", pa.float32()),
                                    ("ts", pa.float64()),
                                ),
                            ),
                            ("audio", struct(("$", pa.uint64()), ("level_db", pa.float32()))),
                        ),
                    ),
                ),
            )
        ]
    )
    t = conch.connect(root).create_table("recordings", [], schema)
    for name, table in data.items():
        lvl = CONCH_LEVEL[name]
        parts = lvl.split(".")
        keys = LEVEL_KEYS[name]
        renamed = table.rename_columns(
            [".".join(parts[: keys.index(c) + 1]) if c in keys else c for c in table.column_names]
        )
        t.write(renamed, level=lvl)
    return t


def best(fn: Callable[[], pa.Table], repeat: int) -> tuple[float, pa.Table]:
    out = fn()  # warm-up (file cache, imports)
    times = []
    for _i in range(repeat):
        s = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - s)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenes", type=int, default=1000)
    ap.add_argument("--clips", type=int, default=10)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--detections", type=int, default=12)
    ap.add_argument("--audio", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "nested.json"))
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="nested_bench_"))
    s = time.perf_counter()
    data = generate(args.scenes, args.clips, args.frames, args.detections, args.audio)
    print(f"generated {', '.join(f'{k}={v.num_rows:,}' for k, v in data.items())} in {time.perf_counter() - s:.1f}s")
    s = time.perf_counter()
    t = to_conch(root / "conch", data)
    conch_write = time.perf_counter() - s
    s = time.perf_counter()
    (root / "pq").mkdir()
    for name, table in data.items():
        pq.write_table(table, root / "pq" / f"{name}.parquet")
    pq_write = time.perf_counter() - s
    print(f"write: conch {conch_write:.2f}s, parquet {pq_write:.2f}s")

    db = duckdb.connect()
    db.execute("SET threads TO 2")
    for name in data:
        db.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{root / 'pq' / name}.parquet')")

    scenes = t.scenes
    clips = scenes.clips
    frames, detections = clips.frames, clips.detections

    def c_broadcast() -> pa.Table:
        return frames.select(b=_.brightness, location=scenes.location, duration=clips.duration).scan().to_arrow()

    def c_reduce() -> pa.Table:
        return (
            clips.select(
                mean=_.detections.confidence.mean(), n=_.detections.count(), conf=_.detections.confidence.list()
            )
            .scan()
            .to_arrow()
        )

    def c_window() -> pa.Table:
        return frames.select(rolling=_.brightness.window(frame=(-4, 0)).mean()).scan().to_arrow()

    def c_regroup() -> pa.Table:
        resampled = detections.regroup(key=(detections.ts * clips.fps).floor()).rekey(frames)
        return frames.select(avg_conf=resampled.confidence.mean(), det_count=resampled.count()).scan().to_arrow()

    sql = {
        "broadcast": """SELECT f.scene, f.clip, f.frame, f.brightness AS b, s.location, c.duration
            FROM frames f JOIN clips c USING (scene, clip) JOIN scenes s USING (scene)
            ORDER BY f.scene, f.clip, f.frame""",
        "reduce": """SELECT c.scene, c.clip, avg(d.confidence) AS mean, count(d.det) AS n,
                list(d.confidence ORDER BY d.det) AS conf
            FROM clips c LEFT JOIN detections d USING (scene, clip)
            GROUP BY c.scene, c.clip ORDER BY c.scene, c.clip""",
        "window": """SELECT scene, clip, frame, avg(brightness) OVER (PARTITION BY scene, clip ORDER BY frame
                ROWS BETWEEN 4 PRECEDING AND CURRENT ROW) AS rolling
            FROM frames ORDER BY scene, clip, frame""",
        "regroup": """WITH d AS (
                SELECT d.scene, d.clip, CAST(floor(d.ts * c.fps) AS UBIGINT) AS frame, d.confidence
                FROM detections d JOIN clips c USING (scene, clip))
            SELECT f.scene, f.clip, f.frame, avg(d.confidence) AS avg_conf, count(d.confidence) AS det_count
            FROM frames f LEFT JOIN d USING (scene, clip, frame)
            GROUP BY f.scene, f.clip, f.frame ORDER BY f.scene, f.clip, f.frame""",
    }
    conch_q = {"broadcast": c_broadcast, "reduce": c_reduce, "window": c_window, "regroup": c_regroup}
    results: dict[str, Any] = {
        "config": vars(args),
        "rows": {k: v.num_rows for k, v in data.items()},
        "write_s": {"conch": conch_write, "parquet": pq_write},
        "queries": {},
    }
    print(f"{'query':<10} {'conch s':>9} {'duckdb s':>9} {'ratio':>7}  rows")
    for name, fn in conch_q.items():
        tc, out_c = best(fn, args.repeat)
        td, out_d = best(lambda q=sql[name]: db.sql(q).to_arrow_table(), args.repeat)  # type: ignore[misc]
        assert out_c.num_rows == out_d.num_rows, (name, out_c.num_rows, out_d.num_rows)
        ratio = tc / td
        results["queries"][name] = {"conch_s": tc, "duckdb_s": td, "ratio": ratio, "rows": out_c.num_rows}
        print(f"{name:<10} {tc:9.3f} {td:9.3f} {ratio:7.2f}  {out_c.num_rows:,}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"results → {args.out}")


if __name__ == "__main__":
    main()
