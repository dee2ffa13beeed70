"""Catalog and table lifecycle: connecting (and not creating), dropping, re-creating, closing,
schema changes (evolve, rename, drop) and time travel by time or version."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, date, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch
import conch.log.txn as conch_txn
from conch.errors import (
    ColumnNotFoundError,
    InvalidArgumentError,
    SchemaError,
    TableNotFoundError,
    TimeTravelError,
    WarehouseError,
    WarehouseNotFoundError,
)
from conch.model.time import to_time


def cli(warehouse: str | Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "conch.apps.cli", "--warehouse", str(warehouse), *args]
    env = {**os.environ, "PYTHONPATH": str(Path(conch.__file__).parents[1])}  # this checkout's conch
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


# ----- connect: reading never creates ------------------------------------------------------------
def test_reading_a_missing_warehouse_creates_nothing(tmp_path: Path) -> None:
    wh = tmp_path / "typo"
    cat = conch.connect(wh)
    assert cat.list_tables() == []
    with pytest.raises(TableNotFoundError):
        cat.table("t")
    assert not wh.exists(), "a read made a warehouse"
    cat.create_table("t", [("id", pa.int64())])
    assert (wh / "_catalog.sqlite").exists(), "the first create_table makes it"
    assert conch.connect(wh, create=False).list_tables() == ["t"]


def test_connect_errors_and_forms(tmp_path: Path) -> None:
    with pytest.raises(WarehouseNotFoundError, match="create=True"):
        conch.connect(tmp_path / "missing", create=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(WarehouseError, match="is a file"):
        conch.connect(tmp_path / "file")
    with pytest.raises(WarehouseError, match="supported"):
        conch.connect("s4://bucket/wh")
    conch.connect(f"file://{tmp_path}/viauri").create_table("t", [("id", pa.int64())])
    assert conch.connect(tmp_path / "viauri").list_tables() == ["t"]
    conch.connect(tmp_path / "eager", create=True)
    assert (tmp_path / "eager").is_dir()


def test_cli_read_commands_do_not_create_warehouses(tmp_path: Path) -> None:
    result = cli(tmp_path / "typo", "tables")
    assert result.returncode != 0 and "no warehouse" in result.stdout + result.stderr
    assert not (tmp_path / "typo").exists()


def test_close_and_context_manager(tmp_path: Path) -> None:
    with conch.connect(tmp_path / "w") as cat:
        t = cat.create_table("t", [("id", pa.int64())])
        t.write([{"id": 1, "x": 1.0}])
    assert t.scan().to_pylist() == [{"id": 1, "x": 1.0}], "a closed catalog's tables reconnect"


# ----- tables: identity, exist_ok, dropped handles -------------------------------------------------
def test_exist_ok_checks_the_key_schema(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("id", pa.int64())])
    assert catalog.create_table("t", [("id", pa.int64())], exist_ok=True).id == t.id
    with pytest.raises(SchemaError, match="key schema"):
        catalog.create_table("t", [("id", pa.string())], exist_ok=True)


def test_a_dropped_tables_handle_raises_and_a_new_table_is_another(catalog: conch.Catalog) -> None:
    old = catalog.create_table("t", [("id", pa.int64())])
    old.write([{"id": 1, "x": 1.0}])
    catalog.drop_table("t")
    for call in (lambda: old.write([{"id": 2, "x": 2.0}]), lambda: old.scan().to_arrow(), old.history):
        with pytest.raises(TableNotFoundError):
            call()
    new = catalog.create_table("t", [("id", pa.int64())])
    assert new.id != old.id
    with pytest.raises(TableNotFoundError):
        old.write([{"id": 3, "x": 3.0}])
    assert new.scan().to_pylist() == [] and new.history() == []
    assert not list(catalog.warehouse.storage.list(old.id)), "the dropped handle's write left no files"


def test_state_is_not_mutable(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("id", pa.int64())])
    t.write([{"id": 1, "x": 1.0}])
    state = t.state()
    with pytest.raises(TypeError):
        state.fragments["x"] = None  # type: ignore[index]
    with pytest.raises(AttributeError):
        state.seq = 0  # type: ignore[misc]


def test_shadowed_names_are_reachable(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("id", pa.int64())])
    t.write([{"id": 1, "name": "a", "schema": 2}])
    assert t.name == "t"
    assert t.scan(t["name"]).to_pylist() == [{"id": 1, "name": "a"}]
    assert t.scan(where=t["schema"] == 2).count() == 1
    assert "name" in repr(t.col("name"))


# ----- schema drift, rename, drop ------------------------------------------------------------------
def test_evolve_option_and_history_names_added_columns(tmp_path: Path) -> None:
    strict = conch.connect(tmp_path / "w", evolve=False, maintenance=conch.Policy(auto=False))  # history() lists writes
    t = strict.create_table("t", [("id", pa.int64())], pa.schema([("score", pa.float64())]))
    t.write([{"id": 1, "score": 1.0}])
    with pytest.raises(SchemaError, match=r"\['scroe'\].*evolve=True"):
        t.write([{"id": 2, "scroe": 2.0}])
    assert t.scan().to_pylist() == [{"id": 1, "score": 1.0}], "nothing committed"
    c = t.write([{"id": 2, "label": "x"}], evolve=True)
    assert c.added_columns == ("label",)
    lenient = conch.connect(tmp_path / "w", maintenance=conch.Policy(auto=False)).table("t")  # the default evolves
    assert lenient.write([{"id": 3, "extra": 1}]).added_columns == ("extra",)
    assert [h.added_columns for h in lenient.history()] == [(), ("label",), ("extra",)]
    assert "added extra" in lenient.history()[-1].summary


def test_rename_and_drop_are_metadata_only_with_time_travel(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("id", pa.int64())])
    c1 = t.write([{"id": 1, "sr": 16000, "audio": {"codec": "flac", "size": 10}}])
    files = {f.path for f in catalog.warehouse.storage.list(t.id) if "/meta/" not in f.path}
    r = t.rename_column("sr", "rate")
    t.rename_column("audio.codec", "audio.format")
    d = t.drop_columns("audio.size")
    assert {f.path for f in catalog.warehouse.storage.list(t.id) if "/meta/" not in f.path} == files, (
        "no data rewritten"
    )
    assert t.scan().to_pylist() == [{"id": 1, "rate": 16000, "audio": {"format": "flac"}}]
    assert t.scan(version=c1.seq).to_pylist() == [{"id": 1, "sr": 16000, "audio": {"codec": "flac", "size": 10}}]
    assert t.scan(asof=r.time).to_pylist() == [{"id": 1, "rate": 16000, "audio": {"codec": "flac", "size": 10}}]
    t.write([{"id": 2, "sr": 8000, "audio": {"size": 3}}])  # old names again: new columns, new ids
    rows = t.scan().to_pylist()
    assert rows[1] == {"id": 2, "rate": None, "audio": {"format": None, "size": 3}, "sr": 8000}
    assert rows[0]["audio"]["size"] is None, "a dropped column's old cells never come back"
    assert t.scan(version=d.seq).to_pylist() == [{"id": 1, "rate": 16000, "audio": {"format": "flac"}}]
    with pytest.raises(SchemaError, match="taken"):
        t.rename_column("rate", "sr")
    with pytest.raises(SchemaError, match="group"):
        t.rename_column("rate", "audio.rate")
    with pytest.raises(ColumnNotFoundError):
        t.drop_columns("nope")
    with pytest.raises(ColumnNotFoundError, match="key"):
        t.drop_columns("id")


def test_cli_rename_and_drop(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "w")
    t = cat.create_table("t", [("id", pa.int64())])
    t.write([{"id": 1, "a": 1, "b": 2, "c": 3}])
    assert cli(tmp_path / "w", "rename-column", "t", "a", "alpha").returncode == 0
    assert cli(tmp_path / "w", "drop-columns", "t", "b", "c").returncode == 0
    assert t.scan().to_pylist() == [{"id": 1, "alpha": 1}]


# ----- time travel ---------------------------------------------------------------------------------
def test_one_time_parser() -> None:
    assert to_time("2026-11-22") == to_time(date(2026, 11, 22)) == to_time(datetime(2026, 11, 22, tzinfo=UTC))
    assert to_time("2026-11-22T02:00:00+02:00") == to_time(datetime(2026, 11, 22))
    assert to_time("1795305600000000") == to_time(1795305600000000) == 1795305600000000
    for bad, hint in [
        (1, "version=1"),
        (1_795_305_600, "seconds"),
        (1_795_305_600_000, "milliseconds"),
        (1.5, "float"),
    ]:
        with pytest.raises(TimeTravelError, match=hint):
            to_time(bad)
    with pytest.raises(TimeTravelError, match="ISO"):
        to_time("yesterday")
    assert to_time(None) is None


def test_asof_version_and_the_first_commit(tmp_path: Path) -> None:
    catalog = conch.connect(
        tmp_path, maintenance=conch.Policy(auto=False)
    )  # versions are commits: no compaction between them
    t = catalog.create_table("t", [("id", pa.int64())])
    c1 = t.write([{"id": 1, "v": 1}])
    c2 = t.write([{"id": 1, "v": 2}])
    assert t.scan(version=1).to_pylist() == [{"id": 1, "v": 1}]
    assert t.scan(version=c2.seq).to_pylist() == [{"id": 1, "v": 2}]
    assert t.scan(asof=c1.datetime.isoformat()).to_pylist() == [{"id": 1, "v": 1}]
    with pytest.raises(TimeTravelError, match="first commit"):
        t.scan(asof=datetime(2001, 1, 1))
    with pytest.raises(TimeTravelError, match=r"versions are 1\.\.2"):
        t.scan(version=3)
    with pytest.raises(conch.InvalidArgumentError):
        t.scan(asof=c1.time, version=1)
    result = cli(catalog.uri, "scan", "t", "--asof", "2001-01-01")
    assert result.returncode != 0 and "first commit" in result.stdout + result.stderr
    assert "v" in cli(catalog.uri, "scan", "t", "--asof", c1.datetime.isoformat()).stdout


# ----- issue 21: history(kind=...) -------------------------------------------------------------
OPS = st.lists(st.sampled_from(["write", "delete", "compact", "flush", "vacuum", "schema", "expire"]), max_size=14)


@settings(deadline=None, max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_history_by_kind_finds_the_write_before_the_last(
    tmp_path_factory: pytest.TempPathFactory, ops: list[str]
) -> None:
    """Model: the commits each call returned, by kind. Automatic compactions interleave (the
    default policy compacts after writes), so `history()[-2]` is not the write before the last;
    `history(kind="write")[-2]` is, and every filter keeps exactly the commits of its kinds."""
    w = tmp_path_factory.mktemp("w")
    with conch.connect(w, maintenance=conch.Policy(settle_after=None)) as cat:  # inline compaction only
        t = cat.create_table("t", [("id", pa.uint64())])
        made: dict[str, list[int]] = {}
        for i, op in enumerate(["write", "write", *ops]):
            if op == "write":
                seq = t.write([{"id": i % 5, "x": float(i)}]).seq
            elif op == "delete":
                seq = t.delete([i % 5]).seq
            elif op == "compact":
                t.compact()
                continue  # may commit nothing: read back below
            elif op == "flush":
                seq = t.flush() + 1  # the snapshot is of version n; its registration is commit n + 1
            elif op == "vacuum":
                t.vacuum(3600)
                continue
            elif op == "schema":
                old = "x" if "x" in t.schema.columns else next(c for c in t.schema.columns if c.startswith("r"))
                seq = t.rename_column(old, f"r{i}").seq
            else:
                t.expire(retain_last=50)
                continue
            made.setdefault(op, []).append(seq)
        every = t.history()
        assert [c.seq for c in t.history(kind="write")] == made["write"]
        assert t.history(kind="write")[-2].seq == made["write"][-2]
        for kind in ("delete", "flush", "schema"):
            assert [c.seq for c in t.history(kind)] == made.get(kind, [])
        for kinds in (["compact"], ["write", "delete"], ["data"], ["maintenance"], ["vacuum", "expire"]):
            groups = {"data": conch_txn.DATA_KINDS, "maintenance": conch_txn.MAINTENANCE_KINDS}
            wanted = {k2 for k in kinds for k2 in groups.get(k, (k,))}
            assert t.history(kinds) == [c for c in every if c.kind in wanted]
        assert {c.kind for c in every} <= set(conch_txn.COMMIT_KINDS)
        with pytest.raises(InvalidArgumentError, match="no commit kind 'wirte'"):
            t.history(kind="wirte")


def test_cli_history_kind(tmp_path: Path) -> None:
    w = tmp_path / "w"
    t = conch.connect(w).create_table("t", [("id", pa.uint64())])
    t.write([{"id": 1}])
    t.compact()
    t.delete([1])
    out = cli(w, "history", "t", "--kind", "write", "--kind", "delete")
    assert out.returncode == 0 and "write" in out.stdout and "delete" in out.stdout and "compact" not in out.stdout
    assert "compact" in cli(w, "history", "t", "--kind", "maintenance").stdout
    bad = cli(w, "history", "t", "--kind", "wirte")
    assert bad.returncode == 2 and "no commit kind 'wirte'" in bad.stderr
