"""POST /score: closed-set scoring of masks against given choices (fill.choices)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from fill.schemas import ScoreRequest, ScoreResult
from service.bodies import JsonRoute
from service.dependencies import ERRORS, ready_state
from service.state import ServiceState

router = APIRouter(route_class=JsonRoute)


@router.post("/score", response_model=ScoreResult, responses=ERRORS)
async def score(request: ScoreRequest, state: ServiceState = Depends(ready_state)) -> Response:
    """Per mask, each choice's probability: the share of the retrieved tokens' probability that votes for
    its phrases (NPM's zero-shot classification), with the occurrences that voted most."""
    result = await state.requests.score(request)  # already a ScoreResult: serialised once, not validated again
    return Response(result.model_dump_json(), media_type="application/json")
