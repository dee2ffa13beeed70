"""Issue 32 item 8: a value a torch loader cannot decode names its table, key and column, and
`on_error="skip"` drops its row from every column, counted, instead of ending the epoch."""

from __future__ import annotations

import io
import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image
from torch.utils.data import DataLoader

import conch
import conch.engines.torch as ct

ROWS, BAD = 30, 17


def _png(i: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((6, 5, 3), i, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> conch.Table:
    """Rows 0..29: a PNG of pixel value i and label i * 10; row 17's image is a truncated PNG."""
    t = conch.connect(tmp_path_factory.mktemp("wh")).create_table("pics", [("id", pa.int64())])
    imgs = [_png(i) for i in range(ROWS)]
    imgs[BAD] = imgs[BAD][:40]
    t.write({"id": list(range(ROWS)), "img": imgs, "label": [i * 10 for i in range(ROWS)]})
    return t


def _rows(batches: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    """(id, label, pixel value) of every row yielded, checking each image is whole."""
    out = []
    for b in batches:
        assert len(b["id"]) == len(b["label"]) == len(b["img"])
        for j in range(len(b["id"])):
            img = b["img"][j]
            assert img.shape == (3, 6, 5) and int(img.min()) == int(img.max())
            out.append((int(b["id"][j]), int(b["label"][j]), int(img[0, 0, 0])))
    return out


def test_a_bad_value_names_table_key_and_column(table: conch.Table) -> None:
    ds = ct.dataset(table.scan("img", "label"), batch_size=8, decode={"img": ct.decoders.image()})
    with pytest.raises(conch.DecodeError, match=r"table 'pics', key 17, column 'img': image\(\): cannot decode") as e:
        list(ds)
    assert (e.value.table, e.value.key, e.value.column) == ("pics", BAD, "img")
    assert isinstance(e.value.__cause__, conch.DecodeError)  # the decoder's own error
    again = pickle.loads(pickle.dumps(e.value))  # how it leaves a DataLoader worker
    assert (again.table, again.key, again.column, str(again)) == ("pics", BAD, "img", str(e.value))
    with pytest.raises(conch.DecodeError, match="table 'pics', key 17, column 'img'"):  # from a worker
        list(DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context="fork"))
    with pytest.raises(conch.DecodeError, match="table 'pics', key 17, column 'img'"):
        ct.map_dataset(table.scan("img"), decode={"img": ct.decoders.image()}).__getitems__([3, BAD])


def test_a_users_hook_error_is_named_too(table: conch.Table) -> None:
    def strict(v: bytes) -> int:
        if len(v) < 50:
            raise ValueError("too short")
        return len(v)

    ds = ct.dataset(table.scan("img"), batch_size=None, decode={"img": strict})
    with pytest.raises(conch.DecodeError, match="key 17, column 'img': ValueError: too short"):
        list(ds)


@pytest.mark.parametrize(("batch_size", "shuffle"), [(8, False), (7, True), (None, True)])
def test_skip_yields_every_good_row_once_aligned_and_counts_the_bad(
    table: conch.Table, batch_size: int | None, shuffle: bool
) -> None:
    ds = ct.dataset(
        table.scan("img", "label"),
        batch_size=batch_size,
        shuffle=shuffle,
        shuffle_buffer=12,
        splits=3,
        decode={"img": ct.decoders.image()},
        on_error="skip",
    )
    with pytest.warns(UserWarning, match=r"table 'pics': 1 row\(s\) skipped.*key 17, column 'img'"):
        got = list(ds)
    if batch_size is None:
        got = [{k: [v] for k, v in s.items()} for s in got]
    rows = _rows(got)
    assert sorted(rows) == [(i, i * 10, i) for i in range(ROWS) if i != BAD]
    assert ds.skipped == 1 and [(e.key, e.column) for e in ds.skip_errors] == [(BAD, "img")]
    if batch_size:  # full batches, but one row short where the bad row was
        assert sorted(len(b["id"]) for b in got)[1:] == [batch_size] * (len(got) - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(ct.dataset(table.scan("img", "label"), batch_size=8, decode={"img": len}, on_error="skip"))


def test_resume_under_skip_yields_exactly_the_remaining_good_rows(table: conch.Table) -> None:
    def make() -> Any:
        dec = {"img": ct.decoders.image()}
        return ct.dataset(table.scan("img", "label"), batch_size=None, shuffle_buffer=64, decode=dec, on_error="skip")

    ds = make()
    it = iter(ds)
    first = [next(it) for _ in range(BAD + 1)]  # the row after the bad one
    state = ds.state_dict()
    assert state["done"] == BAD + 2  # the dropped row counts as read
    rest = make()
    rest.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing left to skip
        tail = list(rest)
    ids = [int(s["id"]) for s in first + tail]
    assert sorted(ids) == [i for i in range(ROWS) if i != BAD] and rest.skipped == 0


def test_on_error_is_checked(table: conch.Table) -> None:
    with pytest.raises(conch.ConchError, match="on_error='ignore'"):
        ct.dataset(table.scan("img"), on_error="ignore")


def test_the_decoders_error_is_the_one_in_conch_errors(tmp_path: Path) -> None:
    assert ct.decoders.DecodeError is conch.DecodeError is conch.errors.DecodeError
    assert issubclass(conch.DecodeError, ValueError)
