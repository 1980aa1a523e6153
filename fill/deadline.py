"""A request's time limit, checked between the engine's steps (so a late request stops computing, not only its
response)."""

from __future__ import annotations

import time

from common.errors import AppError


class Deadline:
    """A request's time limit: `check` raises AppError (timeout, 504) once `seconds` have passed since
    `start` (time.perf_counter)."""

    def __init__(self, seconds: float, start: float | None = None) -> None:
        self.seconds = seconds
        self.at = (time.perf_counter() if start is None else start) + seconds

    def left(self) -> float:
        return self.at - time.perf_counter()

    def check(self, stage: str) -> None:
        if time.perf_counter() > self.at:
            raise self.error(stage)

    def error(self, stage: str) -> AppError:
        return AppError(
            f"request timed out after {self.seconds:g} s (FILL_REQUEST_TIMEOUT), in its {stage} "
            "stage; retry later, or ask for less (k, max_span_tokens, masks)",
            kind="timeout",
        )
