"""`python -m bench --only compaction`: the LSM tree maintained (issue 10's benchmark), side by side
in one run; writes bench/results/compaction.json.

- **Workload 7 with maintenance**: 500 and 3,000 small upsert commits (200 rows each, every key
  written about twice) into Conch with the default maintenance policy on, with it off, and the
  same final rows written once; full scan, 1 % value filter and a 50-key take, as ratios to the
  rows written once. Also the ingest time with and without automatic maintenance (its cost) and
  the write amplification: bytes compaction commits wrote / bytes writes committed, read from the
  WAL (every `AddKeySpace` / `AddFragment` records its file's size). Reads right after the last
  commit and once settled (`Table.wait_for_maintenance`, with the settle's time).
- **Concurrent writers**: the same 3,000 commits from 2 writer processes at once, default policy
  on, then the same reads (right after, settled) as ratios to the resulting rows written once.
- **Partial-column upsert**: 10 % of the keys get a new value in one column; a full read after
  compaction vs a read of a clean table with the same values.
- **Minor compaction time vs data size** (goal: flat) and **major compaction throughput**.
- **Lance and Delta on the same commit history** (`merge_insert` / `merge` upserts per commit, the
  500-commit history): time of `optimize.compact_files()` / `optimize.compact()` and Conch's
  `Table.compact()`, and each system's full scan before and after.

Conch's maintenance API (`conch.Policy`, `connect(..., maintenance=...)`, `Table.compact`) is
engineer c1's; without it the Conch-maintained rows print as n/a and the rest still runs.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import conch
from bench import systems as S

PER_COMMIT = 200
COLUMNS = 4


def history(commits: int, seed: int = 7) -> Iterator[pa.Table]:
    """`commits` upserts of PER_COMMIT random keys out of commits * PER_COMMIT / 2 (overlapping
    runs: every key is written about twice), 4 f64 columns."""
    rng = np.random.default_rng(seed)
    universe = max(commits * PER_COMMIT // 2, PER_COMMIT)
    for _ in range(commits):
        ks = np.sort(rng.choice(universe, size=PER_COMMIT, replace=False)).astype(np.uint64)
        yield pa.table({"id": pa.array(ks), **{f"c{i}": rng.random(PER_COMMIT) for i in range(COLUMNS)}})


def final_rows(commits: int) -> pa.Table:
    """The fresh records after `history(commits)`: what one commit would write."""
    last: dict[int, tuple[float, ...]] = {}
    for t in history(commits):
        cols = [t.column(f"c{i}").to_numpy() for i in range(COLUMNS)]
        for j, k in enumerate(t.column("id").to_numpy()):
            last[int(k)] = tuple(float(c[j]) for c in cols)
    ids = np.array(sorted(last), dtype=np.uint64)
    vals = np.array([last[int(k)] for k in ids])
    return pa.table({"id": pa.array(ids), **{f"c{i}": vals[:, i] for i in range(COLUMNS)}})


def policy(on: bool) -> Any:
    """`connect(maintenance=...)` for the default policy (on) or none (off); None if this Conch
    has no maintenance yet."""
    cls = getattr(conch, "Policy", None)
    if cls is None:
        return None
    return cls() if on else cls(auto=False)


def connect(root: Path, maintenance: Any) -> conch.Catalog:
    if maintenance is None:
        return conch.connect(root)
    return conch.connect(root, maintenance=maintenance)  # type: ignore[call-arg]


def ingest(root: Path, commits: int, maintenance: Any) -> tuple[conch.Table, float]:
    t = connect(S.fresh(root), maintenance).create_table("t", [("id", pa.uint64())])
    t0 = time.perf_counter()
    for batch in history(commits):
        t.write(batch)
    return t, time.perf_counter() - t0


def bytes_by_kind(t: conch.Table) -> dict[str, int]:
    """Bytes of the files each kind of commit added (from the WAL's records; a file a record
    names again, as a move to L1 does, is counted once, by the commit that wrote it)."""
    from conch.log.wal import AddFragment, AddKeySpace

    out: dict[str, int] = {}
    seen: set[str] = set()
    for _, _, entry in t.log.entries():
        n = 0
        for op in entry.ops:
            if isinstance(op, AddKeySpace | AddFragment):
                rec = op.key_space if isinstance(op, AddKeySpace) else op.fragment
                n += rec.bytes if rec.path not in seen else 0
                seen.add(rec.path)
        out[entry.kind] = out.get(entry.kind, 0) + n
    return out


def reads(t: conch.Table, probe: pa.Table, reps: int, once: conch.Table) -> dict[str, tuple[float, float]]:
    """Full scan, 1 % filter (c0 < 0.01) and a 50-key take of `t`, each alternated rep by rep
    with the same query of `once` (the rows written once), so a load burst on the shared machine
    hits both sides of the ratio: case → (median seconds of `t`, of `once`)."""
    rng = np.random.default_rng(50)
    keys = [int(k) for k in rng.choice(probe.column("id").to_numpy(), size=50, replace=False)]
    queries: dict[str, Callable[[conch.Table], pa.Table]] = {
        "full scan": lambda x: x.scan().to_arrow(),
        "1% filter": lambda x: x.scan(where=x["c0"] < 0.01).to_arrow(),
        "50-key take": lambda x: x.scan(keys=keys).to_arrow(),
    }
    out = {}
    for case, (mine, base, got, _) in S.alternated_reads(t, once, queries, reps).items():
        if case == "full scan":
            assert got.num_rows == probe.num_rows, (got.num_rows, probe.num_rows)
        if case == "50-key take":
            assert got.num_rows == 50
        out[case] = (mine, base)
    return out


def compact(t: conch.Table) -> float | None:
    fn: Callable[..., Any] | None = getattr(t, "compact", None)
    if fn is None:
        return None
    t0 = time.perf_counter()
    fn(force=True)
    return time.perf_counter() - t0


# ----- sections -----------------------------------------------------------------------------------
def workload7(work: Path, commits: int, reps: int, out: list[dict[str, Any]]) -> None:
    probe = final_rows(commits)
    once = connect(S.fresh(work / "once"), policy(False)).create_table("t", [("id", pa.uint64())])
    once.write(probe)
    off, ingest_off = ingest(work / "off", commits, policy(False))
    rows = {"rows written once": reads(once, probe, reps, once), "maintenance off": reads(off, probe, reps, once)}
    on_policy = policy(True)
    extra: dict[str, Any] = {"ingest_s_off": round(ingest_off, 2)}
    if on_policy is not None:
        on, ingest_on = ingest(work / "on", commits, unsettled(on_policy))
        rows["default policy, right after the last commit"] = reads(on, probe, reps, once)
        extra |= settled(on)
        rows["default policy, settled"] = reads(on, probe, reps, once)
        extra |= {
            "ingest_s_on": round(ingest_on, 2),
            "ingest_cost": round(ingest_on / ingest_off, 2),
            "write_amplification": write_amplification(on),
        }
    _report(f"w7 {commits} commits", rows, out)
    out.append({"section": f"w7 {commits} commits", "case": "ingest", **extra})
    print(f"  w7 {commits:>5} ingest {extra}")


def unsettled(p: Any) -> Any:
    """The default policy with its background settle postponed (not off), so that the reads
    "right after the last commit" are not raced by it; the inline trigger is unchanged, and a
    steady writer postpones the settle at every commit anyway."""
    return dataclasses.replace(p, settle_after=3600.0) if hasattr(p, "settle_after") else p


def settled(t: conch.Table) -> dict[str, Any]:
    """Settle the table now (`Table.wait_for_maintenance`) and say how long it took."""
    wait: Callable[[], Any] | None = getattr(t, "wait_for_maintenance", None)
    if wait is None:
        return {}
    t0 = time.perf_counter()
    wait()
    return {"settle_s": round(time.perf_counter() - t0, 2)}


def write_amplification(t: conch.Table) -> float:
    kinds = bytes_by_kind(t)
    ingested = sum(v for k, v in kinds.items() if k != "compact")
    return round(kinds.get("compact", 0) / max(ingested, 1), 2)


def _report(section: str, rows: dict[str, dict[str, tuple[float, float]]], out: list[dict[str, Any]]) -> None:
    for variant, by in rows.items():
        for case, (secs, base) in by.items():
            r = {"section": section, "case": case, "variant": variant, "seconds": secs, "once_seconds": base}
            r["ratio_to_once"] = round(secs / base, 2)
            out.append(r)
            print(f"  {section:<26} {case:<12} {variant:<44} {secs * 1000:9.1f} ms  {r['ratio_to_once']:6.2f}×")


def _writer(root: str, batches: list[pa.Table], maintenance: Any) -> None:
    t = connect(Path(root), maintenance).table("t")
    for batch in batches:
        t.write(batch)


def concurrent_writers(work: Path, commits: int, reps: int, out: list[dict[str, Any]], writers: int = 2) -> None:
    """Issue 10's "with concurrent writers": the same `commits` upserts from `writers` processes
    at once (commit i from writer i % writers), each with the default policy on (so their inline
    compactions race each other and the other's writes); then the reads right after the last
    commit and once settled (`wait_for_maintenance` in a reader, which settles runs any process
    wrote), as ratios to the same final rows written once. Which writer's value of a key is last
    depends on the race, so "once" is the maintained table's own rows written in one commit."""
    on_policy = policy(True)
    if on_policy is None or not hasattr(conch.Table, "wait_for_maintenance"):
        return
    root = S.fresh(work / "on")
    connect(root, policy(False)).create_table("t", [("id", pa.uint64())])
    batches = list(history(commits))
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(root), batches[i::writers], on_policy)) for i in range(writers)]
    cpu0, t0 = os.times(), time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    wall, cpu1 = time.perf_counter() - t0, os.times()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    t = connect(root, on_policy).table("t")
    probe = t.scan().to_arrow().sort_by("id")
    assert probe.num_rows == final_rows(commits).num_rows  # no write lost (values depend on the race)
    once = connect(S.fresh(work / "once"), policy(False)).create_table("t", [("id", pa.uint64())])
    once.write(probe)
    rows = {
        "rows written once": reads(once, probe, reps, once),
        "default policy, right after the last commit": reads(t, probe, reps, once),
    }
    extra: dict[str, Any] = {"writers": writers, "ingest_s": round(wall, 2)}
    extra["ingest_cpu_s"] = round(
        (cpu1.children_user + cpu1.children_system) - (cpu0.children_user + cpu0.children_system), 2
    )
    extra |= settled(t)
    assert t.scan().to_arrow().sort_by("id").equals(probe)  # the settle changed no value
    rows["default policy, settled"] = reads(t, probe, reps, once)
    extra["write_amplification"] = write_amplification(t)
    section = f"{writers} writers: w7 {commits} commits"
    _report(section, rows, out)
    out.append({"section": section, "case": "ingest", **extra})
    print(f"  {section} ingest {extra}")


def partial_upsert(work: Path, n: int, reps: int, out: list[dict[str, Any]]) -> None:
    rng = np.random.default_rng(3)
    data = pa.table({"id": pa.array(np.arange(n, dtype=np.uint64)), **{f"c{i}": rng.random(n) for i in range(4)}})
    upd_ids = np.sort(rng.choice(n, size=n // 10, replace=False)).astype(np.uint64)
    upd = pa.table({"id": pa.array(upd_ids), "c1": rng.random(len(upd_ids))})
    t = connect(S.fresh(work / "upsert"), policy(False)).create_table("t", [("id", pa.uint64())])
    t.write(data)
    t.write(upd)
    c1 = data.column("c1").to_numpy().copy()
    c1[upd_ids.astype(np.int64)] = upd.column("c1").to_numpy()
    clean_data = data.set_column(2, "c1", pa.array(c1))
    clean = connect(S.fresh(work / "clean"), policy(False)).create_table("t", [("id", pa.uint64())])
    clean.write(clean_data)
    # each read alternated rep by rep with the clean read (a load burst hits both sides); a
    # ~12 ms scan needs more than the default 3-5 reps to show a 5 % difference
    reps = max(reps, 15)
    secs_before, secs_clean, got, want = S.interleaved(
        lambda: t.scan().to_arrow(), lambda: clean.scan().to_arrow(), reps
    )
    assert got.equals(want)
    row: dict[str, Any] = {"section": "partial-column upsert", "rows": n, "clean_s": secs_clean}
    row["before_compaction"] = round(secs_before / secs_clean, 2)
    compact_s = compact(t)
    if compact_s is not None:
        secs_after, secs_clean, got, want = S.interleaved(
            lambda: t.scan().to_arrow(), lambda: clean.scan().to_arrow(), reps
        )
        assert got.equals(want)
        row |= {
            "after_compaction": round(secs_after / secs_clean, 2),
            "clean_s_after": secs_clean,
            "compact_s": round(compact_s, 3),
        }
    out.append(row)
    print(f"  upsert 10% of {n:,} keys, read / clean read: {row}")


def compaction_scaling(work: Path, sizes: list[int], out: list[dict[str, Any]]) -> None:
    """Minor compaction (a few small commits over a big run) and major (everything rewritten)
    against the table's size."""
    rng = np.random.default_rng(11)
    for n in sizes:
        data = pa.table({"id": pa.array(np.arange(n, dtype=np.uint64)), **{f"c{i}": rng.random(n) for i in range(4)}})
        t = connect(S.fresh(work / f"scale{n}"), policy(False)).create_table("t", [("id", pa.uint64())])
        t.write(data)
        for _ in range(4):
            ks = np.sort(rng.choice(n, size=1000, replace=False)).astype(np.uint64)
            t.write(pa.table({"id": pa.array(ks), "c0": rng.random(1000)}))
        row: dict[str, Any] = {"section": "compaction vs size", "rows": n, "bytes": S.dir_size(work / f"scale{n}")}
        plan = getattr(t, "maintenance_plan", None)
        if plan is not None:
            row["plan"] = str(plan())
        secs = compact(t)
        if secs is not None:
            row |= {"compact_s": round(secs, 3), "rows_per_s": round(n / secs)}
            row["mb_per_s"] = round(row["bytes"] / secs / 1e6, 1)
        out.append(row)
        print(f"  compaction of {n:,} rows: {row}")


def competitors(work: Path, commits: int, reps: int, out: list[dict[str, Any]]) -> None:
    """The same upsert history in Lance (merge_insert) and Delta (merge), compacted by each."""
    import lance
    from deltalake import DeltaTable, write_deltalake

    batches = list(history(commits))
    lpath, dpath = S.fresh(work / "lance"), S.fresh(work / "delta")
    t0 = time.perf_counter()
    ds = lance.write_dataset(batches[0], str(lpath))
    for b in batches[1:]:
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(b)
    lance_ingest = time.perf_counter() - t0
    t0 = time.perf_counter()
    write_deltalake(str(dpath), batches[0])
    for b in batches[1:]:
        (
            DeltaTable(str(dpath))
            .merge(b, predicate="t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
    delta_ingest = time.perf_counter() - t0
    conch_t, conch_ingest = ingest(work / "conch", commits, policy(False))
    scans: dict[str, Callable[[], pa.Table]] = {
        "lance": lambda: lance.dataset(str(lpath)).to_table(),
        "delta": lambda: DeltaTable(str(dpath)).to_pyarrow_table(),
        "conch": lambda: conch_t.scan().to_arrow(),
    }
    compactors: dict[str, Callable[[], Any]] = {
        "lance": lambda: lance.dataset(str(lpath)).optimize.compact_files(),
        "delta": lambda: DeltaTable(str(dpath)).optimize.compact(),
        "conch": lambda: conch_t.compact(force=True) if hasattr(conch_t, "compact") else None,
    }
    ingests = {"lance": lance_ingest, "delta": delta_ingest, "conch": conch_ingest}
    n_rows = final_rows(commits).num_rows
    for system in ("conch", "lance", "delta"):
        before, got = S.timed(scans[system], reps)
        assert got.num_rows == n_rows, (system, got.num_rows, n_rows)
        t0 = time.perf_counter()
        did = compactors[system]()
        secs = time.perf_counter() - t0
        after, got = S.timed(scans[system], reps)
        assert got.num_rows == n_rows, (system, got.num_rows, n_rows)
        row = {
            "section": f"same {commits}-commit history",
            "system": system,
            "ingest_s": round(ingests[system], 2),
            "scan_before_s": before,
            "compact_s": None if system == "conch" and did is None else round(secs, 3),
            "scan_after_s": after,
        }
        out.append(row)
        print(f"  {commits} commits, {system:<6} {row}")


def run(work: Path, scale: float, reps: int, out_dir: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    load = os.getloadavg()[0]
    print(
        f"compaction bench: scale={scale} reps={reps}; load average {load:.1f}; Conch maintenance: "
        f"{'yes' if policy(True) is not None else 'not built yet'}"
    )
    for commits in (max(2, int(500 * scale)), max(2, int(3000 * scale))):
        workload7(work / f"w7_{commits}", commits, reps, rows)
    concurrent_writers(work / "w7_writers", max(2, int(3000 * scale)), reps, rows)
    partial_upsert(work / "upsert", max(1000, int(1_000_000 * scale)), reps, rows)
    compaction_scaling(work / "scaling", [max(2000, int(n * scale)) for n in (250_000, 1_000_000, 4_000_000)], rows)
    competitors(work / "competitors", max(2, int(500 * scale)), reps, rows)
    doc = {
        "scale": scale,
        "reps": reps,
        "load_average_start": round(load, 1),
        "load_average_end": round(os.getloadavg()[0], 1),
        "cpus": S.cpu_count(),
        "total_seconds": round(time.perf_counter() - t0, 1),
        "results": rows,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "compaction.json").write_text(json.dumps(doc, indent=1))
    print(f"wrote {out_dir / 'compaction.json'} in {doc['total_seconds']} s")
    return doc
