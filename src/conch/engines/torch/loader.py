"""PyTorch datasets over Conch scans (`conch.engines.torch`): sharded, shuffled, resumable, pinned.

>>> ds = conch.engines.torch.dataset(t.scan("x", "label"), batch_size=256, shuffle=True, seed=0)  # doctest: +SKIP
>>> for epoch in range(3):  # doctest: +SKIP
...     ds.set_epoch(epoch)
...     for batch in DataLoader(ds, batch_size=None, num_workers=2): ...

**Sharding.** The scan is cut into disjoint key-range splits (`Scan.splits`, `conch.scan.splits`). Every
reader (a DataLoader worker of a `torch.distributed` rank; rank and world size auto-detected
from an initialised process group or `RANK`/`WORLD_SIZE`, or given) takes every C-th split of the
epoch's split order, C = world size × workers, so each row is read exactly once per epoch across
all of them, and no worker reads the rows of another.

**Shuffling** (`shuffle=True`): the split order is a permutation seeded by `(seed, epoch)`, the
same on every reader; rows are then shuffled in blocks of `shuffle_buffer` rows (the rows read
next, across split boundaries), each block permuted by `(seed, epoch, reader, block)`. Memory
is bounded by the block; the order is deterministic for a seed, table version, world size and
worker count. Call `set_epoch(e)` before each epoch (as with `DistributedSampler`): DataLoader
workers are copies made when an epoch starts; a copy that lives on (`persistent_workers=True`,
or `num_workers=0`) counts the epochs it completes.

**Resuming.** `state_dict()` is the reader's cursor: epoch, block number, where the block began
(split position, rows into that split) and samples already yielded from it; `load_state_dict`
restarts there, re-reading at most one block. This is the protocol torchdata's
`StatefulDataLoader` uses per worker (with `num_workers > 0`, use it to save and restore).

**Pinned.** The dataset reads the scan's version (the newest commit when the scan was built, or
its `asof`) for its whole life, so commits during training never change an epoch.

**Output.** `batch_size=None` yields one sample at a time (for `DataLoader(ds, batch_size=B)`);
`batch_size=B` yields batches (use `DataLoader(ds, batch_size=None)`, faster). Samples and
batches are dicts by column path (`"audio.bytes"`): numeric columns and fixed-size lists become
tensors (zero-copy from Arrow where the buffer allows), strings and binaries lists, unless a
`decode` hook for the column turns each value into something else (an image tensor, say);
`format="arrow"` yields Arrow record batches instead. `prefetch` blocks are read ahead by a
background thread in each reader.

**Bad values.** A `decode` hook that fails raises `conch.DecodeError` naming the table, key and
column (`conch.engines.torch.decoding`). With `on_error="skip"` the row is dropped from every
column instead (batches then hold fewer rows where rows were dropped), counted in `skipped`
with its error kept in `skip_errors` (the first `SKIP_ERRORS_KEPT`), and a warning at the end
of the epoch says how many; both count what this process read (each DataLoader worker counts
and warns for itself). The cursor counts dropped rows as read: a resume skips them again.

Processes: the dataset pickles as plain data (scan spec, splits) and opens the table once per
process, so it is safe under `fork`, `spawn` and `forkserver` start methods.
"""

from __future__ import annotations

import math
import os
import queue
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.engines.source import ScanSpec, open_split
from conch.engines.torch import ring
from conch.engines.torch.decoding import Decoded, Decoding, kept_rows, run_hooks
from conch.errors import ConchError, DecodeError
from conch.model.deps import optional_import
from conch.model.keys import KeySet, encode_keys
from conch.scan import Scan, Split
from conch.scan.columns import narrowest_column

torch = optional_import("torch")
_IterableDataset: Any = torch.utils.data.IterableDataset
_Dataset: Any = torch.utils.data.Dataset

SPLIT_ROWS = 16_384  # target rows per split when `splits` is not given


def dataset(
    scan: Scan,
    *,
    batch_size: int | None = None,
    shuffle: bool = False,
    seed: int = 0,
    shuffle_buffer: int = 8192,
    splits: int | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    format: str = "torch",
    decode: Mapping[str, Callable[[Any], Any]] | None = None,
    prefetch: int = 2,
    drop_last: bool = False,
    on_error: str = "raise",
) -> ConchIterableDataset:
    """An `IterableDataset` over `scan`; see the module doc (`on_error`: under "Bad values")."""
    if format not in ("torch", "arrow"):
        raise ConchError(f"format={format!r}: use 'torch' (dicts of tensors) or 'arrow' (record batches)")
    if (batch_size is not None and batch_size < 1) or shuffle_buffer < 1 or prefetch < 0:
        raise ConchError("batch_size and shuffle_buffer must be positive, prefetch >= 0")
    if splits is not None and (isinstance(splits, bool) or not isinstance(splits, int) or splits < 1):
        raise ConchError(f"splits={splits!r}: give a positive number of splits, or None (follows the readers)")
    spec = ScanSpec.from_scan(scan)
    rows = sum(ks.rows for ks in scan.plan.key_spaces)
    keys = tuple(scan.plan.schema.key_names(spec.level))
    decoding = Decoding(dict(decode or {}), spec.table_name, keys, on_error)
    return ConchIterableDataset(
        spec,
        scan.splits(splits) if splits is not None else None,
        _Options(batch_size, shuffle, seed, shuffle_buffer, format, decoding, prefetch, drop_last),
        rank,
        world_size,
        rows,
    )


SPLITS_PER_READER = 4  # default splits per reader, rows allowing: slow splits even out
MIN_SPLIT_ROWS = 1_024  # below this a split costs more to open than it balances
SKIP_ERRORS_KEPT = 20  # errors of skipped rows kept per epoch (all are counted)


def default_split_count(rows: int, readers: int) -> int:
    """The number of splits when `splits=None`: about `SPLIT_ROWS` rows each, but with several
    readers (world size × DataLoader workers) at least `SPLITS_PER_READER` per reader while
    splits keep `MIN_SPLIT_ROWS` rows, and never fewer than the readers (rows allowing): no
    reader idles. One reader reads its splits one after the other: sized by rows only."""
    by_size = -(-rows // SPLIT_ROWS)
    busy = min(readers * SPLITS_PER_READER, max(readers, rows // MIN_SPLIT_ROWS)) if readers > 1 else 1
    return max(1, min(max(rows, 1), max(by_size, busy)))


@dataclass(frozen=True)
class _Options:
    batch_size: int | None
    shuffle: bool
    seed: int
    block_rows: int
    format: str
    decoding: Decoding
    prefetch: int
    drop_last: bool


@dataclass(frozen=True)
class _Block:
    """Rows read for one shuffle block, and where in the reader's splits the block began."""

    index: int
    pos: int  # position of the block's first split in this reader's split list
    offset: int  # rows of that split before the block
    rows: pa.Table


class ConchIterableDataset(_IterableDataset):
    """Iterable, sharded, shuffled and resumable; build with `conch.engines.torch.dataset`."""

    def __init__(
        self,
        spec: ScanSpec,
        splits: list[Split] | None,
        opts: _Options,
        rank: int | None,
        world_size: int | None,
        rows: int = 0,
    ) -> None:
        self.spec = spec
        self.fixed_splits = splits  # None: the count follows the readers (`default_split_count`)
        self.rows = rows  # the scan's rows as planned (an upper bound under a filter)
        self._by_count: dict[int, list[Split]] = {}
        self.opts = opts
        self._rank, self._world = rank, world_size
        self.epoch = 0
        self._resume: dict[str, Any] | None = None
        self._cursor: dict[str, Any] = {"epoch": 0, "block": 0, "pos": 0, "offset": 0, "done": 0}
        self.skipped = 0  # rows dropped by on_error="skip" in this process's current (or last) epoch
        self.skip_errors: list[DecodeError] = []  # why: the first SKIP_ERRORS_KEPT of them

    def __repr__(self) -> str:
        n = "splits following the readers" if self.fixed_splits is None else f"{len(self.fixed_splits)} splits"
        return f"conch.engines.torch.dataset({self.spec.table_name!r}, {n}, asof={self.spec.asof})"

    @property
    def splits(self) -> list[Split]:
        """The splits read by this process's readers: the `splits` given, else
        `default_split_count(rows, readers)` of them, planned once per process and count."""
        if self.fixed_splits is not None:
            return self.fixed_splits
        n = default_split_count(self.rows, self.reader()[1])
        if n not in self._by_count:
            self._by_count[n] = self.spec.scan().splits(n)
        return self._by_count[n]

    # ----- epochs and state -----------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Shuffle for this epoch (call before iterating, in every rank)."""
        self.epoch = epoch

    def state_dict(self) -> dict[str, Any]:
        """This reader's cursor (see the module doc): resume with `load_state_dict`."""
        return {**self._cursor, "asof": self.spec.asof, "splits": len(self.splits), "seed": self.opts.seed}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at a cursor from `state_dict` (same table version, splits and seed)."""
        if state.get("asof") != self.spec.asof:
            raise ConchError(
                "this state was saved by a dataset over another table version: "
                f"state asof={state.get('asof')}, dataset asof={self.spec.asof}; build the dataset with the same scan "
                "(asof=...)"
            )
        if self.fixed_splits is not None:  # else checked when iterating, where the readers are known
            self._check_splits(state)
        self._resume = dict(state)
        self.epoch = int(state["epoch"])

    def _check_splits(self, state: Mapping[str, Any]) -> None:
        if state.get("splits") != len(self.splits):
            raise ConchError(
                f"this state was saved by a dataset read in {state.get('splits')} splits; this one reads "
                f"{len(self.splits)} (splits follow the world size and worker count unless given): build it with "
                "the same splits=, world size and workers"
            )

    # ----- sharding ---------------------------------------------------------------------------
    def reader(self) -> tuple[int, int]:
        """(this reader's number, number of readers): ranks × DataLoader workers."""
        rank, world = _rank_world(self._rank, self._world)
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        return rank * nw + wid, world * nw

    def my_splits(self, epoch: int) -> list[Split]:
        """The splits this reader reads in `epoch`, in order."""
        me, readers = self.reader()
        order = np.arange(len(self.splits))
        if self.opts.shuffle:
            order = np.random.default_rng([self.opts.seed, epoch]).permutation(len(self.splits))
        return [self.splits[i] for i in order[me::readers]]

    # ----- iterating --------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        resume, self._resume = self._resume, None
        if resume:
            self._check_splits(resume)
        epoch = int(resume["epoch"]) if resume else self.epoch
        me, _ = self.reader()
        splits = self.my_splits(epoch)
        start = resume or {"block": 0, "pos": 0, "offset": 0, "done": 0}
        blocks = _prefetched(self._blocks(splits, start), self.opts.prefetch)
        arrow = self.opts.format == "arrow"
        out = _Rebatcher(self.opts.batch_size, self.opts.drop_last)
        self.skipped, self.skip_errors = 0, []
        try:
            for block in blocks:
                rows = block.rows
                if self.opts.shuffle:
                    rng = np.random.default_rng([self.opts.seed, epoch, me, block.index])
                    rows = rows.take(pa.array(rng.permutation(rows.num_rows)))
                skip = int(start["done"]) if block.index == start["block"] else 0
                # Convert once per block; batches are then views (tensor slices) of it.
                piece: Any = rows.slice(skip) if arrow else _Cols.of(rows.slice(skip), self.opts.decoding)
                read = _read_rows(piece.decoded.kept if not arrow else None)
                if not arrow and piece.decoded.errors:
                    self._count_skipped(piece.decoded.errors)
                at = {"epoch": epoch, "block": block.index, "pos": block.pos, "offset": block.offset}
                for item, n_done in out.push(piece):
                    if self.opts.batch_size is not None or arrow:
                        self._cursor = {**at, "done": skip + read(n_done)}
                        yield _one_batch(item) if arrow else _emit(item.cols)
                        continue
                    for j in range(item.num_rows):
                        self._cursor = {**at, "done": skip + read(n_done - item.num_rows + j + 1)}
                        yield _emit({k: v[j] for k, v in item.cols.items()})
            self._cursor = {"epoch": epoch + 1, "block": 0, "pos": 0, "offset": 0, "done": 0}
            for item, _ in out.flush():
                yield _one_batch(item) if arrow else _emit(item.cols)
            if self.skipped:
                warnings.warn(
                    f"table {self.spec.table_name!r}: {self.skipped} row(s) skipped this epoch (on_error='skip'), "
                    f"first {self.skip_errors[0]}; see the dataset's skipped and skip_errors",
                    UserWarning,
                    stacklevel=2,
                )
        finally:
            blocks.close()
        self.epoch = epoch + 1  # the next pass in this process (a persistent worker, say) is the next epoch

    def _count_skipped(self, errors: list[DecodeError]) -> None:
        self.skipped += len(errors)
        self.skip_errors.extend(errors[: SKIP_ERRORS_KEPT - len(self.skip_errors)])

    def _blocks(self, splits: list[Split], start: Mapping[str, Any]) -> Iterator[_Block]:
        """Blocks of `block_rows` rows read from `splits`, starting at a cursor."""
        size = self.opts.block_rows
        index, pos, offset = int(start["block"]), int(start["pos"]), int(start["offset"])
        pending: list[pa.RecordBatch] = []
        have = 0
        block_pos, block_offset = pos, offset
        for p in range(pos, len(splits)):
            seen = 0
            skip = offset if p == pos else 0
            for batch in open_split(splits[p]).to_record_batches():
                n = batch.num_rows
                if seen + n <= skip:
                    seen += n
                    continue
                if seen < skip:
                    batch = batch.slice(skip - seen)
                    seen = skip
                while batch.num_rows:
                    take = min(size - have, batch.num_rows)
                    pending.append(batch.slice(0, take))
                    have += take
                    seen += take
                    batch = batch.slice(take)
                    if have == size:
                        yield _Block(index, block_pos, block_offset, pa.Table.from_batches(pending))
                        index, pending, have = index + 1, [], 0
                        block_pos, block_offset = p, seen
            if have == 0:  # the next block starts at the next split
                block_pos, block_offset = p + 1, 0
        if have:
            yield _Block(index, block_pos, block_offset, pa.Table.from_batches(pending))


# ----- leaving a DataLoader worker -----------------------------------------------------------
# A batch leaves a worker through the worker's ring of shared-memory slots (`conch.engines.torch.ring`):
# one copy into a reused slot in the worker, a few hundred bytes through the pipe, and views of
# the slot in the main process. When every slot is still in use, a batch whose tensors fit in
# WIRE_MAX bytes travels as one byte buffer through the pipe; a larger one as torch pickles it.
WIRE_MAX = 1 << 20


def _in_worker() -> bool:
    return torch.utils.data.get_worker_info() is not None


def _emit(cols: dict[str, Any]) -> dict[str, Any]:
    """A batch (or sample) as yielded: as is in the main process; from a worker, wrapped to
    leave it cheaply (above)."""
    return _Wire(cols) if _in_worker() else cols


class _Wire(dict[str, Any]):
    """A dict of columns leaving a DataLoader worker (see above). The receiver unpickles a
    plain dict."""

    def __copy__(self) -> _Wire:  # DataLoader's collate copies mappings: keep the wrapper
        return _Wire(self)

    def __reduce__(self) -> Any:
        sent = ring.send(self)
        if sent is not None:
            return sent
        total = ring.tensor_bytes(self)
        if not total or total > WIRE_MAX:
            return (dict, (dict(self),))
        try:  # numpy views: a few µs per column, where torch ops cost tens
            arrays = [(k, v.detach().numpy()) for k, v in self.items() if isinstance(v, torch.Tensor)]
        except (TypeError, RuntimeError):  # a dtype numpy lacks (bfloat16): torch's way
            return (dict, (dict(self),))
        buf = bytearray(total)
        flat = np.frombuffer(buf, np.uint8)
        layout, off = [], 0
        for k, a in arrays:
            a = np.ascontiguousarray(a)
            flat[off : off + a.nbytes] = a.reshape(-1).view(np.uint8)
            layout.append((k, off, a.dtype.str, a.shape))
            off += ring.aligned(a.nbytes)
        rest = {k: v for k, v in self.items() if not isinstance(v, torch.Tensor)}
        return (_unwire, (buf, layout, rest, list(self)))


def _unwire(buf: bytearray, layout: list[Any], rest: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """A `_Wire` rebuilt in the receiving process: tensors are views of `buf` (no copy)."""
    out = dict(rest)
    for k, off, dtype, shape in layout:
        out[k] = torch.from_numpy(np.frombuffer(buf, np.dtype(dtype), math.prod(shape), off).reshape(shape))
    return {k: out[k] for k in order}


class _Cols:
    """Converted columns of some rows (tensors or lists by path), sliced without copying."""

    def __init__(self, cols: dict[str, Any], num_rows: int, decoded: Decoded | None = None) -> None:
        self.cols = cols
        self.num_rows = num_rows
        self.decoded = decoded  # of a block: which rows were kept, and why others were not

    @classmethod
    def of(cls, table: pa.Table, decoding: Decoding) -> _Cols:
        """The columns of a block (batches are then views of them)."""
        cols, decoded = _convert(table, decoding)
        return cls(cols, table.num_rows if decoded.kept is None else len(decoded.kept), decoded)

    def slice(self, offset: int, length: int) -> _Cols:
        n = max(0, min(length, self.num_rows - offset))
        return _Cols({k: v[offset : offset + n] for k, v in self.cols.items()}, n)

    @staticmethod
    def concat(parts: list[_Cols]) -> _Cols:
        if len(parts) == 1:
            return parts[0]
        cols = {k: _concat_values([p.cols[k] for p in parts]) for k in parts[0].cols}
        return _Cols(cols, sum(p.num_rows for p in parts))


def _concat_values(parts: list[Any]) -> Any:
    if isinstance(parts[0], torch.Tensor):
        return torch.cat(parts)
    return [x for p in parts for x in p]


def _concat(parts: list[Any]) -> Any:
    return pa.concat_tables(parts) if isinstance(parts[0], pa.Table) else _Cols.concat(parts)


class _Rebatcher:
    """Cuts a stream of row slices (Arrow tables or `_Cols`) into batches of `size` rows (when
    None: passes each slice through)."""

    def __init__(self, size: int | None, drop_last: bool) -> None:
        self.size = size or 0
        self.drop_last = drop_last
        self.parts: list[Any] = []
        self.have = 0

    def push(self, piece: Any) -> Iterator[tuple[Any, int]]:
        """Yield (batch, rows of `piece` consumed so far) for each batch completed by `piece`."""
        if not self.size:
            if piece.num_rows:
                yield piece, piece.num_rows
            return
        used = 0
        while used < piece.num_rows:
            take = min(self.size - self.have, piece.num_rows - used)
            self.parts.append(piece.slice(used, take))
            self.have += take
            used += take
            if self.have == self.size:
                batch = _concat(self.parts)
                self.parts, self.have = [], 0
                yield batch, used

    def flush(self) -> Iterator[tuple[Any, int]]:
        if self.have and not self.drop_last:
            yield _concat(self.parts), 0
        self.parts, self.have = [], 0


class _prefetched:
    """Runs a block iterator in a background thread, `depth` blocks ahead (0: inline)."""

    _END = object()

    def __init__(self, source: Iterator[_Block], depth: int) -> None:
        self.source = source
        self.depth = depth
        self.stop = threading.Event()
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=max(depth, 1))
        self.thread: threading.Thread | None = None
        if depth:
            self.thread = threading.Thread(target=self._run, daemon=True, name="conch-prefetch")
            self.thread.start()

    def _run(self) -> None:
        try:
            for item in self.source:
                while not self.stop.is_set():
                    try:
                        self.queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self.stop.is_set():
                    return
            self._put(self._END)
        except BaseException as e:  # handed to the consumer, raised there
            self._put(e)

    def _put(self, item: Any) -> None:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def __iter__(self) -> Iterator[_Block]:
        if self.thread is None:
            yield from self.source
            return
        while True:
            item = self.queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=5)


def _rank_world(rank: int | None, world: int | None) -> tuple[int, int]:
    if rank is not None and world is not None:
        r, w = rank, world
    elif torch.distributed.is_available() and torch.distributed.is_initialized():
        r, w = torch.distributed.get_rank(), torch.distributed.get_world_size()
    else:
        r, w = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if not 0 <= r < w:
        raise ConchError(f"rank {r} is not in [0, world_size={w})")
    return r, w


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)


def _read_rows(kept: np.ndarray | None) -> Callable[[int], int]:
    """Rows of a block piece read once `n` of its kept rows are yielded (dropped rows count as read)."""
    if kept is None:
        return lambda n: n
    return lambda n: int(kept[n - 1]) + 1 if n else 0


# ----- Arrow → tensors ---------------------------------------------------------------------------
def to_tensors(table: pa.Table, decode: Mapping[str, Callable[[Any], Any]] | None = None) -> dict[str, Any]:
    """Columns by path (structs flattened) as tensors where numeric, else lists (or decoded)."""
    return _convert(table, Decoding(dict(decode or {})))[0]


def _convert(table: pa.Table, decoding: Decoding) -> tuple[dict[str, Any], Decoded]:
    leaves = {n: c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for n, c in _leaves(table)}
    decoded = run_hooks(leaves, table.num_rows, decoding)
    out: dict[str, Any] = {}
    for name, arr in leaves.items():
        if name in decoded.values:
            out[name] = _stack(decoded.values[name])
        else:
            out[name] = _tensor(name, kept_rows(arr, decoded.kept))
    return out, decoded


def _leaves(table: pa.Table) -> Iterator[tuple[str, Any]]:
    stack: list[tuple[str, Any]] = [(f.name, table.column(f.name)) for f in table.schema]
    while stack:
        name, col = stack.pop(0)
        if pa.types.is_struct(col.type):
            arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            fields = [(f"{name}.{arr.type.field(i).name}", arr.field(i)) for i in range(arr.type.num_fields)]
            stack = fields + stack
        else:
            yield name, col


def _tensor(name: str, arr: pa.Array) -> Any:
    t = arr.type
    if pa.types.is_fixed_size_list(t):
        shape = [len(arr)]
        inner = arr
        while pa.types.is_fixed_size_list(inner.type):
            shape.append(inner.type.list_size)
            inner = inner.flatten()
        if arr.null_count:
            raise ConchError(f"column {name!r} has null tensors: fill them, or pass decode= or format='arrow'")
        return _tensor(name, inner).reshape(shape)
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_duration(t):
        arr = arr.cast(pa.int64() if arr.type.bit_width == 64 else pa.int32())
        t = arr.type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        if arr.null_count:
            if not pa.types.is_floating(t):
                raise ConchError(
                    f"column {name!r} ({t}) has nulls, which an integer tensor cannot hold: "
                    "fill them, filter them with where=, or pass decode= or format='arrow'"
                )
            arr = pc.fill_null(arr, float("nan"))
        if pa.types.is_unsigned_integer(t) and t.bit_width > 8:  # torch lacks most unsigned types
            arr = arr.cast(pa.int64() if t.bit_width >= 32 else pa.int32())
        values = arr.to_numpy(zero_copy_only=False)
        with warnings.catch_warnings():  # Arrow buffers are read-only; tensors share them
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(values)
    return arr.to_pylist()


def _stack(values: list[Any]) -> Any:
    if values and all(isinstance(v, torch.Tensor) for v in values):
        shapes = {tuple(v.shape) for v in values}
        if len(shapes) == 1:
            return torch.stack(values)
    return values


# ----- random access ------------------------------------------------------------------------------
class ConchMapDataset(_Dataset):
    """A map-style dataset: item i is the record of the i-th key (key order), read by a take.

    `__getitems__` reads a whole sampler batch with one take. Build with `conch.engines.torch.map_dataset`.
    """

    def __init__(self, spec: ScanSpec, keys: pa.Table, decode: Mapping[str, Callable[[Any], Any]]) -> None:
        self.spec = spec
        self.keys = keys
        self.decode = dict(decode)

    def __len__(self) -> int:
        return self.keys.num_rows

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        """The samples at `indices`, in that order, with one take."""
        idx = pa.array(indices, pa.int64())
        if len(indices) and (pc.min(idx).as_py() < -len(self) or pc.max(idx).as_py() >= len(self)):
            raise IndexError(f"index out of range for {len(self)} keys")
        wanted = self.keys.take(pc.if_else(pc.less(idx, 0), pc.add(idx, len(self)), idx))
        enc = encode_keys(wanted.combine_chunks().columns)
        uniq = pc.unique(enc)
        got = self.spec.scan(keys=KeySet(uniq.take(pc.array_sort_indices(uniq)))).to_arrow()
        pos = pc.index_in(enc, value_set=encode_keys(got.select(self.keys.column_names).combine_chunks().columns))
        if pos.null_count:
            raise ConchError(f"table {self.spec.table_name!r}: keys vanished at the pinned version (filtered out?)")
        rows = got.take(pos)
        cols = _convert(rows, Decoding(self.decode, self.spec.table_name, tuple(self.keys.column_names)))[0]
        return [{k: v[i] for k, v in cols.items()} for i in range(rows.num_rows)]


def map_dataset(scan: Scan, *, decode: Mapping[str, Callable[[Any], Any]] | None = None) -> ConchMapDataset:
    """A map-style dataset over the keys `scan` returns (read once, pinned), for samplers."""
    spec = ScanSpec.from_scan(scan)
    names = scan.plan.schema.key_names(spec.level)
    keys = spec.with_columns((narrowest_column(scan.plan.columns),)).scan().to_arrow().select(names)
    spec = spec.without_filter()
    return ConchMapDataset(spec, keys.combine_chunks(), decode or {})
