"""Limits at the door, before a route runs: the request's framing (both Content-Length and Transfer-Encoding: 400,
the connection closed, RFC 9112 6.3) and path (percent-escapes that do not encode UTF-8: 400), the body's size
(413, checked before the body is read) and media type (415), and deadlines for a request's headers and its body
(slow clients are disconnected); what the HTTP parser itself refuses (a malformed request line or header, a bad
Content-Length, no Host, a head past h11's limit) is answered in the one JSON error shape too, 400 or 431."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import unquote_to_bytes

import h11
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.errors import error_response

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
    is not JSON (or JSON lines, for the documents) gets 415."""

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


class JsonErrorsProtocol(H11Protocol):
    """uvicorn's h11 protocol answering what h11 refuses in the one JSON error shape (see `send_400_response`)."""

    _protocol_error: h11.RemoteProtocolError | None = None

    def send_400_response(self, msg: str) -> None:
        """What h11 refuses, in the one JSON error shape (uvicorn answers plain text), naming h11's reason;
        431 for a head past its size limit. The connection closes, as uvicorn closes it."""
        problem = self._protocol_error
        status = getattr(problem, "error_status_hint", 400) if problem is not None else 400
        reason = str(problem) if problem is not None and str(problem) else msg
        body = json.dumps({"error": f"malformed HTTP request: {reason}", "error_type": "bad_request"}).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        self.transport.write(self.conn.send(h11.Response(status_code=status, headers=headers)))
        self.transport.write(self.conn.send(h11.Data(data=body)))
        self.transport.write(self.conn.send(h11.EndOfMessage()))
        self.transport.close()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn.next_event = self._next_event  # type: ignore[method-assign]  # keeps the parser's error for send_400_response

    def _next_event(self) -> Any:
        try:
            return h11.Connection.next_event(self.conn)
        except h11.RemoteProtocolError as exc:
            self._protocol_error = exc
            raise


def header_timeout_protocol(seconds: float, body_seconds: float | None = None) -> type[H11Protocol]:
    """uvicorn's h11 protocol with deadlines: a connection that has not sent a complete request head `seconds`
    after it opened, or after the first byte of its next request, is closed; so is one whose request body is
    not complete `body_seconds` (default `seconds`) after its head (uvicorn by itself waits forever for a client
    sending its headers, or its body, a byte at a time)."""
    body_limit = seconds if body_seconds is None else body_seconds

    class HeaderTimeout(JsonErrorsProtocol):
        _timer: asyncio.TimerHandle | None = None
        _waiting_for: str | None = None  # "head" or "body"

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm("head")

        def data_received(self, data: bytes) -> None:
            if self._timer is None and self.conn.their_state is h11.IDLE:
                self._arm("head")
            super().data_received(data)
            state = self.conn.their_state
            if state is h11.SEND_BODY:
                if self._waiting_for != "body":
                    self._arm("body")
            elif state is not h11.IDLE:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self, what: str) -> None:
            self._disarm()
            self._waiting_for = what
            self._timer = self.loop.call_later(seconds if what == "head" else body_limit, self._expired)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._waiting_for = None

        def _expired(self) -> None:
            what, self._timer, self._waiting_for = self._waiting_for, None, None
            waiting = self.conn.their_state is (h11.IDLE if what == "head" else h11.SEND_BODY)
            if waiting and not self.transport.is_closing():
                self.logger.info(
                    "closing a connection that sent no complete request %s in %.1f s",
                    what,
                    seconds if what == "head" else body_limit,
                )
                self.transport.close()

    return HeaderTimeout
