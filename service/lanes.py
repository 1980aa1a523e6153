"""The server's lanes (fill.prepared.Lanes): where the engine's driver (FillEngine.run) has a request's prepare
and finish steps run. A request costing more than FILL_HEAVY_WEIGHT default fills (Planned.cost, fill.budget)
takes the heavy lane: a batcher of its own (at a lower CPU priority) and worker threads of its own, so cheap
requests never queue behind it; the others take the light lane. The prepare step waits for the request's batch
(service.batcher) until its deadline (504 naming the queue); the finish step runs on a worker thread of the
lane, in the request's context (its log id)."""

from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from common.priority import lower_this_thread
from fill.deadline import Deadline
from fill.prepared import Planned, Prepared, Req
from service.config import Settings
from service.metrics import Metrics
from service.serving import Serving

T = TypeVar("T")


class Workers:
    """The finishing threads of the two lanes (FILL_WORKERS, FILL_HEAVY_WORKERS at FILL_HEAVY_NICE)."""

    def __init__(self, settings: Settings) -> None:
        self.light = ThreadPoolExecutor(settings.fill_workers, thread_name_prefix="fill")
        self.heavy = ThreadPoolExecutor(
            settings.heavy_workers,
            thread_name_prefix="fill-heavy",
            initializer=lower_this_thread,
            initargs=(settings.heavy_nice,),
        )

    def close(self) -> None:
        self.light.shutdown(wait=False)
        self.heavy.shutdown(wait=False)


class ServerLanes:
    """The lanes of one served engine (`serving`: its two batchers) for the requests of the server."""

    def __init__(self, serving: Serving, workers: Workers, heavy_weight: float, metrics: Metrics) -> None:
        self.serving, self.workers, self.heavy_weight, self.metrics = serving, workers, heavy_weight, metrics

    def heavy(self, planned: Planned[Any]) -> bool:
        return planned.cost > self.heavy_weight

    def prepare(self, planned: Planned[Req], deadline: Deadline | None) -> Prepared[Req]:
        heavy = self.heavy(planned)
        self.metrics.lanes.labels("heavy" if heavy else "light").inc()
        future = (self.serving.heavy if heavy else self.serving.batcher).submit(planned)
        try:
            prepared: Prepared[Req] = future.result(timeout=max(deadline.left(), 0) if deadline is not None else None)
        except TimeoutError:
            future.cancel()  # not batched yet: dropped from the queue
            assert deadline is not None  # (no deadline: the wait has no timeout)
            raise deadline.error("queue") from None
        return prepared

    def finish(self, planned: Planned[Req], work: Callable[[], T]) -> T:
        pool = self.workers.heavy if self.heavy(planned) else self.workers.light
        return pool.submit(contextvars.copy_context().run, work).result()
