"""The JSON body of a route, parsed with messages that name the problem: FastAPI answers every body its
`json.loads` cannot take but bad JSON "There was an error parsing the body". `JsonRoute` (the route class of the
routers with a JSON body) parses it with `parse_json`: a body nested too deeply, an integer past Python's digit
limit, bytes that are not UTF-8 are each a 422 saying so (the documents route says the same: service.routes.documents).
A body with a Content-Encoding is refused before it is read (415: service.limits)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

FLAT = "send a JSON object of the request's fields"


def _charset(content_type: str) -> str | None:
    """The charset a Content-Type declares (`application/json; charset=latin-1` -> latin-1), or None."""
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"') or None
    return None


def parse_json(body: bytes, content_type: str = "") -> Any:
    """The JSON value of a body (UTF-8, RFC 8259 8.1); bad JSON raises json's JSONDecodeError (FastAPI's 422 with
    its position), any other body an HTTPException 400 (answered as a 422 `body: <problem>`: service.errors) naming
    the problem: not UTF-8 (the byte and its position; a declared charset other than UTF-8), nested too deeply,
    an integer of too many digits."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        declared = _charset(content_type)
        named = f" (the declared charset {declared} is not accepted)" if declared else ""
        raise HTTPException(
            400,
            f"body is not UTF-8{named}: byte 0x{body[exc.start]:02x} at position {exc.start} is "
            f"{exc.reason}; send the JSON encoded as UTF-8",
        ) from None
    try:
        return json.loads(text)
    except RecursionError:  # json's parser recurses once per level of arrays and objects
        raise HTTPException(400, f"body is nested too deeply (arrays or objects inside each other): {FLAT}") from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # int() past sys.get_int_max_str_digits(); the only other ValueError json raises
        given = str(exc).rsplit("value has ", 1)[-1].split(";", 1)[0] if "value has " in str(exc) else "too many digits"
        raise HTTPException(
            400,
            f"body has an integer of {given}, more than the {sys.get_int_max_str_digits()} digits a number may have: "
            f"{FLAT} with numbers in their bounds",
        ) from None


class JsonRequest(Request):
    """A request whose `json()` is `parse_json` of its body."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body(), self.headers.get("content-type", ""))
        return self._json


class JsonRoute(APIRoute):
    """A route whose JSON body is parsed by `parse_json` (its errors name the problem)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(JsonRequest(request.scope, request.receive))

        return handle
