"""One behaviour suite for every storage backend (local directory by path and by `file://` URI,
`memory://`, S3 on moto, Azure Blob on Azurite), and the URI-scheme registry.

A new backend adds one branch to the `storage` fixture; every assertion below then runs on it.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conch.errors import ConditionalWriteUnsupportedError, StorageError, WarehouseError, WarehouseNotFoundError
from conch.files.storage import LocalStorage, RangeReader, Storage
from conch.files.storage.registry import split_uri, storage_from_uri
from services import Azurite, MotoS3

BACKENDS = ["local", "file-uri", "memory", "s3", "azure"]


@pytest.fixture(params=BACKENDS)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    kind = request.param
    if kind == "local":
        return storage_from_uri(tmp_path / "root", create=True)
    if kind == "file-uri":
        return storage_from_uri(f"file://{tmp_path}/root", create=True)
    if kind == "memory":
        return storage_from_uri(f"memory://{uuid.uuid4().hex}/wh")
    if kind == "azure":
        az: Azurite = request.getfixturevalue("azurite")
        return storage_from_uri(az.uri(), options=az.options)
    s3: MotoS3 = request.getfixturevalue("moto_s3")
    return storage_from_uri(s3.uri(), options=s3.options)


def test_registry_picks_backend_by_scheme(tmp_path: Path) -> None:
    assert isinstance(storage_from_uri(tmp_path), LocalStorage)
    assert storage_from_uri("memory://x/y").uri == "memory://x/y"
    assert storage_from_uri("s3://bucket/wh", options={"region": "eu-west-1"}).uri == "s3://bucket/wh"
    with pytest.raises(WarehouseError, match="unsupported warehouse URI"):
        storage_from_uri("ftp://host/x")
    with pytest.raises(StorageError, match="local directory"):
        storage_from_uri(tmp_path, options={"endpoint": "http://x"})


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


def test_write_read_overwrite(storage: Storage) -> None:
    storage.write("a/b/c.bin", b"hello")
    assert storage.read("a/b/c.bin") == b"hello"
    assert storage.size("a/b/c.bin") == 5 and storage.exists("a/b/c.bin")
    storage.write("a/b/c.bin", bytearray(b"bye"))  # an overwrite
    assert storage.read("a/b/c.bin") == b"bye" and storage.size("a/b/c.bin") == 3


def test_create_is_put_if_absent(storage: Storage) -> None:
    assert storage.create("log/1.json", b"first") is True
    assert storage.create("log/1.json", b"second") is False
    assert storage.read("log/1.json") == b"first"


def test_concurrent_creates_have_one_winner(storage: Storage) -> None:
    results: dict[int, bool] = {}

    def attempt(i: int) -> None:
        results[i] = storage.create("race", f"writer {i}".encode())

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, ok in results.items() if ok]
    assert len(winners) == 1
    assert storage.read("race") == f"writer {winners[0]}".encode()


def read_into(r: RangeReader, ranges: list[tuple[int, int]]) -> bytes:
    """The bytes `read_into` lays end to end for `ranges` (what it reports it read)."""
    out = bytearray(sum(n for _, n in ranges))
    got = r.read_into([o for o, _ in ranges], [n for _, n in ranges], memoryview(out))
    return bytes(out[:got])


def test_ranged_reads(storage: Storage) -> None:
    data = bytes(range(256)) * 40
    storage.write("f", data)
    r = storage.open("f")
    try:
        assert r.size() == len(data)
        assert r.read_at(10, 5) == data[10:15]
        assert r.read_at(len(data) - 3, 100) == data[-3:]  # fewer only at the end
        ranges = [(5000, 10), (0, 4), (100, 0), (len(data) - 1, 1), (3, 4000)]
        assert read_into(r, ranges) == b"".join(data[o : o + n] for o, n in ranges)
        # a range past the end comes back short, and the reads stop there
        assert read_into(r, [(1, 2), (len(data) - 2, 10), (0, 3)]) == data[1:3] + data[-2:]
    finally:
        r.close()


def test_missing_files(storage: Storage) -> None:
    for fn in (storage.open, storage.read, storage.size):
        with pytest.raises(FileNotFoundError):
            fn("nope/x")
    assert not storage.exists("nope/x")
    storage.delete("nope/x")  # missing is fine


def test_staged_commits_only_on_clean_exit(storage: Storage) -> None:
    with storage.staged("t/cg/f.vortex") as local:
        Path(local).write_bytes(b"payload")
        assert not storage.exists("t/cg/f.vortex")
    assert storage.read("t/cg/f.vortex") == b"payload"
    with pytest.raises(RuntimeError), storage.staged("t/cg/g.vortex") as local:
        Path(local).write_bytes(b"half")
        raise RuntimeError("writer died")
    assert not storage.exists("t/cg/g.vortex")
    assert not Path(local).exists()  # no scratch file left behind


def test_batched_writes_read_back_and_a_vanished_file_fails_the_batch(storage: Storage) -> None:
    # A batch defers durability (local: the fsyncs, together at its end); what readers see must
    # not change: each file is there, whole, as soon as its write returns.
    with storage.batch():
        with storage.batch():  # nested: the outer batch syncs
            storage.write("t/keys/a", b"a" * 10)
        with storage.staged("t/cg/b") as local:
            Path(local).write_bytes(b"bb")
        assert storage.read("t/keys/a") == b"a" * 10 and storage.size("t/cg/b") == 2
    assert sorted(f.path for f in storage.list("t")) == ["t/cg/b", "t/keys/a"]
    # a file removed before the batch synced (a vacuum with grace 0) fails the batch, which
    # `TableLog.staging` turns into a CommitConflictError; object stores have nothing to sync
    expected = pytest.raises(FileNotFoundError) if isinstance(storage, LocalStorage) else contextlib.nullcontext()
    with expected, storage.batch():
        storage.write("t/keys/c", b"c")
        storage.delete("t/keys/c")


def test_list_and_delete_prefix(storage: Storage) -> None:
    for p in ("t1/keys/a", "t1/cg/g/b", "t10/keys/c", "top"):
        storage.write(p, p.encode())
    listed = {f.path: f for f in storage.list("t1")}
    assert sorted(listed) == ["t1/cg/g/b", "t1/keys/a"]  # a prefix is a path segment: not t10
    assert listed["t1/keys/a"].size == len(b"t1/keys/a") and listed["t1/keys/a"].mtime > 1e9
    assert sorted(f.path for f in storage.list()) == ["t1/cg/g/b", "t1/keys/a", "t10/keys/c", "top"]
    assert list(storage.list("absent")) == []
    storage.delete_prefix("t1")
    assert sorted(f.path for f in storage.list()) == ["t10/keys/c", "top"]


def test_bad_paths_are_refused(storage: Storage) -> None:
    for bad in ("../escape", "a/../../b"):
        with pytest.raises(ValueError):
            storage.write(bad, b"x")


def test_large_file_multipart(storage: Storage) -> None:
    """Past the multipart threshold (8 MiB parts) the upload is split; the bytes come back whole."""
    data = uuid.uuid4().bytes * (18 * 1024 * 1024 // 16)
    with storage.staged("big/staged") as local:
        Path(local).write_bytes(data)
    storage.write("big/written", data)
    for p in ("big/staged", "big/written"):
        r = storage.open(p)
        assert r.size() == len(data)
        got = read_into(r, [(0, 16), (9 * 1024 * 1024, 16), (len(data) - 16, 16)])
        assert got == data[:16] + data[9 * 1024 * 1024 : 9 * 1024 * 1024 + 16] + data[-16:]


def test_s3_without_conditional_writes_is_refused(moto_s3: MotoS3) -> None:
    """A store configured without conditional puts cannot commit: `create` says so, typed."""
    s = storage_from_uri(moto_s3.uri(), options={**moto_s3.options, "conditional_put": "disabled"})
    with pytest.raises(ConditionalWriteUnsupportedError, match="conditional writes"):
        s.create("x", b"1")


def test_s3_credentials_from_environment(moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in moto_s3.env.items():
        monkeypatch.setenv(k, v)
    s = storage_from_uri(moto_s3.uri())
    s.write("x", b"from env")
    assert s.read("x") == b"from env"


def test_unreachable_store_is_a_typed_error() -> None:
    port = __import__("services").free_port()  # nothing listens there
    s = storage_from_uri(
        "s3://b/p",
        options={
            "endpoint": f"http://127.0.0.1:{port}",
            "access_key_id": "x",
            "secret_access_key": "x",
            "region": "us-east-1",
        },
    )
    with pytest.raises(StorageError, match=r"s3://b/p/x"):
        s.write("x", b"1")


_paths = st.sampled_from(["a", "b/c", "b/d", "e/f/g"])
_ops = st.lists(
    st.tuples(st.sampled_from(["write", "create", "delete", "read", "list"]), _paths, st.binary(max_size=40)),
    max_size=25,
)


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_model(storage: Storage, ops: list[tuple[str, str, bytes]]) -> None:
    """Random operations agree with a dict of path → bytes."""
    root = uuid.uuid4().hex[:8]
    model: dict[str, bytes] = {}
    for op, rel, data in ops:
        path = f"{root}/{rel}"
        if op == "write":
            storage.write(path, data)
            model[path] = data
        elif op == "create":
            assert storage.create(path, data) is (path not in model)
            model.setdefault(path, data)
        elif op == "delete":
            storage.delete(path)
            model.pop(path, None)
        elif op == "read":
            if path in model:
                assert storage.read(path) == model[path]
                assert storage.size(path) == len(model[path])
            else:
                assert not storage.exists(path)
        else:
            assert {f.path: f.size for f in storage.list(root)} == {p: len(d) for p, d in model.items()}
