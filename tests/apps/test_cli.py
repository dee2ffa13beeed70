"""The `conch` command line, run as a real subprocess against a real warehouse."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conch
from helpers import run_cli


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    w = str(tmp_path / "w")
    t = conch.connect(w).create_table("audio", [("id", pa.uint64())])
    t.write([{"id": i, "silence_ratio": i / 10, "audio": {"meta": {"size": i}}} for i in range(5)])
    t.delete([4])
    return w


def test_tables_schema_history_manifests(warehouse: str) -> None:
    out = run_cli(warehouse, "tables").stdout
    assert "audio" in out and "id: uint64" in out
    assert "└── audio: struct" in run_cli(warehouse, "schema", "audio").stdout
    hist = run_cli(warehouse, "history", "audio").stdout
    assert "write" in hist and "delete" in hist
    man = run_cli(warehouse, "manifests", "audio").stdout
    for header in (
        "Key Space manifest",
        "Column Group manifest for audio.audio.meta",
        "Key Span",
        "Committed At",
        "0..4",
    ):
        assert header in man


def test_scan_table_and_files(warehouse: str, tmp_path: Path) -> None:
    out = run_cli(warehouse, "scan", "audio", "--where", "silence_ratio < 0.25", "--columns", "silence_ratio").stdout
    assert "0.1" in out and "0.3" not in out
    res = run_cli(warehouse, "scan", "audio", "--format", "json", "--where", "audio.meta.size >= 2")
    assert [json.loads(line)["id"] for line in res.stdout.splitlines()] == [2, 3]
    pq_path = tmp_path / "out.parquet"
    run_cli(warehouse, "scan", "audio", "--format", "parquet", "--output", str(pq_path))
    assert pq.read_table(pq_path).num_rows == 4
    csv = run_cli(warehouse, "scan", "audio", "--format", "csv", "--columns", "silence_ratio").stdout.splitlines()
    assert csv[0].replace('"', "") == "id,silence_ratio" and len(csv) == 5


def test_errors_are_readable_and_exit_nonzero(warehouse: str) -> None:
    res = run_cli(warehouse, "scan", "nope")
    assert res.returncode == 2 and "no table 'nope'" in res.stderr
    res = run_cli(warehouse, "scan", "audio", "--where", "silence_ratio <")
    assert res.returncode == 2 and "cannot parse filter" in res.stderr


def test_vacuum_and_flush(warehouse: str) -> None:
    assert "removed 0 files" in run_cli(warehouse, "vacuum", "audio", "--older-than", "0s").stdout
    out = run_cli(warehouse, "flush", "audio").stdout
    # the snapshot is of the newest version (the vacuum's own entry included); the flush then
    # registers it in one more entry
    history = conch.connect(warehouse).table("audio").history()
    assert f"snapshot at seq {history[-2].seq}" in out and history[-2].kind == "vacuum" and history[-1].kind == "flush"


def test_negative_limit_is_a_usage_error(warehouse: str) -> None:
    out = run_cli(warehouse, "scan", "audio", "--limit", "-5")
    assert out.returncode == 2 and "--limit" in out.stderr and "greater than or equal to 0" in out.stderr
    assert out.stderr.startswith("error:") and len(out.stderr.strip().splitlines()) == 1
    assert run_cli(warehouse, "scan", "audio", "--limit", "0").returncode == 0


# ----- issue 14: a complete CLI ------------------------------------------------------------------
DATA = Path(__file__).parents[1] / "data"


def test_ingest_msft_csv_as_a_new_user_would(tmp_path: Path) -> None:
    """The CSV that failed with tracebacks: `Adj. Close*` (a dot) and a date key."""
    w = str(tmp_path / "w")
    res = run_cli(w, "ingest", str(DATA / "msft.csv"), "--table", "msft", "--key", "Date")
    assert res.returncode == 0, res.stderr
    assert "wrote 60 rows" in res.stdout
    assert (
        "renamed column 'Adj. Close*' to 'adj_close'" in res.stderr and "--rename 'Adj. Close*=adj_close'" in res.stderr
    )
    assert "stored as timestamp[us]" in res.stderr
    t = conch.connect(w).table("msft")
    assert t.key_schema.field("Date").type == pa.timestamp("us") and t.scan().count() == 60
    assert "adj_close" in t.schema.columns
    got = run_cli(w, "get", "msft", "2003-03-26")
    assert got.returncode == 0 and "26.38" in got.stdout and "78640415" in got.stdout
    # renames and casts chosen by the user; the same file again is an upsert of the same keys
    res = run_cli(
        w, "write", "msft", str(DATA / "msft.csv"), "--rename", "Adj. Close*=adj_close", "--cast", "Volume=float64"
    )
    assert res.returncode == 0, res.stderr
    assert t.scan().count() == 60 and [c.kind for c in t.history()].count("write") == 2


def test_create_write_get_delete_drop(tmp_path: Path) -> None:
    w = str(tmp_path / "w")
    assert "created t (id: u64" in run_cli(w, "create", "t", "--key", "id:uint64").stdout
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": i, "x": i * 1.5, "name": f"n{i}"}) + "\n" for i in range(10)))
    assert run_cli(w, "write", "t", str(rows)).returncode == 0
    pq.write_table(pa.table({"id": pa.array([10, 11], pa.uint64()), "x": [0.0, 99.0]}), tmp_path / "more.parquet")
    assert "wrote 2 rows" in run_cli(w, "write", "t", str(tmp_path / "more.parquet")).stdout
    assert "would delete 5 keys" in run_cli(w, "delete", "t", "--where", "x between 3 and 9", "--dry-run").stdout
    res = run_cli(w, "delete", "t", "--where", "x between 3 and 9 or name like 'n9%'")
    assert res.returncode == 0 and "deleted 6 keys" in res.stdout, res.stderr
    assert "deleted 2 keys" in run_cli(w, "delete", "t", "0", "11").stdout
    t = conch.connect(w).table("t")
    assert sorted(r["id"] for r in t.scan().to_pylist()) == [1, 7, 8, 10]
    miss = run_cli(w, "get", "t", "0", "7")
    assert miss.returncode == 1 and "0: no such key" in miss.stdout and "n7" in miss.stdout
    no = run_cli(w, "drop", "t")
    assert no.returncode == 2 and "pass --yes" in no.stderr
    assert run_cli(w, "drop", "t", "--yes").returncode == 0 and conch.connect(w).list_tables() == []


def test_every_error_is_one_line_with_the_fix(tmp_path: Path) -> None:
    w = str(tmp_path / "w")
    run_cli(w, "create", "t", "--key", "id:uint64")
    bad = tmp_path / "bad.csv"
    bad.write_text("id,x,name\n1,2,abc\n")
    cases = [
        (("create", "u", "--key", "id"), "needs a type"),
        (("create", "u", "--key", "id:complex"), "unknown type 'complex'"),
        (("write", "nope", str(bad)), "pass --key COLUMN"),
        (("write", "t", str(tmp_path / "missing.csv")), "no such file"),
        (("write", "t", str(bad), "--rename", "zz=y"), "matches no column"),
        (("write", "t", str(bad), "--cast", "name=int64"), "use --cast COL=TYPE"),
        (("ingest", str(bad), "-t", "t", "--key", "id", "--partitions", "2"), "add --spark"),
        (("delete", "t"), "one of them"),
        (("delete", "t", "--where", "x >"), "cannot parse filter"),
        (("get", "t", "abc"), "is not a uint64"),
        (("scan", "t", "--format", "xml"), "unknown format"),
        (("scan", "t", "--format", "parquet"), "needs --output"),
        (("frobnicate",), "No such command"),
    ]
    for args, message in cases:
        res = run_cli(w, *args)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), (args, res.stderr)
        assert message in lines[0], (args, lines[0])
        assert "Traceback" not in res.stdout + res.stderr
    debug = run_cli(w, "--debug", "get", "t", "abc")
    assert "Traceback" in debug.stderr and "InvalidArgumentError" in debug.stderr


def test_manifests_fit_the_terminal_and_blobs_are_previewed(tmp_path: Path) -> None:
    import io
    import wave

    w = str(tmp_path / "w")
    t = conch.connect(w).create_table("m", [("id", pa.uint64())])
    png = (
        b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + (64).to_bytes(4, "big") + (48).to_bytes(4, "big") + b"\x08" * 40
    )
    buf = io.BytesIO()
    with wave.open(buf, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(16000)
        wav.writeframes(b"\x00\x00" * 24000)
    t.write([{"id": 1, "img": png, "audio": buf.getvalue(), "blob": b"\x01" * 19834}])
    t.delete([7])
    for width in ("80", "100", "200"):
        res = subprocess.run(
            [sys.executable, "-m", "conch.apps.cli", "--warehouse", w, "manifests", "m"],
            capture_output=True, text=True, timeout=120, env={"COLUMNS": width, "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert res.returncode == 0 and "Key Space manifest" in res.stdout
        assert max(len(line) for line in res.stdout.splitlines()) <= int(width)
        assert "1..1" in res.stdout.replace(" ", "").replace("\n", "") or "1..1" in res.stdout
    out = run_cli(w, "scan", "m").stdout
    assert "PNG 64×48" in out and "WAV 1.50s 16000Hz mono" in out and "binary 19.8KB" in out
    assert "bytes>" not in out


def test_ui_command_serves_the_inspector(tmp_path: Path) -> None:
    import socket
    import time
    import urllib.request

    w = str(tmp_path / "w")
    conch.connect(w).create_table("t", [("id", pa.uint64())]).write([{"id": 1, "x": 2.0}])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "conch.apps.cli", "--warehouse", w, "ui", "--port", str(port)])
    try:
        for _ in range(300):
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/t/t", timeout=2).read().decode()
                break
            except OSError:
                time.sleep(0.1)
        assert "LSM tree" in page and "<svg" in page
        css = urllib.request.urlopen(f"http://127.0.0.1:{port}/static/style.css", timeout=5).read()
        assert b"--accent" in css
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_compact_and_maintenance(tmp_path: Path) -> None:
    w = str(tmp_path / "w")
    assert run_cli(w, "create", "ev", "--key", "day:int32,id:uint64", "--partition-by", "day").returncode == 0
    t = conch.connect(w, maintenance=conch.Policy(auto=False)).table("ev")
    for i in range(3):
        t.write({"day": [1, 2], "id": [i, i], "x": [float(i)] * 2})
    plan = run_cli(w, "maintenance", "ev").stdout
    assert "LSM: 6 L0 runs, 0 L1 runs" in plan and "major" in plan  # one run per partition and write
    out = run_cli(w, "compact", "ev").stdout
    assert "1 compaction(s): 6 runs → 2" in out  # one range to start with, cut at the partition change
    assert "LSM: 0 L0 runs, 2 L1 runs over 2 key range(s)" in out
    man = run_cli(w, "manifests", "ev").stdout
    assert "Compacted At" in man and "L1" in man
    assert "nothing to compact" in run_cli(w, "maintenance", "ev").stdout


# ----- issue 21: user strings are shown literally (rich markup and emoji codes are off) ----------
HOSTILE = ["/a/b.png", "[bold]", "[/]", "[red]x[/red]", "a:smile:", "[link=http://x]y", "\\[b]", "[", "]["]


def test_user_strings_reach_the_terminal_literally(tmp_path: Path) -> None:
    """Keys, column names and values that rich would read as markup or emoji: `get /a/b.png` was a
    MarkupError traceback, `[bold]` vanished from titles and headers, `schema` printed
    `timestamp[us]` as `timestamp`, `x:smile:` became an emoji."""
    w = str(tmp_path / "w")
    t = conch.connect(w).create_table("media", [("path", pa.string())])
    t.write({"path": HOSTILE, "[bold]": HOSTILE, "x:smile:": list(range(len(HOSTILE))), "ts": [None] * len(HOSTILE)})
    t.write({"path": ["[bold]"], "when": pa.array([0], pa.timestamp("us"))})
    got = run_cli(w, "get", "media", *HOSTILE)
    assert got.returncode == 0 and "Traceback" not in got.stderr, got.stderr
    for key in HOSTILE:
        assert f"media[{key}]" in got.stdout, key  # the title
        assert f"│ {key} " in got.stdout, key  # the cell
    assert "│ [bold] " in got.stdout and "│ x:smile: " in got.stdout  # the column names
    missing = run_cli(w, "get", "media", "[/]nope")
    assert missing.returncode == 1 and "[/]nope: no such key" in missing.stdout
    scan = run_cli(w, "scan", "media", "--where", "path = '[bold]'", "--explain")
    assert scan.returncode == 0 and "┃ [bold] " in scan.stdout and "┃ x:smile: " in scan.stdout, scan.stderr
    assert "[bold]" in scan.stdout.split("┘", 1)[1]  # the plan names the filter's literal
    schema = run_cli(w, "schema", "media").stdout
    assert "[bold]: utf8" in schema and "x:smile:" in schema and "timestamp[us]" in schema, schema
    spans = run_cli(w, "manifests", "media").stdout.replace("\n", "")
    assert "/a/b.png..a:smile:" in spans  # the key span
    bad = run_cli(w, "get", "nope", "[/]")
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr


@settings(deadline=None, max_examples=60)
@given(st.lists(st.text(st.sampled_from("[]/\\:=#@ab smile"), min_size=1, max_size=12), min_size=1, max_size=4))
def test_any_cell_text_is_printed_as_it_is(values: list[str]) -> None:
    """Model: what print_arrow shows of a string column is the strings themselves."""
    from conch.apps.cli import common

    values = [v.strip() or "x" for v in values]
    common.console.width = 200
    with common.console.capture() as cap:
        common.print_arrow(pa.table({v: [v] for v in dict.fromkeys(values)}), title=values[0])
    out = cap.get()
    assert out.splitlines()[0].strip() == values[0]
    for v in values:
        assert f" {v} " in out, (v, out)


# ----- issue 21: CSV comment lines and timestamp formats ------------------------------------------
PRICES = "Date,Open,Close\n19-Sep-03,1.5,2\n22-Sep-03,2.25,3\n23-Sep-03,2.5,4\n"


def test_csv_comment_lines_and_timestamp_formats(tmp_path: Path) -> None:
    """A `#` line failed with 'Expected 1 columns, got 11'; `19-Sep-03` stayed text, silently."""
    w = str(tmp_path / "w")
    top = tmp_path / "top.csv"
    top.write_text("# Daily prices\n# source: a, b, c\n" + PRICES)
    res = run_cli(w, "ingest", str(top), "-t", "top", "--key", "Date")
    assert res.returncode == 0, res.stderr
    assert "skipped 2 comment line(s)" in res.stderr
    assert "column 'Date' of top.csv looks like dates ('19-Sep-03')" in res.stderr and "'%d-%b-%y'" in res.stderr
    t = conch.connect(w).table("top")
    assert t.key_schema.field("Date").type == pa.string() and t.scan().count() == 3
    middle = tmp_path / "middle.csv"
    middle.write_text(PRICES.replace("22-Sep", "# a note, in the middle\n22-Sep"))
    res = run_cli(w, "ingest", str(middle), "-t", "mid", "--key", "Date")
    assert res.returncode == 2 and "Expected 3 columns, got 2: # a note" in res.stderr and "--comment '#'" in res.stderr
    res = run_cli(
        w, "ingest", str(middle), "-t", "mid", "--key", "Date", "--comment", "#", "--timestamp-format", "%d-%b-%y"
    )
    assert res.returncode == 0 and "looks like dates" not in res.stderr, res.stderr
    t = conch.connect(w).table("mid")
    assert pa.types.is_timestamp(t.key_schema.field("Date").type)
    rows = t.scan().to_pylist()
    assert [(r["Date"].strftime("%Y-%m-%d"), r["Open"]) for r in rows] == [
        ("2003-09-19", 1.5), ("2003-09-22", 2.25), ("2003-09-23", 2.5)
    ]  # fmt: skip
    assert "one character" in run_cli(w, "write", "mid", str(middle), "--comment", "//").stderr


@settings(deadline=None, max_examples=200)
@given(
    st.lists(st.sampled_from([b"# c", b"#", b"a,b", b"1,#2", b"", b"x#", b"##", b"\r"]), max_size=30),
    st.booleans(),
    st.integers(1, 7),
    st.booleans(),
)
def test_comment_lines_are_skipped_in_any_chunking(lines: list[bytes], everywhere: bool, chunk: int, eol: bool) -> None:
    """Model: the stream is the lines kept, whatever the chunk boundaries (lines starting with '#':
    every one, or only those before the first other line)."""
    import io

    from conch.write.file_input import _SkipLines

    data = b"\n".join(lines) + (b"\n" if eol and lines else b"")
    parts = data.split(b"\n")
    kept, leading = [], True
    for i, line in enumerate(parts):
        full = line + (b"\n" if i < len(parts) - 1 else b"")
        if (everywhere or leading) and line.startswith(b"#"):
            continue
        if full:
            leading = False
        kept.append(full)
    out = io.BufferedReader(_SkipLines(io.BytesIO(data), b"#", everywhere, chunk=chunk), buffer_size=3).read()
    assert out == b"".join(kept)


def test_help_texts_survive_rich_markup() -> None:
    """Typer renders help as rich markup: `timestamp[us]` in a help line printed `timestamp`.
    Every command's and option's help must read the same after markup (brackets escaped)."""
    import typer
    from rich.markup import render

    from conch.apps.cli import app

    def helps(cmd: object) -> list[str]:
        out = [getattr(cmd, "help", None) or ""]
        out += [getattr(p, "help", None) or "" for p in getattr(cmd, "params", [])]
        for sub in getattr(cmd, "commands", {}).values():
            out += helps(sub)
        return out

    texts = [t for t in helps(typer.main.get_command(app)) if t]
    assert len(texts) > 40
    for text in texts:
        assert render(text).plain == text.replace("\\[", "["), text
