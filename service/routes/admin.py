"""POST /admin/reload (only when API keys are configured)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool

from service.dependencies import ERRORS, get_state, require_admin
from service.schemas import ErrorResponse, ReloadRequest
from service.state import ServiceState

router = APIRouter(prefix="/admin")


@router.post("/reload", responses={**ERRORS, 403: {"model": ErrorResponse}})
async def reload(request: ReloadRequest, http: Request, state: ServiceState = Depends(get_state)) -> dict[str, Any]:
    """Serve another index directory (or the configured one, read again) without failing a request:
    the new index is opened and warmed up beside the old one, which is released after its last
    request. Needs API keys to be configured (else 403); a failure leaves the old index serving."""
    require_admin(http)  # in the body, not a dependency: a bad body is a 422 before the 403, as it always was
    return await run_in_threadpool(state.reload_or_report, request.index)
