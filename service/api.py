"""The HTTP layer: thin routes over the fill engine."""

from __future__ import annotations

import time
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from encoder.model import QueryError
from service.config import Settings, get_settings
from service.engine import FillParams, ModeError
from service.errors import ServiceError, install_handlers
from service.schemas import ErrorResponse, FillRequest, FillResponse
from service.state import WARMUP, ServiceState

ERRORS = {422: {"model": ErrorResponse}, 429: {"model": ErrorResponse}, 503: {"model": ErrorResponse}}


def get_state(request: Request) -> ServiceState:
    return request.app.state.service


def ready_state(state: ServiceState = Depends(get_state)) -> ServiceState:
    if not state.ready or state.engine is None:
        reason = f"failed to load: {state.error}" if state.error else "model and index are loading"
        raise ServiceError("not_ready", f"service not ready ({reason})")
    return state


def create_app(settings: Settings | None = None, state: ServiceState | None = None) -> FastAPI:
    """The app; `state` may be given ready-made (tests), else the engine loads in the background."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if state is None:
            app.state.service.start_loading()
        yield

    app = FastAPI(title="NPM phrase fill", version="0.1.0", lifespan=lifespan,
                  description="Fill <mask>s with phrases retrieved from a corpus, with evidence.")
    app.state.service = state or ServiceState(settings)
    registry = CollectorRegistry()
    requests = Counter("fill_requests", "fill requests by outcome", ["outcome"], registry=registry)
    latency = Histogram("fill_seconds", "fill latency", registry=registry)
    stages = Histogram("fill_stage_seconds", "fill latency per engine stage", ["stage"], registry=registry)
    install_handlers(app)

    @app.get("/healthz")
    def healthz() -> dict:
        return {"status": "alive"}

    @app.get("/readyz", responses=ERRORS)
    def readyz(state: ServiceState = Depends(ready_state)) -> dict:
        state.engine.fill("<mask>", WARMUP)  # exercises the encoder and the index for real
        return {"status": "ready"}

    @app.get("/info", responses=ERRORS)
    def info(state: ServiceState = Depends(ready_state)) -> dict:
        m = state.engine.index.manifest
        enc = state.engine.encoder
        return {
            "index": str(state.engine.index.root),
            "created_at": m.created_at,
            "model": {"path": str(enc.model_dir), "fingerprint": m.model.fingerprint, "type": m.model.model_type,
                      "device": str(enc.device), "dtype": str(enc.dtype).replace("torch.", "")},
            "dim": m.dim,
            "index_type": m.index_type,
            "factories": sorted({s.factory for s in m.shards}),
            "vector_dtype": m.vector_dtype,
            "counts": m.counts.model_dump(),
            "build": m.build,
        }

    @app.post("/fill", response_model=FillResponse, responses=ERRORS)
    def fill(req: FillRequest, state: ServiceState = Depends(ready_state)) -> FillResponse:
        if not state.slots.acquire(blocking=False):
            requests.labels("overloaded").inc()
            raise ServiceError("overloaded", f"too many requests in flight (max {settings.max_concurrency}); retry")
        t0 = time.perf_counter()
        try:
            params = FillParams(top_k=req.top_k, k=req.k, max_span_tokens=req.max_span_tokens, alpha=req.alpha,
                                evidence=req.evidence, case_sensitive=req.case_sensitive, mode=req.mode,
                                blocks=req.blocks, drop_stopwords=req.drop_stopwords, aggregate=req.aggregate)
            result = state.engine.fill(req.text, params)
        except QueryError as exc:
            requests.labels("invalid").inc()
            raise ServiceError("validation", f"text: {exc}", loc=("body", "text")) from exc
        except ModeError as exc:
            requests.labels("invalid").inc()
            raise ServiceError("validation", f"mode: {exc}", loc=("body", "mode")) from exc
        finally:
            state.slots.release()
        latency.observe(time.perf_counter() - t0)
        for stage, ms in result.timings_ms.items():
            stages.labels(stage).observe(ms / 1000)
        requests.labels("ok").inc()
        return FillResponse.model_validate(result, from_attributes=True)

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(registry).decode(), media_type=CONTENT_TYPE_LATEST)

    return app
