"""`conch.engines.torch`: sharded, shuffled, resumable, pinned datasets over Conch scans."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import torch
from torch.utils.data import DataLoader

import conch
import conch.engines.torch as ct

N = 240


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> conch.Table:
    # no background settle: the runs stay as written, and no version appears between the loaders
    # a test compares (a loader's order is deterministic per table version)
    cat = conch.connect(tmp_path_factory.mktemp("wh"), maintenance=conch.Policy(settle_after=None))
    t = cat.create_table("t", [("id", pa.int64())])
    t.write(
        {
            "id": list(range(N)),
            "x": [float(i) for i in range(N)],
            "v": pa.array([[i, -i] for i in range(N)], pa.list_(pa.float32(), 2)),
            "blob": [bytes([i % 256]) * 64 for i in range(N)],
        }
    )
    t.write({"id": list(range(0, N, 2)), "x": [-1.0] * (N // 2)})  # fresh cells from a second run
    t.delete([7])
    return t


def _ids(loader: Any) -> list[int]:
    out: list[int] = []
    for b in loader:
        out += b["id"].tolist()
    return out


def _rank_ids(table: conch.Table, world: int, workers: int, **kw: Any) -> list[list[int]]:
    per_rank = []
    for rank in range(world):
        ds = ct.dataset(table.scan("x"), batch_size=16, splits=10, rank=rank, world_size=world, **kw)
        per_rank.append(_ids(DataLoader(ds, batch_size=None, num_workers=workers)))
    return per_rank


EXPECTED = sorted(set(range(N)) - {7})


@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_every_row_exactly_once_per_epoch_for_world_sizes_1_to_4(table: conch.Table, workers: int) -> None:
    for world in (1, 2, 3, 4):
        for shuffle in (False, True):
            per_rank = _rank_ids(table, world, workers, shuffle=shuffle, seed=3, shuffle_buffer=20)
            flat = [i for ids in per_rank for i in ids]
            assert sorted(flat) == EXPECTED, (world, workers, shuffle)
            if world > 1:
                assert sum(1 for ids in per_rank if ids) > 1  # the work is shared


def test_same_seed_same_order_and_epochs_differ(table: conch.Table) -> None:
    def order(seed: int, epoch: int) -> list[int]:
        ds = ct.dataset(table.scan("x"), batch_size=8, shuffle=True, seed=seed, splits=6, shuffle_buffer=32)
        ds.set_epoch(epoch)
        return _ids(DataLoader(ds, batch_size=None, num_workers=2))

    a = order(1, 0)
    assert a == order(1, 0) and sorted(a) == EXPECTED
    assert a != order(2, 0) and a != order(1, 1)
    assert a != EXPECTED  # shuffled


def test_persistent_workers_count_epochs(table: conch.Table) -> None:
    ds = ct.dataset(table.scan("x"), batch_size=8, shuffle=True, seed=1, splits=6, shuffle_buffer=32)
    loader = DataLoader(ds, batch_size=None, num_workers=1, persistent_workers=True)
    first, second = _ids(loader), _ids(loader)
    assert sorted(first) == sorted(second) == EXPECTED and first != second


def test_fresh_values_tensors_blobs_and_decode(table: conch.Table) -> None:
    ds = ct.dataset(table.scan(), batch_size=N, decode={"blob": lambda b: torch.tensor(list(b[:2]))})
    (batch,) = list(ds)
    ids = batch["id"].tolist()
    assert batch["x"].dtype == torch.float64 and batch["v"].shape == (len(ids), 2)
    assert batch["x"].tolist() == [-1.0 if i % 2 == 0 else float(i) for i in ids]  # the fresh cell
    assert batch["v"][:, 1].tolist() == [-float(i) for i in ids]
    assert batch["blob"].shape == (len(ids), 2) and batch["blob"][:, 0].tolist() == [i % 256 for i in ids]
    arrow = list(ct.dataset(table.scan("x"), batch_size=50, format="arrow"))
    assert all(isinstance(b, pa.RecordBatch) for b in arrow) and sum(b.num_rows for b in arrow) == len(EXPECTED)


def test_samples_collate_in_a_plain_dataloader(table: conch.Table) -> None:
    loader = DataLoader(ct.dataset(table.scan("x", "v")), batch_size=32, num_workers=2)
    batches = list(loader)
    assert batches[0]["v"].shape == (32, 2)
    assert sorted(i for b in batches for i in b["id"].tolist()) == EXPECTED


def _by_id(batches: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    for b in batches:
        for j, i in enumerate(b["id"].tolist()):
            rows[i] = {k: v[j].tolist() if isinstance(v, torch.Tensor) else v[j] for k, v in b.items()}
    return rows


@pytest.mark.parametrize("batch_size", [None, 16])
def test_workers_deliver_what_the_main_process_reads(tmp_path: Path, batch_size: int | None) -> None:
    """Batches leave workers packed (small tensors as one buffer, blobs and strings as Arrow
    buffers, large tensors in shared memory): the values, types and shapes must be the ones read
    in-process, for batches and for samples collated by the DataLoader."""
    t = conch.connect(tmp_path / "wh").create_table("w", [("id", pa.int64())])
    n = 96
    t.write(
        {
            "id": list(range(n)),
            "x": [i / 4 for i in range(n)],
            "flag": [i % 3 == 0 for i in range(n)],
            "name": [f"n{i}" * (i % 4) for i in range(n)],
            "blob": [bytes([i]) * (i * 37) for i in range(n)],
            "big": pa.array([[float(i)] * 8192 for i in range(n)], pa.list_(pa.float32(), 8192)),  # 32 KB a row
        }
    )
    ds = ct.dataset(t.scan(), batch_size=batch_size, splits=5, shuffle=True, shuffle_buffer=40)
    inline = list(DataLoader(ds, batch_size=None if batch_size else 8))
    shipped = list(DataLoader(ds, batch_size=None if batch_size else 8, num_workers=2))
    assert set(_by_id(shipped)) == set(range(n))
    assert _by_id(shipped) == _by_id(inline)
    for k in ("x", "flag", "big"):
        assert shipped[0][k].dtype == inline[0][k].dtype and shipped[0][k].shape[1:] == inline[0][k].shape[1:]
    assert all(type(v) is type(inline[0][k]) for k, v in shipped[0].items())
    assert _by_id(shipped)[40]["blob"] == bytes([40]) * 40 * 37 and _by_id(shipped)[6]["name"] == "n6n6"


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_yields_exactly_the_remaining_rows(table: conch.Table, workers: int) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader() -> Any:
        ds = ct.dataset(table.scan("x"), batch_size=8, shuffle=True, seed=5, splits=9, shuffle_buffer=24)
        return StatefulDataLoader(ds, batch_size=None, num_workers=workers)

    full = _ids(loader())
    first = loader()
    it = iter(first)
    seen: list[int] = []
    for _ in range(11):
        seen += next(it)["id"].tolist()
    state = first.state_dict()
    del it
    second = loader()
    second.load_state_dict(state)
    rest = _ids(second)
    assert sorted(seen + rest) == EXPECTED and not set(seen) & set(rest)
    assert seen + rest == full  # the same order as an uninterrupted epoch


def test_resume_per_sample_in_process(table: conch.Table) -> None:
    ds = ct.dataset(table.scan("x"), shuffle=True, seed=9, splits=5, shuffle_buffer=16)
    it = iter(ds)
    seen = [int(next(it)["id"]) for _ in range(37)]
    state = ds.state_dict()
    again = ct.dataset(table.scan("x", asof=state["asof"]), shuffle=True, seed=9, splits=5, shuffle_buffer=16)
    again.load_state_dict(state)
    rest = [int(s["id"]) for s in again]
    assert sorted(seen + rest) == EXPECTED and len(seen + rest) == len(EXPECTED)


def test_state_from_another_version_is_refused(table: conch.Table) -> None:
    ds = ct.dataset(table.scan("x"), splits=4)
    state = {**ds.state_dict(), "asof": 1}
    with pytest.raises(conch.ConchError, match="another table version"):
        ds.load_state_dict(state)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_safe_under_spawn_and_forkserver(table: conch.Table, method: str) -> None:
    ds = ct.dataset(table.scan("x"), batch_size=16, shuffle=True, splits=6)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=method)
    assert sorted(_ids(loader)) == EXPECTED


WRITER = """
import conch
t = conch.connect({wh!r}).table("p")
t.write({{"id": list(range(1000, 1100)), "x": [0.0] * 100}})
t.delete([0, 1, 2])
"""


def test_an_epoch_is_pinned_while_another_process_commits(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    t = conch.connect(wh).create_table("p", [("id", pa.int64())])
    t.write({"id": list(range(200)), "x": [1.0] * 200})
    ds = ct.dataset(t.scan("x"), batch_size=10, splits=8)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    it = iter(loader)
    got = next(it)["id"].tolist()
    subprocess.run([sys.executable, "-c", WRITER.format(wh=str(wh))], check=True)
    got += [i for b in it for i in b["id"].tolist()]
    assert sorted(got) == list(range(200))  # neither the new rows nor the deletes
    assert sorted(_ids(loader)) == list(range(200))  # the next epoch too: the dataset is pinned
    assert len(ct.dataset(t.scan("x")).spec.scan().to_arrow()) == 297  # a new dataset sees them


RANK = """
import json, conch, conch.engines.torch as ct
from torch.utils.data import DataLoader
t = conch.connect({wh!r}).table("t")
ds = ct.dataset(t.scan("x", asof={asof}), batch_size=16, shuffle=True, splits=10)
print(json.dumps([i for b in DataLoader(ds, batch_size=None, num_workers=1) for i in b["id"].tolist()]))
"""


def test_ranks_from_the_environment_in_separate_processes(table: conch.Table) -> None:
    import json

    asof = table.state().time
    script = RANK.format(wh=table.log.uri, asof=asof)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=subprocess.PIPE,
            env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2"},
        )
        for r in range(2)
    ]
    outs = [json.loads(p.communicate()[0]) for p in procs]
    assert all(outs) and sorted(outs[0] + outs[1]) == EXPECTED


def test_map_dataset_random_access_by_key(table: conch.Table) -> None:
    m = ct.map_dataset(table.scan("x", "v"))
    assert len(m) == len(EXPECTED)
    assert m[10]["id"].item() == 11 and m[10]["x"].item() == 11.0  # key 7 is deleted
    items = m.__getitems__([3, 0, -1])
    assert [int(s["id"]) for s in items] == [3, 0, N - 1]
    loader = DataLoader(m, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(0))
    assert sorted(_ids(loader)) == EXPECTED
    with pytest.raises(IndexError):
        m[len(m)]


def test_a_small_mlp_trains_end_to_end(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(0)
    pts = torch.rand((2000, 2), generator=gen) * 2 - 1
    labels = ((pts[:, 0] * pts[:, 1]) > 0).long()  # XOR-like: needs the hidden layer
    t = conch.connect(tmp_path / "wh").create_table("pts", [("id", pa.int64())])
    t.write({"id": list(range(2000)), "p": pa.array(pts.tolist(), pa.list_(pa.float32(), 2)), "label": labels.tolist()})
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: thread start-up costs more than it saves on a busy machine
    model = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    ds = ct.dataset(t.scan("p", "label"), batch_size=64, shuffle=True, seed=0, splits=8)
    loader = DataLoader(ds, batch_size=None, num_workers=1, persistent_workers=True)
    try:
        for epoch in range(10):
            ds.set_epoch(epoch)
            for batch in loader:
                loss = torch.nn.functional.cross_entropy(model(batch["p"]), batch["label"])
                opt.zero_grad()
                loss.backward()
                opt.step()
        with torch.no_grad():
            acc = (model(pts).argmax(1) == labels).float().mean().item()
    finally:
        torch.set_num_threads(threads)
    assert acc > 0.9


# ----- issue 22: every reader busy, batches through a ring, tensors on the device -------------------
def test_default_split_count_follows_the_readers() -> None:
    assert ct.default_split_count(40_000, 1) == 3  # one reader: by size (16k rows a split)
    assert ct.default_split_count(40_000, 14) == 39  # 4 per reader, capped by 1,024 rows a split
    assert ct.default_split_count(2_000, 2) == 2  # at least one split per reader, rows allowing
    assert ct.default_split_count(3, 8) == 3 and ct.default_split_count(0, 4) == 1
    assert ct.default_split_count(10_000_000, 2) == 611  # large tables: by size (16k rows a split)


class WorkerId:
    """A decode hook tagging each row with the DataLoader worker that read it."""

    def __call__(self, value: bytes) -> torch.Tensor:
        info = torch.utils.data.get_worker_info()
        return torch.tensor(-1 if info is None else info.id)


@pytest.mark.parametrize("workers", [2, 3])
def test_every_worker_gets_work_on_a_small_table(tmp_path: Path, workers: int) -> None:
    """6,000 rows were one default split (16k rows a split): one worker read, the others idled."""
    t = conch.connect(tmp_path / "wh").create_table("s", [("id", pa.int64())])
    n = 6_000
    t.write({"id": list(range(n)), "tag": [b"x"] * n})
    ds = ct.dataset(t.scan("tag"), batch_size=128, decode={"tag": WorkerId()})
    batches = list(DataLoader(ds, batch_size=None, num_workers=workers))
    assert sorted(i for b in batches for i in b["id"].tolist()) == list(range(n))
    per_worker = {w: sum(int((b["tag"] == w).sum()) for b in batches) for w in range(workers)}
    assert all(per_worker.values()), per_worker
    assert len(ds.splits) == ct.default_split_count(n, 1) == 1  # in this process: one reader
    assert ds.state_dict()["splits"] == 1


def test_ring_reuses_slots_and_frees_them_when_batches_die() -> None:
    import gc

    from conch.engines.torch import ring

    ring._ring = None
    got = []
    for i in range(ring.SLOTS):
        fn, args = ring.send({"a": torch.arange(10) + i, "s": ["x"], "b": torch.ones(3, dtype=torch.bfloat16)})  # type: ignore[misc]
        got.append(fn(*args))
    assert [g["a"].tolist() for g in got] == [list(range(i, i + 10)) for i in range(ring.SLOTS)]
    assert got[0]["s"] == ["x"] and got[0]["b"].dtype == torch.bfloat16 and list(got[0]) == ["a", "s", "b"]
    assert ring.send({"a": torch.arange(10)}) is None  # every slot in use: the caller sends it another way
    view = got[2]["a"][3:5]  # a view keeps its batch's slot
    del got[2]
    gc.collect()
    assert ring.send({"a": torch.arange(10)}) is None
    del view
    gc.collect()
    fn, args = ring.send({"a": torch.arange(10) * 2})  # type: ignore[misc]
    again = fn(*args)
    assert again["a"].tolist() == [2 * i for i in range(10)]
    assert [g["a"].tolist() for g in got] == [list(range(i, i + 10)) for i in range(ring.SLOTS) if i != 2]  # intact
    token = ring._ring.token  # type: ignore[union-attr]
    fn, args = ring.send({"big": torch.full((100_000,), 7, dtype=torch.int64)})  # larger than a slot: a new ring
    assert ring._ring.token != token and fn(*args)["big"].sum().item() == 700_000  # type: ignore[union-attr]
    ring._ring = None


def test_batches_leave_workers_through_reused_shared_slots(table: conch.Table) -> None:
    from conch.engines.torch import ring

    ds = ct.dataset(table.scan("x", "v"), batch_size=4, splits=6)
    ptrs, n = set(), 0
    for b in DataLoader(ds, batch_size=None, num_workers=2):
        ptrs.add(b["x"].untyped_storage().data_ptr())
        n += len(b["id"])
        segments = [(a.ctypes.data, a.ctypes.data + a.nbytes) for _, a in ring._RECEIVED.values()]
        assert any(lo <= b["x"].data_ptr() < hi for lo, hi in segments)  # a view of a worker's segment
        del b
    assert n == len(EXPECTED) and len(ptrs) <= 2 * ring.SLOTS < n // 4


def test_batches_kept_by_the_loop_are_never_overwritten(table: conch.Table) -> None:
    """More batches held than a ring has slots: the rest leave the old way, none is reused."""
    ds = ct.dataset(table.scan("x", "v"), batch_size=4, splits=6, shuffle=True, shuffle_buffer=50)
    inline = list(DataLoader(ds, batch_size=None))
    held = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert len(held) > 4 * 6 and _by_id(held) == _by_id(inline)


def test_to_device_on_the_cpu_passes_batches_through(table: conch.Table) -> None:
    ds = ct.dataset(table.scan("x", "v", "blob"), batch_size=32, splits=4)
    loader = DataLoader(ds, batch_size=None, num_workers=1)
    moved = ct.to_device(loader, "cpu")
    batches = list(moved)
    assert _by_id(batches) == _by_id(list(loader))
    assert all(v.device.type == "cpu" for b in batches for v in b.values() if isinstance(v, torch.Tensor))
    nested = list(ct.to_device([(torch.ones(2), {"a": [torch.zeros(1)], "s": "x"})], "cpu"))
    assert nested[0][1]["s"] == "x" and nested[0][0].tolist() == [1.0, 1.0]
    assert len(ct.to_device([1, 2, 3], "cpu")) == 3
