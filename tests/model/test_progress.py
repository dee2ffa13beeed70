"""Progress bars: drawn on a terminal for streamed writes, deletes by filter, scans' `to_*` and CLI exports;
silent when standard error is not a terminal, with `progress=False`, or `CONCH_PROGRESS=0`."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

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
    base = [sys.executable, "-m", "conch.apps.cli", "--warehouse", w]
    code, shown = run_on_tty(
        [*base, "scan", "t", "--format", "parquet", "--output", str(tmp_path / "o.parquet")], env()
    )
    assert code == 0 and "exporting parquet" in shown and "3,000 rows" in shown
    out = tmp_path / "q.parquet"
    code, shown = run_on_tty([*base, "--quiet", "scan", "t", "--format", "parquet", "--output", str(out)], env())
    assert code == 0 and "exporting" not in shown and out.exists()


SCAN = """
import sys, pyarrow as pa, conch
t = conch.connect(sys.argv[1]).create_table("t", [("id", pa.uint64())])
for i in range(20):
    t.write({"id": pa.array(range(i * 2000, (i + 1) * 2000), pa.uint64()), "x": [1.5] * 2000}, progress=False)
got = getattr(t.scan(), sys.argv[2])(progress={progress})
print("rows", len(got))
"""


def scan_run(tmp_path: Path, name: str, method: str, progress: str, **extra: str) -> tuple[int, str]:
    script = SCAN.replace("{progress}", progress)
    return run_on_tty([sys.executable, "-c", script, str(tmp_path / name), method], env(**extra))


@pytest.mark.parametrize("method", ["to_arrow", "to_pandas", "to_polars", "to_pylist"])
def test_scan_conversions_show_rows_and_bytes_on_a_terminal(tmp_path: Path, method: str) -> None:
    # CONCH_PROGRESS_DELAY=0: the bar a scan shows once it has run for a second, shown at once
    code, shown = scan_run(tmp_path, "a", method, "None", CONCH_PROGRESS_DELAY="0")
    assert code == 0 and "scanning" in shown and "40,000 rows" in shown and "KB" in shown
    code, shown = scan_run(tmp_path, "b", method, "True")  # asked for: no delay
    assert code == 0 and "scanning" in shown and "40,000 rows" in shown


def test_scan_conversions_silent_when_short_asked_or_not_a_terminal(tmp_path: Path) -> None:
    code, shown = scan_run(tmp_path, "a", "to_arrow", "False", CONCH_PROGRESS_DELAY="0")
    assert code == 0 and "scanning" not in shown
    code, shown = scan_run(tmp_path, "b", "to_arrow", "None", CONCH_PROGRESS_DELAY="0", CONCH_PROGRESS="0")
    assert code == 0 and "scanning" not in shown
    code, shown = scan_run(tmp_path, "c", "to_arrow", "None", CONCH_PROGRESS_DELAY="3600")  # short: no flash
    assert code == 0 and "scanning" not in shown
    script = SCAN.replace("{progress}", "None")
    res = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "d"), "to_pandas"],
        capture_output=True, text=True, env=env(CONCH_PROGRESS_DELAY="0"), timeout=120,
    )  # fmt: skip
    assert res.returncode == 0 and res.stderr == "" and "rows 40000" in res.stdout
