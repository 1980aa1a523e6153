"""The project's one error type, and the one table that maps its kinds to HTTP statuses and exit codes.

Every user-facing failure is an `AppError` whose message names the problem (the file, the field, the
flag) and the fix. The HTTP layer answers `STATUS[kind]` with a `{error, error_type, detail}` body;
every command line prints `error: <message>` and exits with `EXIT_CODE` (`cli_errors`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, get_args

Kind = Literal[
    "input",  # a file, model, index or option given to a job is unusable (the service cannot serve with it)
    "bad_request",  # a request the HTTP layer cannot take as sent (framing, path encoding): the connection closes
    "validation",  # a request field or command-line value is invalid
    "unauthorized",
    "forbidden",
    "not_found",
    "method_not_allowed",
    "conflict",  # another writer holds the index (indexer.lock)
    "request_timeout",  # a request's body did not arrive in time (the connection closes)
    "payload_too_large",
    "unsupported_media_type",
    "overloaded",
    "internal",
    "not_ready",
    "timeout",
]

STATUS: dict[str, int] = {
    "bad_request": 400,
    "validation": 422,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "request_timeout": 408,
    "conflict": 409,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "overloaded": 429,
    "internal": 500,
    "input": 503,
    "not_ready": 503,
    "timeout": 504,
}
assert set(STATUS) == set(get_args(Kind))

EXIT_CODE = 2  # every AppError ends a command line with this code


class AppError(Exception):
    """A user-facing failure of kind `kind`; `field` names the request field at fault (validation)."""

    def __init__(self, message: str, kind: Kind = "input", field: str | None = None) -> None:
        super().__init__(message)
        if kind not in STATUS:
            raise ValueError(f"unknown error kind {kind!r}")
        self.message = message
        self.kind = kind
        self.field = field

    @property
    def status(self) -> int:
        return STATUS[self.kind]


class IndexDamaged(AppError):
    """An index file that cannot be served, named in the message with what is wrong and the fix: found when the
    index opens, when its hashes are checked, or when a fill reads bytes that do not match their checksum (the
    service then stops serving that index: not ready, naming the file, until a reload or restart)."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message, kind="input")
        self.path = path


def kind_for_status(status: int) -> str:
    """The kind of an HTTP status raised by the web framework itself (404, 405, ...); its 400 (a body it cannot
    parse, e.g. not UTF-8) is a validation error like bad JSON."""
    if status == 400:
        return "validation"
    for kind, code in STATUS.items():
        if code == status and kind != "input":
            return kind
    return "internal" if status >= 500 else "validation"


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn an AppError into `error: <message>` on stderr and exit code EXIT_CODE (no traceback)."""
    try:
        yield
    except AppError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        raise SystemExit(EXIT_CODE) from None
