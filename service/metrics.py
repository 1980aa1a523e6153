"""Prometheus metrics of one app: HTTP requests by route and status, fill outcomes and latency (whole
and per engine stage), requests in flight and waiting for a batch, batch sizes, and what is served."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

from fill.schemas import FillResult, ScoreResult

if TYPE_CHECKING:  # (the engine's module loads torch; the metrics need only its type)
    from fill.engine import FillEngine

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.http = Counter(
            "http_requests", "HTTP requests by route template and status", ["route", "status"], registry=r
        )
        self.http_latency = Histogram(
            "http_request_seconds", "HTTP request latency by route template", ["route"], registry=r
        )
        self.requests = Counter("fill_requests", "fill requests by outcome", ["outcome"], registry=r)
        self.latency = Histogram("fill_seconds", "fill latency", registry=r)
        self.stages = Histogram("fill_stage_seconds", "fill latency per engine stage", ["stage"], registry=r)
        self.in_flight = Gauge("fill_in_flight", "fill requests admitted and not yet answered", registry=r)
        self.lanes = Counter(
            "fill_lane_requests",
            "admitted fill and score requests by lane (heavy: over FILL_HEAVY_WEIGHT default fills)",
            ["lane"],
            registry=r,
        )
        self.queue = Gauge("fill_queue_depth", "fill requests waiting for a batch", registry=r)
        self.batch_size = Histogram(
            "fill_batch_size", "requests per encode+search batch", buckets=BATCH_SIZES, registry=r
        )
        self.batch_tokens = Histogram(
            "fill_batch_tokens", "query tokens per batch", buckets=(16, 64, 256, 1024, 4096, 16384), registry=r
        )
        self.batch_seconds = Histogram("fill_batch_seconds", "encode+search time per batch", registry=r)
        self.index_tokens = Gauge("index_tokens", "tokens of the index served", registry=r)
        self.index_shards = Gauge("index_shards", "shards of the index served", registry=r)
        self.delta_shards = Gauge(
            "index_delta_shards",
            "delta shards of the index served (live updates not yet "
            "compacted; POST /admin/documents is refused at FILL_MAX_DELTA_SHARDS)",
            registry=r,
        )
        self.index_warm = Gauge(
            "index_warm",
            "1 once the served index's start-up work in the background is done (its pages mapped, FILL_WARM; its files "
            "hashed, FILL_CHECK_HASHES): fills run at full speed from then on; 0 while it runs",
            registry=r,
        )
        self.reloads = Counter("index_reloads", "index loads and reloads by outcome", ["outcome"], registry=r)
        self.model = Info("model", "the encoder served", registry=r)
        self.generation = Gauge(
            "index_generation", "changes (add, delete, compact) of the served index since its build", registry=r
        )
        self.updates = Counter(
            "index_updates", "document updates applied through the admin routes", ["operation"], registry=r
        )
        self.integrity_failures = Counter(
            "index_integrity_failures",
            "served indexes whose files failed their sha256 check (the server turned not ready)",
            registry=r,
        )

    def outcome(self, outcome: str) -> None:
        self.requests.labels(outcome).inc()

    def filled(self, result: FillResult | ScoreResult, seconds: float) -> None:
        self.latency.observe(seconds)
        for stage, ms in result.timings_ms.items():
            self.stages.labels(stage).observe(ms / 1000)
        self.outcome("ok")

    def batch(self, requests: int, tokens: int, seconds: float) -> None:
        self.batch_size.observe(requests)
        self.batch_tokens.observe(tokens)
        self.batch_seconds.observe(seconds)

    def serving(self, engine: FillEngine) -> None:
        """What is served now (after a load or reload): index size, model id."""
        described = engine.describe()
        self.index_tokens.set(described["counts"]["tokens"])
        self.index_shards.set(described["counts"]["shards"])
        self.generation.set(described["generation"])
        self.delta_shards.set(engine.index.manifest.delta_shards)
        model = described["model"]
        self.model.info(
            {
                "name": model["name"],
                "fingerprint": model["fingerprint"],
                "device": model["device"],
                "dtype": model["dtype"],
                "index": described["index"],
            }
        )

    def render(self) -> str:
        return generate_latest(self.registry).decode()
