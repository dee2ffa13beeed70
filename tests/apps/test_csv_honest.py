"""CSV input never changes a column's type silently and names the line of what it refuses
(issue 32, item 4): a late bad value, `NA` in every type, an empty key field, a malformed line,
`2010/01/01 00:00:00` dates."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import conch
from conch.write.file_input import FileInput, read_files
from helpers import run_cli


def _read(path: Path, **kw: object) -> pa.Table:
    return read_files(FileInput([path], **kw)).read_all()  # type: ignore[arg-type]


def test_one_bad_value_in_a_column_of_numbers_is_an_error_naming_its_line(tmp_path: Path) -> None:
    rows = [f"X{i},{i}.5" for i in range(40)]
    rows.insert(30, "BAD,not_a_number")
    path = tmp_path / "airports.csv"
    path.write_text("iata,latitude\n" + "\n".join(rows) + "\n")
    with pytest.raises(conch.SchemaError, match=r"column 'latitude' holds numbers, but line 32 holds 'not_a_number'"):
        _read(path)  # before: latitude became text without a word
    assert _read(path, cast={"latitude": pa.string()}).schema.field("latitude").type == pa.string()


def test_a_bad_value_after_the_first_block_names_column_and_line(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    n = 1_200_000  # past the 16 MiB block pyarrow infers types from
    with open(path, "w") as f:
        f.write("id,x\n")
        f.writelines(f"{i},{i}\n" for i in range(n))
        f.write(f"{n},not_a_number\n")
    with pytest.raises(
        conch.SchemaError, match=rf"column 'x' is int64 .* line {n + 2} holds 'not_a_number'.*--cast x=string"
    ):
        _read(path)


def test_na_is_null_in_every_type_and_an_empty_key_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "penguins.csv"
    path.write_text("id,sex,mass,island\n1,NA,NA,A\n2,M,3.5,\n3,F,NA,B\n")
    got = _read(path)
    assert got.column("sex").to_pylist() == [None, "M", "F"]  # before: the text "NA"
    assert got.column("mass").to_pylist() == [None, 3.5, None]
    assert got.column("island").to_pylist() == ["A", None, "B"]
    bad = tmp_path / "nokey.csv"
    bad.write_text("iata,name\nAAA,a\n,b\n")
    with pytest.raises(conch.SchemaError, match=r"row 2 .* no value for key column 'iata'"):
        _read(bad, key=["iata"])  # before: the key ""


def test_malformed_line_and_dates_and_header_only_through_the_cli(tmp_path: Path) -> None:
    w = str(tmp_path / "w")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,c\n1,2,3\n4,5,6\n7,8\n")
    res = run_cli(w, "ingest", str(bad), "-t", "bad", "--key", "a")
    assert res.returncode == 2 and "line 4: CSV parse error: Expected 3 columns, got 2" in res.stderr
    temps = tmp_path / "sf-temps.csv"
    temps.write_text("k,date,temp\n1,2010/01/01 00:00:00,3\n2,2010/01/01 01:00:00,4\n")
    res = run_cli(w, "ingest", str(temps), "-t", "temps", "--key", "k")
    assert "--timestamp-format '%Y/%m/%d %H:%M:%S'" in res.stderr
    res = run_cli(w, "ingest", str(temps), "-t", "temps2", "--key", "k", "--timestamp-format", "%Y/%m/%d %H:%M:%S")
    assert res.returncode == 0
    assert pa.types.is_timestamp(conch.connect(w).table("temps2").state().schema.column("date").type)
    header = tmp_path / "header.csv"
    header.write_text("iata,name\n")
    res = run_cli(w, "ingest", str(header), "-t", "h", "--key", "iata")
    assert res.returncode == 2 and "no values in the input (a header without rows?)" in res.stderr
    assert "has type null" not in res.stderr
