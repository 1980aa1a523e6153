"""The request path: a fill or a score admitted in a free slot (more requests in flight get 429), checked
against the per-request budget, given its deadline (504 once FILL_REQUEST_TIMEOUT has passed), and run by the
engine's driver (FillEngine.run) on a thread of its own through the server's lanes (service.lanes: batched with
the requests arriving meanwhile, then finished on a worker thread of its lane), counted in the metrics."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Callable, Protocol, TypeVar

from common.errors import AppError
from common.process import IdleTrim
from fill.budget import Budget
from fill.deadline import Deadline
from fill.engine import FillEngine
from fill.schemas import FillRequest, FillResult, ScoreRequest, ScoreResult
from service.config import Settings
from service.lanes import ServerLanes, Workers
from service.metrics import Metrics
from service.serving import Serving

Res = TypeVar("Res", FillResult, ScoreResult)


class Admitting(Protocol):
    """What the request path needs of the service's state (service.state.ServiceState)."""

    settings: Settings
    metrics: Metrics

    def using(self) -> AbstractContextManager[Serving]: ...

    def ready_engine(self) -> FillEngine: ...


class RequestPath:
    def __init__(self, state: Admitting) -> None:
        settings = state.settings
        self.state = state
        self.budget = Budget(settings.max_candidates, settings.max_evidence, settings.max_search, settings.max_matches)
        self.slots = threading.BoundedSemaphore(settings.max_concurrency)
        # a request's driver thread waits for its batch and its worker: one per request in flight
        self.drivers = ThreadPoolExecutor(settings.max_concurrency, thread_name_prefix="request")
        self.workers = Workers(settings)
        self.trim = IdleTrim()  # the allocator's free memory handed back once no request is in flight
        self._in_flight = 0
        self._count_lock = threading.Lock()

    def close(self) -> None:
        self.trim.busy()  # no trim after the close
        self.drivers.shutdown(wait=False)
        self.workers.close()

    async def fill(self, request: FillRequest) -> FillResult:
        """One fill (see the module doc)."""
        return await self.serve(lambda engine, deadline, lanes: engine.run(request, self.budget, deadline, lanes))

    async def score(self, request: ScoreRequest) -> ScoreResult:
        """One closed-set score, admitted, batched and timed out like a fill."""
        return await self.serve(lambda engine, deadline, lanes: engine.run(request, self.budget, deadline, lanes))

    async def serve(self, run: Callable[[FillEngine, Deadline, ServerLanes], Res]) -> Res:
        """`run(engine, deadline, lanes)` (the engine's driver for one request) admitted in a slot, on a driver
        thread, within the request's deadline, counted in the metrics."""
        state = self.state
        settings, metrics = state.settings, state.metrics
        state.ready_engine()
        if not self.slots.acquire(blocking=False):
            metrics.outcome("overloaded")
            raise AppError(f"too many requests in flight (max {settings.max_concurrency}); retry", kind="overloaded")
        t0 = time.perf_counter()
        deadline = Deadline(settings.request_timeout, t0)
        metrics.in_flight.inc()
        self._started()
        try:
            with state.using() as serving:
                lanes = ServerLanes(serving, self.workers, settings.heavy_weight, metrics)
                loop = asyncio.get_running_loop()  # the driver runs in this request's context (its log id)
                result = await loop.run_in_executor(
                    self.drivers, contextvars.copy_context().run, run, serving.engine, deadline, lanes
                )
        except AppError as exc:
            metrics.outcome("invalid" if exc.kind == "validation" else exc.kind)
            raise
        finally:
            self.slots.release()
            metrics.in_flight.dec()
            self._ended()
        metrics.filled(result, time.perf_counter() - t0)
        return result

    def _started(self) -> None:
        with self._count_lock:
            self._in_flight += 1
            self.trim.busy()

    def _ended(self) -> None:
        with self._count_lock:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.trim.idle()
