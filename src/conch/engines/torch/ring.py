"""Batches leaving a DataLoader worker through a ring of reusable shared-memory slots.

A DataLoader worker sends every batch to the main process through one pipe. Pickled the usual
way, each tensor becomes a shared-memory segment of its own whose file descriptor the main
process fetches through a side connection (`multiprocessing.resource_sharer`) and maps: a
connection, `sendmsg`, `mmap` and `munmap` per tensor and batch, all on the main process, which
serves every worker (issue 22: a ceiling near 0.75 GB/s whatever the worker count). Packing a
batch into bytes through the pipe instead costs two copies and the pipe's bandwidth.

Here each worker process owns one **ring**: one shared-memory segment, created once, cut into
`slots` slots of `slot_bytes` after a header of one flag byte per slot. A batch is copied into a
free slot (the one copy on its way, made in the worker) and only its layout travels through the
pipe (a few hundred bytes); the segment itself crosses once, with the first batch that uses it.
The main process keeps the segments it has seen (`_RECEIVED`, by ring token) and wraps a slot as
tensors without a copy: views of one fresh `numpy` view of the slot, whose death (every tensor
of the batch, and every view of one, gone; or, with `pin_memory=True`, as soon as the pinning
thread has copied the batch) clears the slot's flag, and the worker reuses the slot.

When no slot is free (a training loop that keeps many batches alive), the batch leaves the
old way (`None` from `send`): the ring never blocks and never overwrites a batch still in use.
A batch larger than the slots gets a new, larger ring (the old one is released by the main
process when the new one arrives: the pipe keeps a worker's messages in order, so every batch
of the old ring has been received by then).
"""

from __future__ import annotations

import math
import os
import secrets
import threading
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from conch.model.deps import optional_import

torch = optional_import("torch")

SLOTS = 6  # slots per ring: the DataLoader keeps prefetch_factor (2) batches per worker in flight
RING_MAX_BYTES = 512 << 20  # fewer slots (at least 2) when batches are large
ALIGN = 64  # every tensor starts at a multiple: any dtype can view it


def aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def tensor_bytes(cols: Mapping[str, Any]) -> int:
    return sum(aligned(v.numel() * v.element_size()) for v in cols.values() if isinstance(v, torch.Tensor))


class _Ring:
    """The sending side: one shared segment of `slots` slots, owned by one worker process."""

    def __init__(self, slot_bytes: int, slots: int) -> None:
        self.token = f"{os.getpid()}-{secrets.token_hex(6)}"
        self.slot_bytes = slot_bytes
        self.slots = slots
        self.header = aligned(slots)
        self.buf = torch.empty(self.header + slots * slot_bytes, dtype=torch.uint8).share_memory_()
        self.flags = self.buf.numpy()[:slots]  # 1: the slot holds a batch the receiver may still use
        self.flags[:] = 0
        self.sent = False  # the segment travels with the first batch that uses it
        self.next = 0

    def acquire(self) -> int | None:
        for i in range(self.slots):
            s = (self.next + i) % self.slots
            if not self.flags[s]:
                self.flags[s] = 1
                self.next = s + 1
                return s
        return None


_lock = threading.Lock()
_ring: _Ring | None = None  # this process's ring (a DataLoader worker's)
_ring_pid = 0


def send(cols: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The pickle reduction of a batch sent through this process's ring, or None when the ring
    cannot take it (no tensor, or every slot still in use)."""
    global _ring, _ring_pid
    total = tensor_bytes(cols)
    if not total:
        return None
    with _lock:  # the worker's queue pickles in its feeder thread; one ring per process
        if _ring is None or _ring_pid != os.getpid() or total > _ring.slot_bytes:
            slot_bytes = aligned(max(total, 4096))
            _ring = _Ring(slot_bytes, max(2, min(SLOTS, RING_MAX_BYTES // slot_bytes)))
            _ring_pid = os.getpid()
        ring = _ring
        slot = ring.acquire()
        if slot is None:
            return None
        base = ring.header + slot * ring.slot_bytes
        layout, off = [], 0
        for k, v in cols.items():
            if isinstance(v, torch.Tensor):
                n = v.numel() * v.element_size()
                ring.buf[base + off : base + off + n].view(v.dtype).view(v.shape).copy_(v)
                layout.append((k, off, v.dtype, tuple(v.shape)))
                off += aligned(n)
        rest = {k: v for k, v in cols.items() if not isinstance(v, torch.Tensor)}
        segment = None if ring.sent else ring.buf
        ring.sent = True
    return (receive, (ring.token, segment, slot, base, off, layout, rest, list(cols)))


# ----- the receiving side (the main process) ---------------------------------------------------
_RECEIVED: dict[str, tuple[int, Any]] = {}  # ring token -> (sender pid, segment as a numpy array)


def _adopt(token: str, segment: Any) -> None:
    pid = int(token.split("-")[0])
    for t, (p, _) in list(_RECEIVED.items()):  # the sender's older rings, and dead senders' rings
        if p == pid or not _alive(p):
            _RECEIVED.pop(t, None)  # two DataLoaders' pinning threads may both be here
    _RECEIVED[token] = (pid, segment.numpy())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _release(whole: np.ndarray, slot: int) -> None:
    whole[slot] = 0  # the slot's flag, in the segment's header


def receive(
    token: str,
    segment: Any,
    slot: int,
    base: int,
    used: int,
    layout: list[tuple[str, int, Any, tuple[int, ...]]],
    rest: dict[str, Any],
    order: list[str],
) -> dict[str, Any]:
    """A batch rebuilt from its ring slot: tensors are views of the shared slot, no copy."""
    if segment is not None:
        _adopt(token, segment)
    whole = _RECEIVED[token][1]
    view = whole[base : base + max(used, 1)]  # a fresh array per batch: its death frees the slot
    weakref.finalize(view, _release, whole, slot)
    slot_t = torch.from_numpy(view)
    out = dict(rest)
    for k, off, dtype, shape in layout:
        out[k] = slot_t[off : off + math.prod(shape) * dtype.itemsize].view(dtype).view(shape)
    return {k: out[k] for k in order}
