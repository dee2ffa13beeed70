"""`conch ingest` / `write` / `create` keys as a new user types them (issue 32, item 3): a --key
that is not an existing table's key is refused, a failed first ingest leaves no table behind, and
`--key a --key b` means `--key a,b` in every command."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import conch
from helpers import run_cli


def _csv(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_ingest_with_another_key_than_the_tables_is_refused(tmp_path: Path) -> None:
    w = str(tmp_path / "w")
    src = _csv(tmp_path / "airports.csv", "iata,name\nAAA,Alpha\nBBB,Beta\n")
    assert run_cli(w, "ingest", src, "-t", "airports", "--key", "iata").returncode == 0
    res = run_cli(w, "ingest", src, "-t", "airports", "--key", "name")
    assert res.returncode == 2, res.stdout
    assert "exists with key iata, not name" in res.stderr
    res = run_cli(w, "write", "airports", src, "--key", "name")
    assert res.returncode == 2 and "exists with key iata" in res.stderr
    assert run_cli(w, "ingest", src, "-t", "airports").returncode == 0  # no --key: the table's key
    assert sum(c.kind == "write" for c in conch.connect(w).table("airports").history()) == 2


def test_a_failed_first_ingest_leaves_no_table(tmp_path: Path) -> None:
    w = str(tmp_path / "w")
    src = _csv(tmp_path / "p.csv", "species,island,mass\nA,x,1\nA,y,2\n")
    res = run_cli(w, "ingest", src, "-t", "p", "--key", "species")
    assert res.returncode == 2 and "appears more than once" in res.stderr
    assert "p" not in conch.connect(w).list_tables()  # before: an empty table keyed by `species`
    res = run_cli(w, "ingest", src, "-t", "p", "--key", "species,island")  # the corrected command
    assert res.returncode == 0, res.stderr
    assert [f.name for f in conch.connect(w).table("p").key_schema] == ["species", "island"]


def test_repeated_and_comma_separated_keys_mean_the_same(tmp_path: Path) -> None:
    w = str(tmp_path / "w")
    src = _csv(tmp_path / "p.csv", "a,b,v\n1,x,1\n1,y,2\n")
    assert run_cli(w, "ingest", src, "-t", "rep", "--key", "a", "--key", "b").returncode == 0
    assert run_cli(w, "ingest", src, "-t", "comma", "--key", "a,b").returncode == 0
    assert run_cli(w, "create", "made", "--key", "a:int64", "--key", "b:string").returncode == 0
    assert run_cli(w, "create", "made2", "--key", "a:int64,b:string").returncode == 0
    cat = conch.connect(w)
    for name in ("rep", "comma", "made", "made2"):
        assert [f.name for f in cat.table(name).key_schema] == ["a", "b"], name
    assert cat.table("rep").scan().to_arrow().num_rows == 2
    assert cat.table("made").key_schema.field("a").type == pa.int64()
