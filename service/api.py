"""The HTTP layer: thin routes over the service state (which holds the fill engine)."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import PlainTextResponse, Response

from common.errors import AppError

from service.auth import ApiKeys
from service.config import Settings, get_settings
from service.errors import install_handlers
from service.limits import RequestLimits
from service.observe import Observe
from service.schemas import ErrorResponse, FillRequest, FillResult, ReloadRequest
from service.state import WARMUP, ServiceState

ERRORS = {code: {"model": ErrorResponse} for code in (401, 413, 415, 422, 429, 503, 504)}


async def get_state(request: Request) -> ServiceState:
    return request.app.state.service


async def ready_state(state: ServiceState = Depends(get_state)) -> ServiceState:
    state.ready_engine()  # 503 before the body is looked at
    return state


def create_app(settings: Settings | None = None, state: ServiceState | None = None,
               load: bool | None = None) -> FastAPI:
    """The app over `state` (default: a new one). With `load` (default: when no state is given) the
    engine loads in the background at start-up and is closed at shutdown."""
    settings = settings or get_settings()
    load = state is None if load is None else load

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if load:
            app.state.service.start_loading()
        yield
        if load:
            app.state.service.close()

    app = FastAPI(title="NPM phrase fill", version="0.1.0", lifespan=lifespan,
                  description="Fill <mask>s with phrases retrieved from a corpus, with evidence.")
    service = app.state.service = state or ServiceState(settings)
    install_handlers(app)
    # the last added is the outermost: CORS answers preflights, then keys are checked, then the body
    app.add_middleware(RequestLimits, max_body=settings.max_body_bytes)
    keys = settings.keys()
    if keys:
        app.add_middleware(ApiKeys, keys=keys)
    if settings.origins():
        app.add_middleware(CORSMiddleware, allow_origins=settings.origins(), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
                           expose_headers=["X-Request-ID", "Retry-After"])
    app.add_middleware(Observe, metrics=service.metrics)

    @app.get("/healthz")
    def healthz() -> dict:
        return {"status": "alive"}

    @app.get("/readyz", responses=ERRORS)
    def readyz(state: ServiceState = Depends(get_state)) -> dict:
        with state.using() as serving:  # 503 while loading; a reload cannot close it meanwhile
            serving.engine.fill(WARMUP)  # exercises the encoder and the index for real
        return {"status": "ready"}

    app.add_api_route("/healthz", healthz, methods=["HEAD"], include_in_schema=False)
    app.add_api_route("/readyz", readyz, methods=["HEAD"], include_in_schema=False, responses=ERRORS)

    @app.get("/info", responses=ERRORS)
    def info(state: ServiceState = Depends(get_state)) -> dict:
        with state.using() as serving:
            return serving.engine.describe()

    @app.post("/fill", response_model=FillResult, responses=ERRORS)
    async def fill(req: FillRequest, state: ServiceState = Depends(ready_state)) -> Response:
        result = await state.fill(req)  # already a FillResult: serialised once, not validated again
        return Response(result.model_dump_json(), media_type="application/json")

    @app.post("/admin/reload", responses={**ERRORS, 403: {"model": ErrorResponse}})
    async def reload(req: ReloadRequest, state: ServiceState = Depends(get_state)) -> dict:
        """Serve another index directory (or the configured one, read again) without failing a request:
        the new index is opened and warmed up beside the old one, which is released after its last
        request. Needs API keys to be configured (else 403); a failure leaves the old index serving."""
        if not keys:
            raise AppError("the admin routes are off: configure API keys (FILL_API_KEYS or FILL_API_KEYS_FILE) "
                           "to use them", kind="forbidden")
        return await run_in_threadpool(state.reload_or_report, req.index)

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics(state: ServiceState = Depends(get_state)) -> PlainTextResponse:
        return PlainTextResponse(state.metrics.render(), media_type=state.metrics.content_type)

    return app
