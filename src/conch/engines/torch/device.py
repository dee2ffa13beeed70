"""Batches onto the device: `conch.engines.torch.to_device(loader, "cuda")`.

>>> loader = DataLoader(ds, batch_size=None, num_workers=8, pin_memory=True)  # doctest: +SKIP
>>> for batch in conch.engines.torch.to_device(loader, "cuda"): ...  # CUDA tensors  # doctest: +SKIP

Wraps any iterable of batches (dicts, lists or tuples of tensors, nested; other values pass
through). On a CUDA device it double-buffers: while the training loop works on batch *k*,
batch *k + 1* is already being copied host-to-device on a side CUDA stream, and the loop's
stream waits for that copy (an event, not a host synchronisation) only when it receives the
batch. A tensor not in pinned memory is first staged into one of two reused pinned buffers per
column (a CPU copy; `DataLoader(pin_memory=True)` makes it unnecessary), so the device copy is
truly asynchronous. Each device tensor is marked as used on the consuming stream
(`record_stream`), so the caching allocator never hands its memory out while the loop uses it.

On any other device (the CPU) each batch is moved with `.to(device)`, a pass-through for CPU
tensors: the same loop runs on a machine without a GPU.

Resuming with torchdata's `StatefulDataLoader`: the wrapper reads one batch ahead, so save the
wrapped loader's `state_dict()` between epochs, or expect one batch to be skipped on resume.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from conch.model.deps import optional_import

torch = optional_import("torch")


def to_device(loader: Iterable[Any], device: Any = "cuda") -> DeviceLoader:
    """`loader`'s batches with every tensor on `device` (see the module doc)."""
    return DeviceLoader(loader, device)


class DeviceLoader:
    """An iterable over a loader's batches, moved to `device`; build with `to_device`."""

    def __init__(self, loader: Iterable[Any], device: Any = "cuda") -> None:
        self.loader = loader
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())

    def __repr__(self) -> str:
        return f"conch.engines.torch.to_device({self.loader!r}, {str(self.device)!r})"

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        if self.device.type != "cuda":
            for batch in self.loader:
                yield _map(batch, lambda t: t.to(self.device))
            return
        yield from self._cuda()

    def _cuda(self) -> Iterator[Any]:
        stream = torch.cuda.Stream(self.device)
        staging = _Staging()
        pending: tuple[Any, Any] | None = None
        for batch in self.loader:
            ready = self._start(batch, stream, staging)
            if pending is not None:
                yield self._finish(*pending)
            pending = ready
        if pending is not None:
            yield self._finish(*pending)

    def _start(self, batch: Any, stream: Any, staging: _Staging) -> tuple[Any, Any]:
        """Issue the batch's host-to-device copies on the side stream; its event marks them done."""
        staging.flip()
        with torch.cuda.stream(stream):
            moved = _map(batch, lambda t: staging.pinned(t).to(self.device, non_blocking=True))
            done = torch.cuda.Event()
            done.record(stream)
        staging.used(done)
        return moved, done

    def _finish(self, moved: Any, done: Any) -> Any:
        current = torch.cuda.current_stream(self.device)
        current.wait_event(done)

        def claim(t: Any) -> Any:
            t.record_stream(current)
            return t

        return _map(moved, claim)


class _Staging:
    """Two sets of reused pinned buffers (by position of the tensor in its batch); a set is
    rewritten only after the device copies that read it last have finished."""

    def __init__(self) -> None:
        self.sets: list[list[Any]] = [[], []]
        self.events: list[Any] = [None, None]
        self.current = 1
        self.i = 0

    def flip(self) -> None:
        self.current ^= 1
        self.i = 0
        if self.events[self.current] is not None:
            self.events[self.current].synchronize()  # the copies of two batches ago: long done

    def used(self, event: Any) -> None:
        self.events[self.current] = event

    def pinned(self, t: Any) -> Any:
        if t.device.type != "cpu" or t.is_pinned():
            return t
        bufs = self.sets[self.current]
        n = t.numel() * t.element_size()
        if self.i == len(bufs):
            bufs.append(torch.empty(0, dtype=torch.uint8))
        if bufs[self.i].numel() < n:
            bufs[self.i] = torch.empty(max(n, 1), dtype=torch.uint8, pin_memory=True)
        out = bufs[self.i][:n].view(t.dtype).view(t.shape).copy_(t)
        self.i += 1
        return out


def _map(value: Any, fn: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, Mapping):
        return {k: _map(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map(v, fn) for v in value]
    if isinstance(value, tuple):
        items = [_map(v, fn) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # named tuples keep their type
    return value
