"""Every error of the HTTP layer becomes `{error, error_type, detail}` with the status of its kind, taken
from the one table in `common.errors` (AppError, request validation, the framework's own 404/405...)."""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from common.errors import STATUS, AppError, kind_for_status

logger = logging.getLogger(__name__)


# headers that every response of a kind carries: when to retry, how to authenticate
KIND_HEADERS: dict[str, dict[str, str]] = {
    "overloaded": {"Retry-After": "1"},
    "not_ready": {"Retry-After": "5"},
    "unauthorized": {"WWW-Authenticate": "Bearer"},
}

# an absolute path of the server machine ("/home/x/index/shard-00000/vectors.npy"): its last two parts stay;
# not a route after its HTTP method ("POST /admin/documents")
_ABSOLUTE_PATH = re.compile(
    r"(?<![\w.:/])(?<!GET )(?<!PUT )(?<!POST )(?<!DELETE )"  # not a route after its HTTP method
    r"/(?:[^\s/'\"():,]+/)*?((?:[^\s/'\"():,]+/)?[^\s/'\"():,]+)(?![^\s'\"():,])"
)


def redact(message: str) -> str:
    """The message without the server's absolute paths (their last two parts stay, enough to name the file)."""
    return _ABSOLUTE_PATH.sub(r"\1", message)


def error_response(
    kind: str, message: str, detail: list[dict[str, Any]] | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    body: dict[str, Any] = {"error": redact(message), "error_type": kind}
    if detail is not None:
        body["detail"] = detail
    return JSONResponse(body, status_code=STATUS[kind], headers={**KIND_HEADERS.get(kind, {}), **(headers or {})})


def _describe(err: dict[str, Any]) -> str:
    loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
    if err.get("type") == "json_invalid":  # loc is (body, char position)
        return f"body: invalid JSON at char {err['loc'][-1]}: {err.get('ctx', {}).get('error', 'decode error')}"
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{loc}: {msg}"


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(AppError)
    async def _app_error(_: Request, exc: AppError) -> JSONResponse:
        if exc.field is None:
            return error_response(exc.kind, exc.message)
        detail = [{"loc": ["body", exc.field], "msg": redact(exc.message), "type": "value_error"}]
        return error_response(exc.kind, f"{exc.field}: {exc.message}", detail)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        message = "; ".join(_describe(e) for e in exc.errors())
        return error_response("validation", message, errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = kind_for_status(exc.status_code)
        if exc.status_code == 400:  # an unparsable body (e.g. not UTF-8) is a validation error like bad JSON
            detail = [{"loc": ["body"], "msg": str(exc.detail), "type": "body_invalid"}]
            return error_response(kind, f"body: {exc.detail}", detail)
        return error_response(kind, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error")
        return error_response("internal", f"internal error: {type(exc).__name__}")
