"""Metastore reads per query build, before and after (issue 20 item 1), side by side in one run.

Every metastore call is one round trip on a server, PostgreSQL or an object store. For each
backend and each query form, a counting proxy around the warehouse's metastore counts the calls
made while the query is *built* (nothing is read from files yet) on a warm table handle, and
while it runs. The same measurement runs in a subprocess against each source tree (`--before`:
a git ref exported with `git archive`; the working tree's `src` is "after"), and the table of
both is written to `bench/results/metastore_reads.json` and printed.

    python bench/metastore_reads.py --before main
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "metastore_reads.json"
sys.path.insert(0, str(ROOT / "tests"))
from helpers import CountingMetastore  # noqa: E402  (the suite's own counting proxy)

BACKENDS = ["sqlite-other", "object-store (local dir)", "memory://", "postgres", "http server"]


@contextlib.contextmanager
def _backend(kind: str, tmp: Path) -> Iterator[dict[str, Any]]:
    from services import ServerProcess, postgres_server

    if kind == "sqlite-other":
        yield {"uri": str(tmp / "wh"), "metastore": f"sqlite:///{tmp}/other.sqlite"}
    elif kind == "object-store (local dir)":
        yield {"uri": str(tmp / "wh"), "metastore": "storage"}
    elif kind == "memory://":
        yield {"uri": f"memory://{tmp.name}/wh"}
    elif kind == "postgres":
        with postgres_server() as pg:
            yield {"uri": str(tmp / "wh"), "metastore": pg.dsn()}
    else:
        server = ServerProcess(str(tmp / "wh"), {"bench-token": "admin"}).start()
        try:
            yield {"uri": server.url, "token": "bench-token"}
        finally:
            server.stop()


def measure(kind: str) -> dict[str, int]:
    """Metastore calls per query form on `kind` (run inside the source tree's process)."""
    import pyarrow as pa

    import conch
    from conch import _

    kid = pa.struct([("$", pa.uint64()), ("v", pa.int64())])
    schema = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("v", pa.int64()), ("kids", pa.list_(kid))])
    with tempfile.TemporaryDirectory() as d, _backend(kind, Path(d)) as opts:
        cat = conch.connect(**opts, maintenance=conch.Policy(settle_after=None))
        t = cat.create_table("t", [("id", pa.uint64())], schema=schema)
        for v in (1, 2, 3):
            t.write([{"id": i, "a": i, "b": i, "v": v, "kids": [{"$": 0, "v": v}]} for i in range(10)])
        first = t.history()[0]
        counting = CountingMetastore(cat.warehouse.metastore)
        cat.warehouse.metastore = counting
        t.scan().to_arrow()  # a warm handle
        counting.take()
        out: dict[str, int] = {}
        q = t.scan("a", where=(t["a"] > 0) & (t["b"] < 5))
        out["build t.scan('a', where=(t['a'] > 0) & (t['b'] < 5))"] = counting.take()
        q.to_arrow()
        out["  ... run it"] = counting.take()
        t.scan(version=2)
        counting.take()  # the first time loads the old state
        t.scan(version=2)
        out["build t.scan(version=2), state cached"] = counting.take()
        t.scan(asof=first.time)
        counting.take()
        t.scan(asof=first.time)
        out["build t.scan(asof=<commit 1>), state cached"] = counting.take()
        t.kids.select(v=_.v, pv=t.v).scan().to_arrow()
        out["nested t.kids.select(v=_.v, pv=t.v): build + run"] = counting.take()
        try:
            t.scan().splits(2)[0].to_arrow()
            out["t.scan().splits(2)[0].to_arrow()"] = counting.take()
        except Exception as e:  # before: the split reopened the default metastore
            out["t.scan().splits(2)[0].to_arrow()"] = type(e).__name__  # type: ignore[assignment]
        cat.close()
        return out


def _export(ref: str, into: Path) -> Path:
    data = subprocess.run(["git", "archive", ref, "src"], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=data, check=True)
    return into / "src"


def _run_tree(src: Path, kind: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)])}
    cmd = [sys.executable, "-m", "bench.metastore_reads", "--measure", kind]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--before", default="main", help="git ref of the 'before' tree")
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # internal: measure one backend here
    ap.add_argument("--backends", default=",".join(BACKENDS))
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    with tempfile.TemporaryDirectory() as d:
        before_src = _export(args.before, Path(d))
        results = {
            kind: {"before": _run_tree(before_src, kind), "after": _run_tree(ROOT / "src", kind)}
            for kind in args.backends.split(",")
        }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"before": args.before, "results": results}, indent=2))
    for kind, r in results.items():
        print(f"\n{kind}  (metastore calls: before {args.before} / after)")
        forms = list(dict.fromkeys([*r["before"], *r["after"]]))
        for f in forms:
            if f != "error":
                print(f"  {f:<55} {r['before'].get(f, '-')!s:>18} / {r['after'].get(f, '-')}")
        for side in ("before", "after"):
            if "error" in r[side]:
                print(f"  {side}: {r[side]['error']}")
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
