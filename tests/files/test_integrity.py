"""Silent damage (issue 8 item 4): every single-file corruption of every file kind is either
harmless (a byte no read touches) or a `CorruptFileError` naming the file, never a wrong answer
or an untyped error; `Table.check()` and `conch check` find every one."""

from __future__ import annotations

import contextlib
import glob
import itertools
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch
from conch.errors import ConchError, CorruptFileError, TableNotFoundError
from conch.files import integrity
from conch.files.format import StoredFile
from conch.files.fragments import VortexFormat
from conch.files.integrity import SealingWriter, seal_file
from conch.files.storage import LocalStorage

N = 300
VALUE = 2000  # bytes per blob value: stored out of line (default large_value_bytes 512)
TAKE = [3, 150, 299]


@dataclass
class Built:
    root: Path
    expected: pa.Table  # a full scan
    taken: pa.Table  # a scan of keys TAKE
    x: np.ndarray  # the float column's values (to find them in the fragment)
    blob_values: list[bytes]


def _scans(t: conch.Table) -> tuple[pa.Table, pa.Table]:
    return t.scan().to_arrow().combine_chunks(), t.scan(keys=TAKE).to_arrow().combine_chunks()


def _build(root: Path) -> Built:
    """Two writes (the second overwrites some cells), a snapshot, then a WAL entry after it (and no
    compaction: the files the tests damage are the writes')."""
    cat = conch.connect(root, maintenance=conch.Policy(auto=False))
    t = cat.create_table("t", [("id", pa.uint64())])
    rng = np.random.default_rng(7)
    x = rng.random(N)
    blobs = [rng.bytes(VALUE) for _ in range(N)]
    t.write({"id": np.arange(N, dtype=np.uint64), "x": x, "b": blobs})
    t.write({"id": np.arange(0, N, 10, dtype=np.uint64), "y": np.arange(0, N, 10, dtype=np.int64)})
    t.flush()
    t.write({"id": np.array([1, 2], dtype=np.uint64), "y": np.array([-1, -2], dtype=np.int64)})
    expected, taken = _scans(t)
    cat.warehouse.metastore.close()
    db = str(root / "_catalog.sqlite")
    with sqlite3.connect(db) as c:  # move the SQLite WAL into the database file we damage
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return Built(root, expected, taken, x, blobs)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return _build(tmp_path_factory.mktemp("pristine") / "w")


def _copy(b: Built, dest: Path) -> Built:
    import shutil

    shutil.copytree(b.root, dest)
    return Built(dest, b.expected, b.taken, b.x, b.blob_values)


def _files(root: Path) -> dict[str, str]:
    """One file of each kind (relative path)."""

    def one(pattern: str) -> str:
        found = sorted(glob.glob(str(root / pattern), recursive=True))
        assert found, pattern
        return os.path.relpath(found[0], root)

    blob = one("*/cg/**/*.vortex.blobs")
    return {
        "fragment": blob.removesuffix(".blobs"),
        "blobs": blob,
        "key space": one("*/keys/*.vortex"),
        "snapshot": one("*/meta/*.zst"),
        "metastore": "_catalog.sqlite",
    }


def _outcome(root: Path, expected: pa.Table, taken: pa.Table) -> str:
    """ "ok" (right answers) or the damaged file's name from the CorruptFileError; fails the test
    on a wrong answer or an untyped error."""
    cat = None
    try:
        cat = conch.connect(root)
        full, part = _scans(cat.table("t"))
        assert part.equals(taken), "a take returned wrong data"
        assert full.equals(expected), "a full scan returned wrong data"
        return "ok"
    except CorruptFileError as e:
        return str(e)
    finally:
        if cat is not None:
            cat.warehouse.metastore.close()


def _checked(root: Path) -> list[str]:
    """What `Table.check()` reports (a CorruptFileError opening the table counts as a report)."""
    cat = None
    try:
        cat = conch.connect(root)
        report = cat.table("t").check()
        assert report.files_checked > 0 or not report.ok
        return [str(p) for p in report.problems]
    except CorruptFileError as e:
        return [str(e)]
    finally:
        if cat is not None:
            cat.warehouse.metastore.close()


def _flip(path: str, pos: int, mask: int = 0x20) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ mask]))


def _truncate(path: str, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def _expect_named(outcome: str, kind: str, rel: str) -> None:
    if kind == "metastore":
        assert "_catalog.sqlite" in outcome or "metastore" in outcome, outcome
    else:
        assert rel in outcome, outcome


# ----- every kind x every damage ---------------------------------------------------------------
def _positions(b: Built, kind: str, path: str) -> list[int]:
    data = Path(path).read_bytes()
    size = len(data)
    pos = [0, size // 3, size // 2, size - 1]
    if kind == "fragment":
        at = data.find(b.x[100:102].tobytes())  # inside the float column's data
        assert at >= 0
        pos += [at, at + 9]
        pos.append(size - 40)  # the block table
    if kind == "metastore":
        pos += [data.find(b'"ops"') + 2, data.rfind(b'"rows"') + 8, data.find(b"xxh3-") + 7]  # WAL entry text
    if kind == "blobs":
        pos += [VALUE * 5 + 17, VALUE * 150 + 1]  # inside a value, inside a taken value
    return sorted(set(pos))


@pytest.mark.parametrize("kind", ["fragment", "blobs", "key space", "snapshot", "metastore"])
def test_every_damage_is_harmless_or_named(pristine: Built, tmp_path: Path, kind: str) -> None:
    rel = _files(pristine.root)[kind]
    size = os.path.getsize(pristine.root / rel)
    damages: list[tuple[str, Callable[[str], None]]] = [("delete", os.remove)]
    damages += [(f"truncate to {n}", lambda p, n=n: _truncate(p, n)) for n in (0, size // 2, size - 1)]
    damages += [
        (f"flip {p}", lambda path, p=p: _flip(path, p)) for p in _positions(pristine, kind, str(pristine.root / rel))
    ]
    for i, (what, damage) in enumerate(damages):
        b = _copy(pristine, tmp_path / f"c{i}")
        damage(str(b.root / rel))
        if kind == "metastore" and what in ("delete", "truncate to 0"):
            # an empty or missing metastore is a new, empty warehouse: the table is not there
            with pytest.raises(TableNotFoundError):
                _outcome(b.root, b.expected, b.taken)
            continue
        outcome = _outcome(b.root, b.expected, b.taken)
        problems = _checked(b.root)
        if kind != "metastore" or outcome != "ok":
            _expect_named(outcome if outcome != "ok" else "\n".join(problems), kind, rel)
            assert problems, f"{kind}, {what}: Table.check() found nothing"
            assert any(rel in p or (kind == "metastore" and "metastore" in p) for p in problems), (what, problems)
        in_block_table = kind == "blobs" and what in (f"truncate to {size - 1}", f"flip {size - 1}")
        if kind != "metastore" and not in_block_table:
            # these files are under one 64 KiB block (or, blobs, all read by a full scan) and
            # every byte of a snapshot is in its digest: no damage can go unread. A blob file's
            # block table is read by ranged reads (`open_blob`) and `check()` only (above).
            assert outcome != "ok", (kind, what)


def test_damage_in_a_value_no_take_reads_is_harmless(pristine: Built, tmp_path: Path) -> None:
    b = _copy(pristine, tmp_path / "c")
    rel = _files(b.root)["blobs"]
    _flip(str(b.root / rel), VALUE * 5 + 17)  # value of key 5: not taken
    cat = conch.connect(b.root)
    t = cat.table("t")
    assert t.scan(keys=TAKE).to_arrow().combine_chunks().equals(b.taken)
    with pytest.raises(CorruptFileError, match=rel.replace(".", r"\.")):
        t.scan(keys=[5]).to_arrow()
    with pytest.raises(CorruptFileError, match=rel.replace(".", r"\.")):
        t.scan("b").to_arrow()


def test_snapshot_edited_to_stay_valid_json(pristine: Built, tmp_path: Path) -> None:
    b = _copy(pristine, tmp_path / "c")
    rel = _files(b.root)["snapshot"]
    path = b.root / rel
    doc = json.loads(pa.CompressedInputStream(pa.BufferReader(path.read_bytes()), "zstd").read())
    doc["fragments"][0]["start"] += 1  # the edit of issue 8: every row shifted, still valid JSON
    path.write_bytes(integrity.pack_snapshot(json.dumps(doc)))  # and still valid zstd
    with pytest.raises(CorruptFileError, match=rel.replace(".", r"\.")):
        conch.connect(b.root).table("t").scan().to_arrow()
    assert any(rel in p for p in _checked(b.root))


def test_wal_entry_edited_in_the_metastore(pristine: Built, tmp_path: Path) -> None:
    b = _copy(pristine, tmp_path / "c")
    with sqlite3.connect(str(b.root / "_catalog.sqlite")) as c:
        (entry,) = c.execute("SELECT entry FROM wal WHERE seq = 4").fetchone()  # 3 is the flush
        edited = entry.replace('"y"', '"z"') if '"y"' in entry else entry.replace('"rows":2', '"rows":3')
        assert edited != entry and json.loads(edited)
        c.execute("UPDATE wal SET entry = ? WHERE seq = 4", (edited,))
        c.execute("UPDATE wal SET time_us = time_us - 1000000000 WHERE seq = 2")  # out of order
    with pytest.raises(CorruptFileError, match="WAL entry"):
        conch.connect(b.root).table("t").to_arrow()
    problems = _checked(b.root)
    assert any("WAL entry 4" in p for p in problems) and any("WAL entry 2" in p for p in problems), problems


def test_newest_wal_entry_hidden_from_the_metastore_is_an_error_not_an_older_table(
    pristine: Built, tmp_path: Path
) -> None:
    """SQLite has no page checksums: a damaged `wal` index can hide rows from an indexed read.
    Hiding the newest entry (here: deleting its row) must not make the table read as of the
    entry before it; the head kept beside the log tells."""
    b = _copy(pristine, tmp_path / "c")
    with sqlite3.connect(str(b.root / "_catalog.sqlite")) as c:
        (newest,) = c.execute("SELECT MAX(seq) FROM wal").fetchone()
        c.execute("DELETE FROM wal WHERE seq = ?", (newest,))
    with pytest.raises(CorruptFileError, match=rf"_catalog\.sqlite.*entries \[{newest}\]"):
        conch.connect(b.root).table("t").to_arrow()


def test_a_metastore_written_before_heads_were_kept_reads_and_commits(pristine: Built, tmp_path: Path) -> None:
    b = _copy(pristine, tmp_path / "c")
    with sqlite3.connect(str(b.root / "_catalog.sqlite")) as c:
        c.execute("DROP TABLE heads")  # the file as an older Conch left it
    t = conch.connect(b.root).table("t")
    assert t.to_arrow().combine_chunks().equals(b.expected)
    t.write({"id": np.array([0], dtype=np.uint64), "y": np.array([7], dtype=np.int64)})
    with sqlite3.connect(str(b.root / "_catalog.sqlite")) as c:
        assert c.execute("SELECT seq FROM heads").fetchall() == c.execute("SELECT MAX(seq) FROM wal").fetchall()
    assert conch.connect(b.root).table("t").scan(keys=[0]).to_arrow()["y"].to_pylist() == [7]


def test_check_on_a_sound_table_and_the_cli(pristine: Built, tmp_path: Path) -> None:
    b = _copy(pristine, tmp_path / "c")
    report = conch.connect(b.root).table("t").check()
    assert report.ok, report
    # 3 key spaces, 3 fragments, 1 blob file, 1 snapshot; 3 writes and the flush registering it
    assert report.files_checked == 8 and report.entries_checked == 4 and report.unverified == 0
    assert report.bytes_checked >= N * VALUE
    run = [sys.executable, "-m", "conch.apps.cli", "--warehouse", str(b.root), "check", "t"]
    ok = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "no problems" in ok.stdout, ok
    rel = _files(b.root)["key space"]
    _flip(str(b.root / rel), 10)
    bad = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1, bad
    assert bad.stdout.splitlines()[0].startswith(f"{rel}: ") and "1 problem" in bad.stdout, bad.stdout


def test_a_take_verifies_only_what_it_reads(tmp_path: Path) -> None:
    """Verification is per block / per value: a take of 3 of 400 20 KB values reads about the
    values, their index rows and at most a block either side, not the 8 MB blob file."""
    cat = conch.connect(tmp_path / "w")
    t = cat.create_table("t", [("id", pa.uint64())])
    rng = np.random.default_rng(0)
    t.write({"id": np.arange(400, dtype=np.uint64), "b": [rng.bytes(20_000) for _ in range(400)]})
    cat.warehouse.format.clear_cache()
    s = t.scan("b", keys=[10, 200, 390])
    assert s.to_arrow().num_rows == 3
    assert 60_000 <= s.metrics().total_bytes_read < 1_000_000, s.metrics()


def test_legacy_files_without_checksums_are_read_unverified(tmp_path: Path) -> None:
    """Files written before integrity carry checksum "" and no block table: read as they are."""
    storage = LocalStorage(tmp_path)
    fmt = VortexFormat(storage)
    import vortex

    table = pa.table({"k0": pa.array([1, 2, 3], pa.uint64())})
    with storage.staged("old.vortex") as local:
        vortex.io.write(table, local)
    got = fmt.read(StoredFile("old.vortex"), ["k0"], table.schema)
    assert got.equals(table)
    assert fmt.verify_file(StoredFile("old.vortex")) == os.path.getsize(tmp_path / "old.vortex")


# ----- random damage -----------------------------------------------------------------------------
@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(["fragment", "blobs", "key space", "snapshot"]),
    where=st.floats(0, 1, exclude_max=True),
    mask=st.integers(1, 255),
)
def test_random_byte_damage(
    pristine: Built, tmp_path_factory: pytest.TempPathFactory, kind: str, where: float, mask: int
) -> None:
    b = _copy(pristine, tmp_path_factory.mktemp("r") / "w")
    rel = _files(b.root)[kind]
    path = str(b.root / rel)
    at = int(where * os.path.getsize(path))
    _flip(path, at, mask)
    outcome = _outcome(b.root, b.expected, b.taken)
    if not (kind == "blobs" and at >= N * VALUE):  # a blob file's block table: open_blob and check read it
        assert outcome != "ok", f"damage to {kind} went unnoticed by a full scan"  # every byte is verified
        _expect_named(outcome, kind, rel)
    assert any(rel in p for p in _checked(b.root))


# ----- the pure functions ------------------------------------------------------------------------
def test_digest_verify_and_seals() -> None:
    d = integrity.digest(b"abc")
    assert d.startswith("xxh3-") and len(d) == 21
    integrity.verify(b"abc", d, "x")
    integrity.verify(b"anything", "", "x")  # nothing recorded
    with pytest.raises(CorruptFileError, match=r"snap\.json"):
        integrity.verify(b"abd", d, "snap.json")
    sealed = integrity.seal_json('{"kind":"write","ops":[]}')
    assert integrity.open_json(sealed, "e") == {"kind": "write", "ops": []}
    with pytest.raises(CorruptFileError, match="row 7"):
        integrity.open_json(sealed.replace("write", "wrote"), "row 7")
    with pytest.raises(CorruptFileError):
        integrity.open_entry(sealed, 5, 10, 3, 1)  # entry 4 missing
    assert integrity.open_entry('{"kind":"write","ops":[]}', 4, 10, 3, 1)["kind"] == "write"  # legacy
    name = integrity.with_digest("t/meta/000001-ab.json", b"{}")
    assert name.endswith(".json") and integrity.digest_in_name(name) == integrity.digest(b"{}")
    assert integrity.digest_in_name("t/meta/000001-ab.json") == ""


def test_untyped_errors_are_conch_errors(pristine: Built, tmp_path: Path) -> None:
    """Damage never escapes as ArrowInvalid / JSONDecodeError / UnicodeDecodeError / sqlite3."""
    for kind, rel in _files(pristine.root).items():
        b = _copy(pristine, tmp_path / kind.replace(" ", "_"))
        path = str(b.root / rel)
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            f.write(b"\xff\xfe\x00garbage\x00" * 8)
        with contextlib.suppress(ConchError):  # anything else fails the test
            _outcome(b.root, b.expected, b.taken)


@settings(max_examples=80)
@given(parts=st.lists(st.integers(0, 200_000), max_size=8), seed=st.integers(0, 99))
def test_sealing_while_writing_equals_sealing_the_written_file(
    tmp_path_factory: pytest.TempPathFactory, parts: list[int], seed: int
) -> None:
    """A blob file sealed as it is written (any cut of its writes, across 64 KiB blocks) gets
    the same block table and checksum as one sealed by reading it back, and its writeback hints
    (`LocalStorage.writeback`) cover what was written, in order, each range once."""
    rng = np.random.default_rng(seed)
    chunks = [rng.bytes(n) for n in parts]
    d = tmp_path_factory.mktemp("seal")
    handed: list[tuple[int, int]] = []

    def writeback(fd: int, offset: int, length: int) -> None:
        assert os.fstat(fd).st_size >= offset + length  # flushed to the file before the hint
        handed.append((offset, length))
        LocalStorage.writeback(fd, offset, length)

    saved, integrity.WRITEBACK = integrity.WRITEBACK, 100_000  # hints every 100 kB, not 4 MB
    try:
        with open(d / "a", "wb") as raw:
            w = SealingWriter(raw, writeback)
            for c in chunks:
                w.write(memoryview(c))
            streamed = w.seal()
    finally:
        integrity.WRITEBACK = saved
    (d / "b").write_bytes(b"".join(chunks))
    assert seal_file(str(d / "b")) == streamed
    assert (d / "a").read_bytes() == (d / "b").read_bytes()
    # the hints cover the file front to back, each range once, a hint per 100 kB or more written
    assert [o for o, _ in handed] == list(itertools.accumulate([n for _, n in handed], initial=0))[:-1]
    assert all(n >= 100_000 for _, n in handed)
    assert sum(parts) - sum(n for _, n in handed) < 100_000 + max(parts, default=0)


@settings(max_examples=60)
@given(sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=30), data=st.data())
def test_value_checks_name_the_first_damaged_value(sizes: list[int], data: st.DataObject) -> None:
    """`check_values` (vectorised) against a per-value model: intact values pass, and damage in
    any byte of a value is a `CorruptFileError` naming that value (nulls: length 0, unchecked)."""
    rng = np.random.default_rng(len(sizes))
    valid = np.array([data.draw(st.booleans()) or n > 0 for n in sizes])
    lengths = np.where(valid, sizes, 0).astype(np.int64)
    values = [rng.bytes(int(n)) for n in lengths]
    hashes = np.array([integrity._hash(v) & 0xFFFFFFFF if ok else 0 for v, ok in zip(values, valid)], np.uint32)
    blob = bytearray(b"".join(values))
    starts = np.cumsum(lengths) - lengths
    assert (integrity.value_hashes(memoryview(blob), starts, lengths)[valid] == hashes[valid]).all()
    integrity.check_values(bytes(blob), lengths, valid, hashes, "f")
    damaged = [i for i, n in enumerate(lengths) if n]
    if damaged:
        i = data.draw(st.sampled_from(damaged))
        blob[int(starts[i]) + data.draw(st.integers(0, int(lengths[i]) - 1))] ^= 0x40
        with pytest.raises(CorruptFileError, match=f"value {i} of the read"):
            integrity.check_values(bytes(blob), lengths, valid, hashes, "f")
