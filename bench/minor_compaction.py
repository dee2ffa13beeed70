"""Minor vs major compaction as the data grows (issue 10: minor compaction's cost follows keys and
metadata, not data bytes).

    .venv/bin/python -m bench.minor_compaction [--rows 20000] [--payloads 100 2000 20000]

One table per payload size: four overlapping runs of `rows` keys (the newest a partial-column
upsert of 10 %), a binary `payload` column of the given bytes per row. The same table is copied;
one copy is minor-compacted (`Table.compact_minor`), the other major-compacted (`Table.compact`);
both are timed, with the bytes each wrote, and a full scan after each as a ratio to before.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import conch

RESULTS = Path(__file__).parent / "results" / "minor_compaction.json"


def build(root: Path, rows: int, payload: int) -> None:
    t = conch.connect(root, maintenance=conch.Policy(auto=False)).create_table("t", [("id", pa.int64())])
    rng = np.random.default_rng(1)
    blob = pa.array([bytes(rng.integers(0, 256, payload, dtype=np.uint8)) for _ in range(64)], pa.binary())
    for _ in range(3):
        ids = np.sort(rng.choice(rows * 2, rows, replace=False))
        t.write(pa.table({"id": ids, "x": rng.random(rows), "payload": blob.take(pa.array(ids % 64))}))
    ids = np.sort(rng.choice(rows * 2, rows // 10, replace=False))
    t.write(pa.table({"id": ids, "x": rng.random(len(ids))}))


def disk(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def measure(rows: int, payload: int) -> dict[str, float]:
    """Build one table, copy it, minor-compact one copy and major-compact the other."""
    with tempfile.TemporaryDirectory() as d:
        a, b = Path(d) / "a", Path(d) / "b"
        build(a, rows, payload)
        shutil.copytree(a, b)
        ta = conch.connect(a, maintenance=conch.Policy(auto=False)).table("t")
        tb = conch.connect(b, maintenance=conch.Policy(auto=False)).table("t")
        scan0 = min(timed(lambda: ta.scan().to_arrow()) for _ in range(3))
        size = disk(a)
        minor_s = timed(lambda: ta.compact_minor())
        minor_w = disk(a) - size
        major_s = timed(lambda: tb.compact())
        major_w = disk(b) - size
        scan_minor = min(timed(lambda: ta.scan().to_arrow()) for _ in range(3)) / scan0
        scan_major = min(timed(lambda: tb.scan().to_arrow()) for _ in range(3)) / scan0
        assert ta.scan().to_arrow().sort_by("id").equals(tb.scan().to_arrow().sort_by("id"))
        row = {
            "payload_bytes": payload,
            "data_bytes": size,
            "minor_s": minor_s,
            "minor_wrote": minor_w,
            "major_s": major_s,
            "major_wrote": major_w,
            "scan_after_minor": scan_minor,
            "scan_after_major": scan_major,
        }
        return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--payloads", type=int, nargs="+", default=[100, 2_000, 20_000])
    args = ap.parse_args()
    out = []
    print(f"{'payload B':>10} {'data MB':>8} {'minor s':>8} {'minor wrote':>12} {'major s':>8} {'major wrote':>12}"
          f" {'scan/before minor':>18} {'major':>6}")  # fmt: skip
    for payload in args.payloads:
        r = measure(args.rows, payload)
        out.append(r)
        print(f"{payload:>10} {r['data_bytes'] / 1e6:>8.1f} {r['minor_s']:>8.3f} {r['minor_wrote'] / 1e3:>10.0f}KB"
              f" {r['major_s']:>8.3f} {r['major_wrote'] / 1e6:>10.1f}MB {r['scan_after_minor']:>17.2f}x"
              f" {r['scan_after_major']:>5.2f}x")  # fmt: skip
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"rows": args.rows, "results": out}, indent=1))


if __name__ == "__main__":
    main()
