"""`bench/goals.py`: issues 10 and 11's goals judged from the result files one bench run writes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

# bench/ is not a package the tests import from (it is run as `python -m bench`): load the file
_spec = importlib.util.spec_from_file_location("bench_goals", Path(__file__).parents[1] / "bench" / "goals.py")
assert _spec is not None and _spec.loader is not None
goals = importlib.util.module_from_spec(_spec)
sys.modules["bench_goals"] = goals  # dataclasses look their module up there
_spec.loader.exec_module(goals)


def _write(out: Path, name: str, doc: dict) -> None:
    (out / name).write_text(json.dumps(doc))


def test_goals_judge_every_source_and_tolerate_missing_ones(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "scan.json",
        {
            "results": [
                {"workload": "5", "case": "take 20-50 random keys (per query)", "system": "conch", "seconds": 0.002},
                {"workload": "5", "case": "take 20-50 random keys (per query)", "system": "lance", "seconds": 0.001},
                {"workload": "4", "case": "audio.bytes where silence<0.1", "system": "conch", "seconds": 0.01},
                {"workload": "4", "case": "audio.bytes where silence<0.1", "system": "lance", "seconds": 0.02},
                {"workload": "1", "case": "write 2,000 rows", "system": "conch", "seconds": 0.6},
                {"workload": "1", "case": "write 2,000 rows", "system": "parquet", "seconds": 0.3},
                {"workload": "8", "case": "stream 0.1 GB of 20 KB blobs", "system": "conch", "seconds": None},
            ]
        },
    )
    _write(
        tmp_path,
        "runs.json",
        {
            "results": [
                {"case": "1000 appends", "query": "full", "system": "conch", "seconds": 0.3},
                {"case": "1000 appends", "query": "full", "system": "lance", "seconds": 0.6},
                {"case": "100 appends", "query": "filter", "system": "conch", "seconds": 0.3},
                {"case": "100 appends", "query": "filter", "system": "lance", "seconds": 0.1},
            ]
        },
    )
    _write(
        tmp_path,
        "memory.json",
        {
            "results": [
                {"rows_total": 10**7, "system": "conch", "step": "scan", "peak_rss": 100 << 20},
                {"rows_total": 10**8, "system": "conch", "step": "scan", "peak_rss": 300 << 20},
                {"rows_total": 10**8, "system": "lance", "step": "scan", "peak_rss": 400 << 20},
            ]
        },
    )
    # spark.json missing: its goal is "not run"
    got = {g.goal: g for g in goals.report(tmp_path)}
    status = {name: g.status for name, g in got.items()}
    assert status["random take of 20-50 keys, 1M x 1 KB (workload 5)"] == "missed"
    assert got["random take of 20-50 keys, 1M x 1 KB (workload 5)"].ratio == 2.0
    assert status["spec/001 scan(audio.bytes, where=silence_ratio < x) at 10 % (workload 4)"] == "met"
    assert status["spec/001 scan(audio.bytes, where=silence_ratio < x) at 1 % (workload 4)"] == "not run"
    assert got["write (workload 1)"].ratio == 0.5 and status["write (workload 1)"] == "missed"
    assert status["blob streaming, 20 KB blobs, 5 GB at scale 1 (workload 8)"] == "not run"
    assert status["full scan after 1,000 commits before compaction (runs)"] == "met"
    assert status["1 % filter after 100 commits before compaction (runs)"] == "missed"
    assert status["full scan after 100 commits before compaction (runs)"] == "not run"
    assert status["peak RSS, scan, at the most keys (memory)"] == "met"
    assert status["peak RSS, scan, flat as keys grow (memory)"] == "missed"  # 3x from 10M to 100M
    assert status["peak RSS, write, at the most keys (memory)"] == "not run"
    assert status["Spark value-filtered scan vs native Parquet (spark_bench)"] == "not run"
    assert status["bulk load, default policy, peak RSS (writes)"] == "not run"
    written = json.loads((tmp_path / "goals.json").read_text())
    assert [g["goal"] for g in written["goals"]] == list(got)
    assert set(written["sources"]) == {"scan.json", "runs.json", "memory.json"}


def test_write_goals(tmp_path: Path) -> None:
    rows = [
        {"section": "bulk load", "case": "4 keys", "system": "conch default", "seconds": 1.1, "peak_rss_mb": 350},
        {"section": "bulk load", "case": "4 keys", "system": "conch auto-off", "seconds": 1.0, "peak_rss_mb": 340},
        {"section": "bulk load", "case": "4 keys", "system": "parquet", "seconds": 0.5, "peak_rss_mb": 200},
        {"section": "wide", "case": "write 1 x 2", "system": "conch", "seconds": 1.0},
        {"section": "wide", "case": "write 1 x 2", "system": "parquet", "seconds": 2.0},
    ]
    _write(tmp_path, "writes.json", {"rows": rows})
    got = {g.goal: g for g in goals.report(tmp_path)}
    assert got["bulk load, default policy vs Policy(auto=False) (writes)"].status == "met"
    assert got["bulk load, default policy, peak RSS (writes)"].status == "met"
    assert got["bulk load vs Parquet (writes)"].ratio == 2.2 and got["bulk load vs Parquet (writes)"].status == "missed"
    assert got["wide table write vs Parquet (writes)"].status == "met"


def test_spark_rows_form(tmp_path: Path) -> None:
    rows = [{"case": "value-filtered scan (1 %)", "conch_s": 1.1, "parquet_s": 1.0, "ratio": 1.1}]
    _write(tmp_path, "spark.json", {"rows": rows})
    (g,) = [g for g in goals.report(tmp_path) if g.goal.startswith("Spark")]
    assert g.status == "met" and g.ratio == 1.1


def test_lsm_goals_read_settled_rows_only(tmp_path: Path) -> None:
    """Issue 10's rows: workload 7 and the 200-row histories count once settled (a row read
    right after the last commit is not the goal's), and the compacted partial upsert."""
    w7 = [
        {
            "workload": "7",
            "case": "full scan after 500 commits, right after the last",
            "system": "conch",
            "seconds": 0.02,
            "ratio_to_one_commit": 2.7,
        },
        {
            "workload": "7",
            "case": "full scan after 500 commits, settled",
            "system": "conch",
            "seconds": 0.01,
            "ratio_to_one_commit": 1.04,
            "settle_s": 0.4,
        },
        {
            "workload": "7",
            "case": "1 % filter after 500 commits, settled",
            "system": "conch",
            "seconds": 0.01,
            "ratio_to_one_commit": 1.3,
        },
    ]
    _write(tmp_path, "scan.json", {"results": w7})
    rows = [
        {
            "section": "w7 3000 commits",
            "case": "1% filter",
            "variant": "default policy",
            "seconds": 0.01,
            "ratio_to_once": 0.9,
        },
        {
            "section": "w7 3000 commits",
            "case": "1% filter",
            "variant": "default policy, settled",
            "seconds": 0.01,
            "ratio_to_once": 1.1,
        },
        {"section": "partial-column upsert", "rows": 1000, "clean_s": 0.01, "after_compaction": 1.2},
    ]
    _write(tmp_path, "compaction.json", {"results": rows})
    got = {g.goal: g for g in goals.report(tmp_path)}
    full = got["full scan after 500 commits of 2,000 random keys, settled (workload 7)"]
    assert (full.status, full.ratio) == ("met", 1.04)
    assert got["1 % filter after 500 commits of 2,000 random keys, settled (workload 7)"].status == "missed"
    assert got["50-key take after 500 commits of 2,000 random keys, settled (workload 7)"].status == "not run"
    three = got["1 % filter after 3,000 commits of 200 random keys, settled (compaction)"]
    assert (three.status, three.ratio) == ("met", 1.1)
    assert got["full scan after 3,000 commits of 200 random keys, settled (compaction)"].status == "not run"
    assert got["read after a 10 % partial-column upsert, compacted (compaction)"].status == "missed"
