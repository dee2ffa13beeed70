"""Issue 31: vector search, Conch vs Lance side by side (`python -m bench.search`); results in
`bench/results/search.json`.

Data: `--rows` × `--dim` float32 vectors in 256 Gaussian clusters (the issue's shape is 200,000 ×
128; `--rows 1000000` is the 1M shape), `--queries` queries drawn from the same clusters, k=10,
one query at a time; or `--data digits`, real vectors a package ships: scikit-learn's 1,797
handwritten digits (64 pixel features), the last `--queries` of them as queries. Ground truth
is numpy brute force over every vector (its rate is reported too).

- **conch hnsw / flat / hnsw m32**: `t.create_index("emb", metric="l2", index=...)` (the last
  with `m=32, ef_construction=128, ef_search=256`: the high-recall point beside Lance's refine),
  `t.build_indexes(min_rows=0)` (build time, index bytes from the manifest), then
  `snapshot.search(q, k=10, columns=[])`; with `--data digits` also **conch default**: the same
  definition and `t.build_indexes()` as a user calls it (no index under 20,000 rows: a run that
  small is searched exactly, faster than any index);
- **lance IVF_HNSW_SQ** (64 partitions) and **IVF_PQ** (256 × 16): `create_index`, then
  `to_table(nearest=..., columns=["id"])`; with `refine_factor=10` too;
- **filtered**: 1 % of rows pass `bucket == 0`: Conch `where=` (pre-filtered, exact), Lance
  `prefilter=True`;
- **fresh**: 10,000 rows written after the build are searched for their own vectors (Conch: the
  next search finds each at distance 0, exactly, with no rebuild).

- **full text** (`--text`): the lines of CPython's `pydoc_data.topics` (the language reference's
  help topics, real English, about 10k documents) × `--text-copies`, Conch `search_text` from its
  persisted per-run text files (global BM25) beside Lance's `INVERTED` index
  (`full_text_query`), ids only, with the text column, and with a 1 % filter (Lance `prefilter`;
  Conch with one predicate, whose passing keys it reads once per version, and with a new
  predicate each query, which reads them every time); Conch again after an upsert of 1 % of the
  rows (runs overlap); p50 latency and queries/s over 24 queries, index MB, and the overlap of
  their top-10.

Systems alternate query by query (a load burst on the shared machine hits both). Figures: recall@10
against exact search, p50 latency, queries/s (1 / mean latency), build seconds, index bytes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import pyarrow as pa

import conch
from bench import systems as S

RESULTS = Path(__file__).parent / "results"
K = 10


def dataset(rows: int, dim: int, queries: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 1, (256, dim)).astype(np.float32)
    data = centers[rng.integers(0, 256, rows)] + rng.normal(0, 0.35, (rows, dim)).astype(np.float32)
    qs = centers[rng.integers(0, 256, queries)] + rng.normal(0, 0.35, (queries, dim)).astype(np.float32)
    return data, qs


def digits(queries: int) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits (shipped with the package): rows, and the last `queries` as queries."""
    from sklearn.datasets import load_digits

    x = load_digits().data.astype(np.float32)
    return np.ascontiguousarray(x[:-queries]), np.ascontiguousarray(x[-queries:])


TEXT_QUERIES = [
    "exception", "class method", "return value", "generator expression", "keyword argument",
    "import module", "syntax error", "default value", "iterator protocol", "string literal",
    "attribute reference", "comparison operators", "context manager", "global statement",
    "lambda", "coroutine await", "slice object", "unicode character", "integer division",
    "boolean operations", "name binding", "descriptor", "metaclass", "try finally",
]  # fmt: skip


def text_bench(work: Path, copies: int, lance_too: bool) -> dict[str, Any]:
    """Full-text latency: Conch `search_text` (persisted files) beside Lance's INVERTED index; ids
    only, with the text, and with a 1 % filter (`bucket == 0`); then Conch after an upsert of 1 %
    of the rows (runs overlap: the first query indexes the overlapped run's fresh records)."""
    import pydoc_data.topics

    lines = [ln.strip() for text in pydoc_data.topics.topics.values() for ln in text.splitlines() if ln.strip()]
    docs = [f"{ln} [{c}]" if c else ln for c in range(copies) for ln in lines]
    ids = np.arange(len(docs), dtype=np.int64)
    table = pa.table({"id": ids, "bucket": ids % 100, "text": docs})
    cat = conch.connect(work / "conch_text", maintenance=conch.Policy(auto=False))
    t = cat.create_table("text", [("id", pa.int64())])
    t.write(table)
    t.create_index("text", kind="text")
    t0 = time.perf_counter()
    t.build_indexes(min_rows=0)
    out: dict[str, Any] = {"documents": len(docs), "builds": {"conch text files": round(time.perf_counter() - t0, 2)}}
    out["index_mb"] = {"conch text files": round(sum(f.bytes for f in t.state().index_files.values()) / 1e6, 1)}
    snap = t.snapshot()
    one = t["bucket"] == 0
    buckets = iter(range(1, 10**9))  # a predicate the process has not seen: its passing keys are read

    def new_bucket(q: str) -> list[int]:
        where = t["bucket"] == next(buckets) % 100
        return snap.search_text(q, k=K, columns=[], where=where).to_arrow().column("id").to_pylist()

    def conch_side(s: Any, columns: list[str], where: Any = None) -> Callable[[str], list[int]]:
        return lambda q: s.search_text(q, k=K, columns=columns, where=where).to_arrow().column("id").to_pylist()

    sides: dict[str, Callable[[str], list[int]]] = {
        "conch search_text": conch_side(snap, []),
        "conch search_text +text": conch_side(snap, ["text"]),
        "conch search_text where 1%": conch_side(snap, [], one),
        "conch where 1%, new each query": new_bucket,
    }
    if lance_too:
        import lance

        ds = lance.write_dataset(table, str(work / "lance_text"))
        t0 = time.perf_counter()
        ds.create_scalar_index("text", "INVERTED")
        out["builds"]["lance INVERTED"] = round(time.perf_counter() - t0, 2)
        index_bytes = sum(p.stat().st_size for p in (work / "lance_text" / "_indices").rglob("*") if p.is_file())
        out["index_mb"]["lance INVERTED"] = round(index_bytes / 1e6, 1)

        def lance_side(columns: list[str], **more: Any) -> Callable[[str], list[int]]:
            return lambda q: (
                ds.to_table(full_text_query=q, columns=columns, limit=K, disable_scoring_autoprojection=True, **more)
                .column("id")
                .to_pylist()
            )

        sides["lance full_text_query"] = lance_side(["id"])
        sides["lance full_text_query +text"] = lance_side(["id", "text"])
        sides["lance prefilter 1%"] = lance_side(["id"], filter="bucket = 0", prefilter=True)
    out["search"], tops = text_measure(sides)
    if lance_too:
        a, b = tops["conch search_text"], tops["lance full_text_query"]
        out["top10_overlap"] = round(sum(len(x & y) for x, y in zip(a, b)) / max(1, sum(len(x) for x in a)), 3)
    upserted = ids[::100]
    t.write(pa.table({"id": upserted, "text": [f"updated line {i}" for i in upserted]}))  # runs overlap now
    after = t.snapshot()
    t0 = time.perf_counter()
    after.search_text(TEXT_QUERIES[0], k=K, columns=[])
    out["after_upsert_first_query_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
    out["search"].update(text_measure({"conch after a 1% upsert": conch_side(after, [])})[0])
    return out


def text_measure(sides: dict[str, Callable[[str], list[int]]]) -> tuple[dict[str, Any], dict[str, list[set[int]]]]:
    """Alternate the sides query by query: p50 ms, queries/s, and each side's top-10 sets."""
    lat: dict[str, list[float]] = {n: [] for n in sides}
    tops: dict[str, list[set[int]]] = {n: [] for n in sides}
    for f in sides.values():
        f(TEXT_QUERIES[0])  # warm
    for q in TEXT_QUERIES:
        for name, f in sides.items():
            t0 = time.perf_counter()
            got = f(q)
            lat[name].append(time.perf_counter() - t0)
            tops[name].append(set(got))
    stats = {
        n: {"p50_ms": round(median(lat[n]) * 1e3, 3), "qps": round(len(TEXT_QUERIES) / sum(lat[n]), 1)} for n in sides
    }
    return stats, tops


def truth(data: np.ndarray, qs: np.ndarray, mask: np.ndarray | None = None) -> tuple[list[set[int]], float]:
    ids = np.arange(len(data)) if mask is None else np.flatnonzero(mask)
    sub = data[ids]
    norms = (sub * sub).sum(1)
    out, t0 = [], time.perf_counter()
    for q in qs:
        d = norms - 2 * sub @ q
        out.append(set(ids[np.argpartition(d, K)[:K]].tolist()))
    return out, len(qs) / (time.perf_counter() - t0)


def vectors(a: np.ndarray) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(a.ravel()), a.shape[1])


def measure(
    sides: dict[str, Callable[[np.ndarray], list[int]]], qs: np.ndarray, want: list[set[int]]
) -> dict[str, Any]:
    """Alternate the sides query by query; recall@10, p50 ms, queries/s."""
    lat: dict[str, list[float]] = {n: [] for n in sides}
    hits: dict[str, int] = dict.fromkeys(sides, 0)
    for f in sides.values():  # warm: caches, loaded index files
        f(qs[0])
    for q, w in zip(qs, want):
        for name, f in sides.items():
            t0 = time.perf_counter()
            got = f(q)
            lat[name].append(time.perf_counter() - t0)
            hits[name] += len(set(got[:K]) & w)
    return {
        n: {
            "recall@10": round(hits[n] / (K * len(qs)), 4),
            "p50_ms": round(median(lat[n]) * 1e3, 3),
            "qps": round(len(qs) / sum(lat[n]), 1),
        }
        for n in sides
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--work", type=Path, default=Path("/tmp/conch-bench-search"))
    ap.add_argument("--no-lance", action="store_true")
    ap.add_argument("--data", choices=["clusters", "digits"], default="clusters")
    ap.add_argument("--text", action="store_true", help="also the full-text comparison")
    ap.add_argument("--text-only", action="store_true", help="only the full-text comparison")
    ap.add_argument("--text-copies", type=int, default=1)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    if args.text_only:
        text = text_bench(args.work, args.text_copies, not args.no_lance)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "search_text.json").write_text(json.dumps({**text, "machine": S.machine()}, indent=2))
        print_text(text)
        return
    if args.data == "digits":
        data, qs = digits(args.queries)
        args.rows, args.dim = data.shape
    else:
        data, qs = dataset(args.rows, args.dim, args.queries)
    bucket = np.arange(args.rows) % 100
    want, numpy_qps = truth(data, qs)
    table = pa.table({"id": np.arange(args.rows, dtype=np.int64), "bucket": bucket, "emb": vectors(data)})
    results: dict[str, Any] = {
        "data": args.data,
        "rows": args.rows,
        "dim": args.dim,
        "queries": args.queries,
        "numpy_qps": round(numpy_qps, 1),
    }
    builds: dict[str, dict[str, Any]] = {}
    sides: dict[str, Callable[[np.ndarray], list[int]]] = {}
    filtered: dict[str, Callable[[np.ndarray], list[int]]] = {}

    cat = conch.connect(args.work / "conch")
    snaps = {}
    # the HNSW index again with twice the links and a wider beam: Conch's high-recall point,
    # beside Lance's refine; on a small real set, also the default a user gets (no index there)
    configs: list[tuple[str, str, dict[str, int], int | None]] = [
        ("hnsw", "hnsw", {}, 0),
        ("flat", "flat", {}, 0),
        ("hnsw m32", "hnsw", {"m": 32, "ef_construction": 128, "ef_search": 256}, 0),
    ]
    if args.data == "digits":
        configs.append(("default", "hnsw", {}, None))
    for name, structure, opts, min_rows in configs:
        t = cat.create_table(name.replace(" ", "_"), [("id", pa.int64())])
        t.write(table)
        t.create_index("emb", metric="l2", index=structure, **opts)
        t0 = time.perf_counter()
        t.build_indexes(min_rows=min_rows)
        secs = time.perf_counter() - t0
        files = t.state().index_files.values()
        builds[f"conch {name}"] = {"build_s": round(secs, 2), "index_bytes": sum(f.bytes for f in files)}
        snap = snaps[name] = t.snapshot()
        sides[f"conch {name}"] = lambda q, s=snap: s.search(q, k=K, columns=[]).to_arrow().column("id").to_pylist()
    hnsw_table = cat.table("hnsw")
    filtered["conch hnsw where"] = lambda q: (
        snaps["hnsw"].search(q, k=K, where=hnsw_table["bucket"] == 0, columns=[]).to_arrow().column("id").to_pylist()
    )

    if not args.no_lance:
        import lance

        for name, kw in (
            ("IVF_HNSW_SQ", {"index_type": "IVF_HNSW_SQ", "num_partitions": 64}),
            ("IVF_PQ", {"index_type": "IVF_PQ", "num_partitions": 256, "num_sub_vectors": 16}),
        ):
            path = args.work / f"lance_{name}"
            ds = lance.write_dataset(table, str(path))
            t0 = time.perf_counter()
            ds = ds.create_index("emb", metric="L2", **kw)
            secs = time.perf_counter() - t0
            size = sum(p.stat().st_size for p in (path / "_indices").rglob("*") if p.is_file())
            builds[f"lance {name}"] = {"build_s": round(secs, 2), "index_bytes": size}

            def lance_search(q: np.ndarray, ds: Any = ds, **more: Any) -> list[int]:
                nearest = {"column": "emb", "q": q, "k": K, **more}
                return (
                    ds.to_table(nearest=nearest, columns=["id"], disable_scoring_autoprojection=True)
                    .column("id")
                    .to_pylist()
                )

            sides[f"lance {name}"] = lance_search
            sides[f"lance {name} refine10"] = lambda q, f=lance_search: f(q, refine_factor=10)
            if name == "IVF_HNSW_SQ":
                filtered["lance IVF_HNSW_SQ prefilter"] = lambda q, ds=ds: (
                    ds.to_table(
                        nearest={"column": "emb", "q": q, "k": K},
                        columns=["id"],
                        filter="bucket = 0",
                        prefilter=True,
                        disable_scoring_autoprojection=True,
                    )
                    .column("id")
                    .to_pylist()
                )

    results["builds"] = builds
    results["search"] = measure(sides, qs, want)
    want_f, _ = truth(data, qs, bucket == 0)
    results["filtered_1pct"] = measure(filtered, qs, want_f)

    # fresh: 10k rows written after the build are found by the next search, exactly
    t = cat.table("hnsw")
    extra = min(10_000, args.rows)
    new, _ = dataset(extra, args.dim, 1, seed=1)
    if args.data == "digits":  # the query digits, as new rows
        new, extra = qs, len(qs)
    t.write(pa.table({"id": np.arange(args.rows, args.rows + extra, dtype=np.int64), "emb": vectors(new)}))
    snap = t.snapshot()
    probe = np.random.default_rng(2).choice(extra, 50, replace=False)
    found = sum(snap.search(new[i], k=1, columns=[]).to_pylist()[0]["id"] == args.rows + i for i in probe)
    results["fresh_found"] = f"{found}/{len(probe)}"
    if args.text:
        results["text"] = text_bench(args.work, args.text_copies, not args.no_lance)
    results["machine"] = S.machine()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"search_{args.data}_{args.rows}.json").write_text(json.dumps(results, indent=2))
    print(
        f"{args.data}: {args.rows} x {args.dim}, {args.queries} queries, k={K}; numpy brute force {numpy_qps:.0f} queries/s"
    )
    print(f"{'side':32} {'build s':>8} {'index MB':>9} {'recall@10':>9} {'p50 ms':>8} {'q/s':>8}")
    for part in ("search", "filtered_1pct"):
        for name, m in results[part].items():
            b = builds.get(name, {})
            mb = f"{b['index_bytes'] / 1e6:.1f}" if b else ""
            print(f"{name:32} {b.get('build_s', ''):>8} {mb:>9} {m['recall@10']:>9} {m['p50_ms']:>8} {m['qps']:>8}")
    print(f"fresh: {results['fresh_found']} of the rows written after the build found at distance 0 by the next search")
    if args.text:
        print_text(results["text"])


def print_text(text: dict[str, Any]) -> None:
    print(f"full text over {text['documents']} documents (pydoc topics lines), k={K}, {len(TEXT_QUERIES)} queries")
    print(f"{'side':32} {'p50 ms':>8} {'q/s':>8}")
    for name, m in text["search"].items():
        print(f"{name:32} {m['p50_ms']:>8} {m['qps']:>8}")
    print("builds (s): " + ", ".join(f"{n} {s}" for n, s in text["builds"].items()))
    print("index MB: " + ", ".join(f"{n} {s}" for n, s in text["index_mb"].items()))
    print(
        f"after the upsert, the first query (indexes the overlapped run's fresh records): {text['after_upsert_first_query_ms']} ms"
    )
    if "top10_overlap" in text:
        print(f"top-10 overlap (two BM25 implementations): {text['top10_overlap']}")


if __name__ == "__main__":
    main()
