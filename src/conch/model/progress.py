"""Progress bars for long work: streamed writes, deletes by filter, large scans and exports.

One small wrapper over `rich.progress`, shown on standard error only when it is a terminal, and
never when asked not to: `progress=False` on the call, or `CONCH_PROGRESS=0` in the environment
(`progress=True` forces it, e.g. in a notebook). It counts rows and bytes, with a total when the
work knows one. Work that is usually short (a scan's `to_arrow()`, which library code also calls
for tiny takes) passes `delay=`: the bar appears only once the work has run that long, so short
calls never flash one (`CONCH_PROGRESS_DELAY=<seconds>` changes the scans' delay; `progress=True`
shows it at once). Compaction and other maintenance jobs use the same class:

>>> with Progress("compacting", total_rows=n) as bar:  # doctest: +SKIP
...     for batch in work():
...         bar.advance(batch.num_rows, batch.nbytes)
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any

SCAN_DELAY = 1.0  # seconds a scan's conversion runs before its bar appears


def scan_delay() -> float:
    """The delay of scans' bars: `CONCH_PROGRESS_DELAY` seconds if set, else `SCAN_DELAY`."""
    try:
        return max(0.0, float(os.environ.get("CONCH_PROGRESS_DELAY", SCAN_DELAY)))
    except ValueError:
        return SCAN_DELAY


def enabled(progress: bool | None) -> bool:
    """Whether to draw: the caller's choice, else on when stderr is a terminal and not disabled."""
    if progress is not None:
        return progress
    if os.environ.get("CONCH_PROGRESS", "").lower() in ("0", "false", "no", "off"):
        return False
    return sys.stderr.isatty()


class Progress:
    """A rows-and-bytes progress bar; a no-op when not `enabled`. Use as a context manager."""

    def __init__(
        self, description: str, total_rows: int | None = None, progress: bool | None = None, delay: float = 0.0
    ) -> None:
        self.description = description
        self.total_rows = total_rows
        self.rows = 0
        self.bytes = 0
        self._on = enabled(progress)
        self._delay = 0.0 if progress else delay  # asked for explicitly: at once
        self._start = 0.0
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        self._start = time.monotonic()
        if self._on and not self._delay:
            self._show()
        return self

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.completed:,.0f} rows, {task.fields[size]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._bar.__enter__()
        self._task = self._bar.add_task(self.description, total=self.total_rows, size="0B")

    def advance(self, rows: int, nbytes: int = 0) -> None:
        """Count `rows` more rows and `nbytes` more bytes of work done."""
        self.rows += rows
        self.bytes += nbytes
        if self._bar is None and self._on and time.monotonic() - self._start >= self._delay:
            self._show()
        if self._bar is not None:
            self._bar.update(self._task, completed=self.rows, size=human_bytes(self.bytes))

    def track(self, batches: Iterable[Any]) -> Iterator[Any]:
        """Yield `batches` (Arrow record batches or tables), counting their rows and bytes (not
        when no bar can be drawn: a 20-key take paid a tenth of a Lance take for the counting)."""
        return self._counted(batches) if self._on else iter(batches)

    def _counted(self, batches: Iterable[Any]) -> Iterator[Any]:
        for b in batches:
            self.advance(b.num_rows, b.nbytes)
            yield b

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.__exit__(typ, exc, tb)
            self._bar = None


def human_bytes(n: float) -> str:
    """`1234567` → `"1.2MB"` (decimal units, as the manifests in spec/001 print them)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f}{unit}" if unit != "B" else f"{int(n)}B"
        n /= 1000
    return f"{n:.1f}TB"


def track(batches: Iterable[Any], description: str, progress: bool | None = None, delay: float = 0.0) -> Iterator[Any]:
    """`batches` unchanged, counted on a progress bar that closes when they are exhausted."""
    with Progress(description, progress=progress, delay=delay) as bar:
        yield from bar.track(batches)
