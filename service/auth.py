"""API keys with roles, checked before a route reads its body: with keys configured, every route but the probes, the
page and the icon needs `Authorization: Bearer <key>` (else 401); the admin routes (`/admin/...`) need an admin key (a
fill key: 403), and with no keys at all they are off (403), since anybody could use them. A CORS preflight never
reaches this gate: the CORS middleware, outside it, answers those (service.api); any other OPTIONS needs a key like
every other method."""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from service.config import Role
from service.errors import error_response

ICON_PATH = "/favicon.ico"  # what a browser asks for on every page it shows, with no key (service.routes.page)
# the orchestrator's probes carry no key, nor does the page, nor a browser's request for the icon
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/", ICON_PATH})
PAGE_FILES = "/page/"  # the page's script and style (service.routes.page): open too; its requests carry the key
ADMIN_PREFIX = "/admin"  # the routes that change what is served (service.routes.admin, service.routes.documents)


def is_admin_path(path: str) -> bool:
    return path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/")


class ApiKeys:
    """The gate in front of every route. The presented key is compared with every configured key in constant time,
    so neither which key nor how much of one matched shows in the response time; its role is looked up after."""

    def __init__(self, app: ASGIApp, keys: dict[str, Role]) -> None:
        self.app = app
        self.keys = [(key.encode(), role) for key, role in keys.items()]

    def role_of(self, authorization: str | None) -> Role | None:
        """The role of the key in an `Authorization: Bearer <key>` header, None when it names no configured key."""
        scheme, _, token = (authorization or "").partition(" ")
        presented = token.strip().encode("utf-8", "replace")
        found: Role | None = None
        for key, role in self.keys:
            if hmac.compare_digest(key, presented):
                found = role
        return found if scheme.lower() == "bearer" else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in OPEN_PATHS or path.startswith(PAGE_FILES):
            await self.app(scope, receive, send)
            return
        admin = is_admin_path(scope["path"])
        if not self.keys:
            if admin:
                await error_response(
                    "forbidden",
                    "the admin routes are off: configure admin keys (FILL_ADMIN_KEYS, or a key with the role admin "
                    "in FILL_API_KEYS_FILE) to use them",
                )(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        authorization = Headers(scope=scope).get("authorization")
        role = self.role_of(authorization)
        if role is None:
            reason = "missing Authorization header" if authorization is None else "invalid API key"
            await error_response("unauthorized", f"{reason}: send Authorization: Bearer <key>")(scope, receive, send)
            return
        if admin and role != "admin":
            await error_response(
                "forbidden",
                f"{scope['method']} {scope['path']} needs an admin key (FILL_ADMIN_KEYS); this key may use POST /fill, "
                "POST /score and the read-only routes",
            )(scope, receive, send)
            return
        await self.app(scope, receive, send)
