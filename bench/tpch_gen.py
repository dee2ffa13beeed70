"""TPC-H data, queries and reference answers from DuckDB's `tpch` extension (run by bench/tpch.py).

Runs in a separate interpreter: `duckdb-extension-tpch` on PyPI ships the extension binary for
DuckDB 1.5.5, not the DuckDB Conch uses, so bench/tpch.py keeps a throwaway virtual environment
with `duckdb==1.5.5` and the extension and runs this file there:

    <venv>/bin/python bench/tpch_gen.py <scale factor> <output directory>

Writes `<table>.parquet` for the 8 tables, `queries.json` (`{"1": "SELECT ...", ...}`) and
`answers.json` (`{"1": "col|col\\nval|val\\n...", ...}`, DuckDB's reference answers at that scale
factor: they exist for 0.01, 0.1 and 1), then `done` last (a partial directory is regenerated).
Imports nothing from Conch.
"""

from __future__ import annotations

import json
import os
import sys

import duckdb  # the generator venv's DuckDB 1.5.5
import duckdb_extension_tpch

TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")


def main() -> None:
    sf, out = float(sys.argv[1]), sys.argv[2]
    os.makedirs(out, exist_ok=True)
    ext = os.path.join(
        os.path.dirname(duckdb_extension_tpch.__file__), "extensions", f"v{duckdb.__version__}", "tpch.duckdb_extension"
    )
    con = duckdb.connect()
    con.execute(f"LOAD '{ext}'")
    con.execute(f"CALL dbgen(sf={sf})")
    for t in TABLES:
        con.execute(f"COPY {t} TO '{os.path.join(out, t)}.parquet' (FORMAT parquet)")
    queries = {str(n): q for n, q in con.execute("SELECT query_nr, query FROM tpch_queries()").fetchall()}
    answers = {
        str(n): a
        for n, s, a in con.execute("SELECT query_nr, scale_factor, answer FROM tpch_answers()").fetchall()
        if abs(s - sf) < 1e-9
    }
    if len(answers) != 22:
        raise SystemExit(f"DuckDB's tpch extension has reference answers for 0.01, 0.1 and 1, not for sf={sf}")
    with open(os.path.join(out, "queries.json"), "w") as f:
        json.dump(queries, f, indent=1)
    with open(os.path.join(out, "answers.json"), "w") as f:
        json.dump(answers, f, indent=1)
    with open(os.path.join(out, "done"), "w") as f:
        f.write(duckdb.__version__)


if __name__ == "__main__":
    main()
