"""`Policy`: the knobs of LSM maintenance (`conch.maintain.compaction`), and whether it runs by itself.

A leaf module so that the warehouse handles (`conch.log.warehouse`) can carry the policy without
depending on the compaction package, which sits above the table log. What the knobs mean and
how the defaults were chosen: `conch.maintain.compaction.plan`.
"""

from __future__ import annotations

from dataclasses import dataclass

from conch.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True)
class Policy:
    """Knobs of automatic and explicit compaction (defaults chosen by measurement, see
    `conch.maintain.compaction.plan`). `conch.connect(uri, maintenance=conch.Policy(auto=False))` turns automatic compaction
    after commits off.

    >>> conch.Policy(l0_trigger=8, max_l1_rows=1 << 20)  # doctest: +SKIP
    """

    auto: bool = True  # compact after commits, in the writing process
    l0_trigger: int = 4  # L0 runs in a component that trigger a compaction
    size_ratio: float = 2.0  # merge: an older run joins if <= ratio × the newer window's bytes
    l1_ratio: float = 0.1  # major once L0 >= ratio × L1, in bytes and in rows (issue 30: measured, plan.py)
    small_bytes: int = 4 << 20  # a component this small is compacted whole (major), at its read-cost trigger
    # ... and holding at most this many rows: a rewrite costs decoding and encoding every row, and
    # compressible columns make a table of 500k rows 0.4 MB (folded every 2nd commit: 8x the
    # ingest CPU of no maintenance, `bench/lsm_shapes.py`)
    small_rows: int = 1 << 16
    l0_read_bytes: int = 512 << 10  # fixed read cost of one L0 run, in bytes of scanning (measured, plan.py)
    read_overhead: float = (
        1.0  # small components: compact once L0 runs cost this share of the scan (the settle folds the rest)
    )
    max_l1_rows: int = 1 << 20  # a range's run is cut in two above this many rows
    auto_budget_bytes: int = 64 << 20  # input bytes one automatic trigger may rewrite
    # the commit-time trigger rewrites at most this multiple of the bytes the commit wrote (at
    # least small_bytes, at most auto_budget_bytes; `plan.commit_budget`); larger merges settle
    commit_rewrite_ratio: float = 4.0
    # runs overlapping nothing go to L1 as they are whatever their size (`plan.move_task`); below
    # this many bytes and `move_rows` rows they wait to move `l0_trigger` at a time, stay in a small
    # component (folded whole), and count as small L1 runs that folds concatenate
    move_bytes: int = 4 << 20
    move_rows: int = 1 << 18
    # adjacent small L1 runs (what moving small disjoint appends leaves) concatenated by the commit-time
    # trigger once this many (runs too large for this many in one `max_l1_rows` piece: the oldest that
    # fill one): a stop trigger, bounding a scan's runs; the settle and compact() fold 2
    fold_trigger: int = 16
    # a large component's L0 sorted runs are merged only at this many (below it, only the major at
    # `l1_ratio`): a scan pays for L0 by its rows, not its runs (the overlay places every small run's
    # keys once, grown per commit; measured, docs/compaction.md "sixth pass": 8, 16 and 32 read the
    # same, 32 writes 1.8x auto-off over 300 commits of random upserts where 8 wrote 2.6x)
    l0_stop: int = 32
    # the commit-time trigger runs a large component's major past its commit's budget once it
    # rewrites at most this many bytes per L0 byte it applies ((L1 + L0) / L0: the cost model's write
    # amplification, amortized over the commits that wrote L0; measured, plan.py "The major of a
    # large component"); earlier, L0 stays tiered under `l0_stop` and the settle or compact() runs it
    major_amplification: float = 3.0
    max_replans: int = 3  # a compaction that lost to a concurrent one plans again this often
    settle_after: float | None = 1.0  # seconds without a commit, then fold L0 in the background (None: never)
    # True: the commit-time trigger runs on the process's maintenance thread beside the writer
    # (Paimon's and RocksDB's background compaction; `conch.maintain.compaction.background`), the
    # writer held only at `stop_runs`. Off by default: on 2 cores the compaction of random upserts
    # costs more CPU than the writes, so the writer waits at the stop trigger anyway and gains
    # ~10 % of wall (`bench.lsm_shapes`, docs/compaction.md); a writer with cores to spare gains
    # the whole trigger. Always off in a process that reopened the table (a Spark task)
    background: bool = False
    # a writer whose table holds this many L0 runs waits for the background trigger to compact them
    # (the stop trigger: the compactor falling behind throttles writers instead of degrading reads;
    # above `l0_stop`, where the compactor starts merging, as Paimon's stop trigger is above its
    # compaction trigger)
    stop_runs: int = 36

    def __post_init__(self) -> None:
        if (
            self.l0_trigger < 2
            or self.l0_read_bytes < 0
            or self.read_overhead < 0
            or self.size_ratio <= 0
            or self.l1_ratio < 0
            or self.max_l1_rows < 1
            or self.commit_rewrite_ratio < 0
            or self.move_bytes < 0
            or self.move_rows < 0
            or self.small_rows < 0
            or self.fold_trigger < 2
            or self.l0_stop < 2
            or self.stop_runs < 2
            or not self.major_amplification >= 1
            or (self.settle_after is not None and not self.settle_after >= 0)
        ):
            raise InvalidArgumentError(
                f"invalid compaction policy {self}: needs l0_trigger >= 2, size_ratio > 0, l1_ratio >= 0, "
                "max_l1_rows >= 1, l0_read_bytes >= 0, read_overhead >= 0, commit_rewrite_ratio >= 0, move_bytes >= 0, move_rows >= 0, fold_trigger >= 2, l0_stop >= 2, stop_runs >= 2, major_amplification >= 1, "
                "settle_after None or >= 0"
            )
