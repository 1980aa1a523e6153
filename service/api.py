"""The HTTP layer: the app, its middleware and its routers (service.routes) over the service state,
which holds the fill engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.auth import ApiKeys
from service.config import Role, Settings, get_settings
from service.errors import install_handlers
from service.limits import RequestLimits
from service.observe import Observe
from service.probe_limit import ProbeBuckets, ProbeLimit
from service.routes import admin as admin_routes
from service.routes import docs as docs_routes
from service.routes import documents as document_routes
from service.routes import fill as fill_routes
from service.routes import page as page_routes
from service.routes import probes as probe_routes
from service.routes import score as score_routes
from service.state import ServiceState


def create_app(
    settings: Settings | None = None, state: ServiceState | None = None, load: bool | None = None
) -> FastAPI:
    """The app over `state` (default: a new one). With `load` (default: when no state is given) the
    engine loads in the background at start-up and is closed at shutdown."""
    settings = settings or get_settings()
    load = state is None if load is None else load

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if load:
            app.state.service.start_loading()
        yield
        if load:
            app.state.service.close()

    app = FastAPI(
        title="NPM phrase fill",
        version="0.1.0",
        lifespan=lifespan,
        description="Fill <mask>s with phrases retrieved from a corpus, with evidence.",
        docs_url=None,  # served from the package, not a CDN (service.routes.docs)
        redoc_url=None,  # ReDoc comes from a CDN only
        swagger_ui_oauth2_redirect_url=None,  # no OAuth here
    )
    app.state.service = state or ServiceState(settings)
    keys = settings.keys()
    install_handlers(app)
    _middleware(app, settings, keys)
    for group in (probe_routes, fill_routes, score_routes, admin_routes, document_routes, docs_routes):
        app.include_router(group.router)
    app.include_router(page_routes.icon)
    if settings.page:
        app.include_router(page_routes.router)
    _document_budget(app, app.state.service.requests.budget.describe() | {"heavy_lane_over": settings.heavy_weight})
    return app


def _document_budget(app: FastAPI, budget: dict[str, Any]) -> None:
    """The server's cost budget in the OpenAPI schema: `x-cost-budget` on FillRequest and ScoreRequest, and a
    sentence in their descriptions."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            for name in ("FillRequest", "ScoreRequest"):
                component = schema.get("components", {}).get("schemas", {}).get(name)
                if component is not None:
                    component["x-cost-budget"] = budget
                    component["description"] = (
                        component.get("description", "")
                        + (
                            f" Cost budget of this server (over it: 422): search {budget['max_search']:,} hits "
                            f"({budget['search']}), candidates {budget['max_candidates']:,} ({budget['candidates']}), "
                            f"evidence {budget['max_evidence']:,} ({budget['evidence']}), phrase matches "
                            f"{budget['max_matches']:,} ({budget['matches']}); a request over "
                            f"{budget['heavy_lane_over']:g} default fills is served in the heavy lane."
                        )
                    ).strip()
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema


def _middleware(app: FastAPI, settings: Settings, keys: dict[str, Role]) -> None:
    # the last added is the outermost: CORS answers preflights, then the open probes' rate limit, then keys are
    # checked, then the body
    app.add_middleware(RequestLimits, max_body=settings.max_body_bytes, max_documents=settings.max_documents_bytes)
    app.add_middleware(ApiKeys, keys=keys)  # also without keys: the admin routes are off then
    if settings.probe_rate > 0:
        app.add_middleware(ProbeLimit, buckets=ProbeBuckets(settings.probe_rate, settings.probe_burst))
    if settings.origins():
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.origins(),
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
            expose_headers=["X-Request-ID", "Retry-After"],
        )
    app.add_middleware(Nosniff)
    app.add_middleware(Observe, metrics=app.state.service.metrics)


class Nosniff:
    """`X-Content-Type-Options: nosniff` on every response of the app (a refusal of a middleware too): a browser
    takes each as the type it says, never a JSON answer as HTML or script. (What the wire refuses before the app:
    service.wire.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_nosniff(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).setdefault("X-Content-Type-Options", "nosniff")
            await send(message)

        await self.app(scope, receive, send_nosniff)
