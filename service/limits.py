"""Limits at the door, before a route runs: the request's framing (both Content-Length and Transfer-Encoding: 400,
the connection closed, RFC 9112 6.3) and path (percent-escapes that do not encode UTF-8: 400), the body's size
(413, checked before the body is read), media type and encoding (415: JSON, sent uncompressed). What happens on
the wire before a request reaches the app (deadlines, what the HTTP parser refuses, absolute-form targets,
closing): service.wire."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import unquote_to_bytes

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import error_response

if TYPE_CHECKING:
    pass

BODY_METHODS = ("POST", "PUT", "PATCH")


DOCUMENTS_PATH = "/admin/documents"  # its body (documents to add) has its own limit and may be JSON lines
JSON_LINES = ("application/x-ndjson", "application/jsonl", "application/json-lines")


def _is_json(content_type: str, lines: bool = False) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return (
        media == "application/json"
        or (media.startswith("application/") and media.endswith("+json"))
        or (lines and media in JSON_LINES)
    )


class RequestLimits:
    """A body larger than `max_body` bytes (`max_documents` for POST /admin/documents) gets 413: at once when
    Content-Length says so, else when the streamed body passes the limit (the rest is never read). A body that
    is not JSON (or JSON lines, for the documents), or has a Content-Encoding other than identity, gets 415."""

    def __init__(self, app: ASGIApp, max_body: int, max_documents: int | None = None) -> None:
        self.app = app
        self.max_body = max_body
        self.max_documents = max_documents or max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refused = _framing_or_path_problem(scope, headers)
        if refused is not None:
            await refused(scope, receive, send)
            return
        length = headers.get("content-length")
        documents = scope["path"] == DOCUMENTS_PATH
        limit = self.max_documents if documents else self.max_body
        refused = None
        if length is not None and not length.isdigit():
            refused = error_response("validation", f"Content-Length {length!r} is not a number of bytes")
        elif length is not None and int(length) > limit:
            refused = error_response(
                "payload_too_large", f"request body of {length} bytes is larger than the limit of {limit} bytes"
            )
        if refused is not None:
            await refused(scope, receive, send)
            return
        has_body = (length is not None and length != "0") or "chunked" in headers.get("transfer-encoding", "").lower()
        encoded = _encoding_problem(headers) if scope["method"] in BODY_METHODS and has_body else None
        if encoded is not None:
            await encoded(scope, receive, send)
            return
        if scope["method"] in BODY_METHODS and has_body and not _is_json(headers.get("content-type", ""), documents):
            given = headers.get("content-type")
            lines = " (or application/x-ndjson for JSON lines)" if documents else ""
            await error_response(
                "unsupported_media_type",
                f"request body must be JSON: send Content-Type: application/json{lines} (got "
                f"{given or 'no Content-Type'})",
            )(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise HTTPException(413, f"request body is larger than the limit of {limit} bytes")
            return message

        await self.app(scope, limited, send)


def _encoding_problem(headers: Headers) -> JSONResponse | None:
    """The 415 response for a body with a Content-Encoding other than identity (gzip, br...): the server reads
    bodies as sent (RFC 7694: the answer's Accept-Encoding says which it takes)."""
    codings = [c.strip() for value in headers.getlist("content-encoding") for c in value.split(",") if c.strip()]
    given = [c for c in codings if c.lower() != "identity"]
    if not given:
        return None
    return error_response(
        "unsupported_media_type",
        f"request body has Content-Encoding {', '.join(codings)}, which is not accepted: send the body uncompressed "
        "(no Content-Encoding, or identity)",
        headers={"Accept-Encoding": "identity"},
    )


def _framing_or_path_problem(scope: Scope, headers: Headers) -> JSONResponse | None:
    """The 400 response (closing the connection) for a request smuggling's ambiguity or an undecodable path."""
    close = {"Connection": "close"}
    if "content-length" in headers and "transfer-encoding" in headers:
        return error_response(
            "bad_request",
            "request has both Content-Length and Transfer-Encoding (ambiguous framing, RFC 9112 6.3): send one; "
            "the connection is closed",
            headers=close,
        )
    try:
        unquote_to_bytes(scope.get("raw_path") or b"").decode("utf-8")
    except UnicodeDecodeError:
        return error_response(
            "bad_request",
            "request path has percent-escapes that do not encode UTF-8 text (e.g. %E9): escape the UTF-8 bytes "
            "(%C3%A9 for é)",
            headers=close,
        )
    return None
