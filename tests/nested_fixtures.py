"""The `recordings` table of spec/002, with data chosen so the spec's printed outputs hold."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

import conch

DETECTION = pa.struct([("$", pa.uint64()), ("label", pa.string()), ("confidence", pa.float32()), ("ts", pa.float64())])
FRAME = pa.struct([("$", pa.uint64()), ("rgb", pa.binary()), ("depth", pa.binary())])
AUDIO = pa.struct([("$", pa.uint64()), ("pcm", pa.binary()), ("level_db", pa.float32())])
CLIP = pa.struct(
    [
        ("$", pa.string()),
        ("camera", pa.string()),
        ("start_time", pa.float64()),
        ("duration", pa.float64()),
        ("fps", pa.float64()),
        ("frames", pa.list_(FRAME)),
        ("detections", pa.list_(DETECTION)),
        ("audio", pa.list_(AUDIO)),
    ]
)
SCENE = pa.struct(
    [
        ("$", pa.string()),
        ("location", pa.string()),
        ("tags", pa.list_(pa.string())),
        ("clips", pa.list_(CLIP)),
        ("metadata", pa.struct([("weather", pa.string()), ("lighting", pa.string())])),
    ]
)
MODEL = pa.struct(
    [
        ("$", pa.string()),
        ("name", pa.string()),
        ("config", pa.struct([("lr", pa.float64()), ("batch_size", pa.int32())])),
    ]
)
RECORDINGS = pa.schema([("scenes", pa.list_(SCENE)), ("models", pa.list_(MODEL))])


def _det(i: int, label: str, conf: float, ts: float) -> dict[str, Any]:
    return {"$": i, "label": label, "confidence": conf, "ts": ts}


# Detections at 10 fps: ts 0.05 → frame 0, 0.15 → frame 1. Clip means 0.85 / 0.92 / 0.78; the
# regroup onto frames gives 0.90, 0.85, 0.70, 0.775 (detections past the last frame drop out).
SCENES: list[dict[str, Any]] = [
    {
        "$": "s1",
        "location": "downtown",
        "tags": ["urban", "day"],
        "metadata": {"weather": "sunny", "lighting": "day"},
        "clips": [
            {
                "$": "c1", "camera": "front", "start_time": 0.0, "duration": 30.0, "fps": 10.0,
                "frames": [{"$": 0, "rgb": b"f0", "depth": b"d0"}, {"$": 1, "rgb": b"f1", "depth": b"d1"}],
                "detections": [_det(0, "car", 0.90, 0.05), _det(1, "pedestrian", 0.85, 0.15), _det(2, "bicycle", 0.80, 0.25)],
                "audio": [{"$": 0, "pcm": b"a0", "level_db": -20.0}, {"$": 1, "pcm": b"a1", "level_db": -18.0}],
            },
            {
                "$": "c2", "camera": "front", "start_time": 30.0, "duration": 15.0, "fps": 10.0,
                "frames": [{"$": 0, "rgb": b"f2", "depth": b"d2"}],
                "detections": [
                    _det(0, "pedestrian", 0.70, 0.05), _det(1, "car", 0.98, 0.5), _det(2, "car", 0.97, 0.6),
                    _det(3, "pedestrian", 0.99, 0.7), _det(4, "car", 0.96, 0.8),
                ],
                "audio": [{"$": 0, "pcm": b"a2", "level_db": -25.0}],
            },
        ],
    },
    {
        "$": "s2",
        "location": "highway",
        "tags": ["fast"],
        "metadata": {"weather": "rain", "lighting": "dusk"},
        "clips": [
            {
                "$": "c3", "camera": "rear", "start_time": 0.0, "duration": 20.0, "fps": 10.0,
                "frames": [{"$": 0, "rgb": b"f3", "depth": b"d3"}],
                "detections": [_det(0, "car", 0.80, 0.02), _det(1, "pedestrian", 0.75, 0.08), _det(2, "car", 0.79, 0.3)],
                "audio": [],
            }
        ],
    },
]  # fmt: skip
MODELS = [{"$": "m1", "name": "detector", "config": {"lr": 0.001, "batch_size": 32}}]


def make_recordings(catalog: conch.Catalog) -> conch.Table:
    t = catalog.create_table("recordings", [], RECORDINGS)
    t.write(pa.table({"scenes": pa.array([SCENES], pa.list_(SCENE)), "models": pa.array([MODELS], pa.list_(MODEL))}))
    return t
