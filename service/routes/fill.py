"""POST /fill."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from fill.schemas import FillRequest, FillResult
from service.bodies import JsonRoute
from service.dependencies import ERRORS, ready_state
from service.state import ServiceState

router = APIRouter(route_class=JsonRoute)


@router.post("/fill", response_model=FillResult, responses=ERRORS)
async def fill(request: FillRequest, state: ServiceState = Depends(ready_state)) -> Response:
    result = await state.requests.fill(request)  # already a FillResult: serialised once, not validated again
    return Response(result.model_dump_json(), media_type="application/json")
