"""Request ids, structured logs and per-route HTTP metrics.

Every request gets an id: the client's `X-Request-ID` when it is a plain token (letters, digits, `-`,
`_`, `.`, at most 64), else a new one. It is echoed in the response's `X-Request-ID`, carried by every
log line written while the request is handled, and in its access line."""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
import uuid

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.metrics import Metrics

REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
_VALID_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
access_log = logging.getLogger("service.access")


def request_id_of(headers: Headers) -> str:
    given = headers.get("x-request-id", "")
    return given if _VALID_ID.fullmatch(given) else uuid.uuid4().hex


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, and a record's `fields`."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = REQUEST_ID.get()
        if request_id is not None:
            line["request_id"] = request_id
        line.update(getattr(record, "fields", {}))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        text = json.dumps(line, ensure_ascii=False, default=str)  # escapes C0 controls only, as JSON requires
        return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# what a log line never holds raw, in either format: C0 and C1 controls, DEL, and the Unicode line and paragraph
# separators (every character Python's str.splitlines or a terminal takes as a line break or a control)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class TextFormatter(logging.Formatter):
    """`time LEVEL logger: message`, one line per record: control characters of the message (a request path,
    an id, a client's text) are escaped (`\\x0a`), so that no request can write a line of its own into the log.
    A traceback still follows on its own lines."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = _CONTROL.sub(_escape, record.message)
        return super().formatMessage(record)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def configure_logging(level: str, fmt: str) -> None:
    """The root logger (and uvicorn's, which propagate to it) writes JSON lines, or plain text."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


class Observe:
    """The outermost middleware: request id, HTTP metrics by route template and status, access log."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(Headers(scope=scope))
        token = REQUEST_ID.set(request_id)
        t0 = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message).append("X-Request-ID", request_id)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            seconds = time.perf_counter() - t0
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"  # bounded label values: no raw paths
            self.metrics.http.labels(template, str(status)).inc()
            self.metrics.http_latency.labels(template).observe(seconds)
            access_log.info(
                "%s %s %d",
                scope["method"],
                scope["path"],
                status,
                extra={
                    "fields": {
                        "method": scope["method"],
                        "path": scope["path"],
                        "status": status,
                        "ms": round(seconds * 1000, 3),
                    }
                },
            )
            REQUEST_ID.reset(token)
