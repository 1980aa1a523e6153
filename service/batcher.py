"""Micro-batching: concurrent fills are encoded in one forward pass and searched in one FAISS matrix
search per shard (`FillEngine.prepare`), on one batching thread. Each request's own work (BM25, spans,
rank) runs afterwards in its own thread, so the next batch is encoded while earlier ones are ranked.

A batch takes every request waiting when the thread gets to it, up to `max_batch` requests and
`max_tokens` query tokens; with `max_wait` > 0 it waits that long for more after the first (a little
latency for larger batches under light load). There is no wait by default: while a batch is computed
the next one gathers by itself.

A batch of two or more is padded to a bucketed shape (`bucket_shape`: rows to a power of two, width to a
multiple of 16 tokens), so the encoder meets a few dozen input shapes rather than every (requests x
longest query) pair: each new shape costs kernel caches and allocator fragments that stay (RSS grew with
the variety of shapes, docs/history/BENCHMARKS.md "The production service issue"). A request alone keeps its one
row; its width is rounded up as every serving pass's is (encoder.model.padded_width), so its fill is the unbatched
one."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable

from common.priority import lower_this_thread
from encoder.model import WIDTH_STEP
from fill.engine import FillEngine
from fill.prepared import Planned, Prepared

logger = logging.getLogger(__name__)


def bucket_shape(rows: int, width: int) -> tuple[int, int]:
    """The padded (rows, width) of an encoder batch of `rows` queries whose longest has `width` tokens:
    unchanged for one query; else rows up to the next power of two and width up to a multiple of 16."""
    if rows <= 1:
        return rows, width
    return 1 << (rows - 1).bit_length(), -(-width // WIDTH_STEP) * WIDTH_STEP


class _Job:
    __slots__ = ("planned", "future")

    def __init__(self, planned: Planned[Any]) -> None:
        self.planned = planned
        self.future: Future[Prepared[Any]] = Future()


class Batcher:
    def __init__(
        self,
        engine: FillEngine,
        max_batch: int = 32,
        max_tokens: int = 4096,
        max_wait: float = 0.0,
        on_batch: Callable[[int, int, float], None] | None = None,
        name: str = "batcher",
        nice: int = 0,
    ) -> None:
        self.engine = engine
        self.max_batch = max_batch
        self.max_tokens = max_tokens
        self.max_wait = max_wait
        self.on_batch = on_batch  # called with (requests, query tokens, seconds) after each batch
        self._queue: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self.nice = nice  # this batching thread's CPU priority (the encoder's and the index's search threads are
        # shared, started at load and warm-up: they keep the usual priority)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        """Requests waiting for a batch."""
        return len(self._queue)

    def submit(self, planned: Planned[Any]) -> Future[Prepared[Any]]:
        """A future of the request's `Prepared` (or its exception). Cancel it to drop a request that has
        not been batched yet."""
        job = _Job(planned)
        with self._cond:
            if self._closed:
                raise RuntimeError("batcher is closed")
            self._queue.append(job)
            self._cond.notify()
        return job.future

    def close(self) -> None:
        """Stop after the batch in progress; requests still waiting fail with RuntimeError."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()
        while self._queue:
            job = self._queue.popleft()
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(RuntimeError("batcher closed"))

    def _take(self) -> list[_Job] | None:
        """The next batch (None once closed): the first waiting request, then more while they fit."""
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            batch: list[_Job] = []
            tokens = 0
            until = time.perf_counter() + self.max_wait
            while len(batch) < self.max_batch:
                if not self._queue:
                    left = until - time.perf_counter()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                    continue
                job = self._queue[0]
                if batch and tokens + job.planned.tokens > self.max_tokens:
                    break
                self._queue.popleft()
                if job.future.set_running_or_notify_cancel():  # a cancelled one (timed out waiting) is dropped
                    batch.append(job)
                    tokens += job.planned.tokens
            return batch

    def _run(self) -> None:
        if self.nice:
            lower_this_thread(self.nice)
        while True:
            batch = self._take()
            if batch is None:
                return
            if not batch:
                continue
            t0 = time.perf_counter()
            try:
                prepared = self.engine.prepare([job.planned for job in batch], bucket_shape)
            except BaseException as exc:  # noqa: BLE001 - every request of the batch gets the error
                if len(batch) > 1:  # find the culprit: each request alone
                    for job in batch:
                        self._one(job)
                else:
                    batch[0].future.set_exception(exc)
                continue
            for job, result in zip(batch, prepared):
                job.future.set_result(result)
            if self.on_batch is not None:
                self.on_batch(len(batch), sum(job.planned.tokens for job in batch), time.perf_counter() - t0)

    def _one(self, job: _Job) -> None:
        try:
            job.future.set_result(self.engine.prepare([job.planned])[0])
        except BaseException as exc:  # noqa: BLE001
            job.future.set_exception(exc)
