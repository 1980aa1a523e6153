"""The request path, one function (`RequestPath.serve`) read top to bottom: a fill or a score admitted in a free slot
(more requests in flight get 429), planned on the event loop (checked against the per-request budget, tokenized),
given its deadline (504 once FILL_REQUEST_TIMEOUT has passed), prepared in a batch with the requests arriving
meanwhile (service.batcher: encoded and searched on the encoder's thread), then finished on a worker thread of its
lane (service.lanes: spans, rank, read, answers) and counted in the metrics. docs/ARCHITECTURE.md, "A fill, hop by
hop", names every step."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from contextlib import AbstractContextManager
from typing import Any, Protocol, overload

from common.errors import AppError
from common.process import IdleTrim
from fill.budget import Budget
from fill.deadline import Deadline
from fill.engine import FillEngine
from fill.prepared import Planned
from fill.schemas import FillRequest, FillResult, ScoreRequest, ScoreResult
from service.config import Settings
from service.lanes import Workers
from service.metrics import Metrics
from service.serving import Serving


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
        self.workers = Workers(settings)
        self.trim = IdleTrim()  # the allocator's free memory handed back once no request is in flight
        self._in_flight = 0
        self._count_lock = threading.Lock()

    def close(self) -> None:
        self.trim.busy()  # no trim after the close
        self.workers.close()

    async def fill(self, request: FillRequest) -> FillResult:
        """One fill (`serve`)."""
        return await self.serve(request)

    async def score(self, request: ScoreRequest) -> ScoreResult:
        """One closed-set score, admitted, batched and timed out like a fill (`serve`)."""
        return await self.serve(request)

    @overload
    async def serve(self, request: FillRequest) -> FillResult: ...

    @overload
    async def serve(self, request: ScoreRequest) -> ScoreResult: ...

    async def serve(self, request: FillRequest | ScoreRequest) -> FillResult | ScoreResult:
        """The whole path of one request, in three execution contexts: this event loop (admission, plan, batching),
        the encoder's thread (its batch's encoder pass and search; a heavy-lane batch's search runs on a niced thread
        of its own) and a worker of its lane (the finish step)."""
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
                engine = serving.engine
                planned: Planned[Any] = engine.plan(request, self.budget)
                lane = self.workers.lane(planned, serving)
                metrics.lanes.labels(lane.name).inc()
                prepared = await lane.batcher.prepared(planned, deadline)
                deadline.check("queue")
                loop = asyncio.get_running_loop()  # the finish step runs in this request's context (its log id)
                finish = contextvars.copy_context().run
                result: FillResult | ScoreResult = await loop.run_in_executor(
                    lane.pool, finish, engine.finish, prepared, deadline
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
