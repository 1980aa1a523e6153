"""What routes depend on: the service state (the app's), the state with a ready engine, the API keys
requirement of admin routes, and the error responses every route documents."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Request

from common.errors import AppError
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


def require_admin(request: Request) -> None:
    """Admin routes need API keys configured (else 403: without keys anybody could use them)."""
    if not request.app.state.admin:
        raise AppError(
            "the admin routes are off: configure API keys (FILL_API_KEYS or FILL_API_KEYS_FILE) to use them",
            kind="forbidden",
        )
