"""The CLI as strong as Python in the first hour (issue 32, items 6 and 10): `--asof TAG`,
`--version`, errors that name CLI commands, suggestions for `ls` / `show`, a wide scan on an
80-column terminal, and printing a few rows of a huge value without holding it several times."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa

import conch
from helpers import run_cli


def _cli(warehouse: Path, *args: str, columns: int = 200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conch.apps.cli", "--warehouse", str(warehouse), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={"COLUMNS": str(columns), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(conch.__file__).parents[1])},
    )


def test_asof_and_version_take_tags_and_numbers(tmp_path: Path) -> None:
    w = tmp_path / "w"
    t = conch.connect(w).create_table("t", [("id", pa.int64())])
    t.write({"id": [1], "x": [1.0]})
    t.tag("first")
    t.write({"id": [1], "x": [2.0]})
    for args in (("--asof", "first"), ("--version", "first"), ("--version", "1")):
        res = run_cli(w, "scan", "t", *args)
        assert res.returncode == 0 and "1.0" in res.stdout and "2.0" not in res.stdout, (args, res.stderr)
    assert "1.0" in run_cli(w, "get", "t", "1", "--asof", "first").stdout
    res = run_cli(w, "scan", "t", "--version", "9")
    assert res.returncode == 2 and "conch history t" in res.stderr and "history()`)" in res.stderr
    res = run_cli(w, "scan", "t", "--asof", "7")
    assert res.returncode == 2 and "--version 7" in res.stderr


def test_commands_of_other_tools_get_a_suggestion(tmp_path: Path) -> None:
    w = tmp_path / "w"
    assert "use `conch tables`" in run_cli(w, "ls").stderr
    assert "use `conch get (records by key) or scan`" in run_cli(w, "show", "t").stderr


def test_a_wide_scan_on_a_narrow_terminal_shows_columns_that_fit(tmp_path: Path) -> None:
    w = tmp_path / "w"
    t = conch.connect(w).create_table("penguins", [("id", pa.int64())])
    t.write({"id": [1, 2], **{f"culmen_depth_{i}": [12.25 + i, 2.5] for i in range(17)}})
    out = _cli(w, "scan", "penguins", columns=80).stdout
    assert "12.25" in out and "13.25" in out  # before: every cell was "…"
    assert "more column(s) not shown on a 80-column terminal" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_printing_five_rows_holds_a_huge_value_at_most_once(tmp_path: Path) -> None:
    """100 MB of text in one cell: the process printing 5 rows may read it (once), but not copy
    it into Python objects (before: ~190 MB above an empty scan, now ~95 MB)."""
    size = 100_000_000
    for name, caption in (("small", "x" * 1000), ("huge", "x" * size)):
        t = conch.connect(tmp_path / name).create_table("huge", [("id", pa.int64())])
        t.write({"id": [1, 2], "caption": [caption, "short"]})
    rss = {}
    for name in ("small", "huge"):
        # RUSAGE_CHILDREN is the largest child so far: measure each in its own interpreter
        probe = (
            "import resource, subprocess, sys; "
            f"r = subprocess.run({[sys.executable, '-m', 'conch.apps.cli', '--warehouse', str(tmp_path / name), 'scan', 'huge', '--limit', '5']!r}, capture_output=True, text=True); "
            "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(r.stdout)"
        )
        res = subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            timeout=300,
            env={"COLUMNS": "80", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(conch.__file__).parents[1])},
        )
        code, kb = res.stdout.split("\n")[0].split()
        assert code == "0", res.stdout + res.stderr
        rss[name] = int(kb) * 1024
        printed = res.stdout
    assert rss["huge"] - rss["small"] < 1.5 * size, rss
    assert "[100.0MB text] xxxx" in printed  # a prefix and the size
