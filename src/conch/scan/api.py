"""`Scan`: a lazy scan of fresh records; results as Arrow, pandas or Polars, streamed in key order."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from conch.errors import ConchError, CorruptFileError
from conch.files.format import FragmentFormat
from conch.files.keycache import KeyCache
from conch.files.manifest import TableState
from conch.model.budget import ScanOptions
from conch.model.keys import EncodedRange
from conch.scan.assemble import output_schema
from conch.scan.blobfiles import blob_files
from conch.scan.candidates import NOTHING
from conch.scan.context import ScanContext
from conch.scan.execute import execute
from conch.scan.explain import render
from conch.scan.metrics import ScanMetrics
from conch.scan.plan import ScanPlan, narrow, plan_scan
from conch.scan.request import ScanRequest
from conch.scan.result import ScanResult
from conch.scan.splits import plan_splits


class ScanSource(Protocol):
    """What a scan reads from: one table version and the warehouse's handles (its URI, fragment
    format, key-space cache and default scan options). `conch.api.snapshot.Snapshot` is one."""

    @property
    def name(self) -> str: ...

    @property
    def uri(self) -> str: ...

    @property
    def format(self) -> FragmentFormat: ...

    @property
    def key_cache(self) -> KeyCache: ...

    @property
    def scan_options(self) -> ScanOptions: ...

    @property
    def seq(self) -> int: ...

    @property
    def time(self) -> int: ...

    @property
    def asof(self) -> int | None: ...

    def view(self, since: int | None = None) -> TableState: ...


class Scan(ScanResult):
    """A scan of fresh records of one table version (`source`, a `conch.api.snapshot.Snapshot`).
    Build with `Table.scan` or `Snapshot.scan`; nothing is read until it is consumed
    (`to_arrow()`, `to_record_batches()`, iteration, `pa.table(scan)`, `pl.DataFrame(scan)`,
    DuckDB, ...: see `ScanResult`)."""

    def __init__(self, source: ScanSource, request: ScanRequest) -> None:
        """The scan `request` (`ScanRequest.resolve`d by `Snapshot.scan`, the one door) of `source`."""
        self.source = source
        self.request = request
        # a since inside a compaction's window reads its retained originals (`conch.log.sinceview`)
        self._state = source.view(request.since)
        self._plan = plan_scan(self._state, request, asof=source.asof)
        self._options = source.scan_options
        self._metrics: ScanMetrics | None = None

    @property
    def plan(self) -> ScanPlan:
        """The plan: level, columns, filter, and the key spaces and fragments it will consider."""
        return self._plan

    @property
    def options(self) -> ScanOptions:
        """The execution options (`with_options` to change them)."""
        return self._options

    def with_options(self, options: ScanOptions | None = None, **changes: Any) -> Scan:
        """This scan with other execution options, e.g. `scan.with_options(fast_paths=False)`
        (the documented debug switch that forces the general path; see `ScanOptions`)."""
        out = copy.copy(self)
        out._options = dataclasses.replace(options or self._options, **changes)
        out._metrics = None
        return out

    def within(self, r: EncodedRange) -> Scan:
        """This scan restricted to keys whose order-preserving encoding (`conch.model.keys.encode_key`)
        is in `r`; bounds are full-key encodings. `Split.open` uses it."""
        out = copy.copy(self)
        out.request = self.request.narrowed(r)
        out._plan = narrow(self._plan, r)
        out._metrics = None
        return out

    @property
    def schema(self) -> pa.Schema:
        """The output schema: key columns, then projected columns nested by group."""
        return output_schema(self._plan.schema, self._plan.level, self._plan.columns, self._options.with_keys)

    def _run(self, plan: ScanPlan, options: ScanOptions | None = None) -> Iterator[pa.RecordBatch]:
        """The batches of `plan`, with a file that vanished reported as a typed error."""
        src = self.source
        ctx = ScanContext(plan, src.format, src.key_cache, options or self._options)
        self._metrics = ctx.metrics
        try:
            yield from execute(ctx)
        except FileNotFoundError as e:
            raise CorruptFileError(
                f"table {self.source.name!r}: file {e.filename} is missing although a commit references it; "
                "see `conch history` and restore the file, or drop the table"
            ) from e

    def to_record_batches(self) -> pa.RecordBatchReader:
        """A streaming reader: bounded memory, batches in key order."""
        return pa.RecordBatchReader.from_batches(self.schema, self._run(self._plan))

    def count(self) -> int:
        """The number of records the scan returns, counted on keys: the filter's columns are
        read, the projected value columns are not (`metrics()` shows the bytes)."""
        keys_only = dataclasses.replace(self._plan, columns=[])
        with_keys = dataclasses.replace(self._options, with_keys=True)
        return sum(b.num_rows for b in self._run(keys_only, with_keys))

    def metrics(self) -> ScanMetrics:
        """What the last run of this scan read (fragments, rows and bytes per group)."""
        if self._metrics is None:
            raise ConchError("the scan has not run yet: call to_arrow() or iterate it first")
        return self._metrics

    def blob_files(self, *columns: str) -> Iterator[dict[str, Any]]:
        """The rows as dicts, the values of binary `columns` (default: every projected binary
        column) as read-only seekable files that read only the ranges asked for, not as bytes
        (`conch.scan.blobfiles`): for decoders that seek (video frames, audio windows)."""
        return blob_files(self, columns)

    def explain(self) -> str:
        """The plan: what is read at each step and what was pruned before reading."""
        return render(self.source.name, self._plan, self._metrics)

    def splits(self, n: int | None = None) -> list[Split]:
        """This scan cut into at most `n` disjoint key-range splits of similar size (default: sized
        by rows and bytes), each picklable and readable in another process (`conch.scan.splits`)."""
        ranges = plan_splits(self.plan, self.source.key_cache, n)
        return [Split(self.source, self.request.narrowed(r), self.options) for r in ranges]

    def __repr__(self) -> str:
        return self.explain()


@dataclass(frozen=True)
class Split:
    """One key range of a scan, as plain picklable data: the scan's snapshot and its request
    narrowed to the range (`ScanRequest.within`), and the execution options; `open()` scans it
    in any process (`conch.scan.splits`)."""

    snapshot: ScanSource  # the scan's table version (`conch.api.snapshot.Snapshot`), reopened by pickling
    request: ScanRequest
    options: ScanOptions = field(default_factory=ScanOptions)

    @property
    def uri(self) -> str:
        """The warehouse's URI."""
        return self.snapshot.uri

    @property
    def table(self) -> str:
        return self.snapshot.name

    @property
    def seq(self) -> int:
        """The pinned commit (0: the table had none; the split reads nothing)."""
        return self.snapshot.seq

    @property
    def time(self) -> int:
        """The pinned commit's time (µs; 0 with seq 0)."""
        return self.snapshot.time

    @property
    def lo(self) -> bytes | None:
        """The split's first key (full-key encoding, inclusive; None: unbounded)."""
        return self.request.within.lo if self.request.within is not None else None

    @property
    def hi(self) -> bytes | None:
        """The end of the split's keys (full-key encoding, exclusive; None: unbounded)."""
        return self.request.within.hi if self.request.within is not None else None

    def open(self) -> Scan:
        """The `Scan` of this split: its snapshot's table version (reopened in this process when
        the split was unpickled), restricted to the split's key range."""
        if not self.seq:
            return Scan(self.snapshot, self.request).within(NOTHING).with_options(self.options)
        return Scan(self.snapshot, self.request).with_options(self.options)

    def restrict(self, scan: Scan) -> Scan:
        """`scan` (of this split's table version) restricted to the split's key range; raises if
        it reads another version. A split pinned before the table's first commit reads nothing."""
        if not self.seq:
            return scan.within(NOTHING).with_options(self.options)
        if scan.plan.state.seq != self.seq:
            raise ConchError(
                f"split of table {self.table!r} is pinned to commit {self.seq}, but the scan it restricts reads "
                f"commit {scan.plan.state.seq}: scan the split's snapshot (`split.open()`)"
            )
        within = self.request.within
        return (scan.within(within) if within is not None else scan).with_options(self.options)

    def to_record_batches(self) -> pa.RecordBatchReader:
        """The split's records, streamed (`open().to_record_batches()`)."""
        return self.open().to_record_batches()

    def to_arrow(self) -> pa.Table:
        """The split's records as one Arrow table."""
        return self.open().to_arrow()
