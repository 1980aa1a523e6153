"""The wire, before a request reaches the app: uvicorn's h11 protocol with deadlines for a request's headers (a
slow client is disconnected) and its body (408, then the connection closes); what the HTTP parser itself refuses
(a malformed request line or header, a bad Content-Length, no Host) is answered in the one JSON error shape, 400,
as is a head larger than the limit (431, however its bytes arrive), an HTTP version other than 1.0 and 1.1 (505)
and a chunk larger than any body the server takes (413, at once).
An absolute-form target (`GET http://host/path`) is served by its path. A response sent before the request's
body is all in closes the connection, and a connection closed with the client's bytes unread lingers (the
response, a FIN, the client's bytes dropped) rather than reset."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from common.errors import STATUS

if TYPE_CHECKING:
    from service.config import Settings

LINGER_IDLE = 2.0  # seconds: a lingering close ends when the client has sent nothing for this long...
LINGER_MAX = 10.0  # ...or this long after it began (or when the client closes its side)
MAX_CHUNK = 2**63 - 1  # bytes: a chunk size past what a 64-bit length holds is refused (RFC 9112 7.1)
MAX_HEAD = 16384  # bytes: a request head larger is refused (431); h11's default, Settings.max_header_bytes's
_ABSOLUTE_FORM = re.compile(rb"[A-Za-z][A-Za-z0-9+.-]*://")


class Refused(h11.RemoteProtocolError):
    """A request the protocol itself refuses (not h11): its message is the whole error, with its kind and status
    (default: the kind's, common.errors.STATUS)."""

    def __init__(self, message: str, status: int | None = None, kind: str = "bad_request") -> None:
        super().__init__(message, error_status_hint=STATUS[kind] if status is None else status)
        self.kind = kind


def origin_form(event: h11.Request) -> h11.Request:
    """The request with an absolute-form target (`GET http://host:port/path?query`, RFC 9112 3.2.2) as origin-form:
    the URI's path (`/` if empty) and query, and its authority as the Host (the Host received is ignored); a
    target of another scheme, or without a host, or with user info (RFC 9110 4.2.4) is refused (400)."""
    if not _ABSOLUTE_FORM.match(event.target):
        return event
    try:
        uri = urlsplit(event.target.decode("ascii"))
        valid = uri.scheme.lower() in ("http", "https") and bool(uri.hostname) and "@" not in uri.netloc
        valid = valid and (uri.port is None or uri.port > 0)
    except ValueError:  # a bad port or IPv6 literal
        valid = False
    if not valid:
        raise Refused(
            f"request target {event.target.decode('ascii')!r} is neither a path nor an http(s) URI with a host "
            "(RFC 9112 3.2): send the path, e.g. GET /healthz"
        )
    target = (uri.path or "/") + (f"?{uri.query}" if uri.query else "")
    headers = [(b"host", uri.netloc.encode("ascii"))]
    headers += [(name, value) for name, value in event.headers.raw_items() if name.lower() != b"host"]
    return h11.Request(method=event.method, target=target, headers=headers, http_version=event.http_version)


class LingeringTransport:
    """A connection's transport as uvicorn sees it, whose `close()`, while the client may still be sending (a body
    not read, a request refused mid-head, bytes not parsed), lingers (RFC 9112 9.6): what is written goes out, then
    a FIN (the write side shut); what the client still sends is read and dropped; the socket closes when the client
    closes its side, or after LINGER_IDLE s without data, LINGER_MAX s at most. Closing with data unread would
    send a reset, which can destroy the response before the client reads it (or fail its send first)."""

    def __init__(
        self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, unread: Callable[[], bool]
    ) -> None:
        self.transport, self.loop, self.unread = transport, loop, unread
        self.lingering = False
        self._until = self._last = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def close(self) -> None:
        if self.lingering or self.transport.is_closing():
            return
        if not self.unread() or not self.transport.can_write_eof():
            self.transport.close()
            return
        self.lingering = True
        self.transport.write_eof()
        self.transport.resume_reading()
        self._until = self.loop.time() + LINGER_MAX
        self.dropped()

    def dropped(self) -> None:
        """Data came while lingering (and was dropped): wait LINGER_IDLE s more, up to LINGER_MAX in all."""
        self._last = self.loop.time()
        if self._timer is None:
            self._timer = self.loop.call_at(min(self._last + LINGER_IDLE, self._until), self._due)

    def _due(self) -> None:
        self._timer = None
        due = min(self._last + LINGER_IDLE, self._until)
        if self.loop.time() < due:
            self._timer = self.loop.call_at(due, self._due)
        else:
            self.hang_up()

    def hang_up(self) -> None:
        """Close the socket now (a reset if the client's bytes are unread)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.transport.close()

    def is_closing(self) -> bool:
        return self.lingering or self.transport.is_closing()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self.lingering:
            self.transport.write(data)

    def pause_reading(self) -> None:
        if not self.lingering:  # what the client sends must be read to be dropped
            self.transport.pause_reading()

    def __getattr__(self, name: str) -> Any:  # the rest is the socket transport's
        return getattr(self.transport, name)


class JsonErrorsProtocol(H11Protocol):
    """uvicorn's h11 protocol, strict on the wire: what h11 refuses is answered in the one JSON error shape (see
    `send_400_response`), and so are a head larger than `max_head` bytes (431, in one piece or not: h11 refuses
    one arriving piecemeal, `_next_event` one arriving whole), an HTTP version other than 1.0 and 1.1 (505) and a
    chunk larger than `max_chunk` (413, when its size line arrives); an absolute-form target is served by its path
    (`origin_form`); a response sent before the request's body is all in says Connection: close; and a
    connection closed with the client's bytes unread lingers (`LingeringTransport`) instead of a reset."""

    max_chunk = MAX_CHUNK
    max_head = MAX_HEAD
    _protocol_error: h11.RemoteProtocolError | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.max_head)
        # keep the parser's error for send_400_response and check what h11 lets through; close after a body not read
        self.conn.next_event = self._next_event  # type: ignore[method-assign]
        self.conn.send = self._send  # type: ignore[method-assign, assignment]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.wire = LingeringTransport(transport, self.loop, self._unread)
        super().connection_made(cast(asyncio.Transport, self.wire))

    def data_received(self, data: bytes) -> None:
        if self.wire.lingering:
            self.wire.dropped()
        else:
            super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.wire.hang_up()  # the timer of a lingering close
        super().connection_lost(exc)

    def shutdown(self) -> None:
        if self.wire.lingering:  # the server is stopping: no more waiting for the client
            self.wire.hang_up()
        else:
            super().shutdown()

    def _unread(self) -> bool:
        return self.conn.their_state in (h11.SEND_BODY, h11.ERROR) or bool(self.conn.trailing_data[0])

    def send_400_response(self, msg: str) -> None:
        """What h11 refuses, in the one JSON error shape (uvicorn answers plain text), naming h11's reason, or what
        `_next_event` refuses (`Refused`)."""
        problem = self._protocol_error
        if not isinstance(problem, Refused):
            status = problem.error_status_hint if problem is not None else 400
            problem = Refused(f"malformed HTTP request: {str(problem or '') or msg}", status)
        self.refuse(problem)

    def refuse(self, problem: Refused) -> None:
        """Answer `problem` in the one JSON error shape (unless a response has begun), then close the connection
        (lingering: `LingeringTransport`); the request's app, if it runs, sees the client gone (what it sends is
        dropped)."""
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # no response begun
            status = problem.error_status_hint
            body = json.dumps({"error": str(problem), "error_type": problem.kind}).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
            headers.append((b"x-content-type-options", b"nosniff"))  # as every answer of the app (service.api)
            headers.append((b"connection", b"close"))
            response = h11.Response(status_code=status, headers=headers, reason=HTTPStatus(status).phrase)
            for event in (response, h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event) or b"")
        self.transport.close()

    def _next_event(self) -> Any:
        head = self.conn.their_state is h11.IDLE  # the next event is a request's head
        buffered = self._buffered() if head else 0
        try:
            try:
                event = h11.Connection.next_event(self.conn)
            except h11.RemoteProtocolError as exc:
                if head and exc.error_status_hint == 431:  # h11: more than max_head bytes and no head yet
                    raise self._head_too_large(None) from None
                raise
            if isinstance(event, h11.Request):
                if buffered - self._buffered() > self.max_head:  # a head that arrived whole
                    raise self._head_too_large(buffered - self._buffered())
                if event.http_version not in (b"1.0", b"1.1"):
                    version = event.http_version.decode("ascii")
                    raise Refused(f"HTTP/{version} is not supported: send HTTP/1.1 (or HTTP/1.0)", 505)
                event = origin_form(event)
            elif self.conn.their_state is h11.SEND_BODY:
                self._check_chunk()
        except h11.RemoteProtocolError as exc:
            self._protocol_error = exc
            raise
        return event

    def _buffered(self) -> int:
        """The bytes received and not yet parsed (h11's receive buffer: its length, not a copy)."""
        return len(self.conn._receive_buffer)

    def _head_too_large(self, size: int | None) -> Refused:
        return Refused(
            f"request head{f' of {size} bytes' if size else ''} (request line and headers) is larger than the limit "
            f"of {self.max_head} bytes (FILL_MAX_HEADER_BYTES): send fewer or shorter headers; the connection is "
            "closed",
            431,
        )

    def _check_chunk(self) -> None:
        """A chunk larger than `max_chunk` is refused when its size line arrives (h11 would wait for its bytes)."""
        size = getattr(getattr(self.conn, "_reader", None), "_bytes_in_chunk", 0)  # h11's ChunkedReader: left of it
        if isinstance(size, int) and size > self.max_chunk:
            raise Refused(
                f"request body chunk of {size} bytes is larger than the limit of {self.max_chunk} bytes; the "
                "connection is closed",
                413,
                "payload_too_large",
            )

    def _send(self, event: h11.Event) -> bytes | None:
        """h11's send; a response begun before the request's body is all in says Connection: close (the rest of
        the body is not read: RFC 9112 9.6 and RFC 9110 15.5.14), and the connection closes after it."""
        if isinstance(event, h11.Response) and self.conn.their_state is h11.SEND_BODY:
            tokens = {t.strip().lower() for n, v in event.headers if n == b"connection" for t in v.split(b",")}
            if b"close" not in tokens:
                headers = [*event.headers.raw_items(), (b"connection", b"close")]
                event = h11.Response(
                    status_code=event.status_code, headers=headers, reason=event.reason, http_version=event.http_version
                )
        return h11.Connection.send(self.conn, event)


class DeadlineProtocol(JsonErrorsProtocol):
    """`JsonErrorsProtocol` with deadlines: a connection that has not sent a complete request head `head_seconds`
    after it opened, or after the first byte of its next request, is closed; one whose request body is not complete
    `body_seconds` after its head gets 408, then closes (uvicorn by itself waits forever for a client sending its
    headers, or its body, a byte at a time)."""

    head_seconds = 10.0
    body_seconds = 30.0
    _timer: asyncio.TimerHandle | None = None
    _waiting_for: str | None = None  # "head" or "body"

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm("head")

    def data_received(self, data: bytes) -> None:
        if self.wire.lingering:
            super().data_received(data)
            return
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
        self._timer = self.loop.call_later(self.head_seconds if what == "head" else self.body_seconds, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._waiting_for = None

    def _expired(self) -> None:
        what, self._timer, self._waiting_for = self._waiting_for, None, None
        waiting = self.conn.their_state is (h11.IDLE if what == "head" else h11.SEND_BODY)
        if not waiting or self.transport.is_closing():
            return
        seconds = self.head_seconds if what == "head" else self.body_seconds
        self.logger.info("closing a connection that sent no complete request %s in %.1f s", what, seconds)
        if what == "head":
            self.wire.hang_up()  # at once: a slow client gets no lingering
        else:  # a 408, then a lingering close: the client reads it rather than a reset
            self.refuse(
                Refused(
                    f"request body not complete {seconds:g} s after its head (FILL_BODY_TIMEOUT): send the whole "
                    "body at once; the connection is closed",
                    kind="request_timeout",
                )
            )


def header_timeout_protocol(
    seconds: float, body_seconds: float | None = None, max_body: int | None = None, head_bytes: int = MAX_HEAD
) -> type[H11Protocol]:
    """`DeadlineProtocol` with these deadlines (`body_seconds`: default `seconds`), a chunk over `max_body` bytes
    refused, a head over `head_bytes`."""
    limits = {
        "head_seconds": seconds,
        "body_seconds": seconds if body_seconds is None else body_seconds,
        "max_chunk": MAX_CHUNK if max_body is None else max_body,
        "max_head": head_bytes,
    }
    return type("HeaderTimeout", (DeadlineProtocol,), limits)


def http_protocol(settings: Settings) -> type[H11Protocol]:
    """The protocol `python -m service` serves with: the settings' deadlines and head limit (FILL_MAX_HEADER_BYTES),
    and a chunk larger than any body the server takes (FILL_MAX_BODY_BYTES, FILL_MAX_DOCUMENTS_BYTES) refused when
    its size line arrives."""
    largest = max(settings.max_body_bytes, settings.max_documents_bytes)
    return header_timeout_protocol(settings.header_timeout, settings.body_timeout, largest, settings.max_header_bytes)
