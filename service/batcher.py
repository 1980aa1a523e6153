"""Micro-batching: concurrent fills are encoded in one forward pass and searched in one FAISS matrix
search per shard (`FillEngine.prepare`). The batching loop is an asyncio task on the server's event loop
(started by the first request): a request's entry in its queue carries the future its handler awaits; the loop
takes a batch and has it computed on the encoder's inference thread (`Encoder.runner`), so a request's prepare
step runs in no thread of its own. Each request's own work (BM25, spans, rank, read) runs afterwards on a worker,
so the next batch is encoded while earlier ones are ranked.

A batch takes every request waiting when the loop gets to it, up to `max_batch` requests and `max_tokens`
query tokens; with `max_wait` > 0 it waits that long for more after the first (a little latency for larger
batches under light load). There is no wait by default: while a batch is computed the next one gathers by
itself.

A batch of two or more is padded to a bucketed shape (`bucket_shape`: rows to a power of two, width to a
multiple of 16 tokens), so the encoder meets a few dozen input shapes rather than every (requests x
longest query) pair: each new shape costs kernel caches and allocator fragments that stay (RSS grew with
the variety of shapes, docs/history/BENCHMARKS.md "The production service issue"). A request alone keeps its one
row; its width is rounded up as every serving pass's is (encoder.model.padded_width), so its fill is the unbatched
one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import deque
from typing import Any, Callable

from encoder.model import WIDTH_STEP
from fill.deadline import Deadline
from fill.engine import FillEngine
from fill.prepared import Planned, Prepared, Req

logger = logging.getLogger(__name__)


def bucket_shape(rows: int, width: int) -> tuple[int, int]:
    """The padded (rows, width) of an encoder batch of `rows` queries whose longest has `width` tokens:
    unchanged for one query; else rows up to the next power of two and width up to a multiple of 16."""
    if rows <= 1:
        return rows, width
    return 1 << (rows - 1).bit_length(), -(-width // WIDTH_STEP) * WIDTH_STEP


class _Job:
    __slots__ = ("planned", "future")

    def __init__(self, planned: Planned[Any], future: asyncio.Future[Prepared[Any]]) -> None:
        self.planned = planned
        self.future = future  # cancelled when its request stops waiting: dropped, or its result ignored


class Batcher:
    """One lane's batching loop. `engine.prepare` runs on `run_on`, by default `engine.encoder.runner` (the encoder's
    one inference thread: the light lane's batches are encoded and searched there). The heavy lane gives a thread of
    its own at a lower CPU priority (service.serving): its batches' searches never take the cores from cheap
    requests' (their encoder passes still run on the encoder's thread, one at a time)."""

    def __init__(
        self,
        engine: FillEngine,
        max_batch: int = 32,
        max_tokens: int = 4096,
        max_wait: float = 0.0,
        on_batch: Callable[[int, int, float], None] | None = None,
        run_on: concurrent.futures.Executor | None = None,
    ) -> None:
        self.engine = engine
        self.run_on = run_on
        self.max_batch = max_batch
        self.max_tokens = max_tokens
        self.max_wait = max_wait
        self.on_batch = on_batch  # called with (requests, query tokens, seconds) after each batch
        self._queue: deque[_Job] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._running: concurrent.futures.Future[Any] | None = None  # the batch being computed
        self._closed = False
        self._lock = threading.Lock()  # close() may come from any thread

    @property
    def depth(self) -> int:
        """Requests waiting for a batch."""
        return len(self._queue)

    async def prepared(self, planned: Planned[Req], deadline: Deadline | None = None) -> Prepared[Req]:
        """The request encoded and searched in a batch with the others waiting (on the event loop; the work on the
        encoder's thread). AppError timeout (stage "queue") once `deadline` passes first: a request not yet in a
        batch is dropped from the queue."""
        future = self.submit(planned)
        try:
            if deadline is None:
                return await future
            return await asyncio.wait_for(asyncio.shield(future), timeout=max(deadline.left(), 0))
        except TimeoutError:
            future.cancel()  # not batched yet: dropped; in a batch: its result is ignored
            assert deadline is not None
            raise deadline.error("queue") from None

    def submit(self, planned: Planned[Any]) -> asyncio.Future[Prepared[Any]]:
        """A future of the request's `Prepared` (or its exception), on the running event loop. Cancel it to drop a
        request that has not been batched yet."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise RuntimeError("batcher is closed")
            if self._loop is not loop or self._task is None or self._task.done():
                # the first request, or one on another event loop (a server has one; each test client its own):
                # the batching loop runs on this one from now on (one left on a stopped loop never resumes)
                self._loop, self._wake = loop, asyncio.Event()
                self._task = loop.create_task(self._run(self._wake), name="batcher")
            wake = self._wake
        job = _Job(planned, loop.create_future())
        self._queue.append(job)
        assert wake is not None
        wake.set()
        return job.future

    def close(self) -> None:
        """Stop after the batch in progress (waited for here, from any thread); requests still waiting fail with
        RuntimeError."""
        with self._lock:
            self._closed = True
            loop, running = self._loop, self._running
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._stop)
            except RuntimeError:  # the loop closed meanwhile: nothing waits on it
                pass
        if running is not None:
            concurrent.futures.wait([running])

    def _stop(self) -> None:
        """(on the loop) Every waiting request fails; the loop task ends."""
        while self._queue:
            _settle(self._queue.popleft(), exc=RuntimeError("batcher closed"))
        if self._wake is not None:
            self._wake.set()

    async def _take(self, wake: asyncio.Event) -> list[_Job] | None:
        """The next batch (None once closed, or once another event loop took over): the first waiting request, then
        more while they fit."""
        while not self._queue and not self._closed and wake is self._wake:
            wake.clear()
            await wake.wait()
        if self._closed or wake is not self._wake:
            return None
        batch: list[_Job] = []
        tokens = 0
        until = time.perf_counter() + self.max_wait
        while len(batch) < self.max_batch:
            if not self._queue:
                left = until - time.perf_counter()
                if left <= 0:
                    break
                wake.clear()
                try:
                    await asyncio.wait_for(wake.wait(), left)
                except TimeoutError:
                    pass
                continue
            job = self._queue[0]
            if batch and tokens + job.planned.tokens > self.max_tokens:
                break
            self._queue.popleft()
            if not job.future.cancelled():  # a cancelled one (timed out waiting) is dropped
                batch.append(job)
                tokens += job.planned.tokens
        return batch

    async def _run(self, wake: asyncio.Event) -> None:
        while True:
            batch = await self._take(wake)
            if batch is None:
                return
            if batch:
                await self._compute(batch)

    async def _compute(self, batch: list[_Job]) -> None:
        """The batch prepared on the encoder's thread; a failing batch of several is retried one request at a time,
        so only the culprit gets the error."""
        t0 = time.perf_counter()
        try:
            prepared = await self._on_encoder(self.engine.prepare, [job.planned for job in batch], bucket_shape)
        except Exception as exc:  # noqa: BLE001 - every request of the batch gets the error
            if len(batch) == 1:
                _settle(batch[0], exc=exc)
                return
            for job in batch:
                try:
                    _settle(job, (await self._on_encoder(self.engine.prepare, [job.planned]))[0])
                except Exception as one:  # noqa: BLE001
                    _settle(job, exc=one)
            return
        for job, result in zip(batch, prepared):
            _settle(job, result)
        if self.on_batch is not None:
            self.on_batch(len(batch), sum(job.planned.tokens for job in batch), time.perf_counter() - t0)

    async def _on_encoder(self, fn: Callable[..., list[Prepared[Any]]], *args: Any) -> list[Prepared[Any]]:
        running = (self.run_on if self.run_on is not None else self.engine.encoder.runner).submit(fn, *args)
        with self._lock:
            self._running = running
        try:
            return await asyncio.wrap_future(running)
        finally:
            with self._lock:
                self._running = None


def _settle(job: _Job, result: Prepared[Any] | None = None, exc: BaseException | None = None) -> None:
    """The job's future answered on its own event loop, unless its request stopped waiting (cancelled)."""
    loop = job.future.get_loop()
    try:
        here = asyncio.get_running_loop() is loop
    except RuntimeError:
        here = False
    if not here:
        if not loop.is_closed():
            loop.call_soon_threadsafe(_settle, job, result, exc)
        return
    if job.future.done():
        return
    if exc is not None:
        job.future.set_exception(exc)
    else:
        job.future.set_result(result)  # type: ignore[arg-type]
