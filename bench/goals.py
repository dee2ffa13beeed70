"""Issues 10 and 11's goals in one table: `python -m bench.goals [results dir]` (and the last
step of every `python -m bench` run).

It reads the result files a `python -m bench` run writes to `bench/results/` and prints, for
every goal, what was measured, the ratio the goal is stated in, and whether it is met; a goal
whose benchmark did not run (or wrote no file) says "not run". Written to
`bench/results/goals.json`. Sources:

- issue 10, `scan.json` (workload 7: 500 commits of 2,000 random keys, default policy) and
  `compaction.json` (`--only compaction`: 500 and 3,000 commits of 200 random keys; a 10 %
  partial-column upsert): reads once the writer's background settle is done, as a ratio to the
  same rows written once;

- `scan.json` (workloads 1, 4, 5, 8): write vs Parquet, spec/001's scan at 1/10/50 %, random
  take, blob streaming;
- `runs.json` (`--only runs`): full scan and 1 % filter after K appends, before compaction;
- `memory.json` (`bench/memory.py`): peak RSS of write / scan / scan after a 0.1 % upsert /
  take as rows grow, vs Lance;
- `spark.json` (`bench/spark_bench.py`): the value-filtered scan vs native Parquet;
- `writes.json` (`bench/writes.py`, issue 24): bulk load with the default policy vs maintenance
  off and its peak RSS, bulk and wide-table write vs Parquet.

Ratios come from one run each (same machine, same moment); absolute times do not compare
across runs on a shared machine.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
FLAT = 1.25  # "flat as rows grow": peak RSS at the most rows within this factor of the fewest


@dataclass
class Goal:
    goal: str
    target: str  # the ratio the goal is stated in and its bound
    measured: str = "not run"
    ratio: float | None = None
    status: str = "not run"  # met | missed | not run


def _load(out: Path, name: str) -> dict[str, Any] | None:
    p = out / name
    try:
        doc: dict[str, Any] = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return doc


def _ms(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 10 else f"{s:.1f} s"


def _judge(g: Goal, ratio: float, ok: Callable[[float], bool], measured: str) -> Goal:
    g.ratio, g.measured = round(ratio, 3), measured
    g.status = "met" if ok(ratio) else "missed"
    return g


def _vs(g: Goal, mine: float | None, theirs: float | None, name: str, bound: float = 1.0) -> Goal:
    """A time goal: Conch's seconds / the other system's ≤ `bound`."""
    if mine is None or theirs is None or theirs <= 0:
        return g
    return _judge(g, mine / theirs, lambda r: r <= bound, f"conch {_ms(mine)} vs {name} {_ms(theirs)}")


def scan_goals(doc: dict[str, Any] | None) -> list[Goal]:
    """Workloads 1, 4, 5 and 8 of `python -m bench`."""
    by: dict[tuple[str, str], float] = {}
    cases: dict[str, list[str]] = {}
    for r in (doc or {}).get("results", []):
        if r.get("seconds") is not None:
            by[(r["case"], r["system"])] = r["seconds"]
            cases.setdefault(r["workload"], [])
            if r["case"] not in cases[r["workload"]]:
                cases[r["workload"]].append(r["case"])

    def case(wl: str, pattern: str) -> str | None:
        return next((c for c in cases.get(wl, []) if re.search(pattern, c)), None)

    out = []
    c = case("5", "take")
    out.append(
        _vs(
            Goal("random take of 20-50 keys, 1M x 1 KB (workload 5)", "conch / lance positional take <= 1"),
            by.get((c, "conch")) if c else None,
            by.get((c, "lance")) if c else None,
            "lance",
        )
    )
    for pct, x in ((1, "0.01"), (10, "0.1"), (50, "0.5")):
        c = case("4", rf"silence<{re.escape(x)}$")
        out.append(
            _vs(
                Goal(
                    f"spec/001 scan(audio.bytes, where=silence_ratio < x) at {pct} % (workload 4)", "conch / lance <= 1"
                ),
                by.get((c, "conch")) if c else None,
                by.get((c, "lance")) if c else None,
                "lance",
            )
        )
    c = case("8", r"one-row commit \(median\)")
    out.append(
        _vs(
            Goal("one-row commit latency vs Delta (commit)", "conch / delta <= 1"),
            by.get((c, "conch")) if c else None,
            by.get((c, "delta")) if c else None,
            "delta",
        )
    )
    one, eight = (
        by.get(("one-row commits from 1 thread(s)", "conch")),
        by.get(("one-row commits from 8 thread(s)", "conch")),
    )
    g = Goal("one-row commits/s, 8 writer threads vs 1 (commit; group commit)", "8 threads / 1 thread >= 1")
    if one and eight:
        _judge(g, one / eight, lambda r: r >= 1.0, f"{1 / eight:.0f} vs {1 / one:.0f} commits/s")
    out.append(g)
    c = case("8", "stream")
    g = _vs(
        Goal("blob streaming, 20 KB blobs, 5 GB at scale 1 (workload 8)", "conch / lance <= 1"),
        by.get((c, "conch")) if c else None,
        by.get((c, "lance")) if c else None,
        "lance",
    )
    if g.ratio is not None:
        g.measured = f"{c}: {g.measured}"
    out.append(g)
    g = Goal("write (workload 1)", "parquet time / conch time (speed vs Parquet) >= 1")
    c = case("1", "write")
    mine, pq = (by.get((c, "conch")), by.get((c, "parquet"))) if c else (None, None)
    if mine and pq:
        _judge(g, pq / mine, lambda r: r >= 1.0, f"{c}: conch {_ms(mine)} vs parquet {_ms(pq)}")
    out.append(g)
    return out


LSM_BOUND = 1.2  # issue 10: reads after many small commits, within 1.2x of the rows written once
QUERIES = ("full scan", "1 % filter", "50-key take")


def lsm_goals(scan: dict[str, Any] | None, compaction: dict[str, Any] | None) -> list[Goal]:
    """Issue 10: workload 7 and the 200-row histories of `bench/compaction.py`, settled; the read
    after a compacted partial-column upsert."""
    out = []
    rows = [r for r in (scan or {}).get("results", []) if r.get("workload") == "7"]
    for q in QUERIES:
        g = Goal(
            f"{q} after 500 commits of 2,000 random keys, settled (workload 7)", f"conch / one commit <= {LSM_BOUND}"
        )
        r = next((r for r in rows if r["case"].startswith(f"{q} after") and r["case"].endswith("settled")), None)
        if r is not None and r.get("ratio_to_one_commit") is not None:
            secs = f"{_ms(r['seconds'])}, settle {r.get('settle_s', '?')} s after the last commit"
            _judge(g, r["ratio_to_one_commit"], lambda x: x <= LSM_BOUND, secs)
        out.append(g)
    crows = (compaction or {}).get("results", [])
    sections = sorted(
        {r["section"] for r in crows if r.get("section", "").startswith("w7 ")}, key=lambda s: int(s.split()[1])
    )
    for section in sections or ["w7 500 commits", "w7 3000 commits"]:
        n = section.split()[1]
        for q in QUERIES:
            g = Goal(
                f"{q} after {int(n):,} commits of 200 random keys, settled (compaction)", f"conch / once <= {LSM_BOUND}"
            )
            r = next(
                (
                    r
                    for r in crows
                    if r.get("section") == section
                    and _same_query(r.get("case", ""), q)
                    and "settled" in r.get("variant", "")
                ),
                None,
            )
            if r is not None and r.get("ratio_to_once") is not None:
                _judge(g, r["ratio_to_once"], lambda x: x <= LSM_BOUND, f"{_ms(r['seconds'])} ({r['variant']})")
            out.append(g)
    g = Goal("read after a 10 % partial-column upsert, compacted (compaction)", "conch / clean read <= 1.05")
    r = next((r for r in crows if r.get("section") == "partial-column upsert"), None)
    if r is not None and r.get("after_compaction") is not None:
        _judge(g, r["after_compaction"], lambda x: x <= 1.05, f"{r['rows']:,} keys, clean read {_ms(r['clean_s'])}")
    out.append(g)
    return out


def _same_query(case: str, q: str) -> bool:
    """`bench/compaction.py` writes "1% filter" where this table says "1 % filter"."""
    return case.replace(" ", "").startswith(q.replace(" ", ""))


def runs_goals(doc: dict[str, Any] | None) -> list[Goal]:
    """`bench/runs.py`: K time-ordered appends, before compaction. The two append counts of the
    run (100 and 1,000 at scale 1) are the goal's "100 and 1,000 commits"."""
    rows = (doc or {}).get("results", [])
    labels = sorted({r["case"] for r in rows if r["case"].endswith(" appends")}, key=lambda s: int(s.split()[0]))
    names = ["100", "1,000"]
    if len(labels) > 2:
        labels = [labels[0], labels[-1]]
    out = []
    for i, want in enumerate(names):
        label = labels[i] if i < len(labels) else None
        for query, what in (("full", "full scan"), ("filter", "1 % filter")):
            g = Goal(f"{what} after {want} commits before compaction (runs)", "conch / lance <= 1")
            if label is not None:
                got = {r["system"]: r["seconds"] for r in rows if r["case"] == label and r["query"] == query}
                _vs(g, got.get("conch"), got.get("lance"), "lance")
                if label.split()[0] != want.replace(",", ""):
                    g.measured += f" ({label}: scaled)"
            out.append(g)
    return out


MEMORY_STEPS = (
    ("write", "write"),
    ("scan", "scan"),
    ("scan after upsert", "scan after a 0.1 % upsert"),
    ("take", "take"),
)


def memory_goals(doc: dict[str, Any] | None) -> list[Goal]:
    """`bench/memory.py`: peak RSS per step at the most rows vs Lance, and its growth from the
    fewest rows to the most (flat: <= FLAT)."""
    rows = (doc or {}).get("results", [])
    sizes = sorted({r["rows_total"] for r in rows})
    rss = {(r["rows_total"], r["system"], r["step"]): r["peak_rss"] for r in rows if r.get("peak_rss")}
    out = []
    for step, what in MEMORY_STEPS:
        g = Goal(f"peak RSS, {what}, at the most keys (memory)", "conch / lance <= 1")
        flat = Goal(f"peak RSS, {what}, flat as keys grow (memory)", f"conch at most keys / at fewest <= {FLAT}")
        if sizes:
            hi, lo = sizes[-1], sizes[0]
            mine, theirs = rss.get((hi, "conch", step)), rss.get((hi, "lance", step))
            if mine and theirs:
                _judge(
                    g,
                    mine / theirs,
                    lambda r: r <= 1.0,
                    f"{hi / 1e6:g}M keys: conch {mine >> 20} MB vs lance {theirs >> 20} MB",
                )
            first = rss.get((lo, "conch", step))
            if mine and first and hi > lo:
                _judge(
                    flat,
                    mine / first,
                    lambda r: r <= FLAT,
                    f"conch {first >> 20} MB at {lo / 1e6:g}M -> {mine >> 20} MB at {hi / 1e6:g}M",
                )
        out += [g, flat]
    return out


def spark_goals(doc: dict[str, Any] | None) -> list[Goal]:
    g = Goal("Spark value-filtered scan vs native Parquet (spark_bench)", "conch / parquet <= 1.2")
    d = doc or {}
    mine, pq = d.get("filtered_conch"), d.get("filtered_parquet")
    if mine is None:  # the rows form: {"case", "conch_s", "parquet_s"}
        row = next((r for r in d.get("rows", []) if "filter" in r.get("case", "")), None)
        mine, pq = (row["conch_s"], row["parquet_s"]) if row else (None, None)
    return [_vs(g, mine, pq, "parquet", bound=1.2)]


def write_goals(doc: dict[str, Any] | None) -> list[Goal]:
    """Issue 24 (`writes.json`, `bench/writes.py`): the bulk load with the default policy vs
    automatic maintenance off (time) and its peak RSS; write throughput vs Parquet."""
    rows = (doc or {}).get("rows", [])

    def row(section: str, system: str, case: str = "") -> dict[str, Any] | None:
        return next(
            (r for r in rows if r["section"] == section and r["system"] == system and case in r.get("case", "")), None
        )

    bulk, off = row("bulk load", "conch default"), row("bulk load", "conch auto-off")
    pq = row("bulk load", "parquet")
    g_time = Goal("bulk load, default policy vs Policy(auto=False) (writes)", "default / auto-off <= 1.2")
    g_rss = Goal("bulk load, default policy, peak RSS (writes)", "<= 700 MB")
    g_pq = Goal("bulk load vs Parquet (writes)", "conch / parquet <= 1.0")
    g_wide = Goal("wide table write vs Parquet (writes)", "conch / parquet <= 1.0")
    if bulk and off:
        _judge(
            g_time,
            bulk["seconds"] / off["seconds"],
            lambda r: r <= 1.2,
            f"{_ms(bulk['seconds'])} vs {_ms(off['seconds'])} (CPU {bulk.get('cpu_s')} vs {off.get('cpu_s')} s)",
        )
    if bulk:
        _judge(g_rss, bulk["peak_rss_mb"] / 700, lambda r: r <= 1.0, f"{bulk['peak_rss_mb']} MB")
    if bulk and pq:
        _vs(g_pq, bulk["seconds"], pq["seconds"], "parquet")
    wide, wide_pq = row("wide", "conch", "write"), row("wide", "parquet", "write")
    if wide and wide_pq:
        _vs(g_wide, wide["seconds"], wide_pq["seconds"], "parquet")
    return [g_time, g_rss, g_pq, g_wide]


def collect(out: Path) -> tuple[list[Goal], dict[str, str]]:
    """Every goal, judged from the result files in `out`; and which files were read (mtime)."""
    sources = {}
    for name in ("scan.json", "compaction.json", "runs.json", "memory.json", "spark.json", "writes.json"):
        p = out / name
        if p.exists():
            sources[name] = datetime.fromtimestamp(p.stat().st_mtime, UTC).strftime("%Y-%m-%d %H:%M UTC")
    goals = (
        lsm_goals(_load(out, "scan.json"), _load(out, "compaction.json"))
        + scan_goals(_load(out, "scan.json"))
        + runs_goals(_load(out, "runs.json"))
        + memory_goals(_load(out, "memory.json"))
        + spark_goals(_load(out, "spark.json"))
        + write_goals(_load(out, "writes.json"))
    )
    return goals, sources


def render(goals: list[Goal]) -> str:
    lines = ["| goal | target | measured | ratio | status |", "|---|---|---|---:|---|"]
    for g in goals:
        ratio = f"{g.ratio:.2f}" if g.ratio is not None else "–"
        lines.append(f"| {g.goal} | {g.target} | {g.measured} | {ratio} | {g.status} |")
    met = sum(g.status == "met" for g in goals)
    missed = sum(g.status == "missed" for g in goals)
    lines.append(f"\n{met} met, {missed} missed, {len(goals) - met - missed} not run (of {len(goals)})")
    return "\n".join(lines)


def report(out: Path = RESULTS) -> list[Goal]:
    """Print the goals table and write `out/goals.json`."""
    goals, sources = collect(out)
    print(
        "\nissue 10, 11 and 24 goals ("
        + (", ".join(f"{k} of {v}" for k, v in sources.items()) or "no result files")
        + ")"
    )
    print(render(goals))
    out.mkdir(parents=True, exist_ok=True)
    doc = {"sources": sources, "goals": [asdict(g) for g in goals]}
    (out / "goals.json").write_text(json.dumps(doc, indent=1))
    return goals


if __name__ == "__main__":
    report(Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS)
