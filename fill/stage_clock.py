"""The time a request spends in each stage of the engine, its deadline checked at every lap."""

from __future__ import annotations

import time

from fill.deadline import Deadline
from fill.schemas import STAGES


class StageClock:
    """The engine's time per stage of one fill (FillResult.timings_ms), checking the deadline at each lap."""

    def __init__(
        self, encode_ms: float, search_ms: float, deadline: Deadline | None, stages: tuple[str, ...] = STAGES
    ) -> None:
        self.spent = dict.fromkeys(stages, 0.0)
        self.spent["encode"], self.spent["search"] = encode_ms, search_ms
        self.deadline = deadline
        self.mark = time.perf_counter()
        if deadline is not None:
            deadline.check("queue")

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.spent[stage] += (now - self.mark) * 1000
        self.mark = now
        if self.deadline is not None:
            self.deadline.check(stage)

    def timings(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.spent.items()}
