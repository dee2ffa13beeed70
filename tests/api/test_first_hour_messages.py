"""Messages a new user meets in the first hour say what was wrong in their words (issue 32,
item 11)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import conch
from conch.write.file_input import FileInput, read_files


@pytest.fixture
def table(tmp_path: Path) -> conch.Table:
    t = conch.connect(tmp_path / "w").create_table("digits", [("id", pa.int64())])
    t.write({"id": [1], "x": [1]})
    return t


def test_an_integer_out_of_range_names_column_row_and_range(table: conch.Table) -> None:
    with pytest.raises(conch.SchemaError, match=r"column 'x', row 1: 1180591620717411303424 is out of range for int64"):
        table.write([{"id": 2, "x": 1}, {"id": 3, "x": 2**70}])  # before: "holds values of types ['int']"


def test_a_json_array_file_says_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text(json.dumps([{"id": 1}, {"id": 2}]))
    with pytest.raises(conch.SchemaError, match=r"is one JSON array; JSON input is JSON lines"):
        read_files(FileInput([path]))  # before: "Column() changed from object to array in row 0"


def test_time_travel_before_the_first_commit_reads_well(table: conch.Table) -> None:
    with pytest.raises(conch.TimeTravelError) as e:
        table.scan(asof=table.history()[0].time - 1_000_000).to_arrow()
    assert "before the first commit of table 'digits'" in str(e.value) and "''s" not in str(e.value)


def test_level_typo_names_the_root_and_per_on_the_root_names_no_internals(table: conch.Table) -> None:
    with pytest.raises(conch.SchemaError, match=r"no level 'nope'; levels: '' \(the root\)"):
        table.scan(level="nope")
    with pytest.raises(conch.ConchError) as e:
        table.x.mean().per(table)  # before: "... has no ... column or group 'domain'"
    assert "domain" not in str(e.value) and "per '<root>'" in str(e.value)
