"""The `conch` command line, run as a real subprocess against a real warehouse."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import conch


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    w = str(tmp_path / "w")
    t = conch.connect(w).create_table("audio", [("id", pa.uint64())])
    t.write([{"id": i, "silence_ratio": i / 10, "audio": {"meta": {"size": i}}} for i in range(5)])
    t.delete([4])
    return w


def cli(warehouse: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conch.cli", "--warehouse", warehouse, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


def test_tables_schema_history_manifests(warehouse: str) -> None:
    out = cli(warehouse, "tables").stdout
    assert "audio" in out and "id: uint64" in out
    assert "└── audio: struct" in cli(warehouse, "schema", "audio").stdout
    hist = cli(warehouse, "history", "audio").stdout
    assert "write" in hist and "delete" in hist
    man = cli(warehouse, "manifests", "audio").stdout
    for header in (
        "Key Space manifest",
        "Column Group manifest for audio.audio.meta",
        "Key Span",
        "Committed At",
        "0..4",
    ):
        assert header in man


def test_scan_table_and_files(warehouse: str, tmp_path: Path) -> None:
    out = cli(warehouse, "scan", "audio", "--where", "silence_ratio < 0.25", "--columns", "silence_ratio").stdout
    assert "0.1" in out and "0.3" not in out
    res = cli(warehouse, "scan", "audio", "--format", "json", "--where", "audio.meta.size >= 2")
    assert [json.loads(line)["id"] for line in res.stdout.splitlines()] == [2, 3]
    pq_path = tmp_path / "out.parquet"
    cli(warehouse, "scan", "audio", "--format", "parquet", "--output", str(pq_path))
    assert pq.read_table(pq_path).num_rows == 4
    csv = cli(warehouse, "scan", "audio", "--format", "csv", "--columns", "silence_ratio").stdout.splitlines()
    assert csv[0].replace('"', "") == "id,silence_ratio" and len(csv) == 5


def test_errors_are_readable_and_exit_nonzero(warehouse: str) -> None:
    res = cli(warehouse, "scan", "nope")
    assert res.returncode == 2 and "no table 'nope'" in res.stdout
    res = cli(warehouse, "scan", "audio", "--where", "silence_ratio <")
    assert res.returncode == 2 and "cannot parse filter" in res.stdout


def test_vacuum_and_flush(warehouse: str) -> None:
    assert "removed 0 files" in cli(warehouse, "vacuum", "audio", "--older-than", "0").stdout
    assert "snapshot at seq 3" in cli(warehouse, "flush", "audio").stdout  # vacuum logs an entry


def test_negative_limit_is_a_usage_error(warehouse: str) -> None:
    out = cli(warehouse, "scan", "audio", "--limit", "-5")
    assert out.returncode == 2 and "--limit" in out.stderr and "greater than or equal to 0" in out.stderr
    assert cli(warehouse, "scan", "audio", "--limit", "0").returncode == 0
