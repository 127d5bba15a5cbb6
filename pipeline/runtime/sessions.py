"""Spark sessions for work on several tables at once, each table in a thread and a session of its own.

Commit metadata (an Iceberg snapshot's summary, a Delta commit's `userMetadata`) and per-statement settings
travel in session settings, which another thread of the same session would see. `SparkSession.newSession()`
shares the SparkContext but has settings, catalogs and temporary views of its own; a worker borrows one for an
item of work and keeps it for its next.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")
R = TypeVar("R")


class SessionPool:
    def __init__(self, spark: SparkSession) -> None:
        self.root = spark
        self._idle: queue.SimpleQueue[SparkSession] = queue.SimpleQueue()  # the workers' sessions, between items
        self._thread = threading.local()

    @property
    def current(self) -> SparkSession:
        """The calling thread's session: the one it borrowed for the item it works on, else the root."""
        return getattr(self._thread, "spark", None) or self.root

    def map(self, work: Callable[[T], R], items: Sequence[T], workers: int, name: str) -> list[R]:
        """`work` on each item, up to `workers` at once in threads named after `name`; the results in item order.
        Every item is worked on, and the first failure (in item order) is raised once all are done. With one
        worker the items are worked on one after another in the calling thread, in the root session, and the
        first failure stops them."""
        from pyspark import inheritable_thread_target

        workers = min(workers, len(items))
        if workers <= 1:
            return [work(item) for item in items]
        target = inheritable_thread_target(self.root)(self._borrowing(work))
        with ThreadPoolExecutor(workers, thread_name_prefix=name) as pool:
            futures = [pool.submit(target, item) for item in items]
        # Every future is done here; `Executor.map` would instead cancel the items not yet started at the first failure.
        return [future.result() for future in futures]

    def _borrowing(self, work: Callable[[T], R]) -> Callable[[T], R]:
        def borrowed(item: T) -> R:
            try:
                self._thread.spark = self._idle.get_nowait()
            except queue.Empty:
                self._thread.spark = self.root.newSession()
            try:
                return work(item)
            finally:
                self._idle.put(self._thread.spark)
                self._thread.spark = None

        return borrowed
