"""Prometheus metrics of one app: requests by outcome, latency, and latency per engine stage."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from service.schemas import FillResult


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("fill_requests", "fill requests by outcome", ["outcome"], registry=self.registry)
        self.latency = Histogram("fill_seconds", "fill latency", registry=self.registry)
        self.stages = Histogram("fill_stage_seconds", "fill latency per engine stage", ["stage"], registry=self.registry)

    def outcome(self, outcome: str) -> None:
        self.requests.labels(outcome).inc()

    def filled(self, result: FillResult, seconds: float) -> None:
        self.latency.observe(seconds)
        for stage, ms in result.timings_ms.items():
            self.stages.labels(stage).observe(ms / 1000)
        self.outcome("ok")

    def render(self) -> str:
        return generate_latest(self.registry).decode()
