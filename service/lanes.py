"""The server's two lanes. A request costing more than FILL_HEAVY_WEIGHT default fills (Planned.cost, fill.budget)
takes the heavy lane: a batching loop of its own (service.batcher; its batches never hold a cheap request) and
worker threads of its own at a lower CPU priority (FILL_HEAVY_WORKERS at FILL_HEAVY_NICE), so cheap requests never
queue behind its finish step; the others take the light lane (FILL_WORKERS)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from common.priority import lower_this_thread
from fill.prepared import Planned
from service.batcher import Batcher
from service.config import Settings
from service.serving import Serving


@dataclass(frozen=True)
class Lane:
    """Where a request's steps run: its batching loop (prepare) and its worker threads (finish)."""

    name: str  # "light" or "heavy" (the metric's label)
    batcher: Batcher
    pool: ThreadPoolExecutor


class Workers:
    """The finishing threads of the two lanes."""

    def __init__(self, settings: Settings) -> None:
        self.heavy_weight = settings.heavy_weight
        self.light = ThreadPoolExecutor(settings.fill_workers, thread_name_prefix="fill")
        self.heavy = ThreadPoolExecutor(
            settings.heavy_workers,
            thread_name_prefix="fill-heavy",
            initializer=lower_this_thread,
            initargs=(settings.heavy_nice,),
        )

    def lane(self, planned: Planned[Any], serving: Serving) -> Lane:
        """The lane of a planned request, by its cost."""
        if planned.cost > self.heavy_weight:
            return Lane("heavy", serving.heavy, self.heavy)
        return Lane("light", serving.batcher, self.light)

    def close(self) -> None:
        self.light.shutdown(wait=False)
        self.heavy.shutdown(wait=False)
