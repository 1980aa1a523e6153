"""The HTTP layer: thin routes over the service state (which holds the fill engine)."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import PlainTextResponse

from service.auth import ApiKeys
from service.config import Settings, get_settings
from service.engine import FillEngine
from service.errors import install_handlers
from service.limits import RequestLimits
from service.schemas import ErrorResponse, FillRequest, FillResult
from service.state import WARMUP, ServiceState

ERRORS = {code: {"model": ErrorResponse} for code in (401, 413, 415, 422, 429, 503)}


def get_state(request: Request) -> ServiceState:
    return request.app.state.service


def ready_engine(state: ServiceState = Depends(get_state)) -> FillEngine:
    return state.ready_engine()


def ready_state(state: ServiceState = Depends(get_state)) -> ServiceState:
    state.ready_engine()  # 503 before the body is looked at
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
    install_handlers(app)
    # the last added is the outermost: CORS answers preflights, then keys are checked, then the body
    app.add_middleware(RequestLimits, max_body=settings.max_body_bytes)
    keys = settings.keys()
    if keys:
        app.add_middleware(ApiKeys, keys=keys)
    if settings.origins():
        app.add_middleware(CORSMiddleware, allow_origins=settings.origins(), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type", "X-Request-ID"])

    @app.get("/healthz")
    def healthz() -> dict:
        return {"status": "alive"}

    @app.get("/readyz", responses=ERRORS)
    def readyz(engine: FillEngine = Depends(ready_engine)) -> dict:
        engine.fill(WARMUP)  # exercises the encoder and the index for real
        return {"status": "ready"}

    app.add_api_route("/healthz", healthz, methods=["HEAD"], include_in_schema=False)
    app.add_api_route("/readyz", readyz, methods=["HEAD"], include_in_schema=False, responses=ERRORS)

    @app.get("/info", responses=ERRORS)
    def info(engine: FillEngine = Depends(ready_engine)) -> dict:
        return engine.describe()

    @app.post("/fill", response_model=FillResult, responses=ERRORS)
    def fill(req: FillRequest, state: ServiceState = Depends(ready_state)) -> FillResult:
        return state.fill(req)

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics(state: ServiceState = Depends(get_state)) -> PlainTextResponse:
        return PlainTextResponse(state.metrics.render(), media_type=state.metrics.content_type)

    return app
