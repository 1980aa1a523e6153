"""The wire (service.wire's protocol, as `python -m service` serves it): raw requests to a real uvicorn server
(RFC 9112: closes after a body not read, chunk sizes, HTTP versions, absolute-form targets, no resets)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import h11
import pytest
import uvicorn

from service.api import create_app
from service.config import Settings
from service.state import ServiceState
from service.wire import http_protocol, origin_form
from tests.service.test_limits import settings, state  # noqa: F401  # the same server: body limit 2048 bytes

WAIT = 20.0  # seconds a socket read may wait: a passing test's reads return at once
MAX_HEADER_BYTES = Settings.model_fields["max_header_bytes"].default  # the default limit of a request head
BODY_TIMEOUT = 0.5  # seconds: the body deadline of `hurried_port`'s server (its test waits up to WAIT for the 408)


@contextmanager
def running(settings: Settings, state: ServiceState) -> Iterator[int]:
    """A real uvicorn server (its h11 protocol as `python -m service` wires it) over the app, in a thread: its port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        create_app(settings, state=state), http=http_protocol(settings), log_config=None, access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="wire-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(WAIT)
        sock.close()


@pytest.fixture(scope="module")
def wire_port(settings, state) -> Iterator[int]:
    with running(settings, state) as port:
        yield port


@pytest.fixture(scope="module")
def hurried_port(settings, state) -> Iterator[int]:
    """The same server with a body deadline of half a second (BODY_TIMEOUT)."""
    with running(settings.model_copy(update={"body_timeout": BODY_TIMEOUT}), state) as port:
        yield port


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response (its body by Content-Length): status, headers (lower-case names), body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed before a response head: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        chunk = sock.recv(65536)
        assert chunk, "the connection closed inside a response body"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def refused(port: int, request: bytes) -> tuple[int, dict[str, str], dict]:
    """Send `request`, read the JSON error answering it, then the end of the connection: a clean close (FIN);
    a reset (or a send refused) fails the test. The status, headers and JSON body."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        sock.sendall(request)
        status, headers, body = read_response(sock)
        assert headers.get("connection") == "close", (status, headers, body)
        assert sock.recv(65536) == b"", "data after a response that closes the connection"
    data = json.loads(body)
    assert headers["content-type"] == "application/json" and set(data) == {"error", "error_type"}, (headers, data)
    assert headers.get("x-content-type-options") == "nosniff", headers  # as every answer (service.api's Nosniff)
    return status, headers, data


POST_FILL_LENGTH = b"POST /fill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
POST_CHUNKED = b"POST /fill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"


def test_a_413_mid_chunked_body_closes_the_connection_cleanly(wire_port):
    """The streamed body passes the limit (2048) and the client goes on sending (1 MB, never its last chunk):
    the 413 says Connection: close, what follows is read and dropped, and the connection ends with a FIN."""
    chunk = b"%x\r\n%s\r\n" % (4000, b'{"text": "<mask> ' + b"y" * 3983)
    status, _, data = refused(wire_port, POST_CHUNKED + chunk * 250)
    assert status == 413 and data["error_type"] == "payload_too_large" and "2048" in data["error"], data


def test_a_complete_request_answered_with_an_error_keeps_the_connection(wire_port):
    """Only a body not read closes the connection: a 422 for a complete request keeps it for the next one."""
    body = b'{"top_k": 1}'
    with socket.create_connection(("127.0.0.1", wire_port), timeout=WAIT) as sock:
        sock.sendall(
            b"POST /fill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n" + body
        )
        status, headers, _ = read_response(sock)
        assert status == 422 and "connection" not in headers, (status, headers)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(sock)[0] == 200


@pytest.mark.parametrize("size", ["ffffffffffffffffffff", "100000000"])
def test_an_absurd_chunk_size_is_413_at_once(wire_port, size):
    """A chunk larger than any body the server takes (20 hex digits overflow 64 bits; 100000000 is 4 GiB) is
    refused when its size line arrives, not after the body timeout (30 s)."""
    status, _, data = refused(wire_port, POST_CHUNKED + size.encode() + b'\r\n{"text": ')
    assert status == 413 and data["error_type"] == "payload_too_large" and "chunk" in data["error"], data


@pytest.mark.parametrize("version", ["2.0", "0.9", "1.2"])
def test_an_http_version_other_than_1_0_or_1_1_is_505(wire_port, version):
    status, _, data = refused(wire_port, b"GET /healthz HTTP/%s\r\nHost: x\r\n\r\n" % version.encode())
    assert status == 505 and data["error_type"] == "bad_request" and f"HTTP/{version}" in data["error"], data


def test_http_1_0_is_served(wire_port):
    with socket.create_connection(("127.0.0.1", wire_port), timeout=WAIT) as sock:
        sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        status, _, body = read_response(sock)
    assert status == 200 and json.loads(body) == {"status": "alive"}


@pytest.mark.parametrize("target", ["http://example.org/healthz", "HTTP://example.org:8080/healthz?x=1"])
def test_an_absolute_form_target_is_routed_by_its_path(wire_port, target):
    """RFC 9112 3.2.2: a server accepts `GET http://host/path`; the Host sent is ignored for the URI's."""
    with socket.create_connection(("127.0.0.1", wire_port), timeout=WAIT) as sock:
        sock.sendall(b"GET %s HTTP/1.1\r\nHost: other\r\n\r\n" % target.encode())
        status, _, body = read_response(sock)
    assert status == 200 and json.loads(body) == {"status": "alive"}, body


def test_an_absolute_form_target_takes_the_host_of_its_uri():
    request = h11.Request(
        method="GET", target="http://example.org:8080?x=1", headers=[("Host", "other"), ("Accept", "*/*")]
    )
    origin = origin_form(request)
    assert origin.target == b"/?x=1" and origin.method == b"GET"
    assert list(origin.headers) == [(b"host", b"example.org:8080"), (b"accept", b"*/*")]
    assert origin_form(h11.Request(method="GET", target="/x", headers=[("Host", "h")])).target == b"/x"


@pytest.mark.parametrize("target", ["ftp://example.org/healthz", "http:///healthz", "http://user@example.org/"])
def test_an_absolute_form_target_without_an_http_host_is_400(wire_port, target):
    status, _, data = refused(wire_port, b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % target.encode())
    assert status == 400 and data["error_type"] == "bad_request" and "target" in data["error"], data


def test_a_431_is_read_whole_then_the_connection_closes_without_a_reset(wire_port):
    """A 1 MB header: the server answers 431 after h11's limit (16 KiB), drops the rest it is sent and closes
    with a FIN; closing with the rest unread would reset the connection (the send or the read here fails)."""
    status, _, data = refused(
        wire_port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 1_000_000 + b"\r\n\r\n"
    )
    assert status == 431 and data["error_type"] == "bad_request", data


HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "


def head_of(size: int) -> bytes:
    """A request head of `size` bytes in all (request line, headers, the blank line)."""
    return HEAD + b"a" * (size - len(HEAD) - 4) + b"\r\n\r\n"


def send_head(port: int, head: bytes, piece: int) -> tuple[int, dict]:
    """Send `head` in writes of `piece` bytes (a short pause between them, so they arrive apart) and read the
    answer: its status and JSON body."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for start in range(0, len(head), piece):
            try:
                sock.sendall(head[start : start + piece])
            except (BrokenPipeError, ConnectionResetError):
                break  # refused before the whole head was sent: the answer is waiting
            time.sleep(0.005 if piece < len(head) else 0)
        status, _, body = read_response(sock)
    return status, json.loads(body)


@pytest.mark.parametrize(
    "size, piece",
    [(100_000, 10**6), (40_000, 10**6), (40_000, 1000), (40_000, 100), (MAX_HEADER_BYTES + 1, 10**6)]
    + [(MAX_HEADER_BYTES + 1, 1000), (MAX_HEADER_BYTES + 1, 100)],
)
def test_a_head_over_the_limit_is_431_however_it_arrives(wire_port, size, piece):
    """One limit for a request head (FILL_MAX_HEADER_BYTES), whether it arrives whole (`piece` larger than the
    head) or in pieces: h11 alone refused only a head arriving in pieces, past its 16 KiB buffer."""
    status, data = send_head(wire_port, head_of(size), piece)
    assert status == 431 and data["error_type"] == "bad_request", data
    assert f"limit of {MAX_HEADER_BYTES} bytes" in data["error"] and "FILL_MAX_HEADER_BYTES" in data["error"], data


@pytest.mark.parametrize("piece", [10**6, 1000], ids=["one write", "1000-byte writes"])
def test_a_head_at_the_limit_is_served_however_it_arrives(wire_port, piece):
    status, data = send_head(wire_port, head_of(MAX_HEADER_BYTES), piece)
    assert status == 200, data


def test_a_body_not_complete_in_time_is_408_then_the_connection_closes(hurried_port):
    """A body shorter than its Content-Length: once the body deadline passes, a JSON 408 (waited for here up to
    WAIT s), then a FIN."""
    body = b'{"text": "<mask>"}'
    head = POST_FILL_LENGTH % (len(body) + 10)
    status, headers, data = refused(hurried_port, head + body)
    assert status == 408 and data["error_type"] == "request_timeout", data
    assert f"{BODY_TIMEOUT:g} s" in data["error"] and "FILL_BODY_TIMEOUT" in data["error"], data


def test_a_body_sent_in_time_is_served_on_the_hurried_server(hurried_port):
    body = b'{"text": "<mask>"}'
    with socket.create_connection(("127.0.0.1", hurried_port), timeout=WAIT) as sock:
        sock.sendall(POST_FILL_LENGTH % len(body) + body)
        assert read_response(sock)[0] == 200
