"""POST /admin/reload (admin keys only: service.auth)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool

from service.auth import ADMIN_PREFIX
from service.bodies import JsonRoute
from service.dependencies import ERRORS, get_state
from service.schemas import ErrorResponse, ReloadRequest
from service.state import ServiceState

router = APIRouter(prefix=ADMIN_PREFIX, route_class=JsonRoute)


@router.post("/reload", responses={**ERRORS, 403: {"model": ErrorResponse}})
async def reload(request: ReloadRequest, state: ServiceState = Depends(get_state)) -> dict[str, Any]:
    """Serve another index directory (or the configured one, read again) without failing a request:
    the new index is opened and warmed up beside the old one, which is released after its last
    request. Needs an admin key (else 403, before the body is read); the directory must lie under the reload root
    (service.state.reload_target); a failure leaves the old index serving."""
    return await run_in_threadpool(state.reload_or_report, request.index)
