"""`WriteQueue`: fragment files encoded a few at a time while the writer goes on (moved out of
`conch.files.fragments`, which it serves through the `Encoder` protocol)."""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from conch.files.blobs import BLOB_SUFFIX
from conch.files.format import FileJob, WrittenFile
from conch.files.storage import Storage


class Encoder(Protocol):
    """What a queue needs of its format (`VortexFormat`): its storage and one file's encoding
    into scratch paths, returning (blob bytes, checksum, extra)."""

    storage: Storage

    def _encode(
        self, job: FileJob, local: str, blob_local: str, after: Callable[[FileJob], Any] | None
    ) -> tuple[int, str, Any]: ...


_Done = Callable[[WrittenFile, Any], None]  # a `WriteQueue` job's callback: (written, extra)
_pools: dict[int, tuple[int, ThreadPoolExecutor]] = {}  # threads -> (pid that made it, pool)
_pools_lock = threading.Lock()


def _encode_pool(threads: int) -> ThreadPoolExecutor:
    """A process-wide pool of `threads` encoder threads (made again in a forked child)."""
    with _pools_lock:
        made = _pools.get(threads)
        if made is None or made[0] != os.getpid():
            made = (os.getpid(), ThreadPoolExecutor(threads, thread_name_prefix="conch-encode"))
            _pools[threads] = made
        return made[1]


class WriteQueue:
    """Files encoded `threads` at a time while the caller goes on (Vortex's writer releases the
    GIL: docs/performance.md), each published and handed to its `done` callback from the calling
    thread in submission order, so what the callbacks record does not depend on the threads'
    timing. Storage is only touched from the calling thread (scratch paths handed out at submit,
    published at finish, inside the caller's `Storage.batch`), and at most `threads` files are in
    flight, so memory is bounded by `threads` jobs' tables. Use it as a context manager: leaving
    the block waits for every file; on an error every file not yet published is discarded."""

    def __init__(self, fmt: Encoder, threads: int = 1) -> None:
        self._fmt = fmt
        self._threads = max(1, threads)
        self._inflight: collections.deque[tuple[FileJob, contextlib.ExitStack, Future[Any], _Done]] = (
            collections.deque()
        )

    def __enter__(self) -> WriteQueue:
        return self

    def __exit__(self, et: Any, e: Any, tb: Any) -> None:
        if e is None:
            self.drain()
        else:
            self._discard(e)

    def submit(self, job: FileJob, done: _Done, after: Callable[[FileJob], Any] | None = None) -> None:
        """Encode `job` (waiting first for the oldest file while `threads` are in flight); `done`
        gets `(written, extra)` once it is published: `extra` is the columns' statistics for a
        job with `stats`, else `after(job)`, computed in the worker beside the encoding."""
        try:
            while len(self._inflight) >= self._threads:
                self._finish()
            stack = contextlib.ExitStack()
            storage = self._fmt.storage
            try:
                blob_local = stack.enter_context(storage.staged(job.path + BLOB_SUFFIX)) if job.blob_columns else ""
                local = stack.enter_context(storage.staged(job.path))
            except BaseException as e:
                stack.__exit__(type(e), e, e.__traceback__)
                raise
            fut: Future[Any]
            if self._threads == 1:  # on this thread, nothing to overlap with
                fut = Future()
                try:
                    fut.set_result(self._fmt._encode(job, local, blob_local, after))
                except BaseException as e:
                    fut.set_exception(e)
            else:
                fut = _encode_pool(self._threads).submit(self._fmt._encode, job, local, blob_local, after)
            self._inflight.append((job, stack, fut, done))
            if self._threads == 1:
                self._finish()
        except BaseException as e:
            self._discard(e)
            raise

    def drain(self) -> None:
        """Wait for every file in flight and publish it."""
        try:
            while self._inflight:
                self._finish()
        except BaseException as e:
            self._discard(e)
            raise

    def _finish(self) -> None:
        job, stack, fut, done = self._inflight.popleft()
        try:
            total, checksum, extra = fut.result()
        except BaseException as e:
            stack.__exit__(type(e), e, e.__traceback__)
            raise
        stack.close()  # publishes the files (in the batch, from this thread)
        done(WrittenFile(total + self._fmt.storage.size(job.path), checksum), extra)

    def _discard(self, e: BaseException) -> None:
        while self._inflight:  # wait for the others, then discard their scratch files
            _, stack, fut, _ = self._inflight.popleft()
            with contextlib.suppress(BaseException):
                fut.result()
            stack.__exit__(type(e), e, e.__traceback__)
