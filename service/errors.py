"""One error type for the API, mapped to HTTP codes in one place."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger(__name__)

STATUS = {"validation": 422, "overloaded": 429, "not_ready": 503, "not_found": 404, "internal": 500}


class ServiceError(Exception):
    def __init__(self, error_type: str, message: str, loc: tuple = ()) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.loc = loc  # the request field at fault, for validation errors


def _body(error_type: str, message: str, detail: list | None = None) -> dict:
    body = {"error": message, "error_type": error_type}
    if detail is not None:
        body["detail"] = detail
    return body


def _describe(err: dict) -> str:
    loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{loc}: {msg}"


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
        detail = [{"loc": list(exc.loc), "msg": exc.message, "type": "value_error"}] if exc.loc else None
        return JSONResponse(_body(exc.error_type, exc.message, detail), status_code=STATUS[exc.error_type])

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        message = "; ".join(_describe(e) for e in errors)
        return JSONResponse(_body("validation", message, errors), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # an unparsable body (e.g. not UTF-8) is a validation error like bad JSON
            detail = [{"loc": ["body"], "msg": str(exc.detail), "type": "body_invalid"}]
            return JSONResponse(_body("validation", f"body: {exc.detail}", detail), status_code=422)
        return JSONResponse(_body("http", str(exc.detail)), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error")
        return JSONResponse(_body("internal", f"internal error: {type(exc).__name__}"), status_code=500)
