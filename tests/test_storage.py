"""One behaviour suite for every storage backend, and the URI-scheme registry.

A new backend adds one entry to `BACKENDS` (a factory from a scratch directory to a storage URI);
every test here then runs against it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from conch.errors import WarehouseError, WarehouseNotFoundError
from conch.storage import Storage
from conch.storage.registry import split_uri, storage_from_uri

BACKENDS: dict[str, Callable[[Path], str]] = {
    "local-path": lambda d: str(d / "root"),
    "file-uri": lambda d: f"file://{d}/root",
}


@pytest.fixture(params=sorted(BACKENDS))
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    return storage_from_uri(BACKENDS[request.param](tmp_path), create=True)


def test_write_read_size_exists_delete(storage: Storage) -> None:
    assert not storage.exists("t/a.bin")
    storage.write("t/a.bin", b"hello world")
    assert storage.exists("t/a.bin") and storage.size("t/a.bin") == 11
    assert storage.read("t/a.bin") == b"hello world"
    storage.write("t/a.bin", b"again")  # overwrite
    assert storage.read("t/a.bin") == b"again"
    storage.delete("t/a.bin")
    storage.delete("t/a.bin")  # missing is fine (vacuums race)
    assert not storage.exists("t/a.bin")
    for call in (storage.read, storage.size, storage.open):
        with pytest.raises(FileNotFoundError):
            call("t/a.bin")


def test_ranged_reads(storage: Storage) -> None:
    data = bytes(range(256)) * 40
    storage.write("f", data)
    r = storage.open("f")
    try:
        assert r.size() == len(data)
        assert r.read_at(10, 5) == data[10:15]
        assert r.read_at(len(data) - 3, 10) == data[-3:], "short only at the end"
        assert r.read_ranges([(0, 4), (100, 2), (5000, 7)]) == [data[0:4], data[100:102], data[5000:5007]]
    finally:
        r.close()


def test_create_is_put_if_absent(storage: Storage) -> None:
    assert storage.create("log/00001", b"first")
    assert not storage.create("log/00001", b"second")
    assert storage.read("log/00001") == b"first"


def test_staged_is_all_or_nothing(storage: Storage) -> None:
    with storage.staged("d/x.vortex") as local:
        Path(local).write_bytes(b"abc")
        assert not storage.exists("d/x.vortex"), "invisible until the block exits"
    assert storage.read("d/x.vortex") == b"abc"
    with pytest.raises(RuntimeError), storage.staged("d/y.vortex") as local:
        Path(local).write_bytes(b"partial")
        raise RuntimeError("writer failed")
    assert not storage.exists("d/y.vortex")
    assert {f.path for f in storage.list("d")} == {"d/x.vortex"}, "no scratch file left behind"


def test_list_and_delete_prefix(storage: Storage) -> None:
    for p in ("t1/keys/a", "t1/cg/_root/b", "t2/c"):
        storage.write(p, b"12345")
    infos = {f.path: f for f in storage.list("t1")}
    assert set(infos) == {"t1/keys/a", "t1/cg/_root/b"}
    assert all(f.size == 5 and f.mtime > 0 for f in infos.values())
    assert {f.path for f in storage.list()} == {"t1/keys/a", "t1/cg/_root/b", "t2/c"}
    assert list(storage.list("missing")) == []
    storage.delete_prefix("t1")
    assert {f.path for f in storage.list()} == {"t2/c"}


def test_paths_stay_under_the_root(storage: Storage) -> None:
    with pytest.raises(ValueError):
        storage.write("../escape", b"x")


# ----- the registry ---------------------------------------------------------------------------
def test_uri_forms() -> None:
    assert split_uri("wh") == ("file", "wh")
    assert split_uri("file:///abs/wh") == ("file", "/abs/wh")
    assert split_uri("s3://bucket/wh") == ("s3", "s3://bucket/wh")


def test_unknown_scheme_file_and_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(WarehouseError, match="file://"):
        storage_from_uri("gopher://x/y")
    (tmp_path / "f").write_text("x")
    with pytest.raises(WarehouseError, match="is a file"):
        storage_from_uri(tmp_path / "f")
    with pytest.raises(WarehouseNotFoundError, match="create=True"):
        storage_from_uri(tmp_path / "missing", create=False)
    storage_from_uri(tmp_path / "lazy")
    assert not (tmp_path / "lazy").exists(), "create=None makes nothing until the first write"
    storage_from_uri(tmp_path / "eager", create=True)
    assert (tmp_path / "eager").is_dir()
