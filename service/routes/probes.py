"""GET (and HEAD) /healthz, /readyz; GET /info, /metrics.

The probes need no key (service.auth) and do no work: /readyz answers from the service's state, the index installed
only once its warm-up fill passed (service.state) and unserved the moment one of its files fails a check
(service.index_watch, or a fill that read damaged bytes), never by running a fill of its own, so that however often
an orchestrator or anybody else calls it, the fills it stands beside do not pay for it. Both run on the event loop
(no thread hop). One client address flooding them gets 429 (service.probe_limit: a token bucket per address,
FILL_PROBE_RATE a second, far above what a kubelet sends, which is therefore never refused)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse

from service.dependencies import ERRORS, get_state
from service.state import ServiceState

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "alive"}


@router.get("/readyz", responses=ERRORS)
async def readyz(state: ServiceState = Depends(get_state)) -> dict[str, str]:
    state.ready_engine()  # 503 naming why: loading, failed to load, or a file of the index failed its check
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
