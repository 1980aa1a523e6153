"""What routes depend on: the service state (the app's), the state with a ready engine, and the error responses
every route documents (the keys and their roles are checked before any route: service.auth)."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Request

from service.schemas import ErrorResponse
from service.state import ServiceState

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (401, 413, 415, 422, 429, 503, 504)
}


async def get_state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


async def ready_state(state: ServiceState = Depends(get_state)) -> ServiceState:
    state.ready_engine()  # 503 before the body is looked at
    return state
