"""GET (and HEAD) /healthz, /readyz; GET /info, /metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse

from service.dependencies import ERRORS, get_state
from service.state import WARMUP, ServiceState

router = APIRouter()


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "alive"}


@router.get("/readyz", responses=ERRORS)
def readyz(state: ServiceState = Depends(get_state)) -> dict[str, str]:
    with state.using() as serving:  # 503 while loading; a reload cannot close it meanwhile
        serving.engine.fill(WARMUP)  # exercises the encoder and the index for real
    return {"status": "ready"}


router.add_api_route("/healthz", healthz, methods=["HEAD"], include_in_schema=False)
router.add_api_route("/readyz", readyz, methods=["HEAD"], include_in_schema=False, responses=ERRORS)


@router.get("/info", responses=ERRORS)
def info(state: ServiceState = Depends(get_state)) -> dict[str, Any]:
    with state.using() as serving:
        return serving.engine.describe()


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(state: ServiceState = Depends(get_state)) -> PlainTextResponse:
    return PlainTextResponse(state.metrics.render(), media_type=state.metrics.content_type)
