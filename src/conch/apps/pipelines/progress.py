"""Progress of running Spark jobs, shown as a rich progress bar (tasks done / tasks started)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn


@contextmanager
def spark_progress(spark: Any, console: Console, description: str) -> Iterator[None]:
    """Poll Spark's status tracker while the body runs; the bar counts tasks of the job's stages.

    Spark's own console progress bar is off in `conch.engines.spark.session()` (it interleaves with
    our output), so this is the one progress display.
    """
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    seen: dict[int, tuple[int, int]] = {}
    columns = (TextColumn("{task.description}", markup=False), BarColumn(), TaskProgressColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(description, total=None)

        def poll() -> None:
            while not stop.wait(0.25):
                for sid in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(sid)
                    if info is not None:
                        seen[sid] = (info.numCompletedTasks, info.numTasks)
                if seen:
                    done = sum(d for d, _ in seen.values())
                    total = sum(t for _, t in seen.values())
                    progress.update(task, completed=done, total=max(total, 1))

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
