"""Single byte flips across `_catalog.sqlite`: every read either answers right or raises a
`ConchError`; SQLite's own errors (a row's text no longer UTF-8: `sqlite3.OperationalError:
Could not decode to UTF-8 column ...`, a damaged page) become `CorruptFileError` naming the file.

The sweep is deterministic and bounded: every byte of the log entries' and snapshot paths' text
flipped with 0x80 (ASCII becomes invalid UTF-8) plus positions spread over the whole file with
three masks; `SWEEP_STEP` sets how many.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest

import conch
from conch.errors import ConchError, CorruptFileError
from conch.log.metastore.sqlite import SqliteMetastore

SWEEP_STEP = 331  # bytes between spread positions


def _build(root: Path) -> tuple[Path, pa.Table]:
    cat = conch.connect(root, maintenance=conch.Policy(auto=False))
    t = cat.create_table("t", [("id", pa.int64())], pa.schema([("name", pa.string())]))
    t.write([{"id": i, "name": f"n{i}"} for i in range(20)])
    t.flush()
    t.write([{"id": 3, "name": "three"}])
    t.write([{"id": 30, "name": "thirty"}])
    expected = t.scan().to_arrow().sort_by("id")
    cat.warehouse.metastore.close()
    db = root / "_catalog.sqlite"
    with sqlite3.connect(db) as c:  # move SQLite's WAL into the file we damage
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db, expected


def _flips(data: bytes) -> list[tuple[int, int]]:
    text: set[int] = set()
    for marker in (b'"ops"', b'"kind"', b"/meta/", b'"schema"'):
        at = data.find(marker)
        while at >= 0:
            text.update(range(at, at + len(marker)))
            at = data.find(marker, at + 1)
    flips = [(p, 0x80) for p in sorted(text)]
    flips += [(p, m) for p in range(0, len(data), SWEEP_STEP) for m in (0x80, 0x20, 0xFF)]
    return flips


def _read_everything(root: Path, db: Path, expected: pa.Table) -> str:
    """'ok' (right answers), 'typed' (a ConchError) — or the untyped error's type and text."""
    ms = SqliteMetastore(db)
    try:
        cat = conch.connect(root, metastore=ms)
        t = cat.table("t")
        got = t.scan().to_arrow().sort_by("id")
        assert got.equals(expected), "a scan returned wrong data"
        t.scan(version=1).to_arrow()
        t.history()
        t.check()
        ms.list_tables()
        ms.check()
        return "ok"
    except ConchError:
        return "typed"
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    finally:
        ms.close()


def test_byte_flips_in_the_catalog_raise_typed_errors(tmp_path: Path) -> None:
    db, expected = _build(tmp_path / "w")
    pristine = db.read_bytes()
    flips = _flips(pristine)
    untyped = []
    for i, (pos, mask) in enumerate(flips):
        damaged = bytearray(pristine)
        damaged[pos] ^= mask
        copy = tmp_path / f"c{i}.sqlite"
        copy.write_bytes(bytes(damaged))
        outcome = _read_everything(tmp_path / "w", copy, expected)
        if outcome not in ("ok", "typed"):
            untyped.append((pos, mask, outcome[:160]))
        copy.unlink()
        for extra in ("-wal", "-shm"):
            Path(str(copy) + extra).unlink(missing_ok=True)
    print(f"catalog flips tried: {len(flips)}, untyped errors: {len(untyped)}")
    assert len(flips) > 100
    assert not untyped, sorted({u[2][:60] for u in untyped})


def test_invalid_utf8_in_an_entry_names_the_file(tmp_path: Path) -> None:
    db, _ = _build(tmp_path / "w")
    data = bytearray(db.read_bytes())
    data[data.find(b'"ops"') + 1] ^= 0x80
    db.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match=r"_catalog\.sqlite"):
        conch.connect(tmp_path / "w").table("t").scan().to_arrow()
    shutil.rmtree(tmp_path / "w")
