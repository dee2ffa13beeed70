"""Progress bars: drawn on a terminal for streamed writes, deletes by filter and CLI exports;
silent when standard error is not a terminal, with `progress=False`, or `CONCH_PROGRESS=0`."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

import conch

SCRIPT = """
import sys, pyarrow as pa, conch
t = conch.connect(sys.argv[1]).create_table("t", [("id", pa.uint64())])
batches = (pa.record_batch({"id": pa.array(range(i * 1000, (i + 1) * 1000), pa.uint64()), "x": [1.0] * 1000})
           for i in range(50))
schema = pa.schema([("id", pa.uint64()), ("x", pa.float64())])
t.write(pa.RecordBatchReader.from_batches(schema, batches), progress={progress})
print("rows", t.scan().count())
"""


def run_on_tty(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run with stderr on a pseudo-terminal; returns (exit code, what the terminal showed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    return proc.wait(timeout=120), shown.decode(errors="replace")


def env(**extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "COLUMNS": "120", "TERM": "xterm", **extra}


def test_streamed_write_shows_rows_and_bytes_on_a_terminal(tmp_path: Path) -> None:
    code, shown = run_on_tty([sys.executable, "-c", SCRIPT.replace("{progress}", "None"), str(tmp_path / "a")], env())
    assert code == 0 and "writing" in shown and "50,000 rows" in shown and "KB" in shown


def test_silent_when_asked_or_not_a_terminal(tmp_path: Path) -> None:
    code, shown = run_on_tty([sys.executable, "-c", SCRIPT.replace("{progress}", "False"), str(tmp_path / "b")], env())
    assert code == 0 and "writing" not in shown
    code, shown = run_on_tty(
        [sys.executable, "-c", SCRIPT.replace("{progress}", "None"), str(tmp_path / "c")], env(CONCH_PROGRESS="0")
    )
    assert code == 0 and "writing" not in shown
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT.replace('{progress}', 'None'), str(tmp_path / "d")],
        capture_output=True, text=True, env=env(), timeout=120,
    )  # fmt: skip
    assert res.returncode == 0 and res.stderr == "" and "rows 50000" in res.stdout


def test_cli_export_progress_and_quiet(tmp_path: Path) -> None:
    w = str(tmp_path / "w")
    conch.connect(w).create_table("t", [("id", pa.uint64())]).write({"id": list(range(3000)), "x": [0.5] * 3000})
    base = [sys.executable, "-m", "conch.cli", "--warehouse", w]
    code, shown = run_on_tty(
        [*base, "scan", "t", "--format", "parquet", "--output", str(tmp_path / "o.parquet")], env()
    )
    assert code == 0 and "exporting parquet" in shown and "3,000 rows" in shown
    out = tmp_path / "q.parquet"
    code, shown = run_on_tty([*base, "--quiet", "scan", "t", "--format", "parquet", "--output", str(out)], env())
    assert code == 0 and "exporting" not in shown and out.exists()
