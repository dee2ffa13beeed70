"""`conch search` and friends, run as a real subprocess against a real warehouse."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

import conch
from helpers import run_cli


def test_search_commands(tmp_path: Path) -> None:
    w = str(tmp_path / "w")
    with conch.connect(w) as cat:
        t = cat.create_table("img", [("id", pa.int64())])
        vecs = np.eye(4, dtype=np.float32)[[0, 1, 2, 3, 0]] + np.arange(5)[:, None].astype(np.float32) / 100
        emb = pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), 4)
        t.write(pa.table({"id": np.arange(5), "emb": emb, "cap": ["red car", "blue sky", "red sea", "cat", "car"]}))
    assert "created vector index" in run_cli(w, "create-index", "img", "emb", "--metric", "l2").stdout
    run_cli(w, "create-index", "img", "cap", "--kind", "text")
    assert "built 2 index files" in run_cli(w, "build-indexes", "img", "--min-rows", "0").stdout  # vector + text
    listed = run_cli(w, "indexes", "img").stdout
    assert "emb_vector: vector on emb" in listed and "cap_text: text on cap" in listed
    out = run_cli(w, "search", "img", "--like", "0", "-k", "2", "--columns", "cap", "--explain").stdout
    assert out.index("red car") < out.index(" car ") and "index file" in out
    out = run_cli(w, "search", "img", "--vector", "0,0,1,0", "-k", "1", "--where", "id > 1").stdout
    assert "red sea" in out
    assert "red sea" in run_cli(w, "search-text", "img", "sea", "-k", "1").stdout
    bad = run_cli(w, "search", "img", "--vector", "1,2")
    assert bad.returncode == 2 and "dimensions" in bad.stderr
    assert "dropped index" in run_cli(w, "drop-index", "img", "cap_text").stdout
