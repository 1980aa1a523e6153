"""Optional API keys: with keys configured, every route but the probes needs `Authorization: Bearer <key>`."""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from service.errors import error_response

OPEN_PATHS = frozenset({"/healthz", "/readyz"})  # the orchestrator's probes carry no key


class ApiKeys:
    """401 (with `WWW-Authenticate: Bearer`) for a request without a valid key. The presented key is
    compared with every configured key in constant time, so neither which key nor how much of one
    matched shows in the response time."""

    def __init__(self, app: ASGIApp, keys: list[str]) -> None:
        if not keys:
            raise ValueError("ApiKeys needs at least one key")
        self.app = app
        self.keys = [k.encode() for k in keys]

    def valid(self, authorization: str | None) -> bool:
        scheme, _, token = (authorization or "").partition(" ")
        presented = token.strip().encode("utf-8", "replace")
        matched = False
        for key in self.keys:
            matched |= hmac.compare_digest(key, presented)
        return scheme.lower() == "bearer" and matched

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        authorization = Headers(scope=scope).get("authorization")
        if self.valid(authorization):
            await self.app(scope, receive, send)
            return
        reason = "missing Authorization header" if authorization is None else "invalid API key"
        await error_response("unauthorized", f"{reason}: send Authorization: Bearer <key>")(scope, receive, send)
