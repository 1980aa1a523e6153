"""GET / (a page to try fills and scores in a browser) and GET /page/{file} (its script and style), from the files of
service/page shipped in the package; no key needed (service.auth), off with FILL_PAGE=false. The page talks to
this server only: its Content-Security-Policy allows its own files and requests to this origin, nothing else, and no
other site may frame it. GET /favicon.ico (`icon`, served with the page off too): the icon a browser asks for on every
page it shows, without a key. Each also answers HEAD (the same headers, no body)."""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import Response

from common.errors import AppError
from service.auth import ICON_PATH, PAGE_FILES

_TYPES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript", "style.css": "text/css"}
_FILES = {name: (files("service") / "page" / name).read_bytes() for name in _TYPES}
_ICON = (files("service") / "page" / "favicon.png").read_bytes()
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",  # frame-ancestors, for browsers that do not read it
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
GET = ["GET", "HEAD"]

router = APIRouter(include_in_schema=False)
icon = APIRouter(include_in_schema=False)


@icon.api_route(ICON_PATH, methods=GET)
async def favicon() -> Response:
    return Response(_ICON, media_type="image/png", headers={"Cache-Control": "public, max-age=86400"})


@router.api_route("/", methods=GET)
async def page() -> Response:
    return Response(_FILES["index.html"], media_type=_TYPES["index.html"], headers=HEADERS)


@router.api_route(PAGE_FILES + "{name}", methods=GET)
async def page_file(name: str) -> Response:
    if name == "index.html" or name not in _FILES:
        raise AppError(f"the page has no file {name!r} (it has app.js and style.css)", kind="not_found")
    return Response(_FILES[name], media_type=_TYPES[name], headers=HEADERS)
