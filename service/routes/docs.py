"""GET /docs: Swagger UI over this server's OpenAPI schema (/openapi.json). Its script and style are the files of the
fastapi-offline package (pinned in pyproject.toml; no CDN), its page and start script are service/page's docs.html
and docs.js (no inline script), all served under a Content-Security-Policy that allows this origin's files and
requests only, and no framing. Needs a key like the schema it shows (service.auth); each route also answers HEAD."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import Response

from common.errors import AppError

DOCS = "/docs"
_VENDORED = files("fastapi_offline") / "static"
_OWN = files("service") / "page"
# the name under /docs/ -> (the file, its type)
_FILES = {
    "swagger-ui-bundle.js": (_VENDORED / "swagger-ui-bundle.js", "text/javascript"),
    "swagger-ui.css": (_VENDORED / "swagger-ui.css", "text/css"),
    "start.js": (_OWN / "docs.js", "text/javascript"),
}
HEADERS = {
    # Swagger UI's icons are data: URIs in its style; its requests (the schema, "Try it out") go to this origin
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",  # frame-ancestors, for browsers that do not read it
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(prefix=DOCS, include_in_schema=False)


@cache
def _read(name: str) -> bytes:
    """A file of the docs, read once when first asked for (Swagger UI's script is 1.5 MB: not at start-up)."""
    return _OWN.joinpath("docs.html").read_bytes() if name == "" else _FILES[name][0].read_bytes()


@router.api_route("", methods=["GET", "HEAD"])
async def docs() -> Response:
    return Response(_read(""), media_type="text/html; charset=utf-8", headers=HEADERS)


@router.api_route("/{name}", methods=["GET", "HEAD"])
async def docs_file(name: str) -> Response:
    if name not in _FILES:
        raise AppError(f"the docs have no file {name!r} (they have {', '.join(sorted(_FILES))})", kind="not_found")
    return Response(_read(name), media_type=_FILES[name][1], headers=HEADERS)
