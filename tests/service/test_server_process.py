"""The real server: `python -m service` in a subprocess, configured by flags or FILL_* variables."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from common.masks import MASK_PATTERN
from tests.conftest import CORPUS

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


ROOT = Path(__file__).resolve().parents[2]
DOCS = {d["id"]: d["text"] for d in CORPUS}
READY_TIMEOUT = 180.0  # generous: a loaded CI machine imports torch slowly


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment without any FILL_* variable, plus `extra`; offline for Hugging Face."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FILL_")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


class Server:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc = proc
        self.port = port
        self.log = log
        self.url = f"http://127.0.0.1:{port}"

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with code {self.proc.returncode} before ready:\n{self.output()}")
            try:
                r = httpx.get(f"{self.url}/readyz", timeout=5)
                last = f"{r.status_code} {r.text}"
                if r.status_code == 200:
                    return
                assert r.status_code == 503, last  # loading: not ready, but answering
            except httpx.TransportError as exc:
                last = repr(exc)
            time.sleep(0.2)
        pytest.fail(f"server not ready after {timeout}s (last: {last}):\n{self.output()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


@pytest.fixture()
def start_server(tmp_path):
    """start_server(args, env, port) -> Server; every process started is stopped at teardown."""
    servers: list[Server] = []

    def start(args: list[str], env: dict[str, str], port: int) -> Server:
        log = tmp_path / f"server-{len(servers)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "service", *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        server = Server(proc, port, log)
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


def check_fill(data: dict, text: str, top_k: int, evidence: int) -> None:
    n_masks = len(MASK_PATTERN.findall(text))
    assert set(data) == {"filled", "masks", "took_ms", "timings_ms"}
    assert len(data["masks"]) == n_masks
    for i, mask in enumerate(data["masks"]):
        assert mask["index"] == i
        assert 0 < len(mask["candidates"]) <= top_k
        scores = [c["score"] for c in mask["candidates"]]
        assert all(0 < s <= 1 for s in scores) and scores == sorted(scores, reverse=True)
        for c in mask["candidates"]:
            assert 0 < len(c["evidence"]) <= evidence
            for e in c["evidence"]:
                assert DOCS[e["doc_id"]][e["start"] : e["end"]] == c["phrase"], (e, c["phrase"])
                assert c["phrase"] in e["context"]
    assert not MASK_PATTERN.search(data["filled"])
    expected = MASK_PATTERN.split(text)
    filled = expected[0] + "".join(m["candidates"][0]["phrase"] + seg for m, seg in zip(data["masks"], expected[1:]))
    assert data["filled"] == filled


def exercise(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        assert c.get("/healthz").json() == {"status": "alive"}
        text = "Marie Curie was born in <mask> in [MASK] . <mask> is the capital of France ."
        r = c.post("/fill", json={"text": text, "top_k": 3, "evidence": 2})
        assert r.status_code == 200, r.text
        check_fill(r.json(), text, top_k=3, evidence=2)

        r = c.post("/fill", json={"text": "no mask", "top_k": 0})
        assert r.status_code == 422
        assert r.json()["error_type"] == "validation"
        r = c.post("/fill", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 422

        info = c.get("/info").json()
        assert info["counts"]["documents"] == len(CORPUS)
        assert "fill_requests" in c.get("/metrics").text
        assert c.get("/openapi.json").status_code == 200


def test_server_with_flags(start_server, tiny_index):
    port = free_port()
    server = start_server(["--index", str(tiny_index), "--port", str(port), "--host", "127.0.0.1"], clean_env(), port)
    server.wait_ready()
    exercise(server)


def test_server_with_env_only(start_server, tiny_index):
    port = free_port()
    server = start_server([], clean_env(FILL_INDEX=str(tiny_index), FILL_PORT=str(port)), port)
    server.wait_ready()
    exercise(server)


def test_flag_overrides_env_port(start_server, tiny_index):
    env_port, flag_port = free_port(), free_port()
    while flag_port == env_port:
        flag_port = free_port()
    server = start_server(
        ["--port", str(flag_port)], clean_env(FILL_INDEX=str(tiny_index), FILL_PORT=str(env_port)), flag_port
    )
    server.wait_ready()
    assert httpx.get(f"http://127.0.0.1:{flag_port}/healthz", timeout=5).status_code == 200
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{env_port}/healthz", timeout=2)


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "service", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_nonexistent_index_exits_2_without_traceback():
    r = run_cli(["--index", "/nonexistent", "--port", str(free_port())], clean_env())
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert "/nonexistent" in r.stderr
    assert "error" in r.stderr.lower()
    assert "Traceback" not in out


def test_nonexistent_index_from_env_exits_2(tmp_path):
    missing = tmp_path / "missing_index"
    r = run_cli([], clean_env(FILL_INDEX=str(missing)))
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert str(missing) in r.stderr
    assert "Traceback" not in out


def test_no_index_exits_2():
    r = run_cli([], clean_env())
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--index" in r.stderr and "FILL_INDEX" in r.stderr
    assert "Traceback" not in r.stdout + r.stderr


def test_bad_env_port_exits_2(tiny_index):
    r = run_cli([], clean_env(FILL_INDEX=str(tiny_index), FILL_PORT="not-a-port"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "FILL_" in r.stderr and "port" in r.stderr.lower()
    assert "Traceback" not in r.stdout + r.stderr


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_bad_log_level_exits_2_naming_the_choices(tiny_index, how):
    args, env = (["--log-level", "bogus"], {}) if how == "flag" else ([], {"FILL_LOG_LEVEL": "bogus"})
    r = run_cli(args, clean_env(FILL_INDEX=str(tiny_index), FILL_PORT=str(free_port()), **env))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("error: --log-level (FILL_LOG_LEVEL): "), r.stderr
    assert all(level in r.stderr for level in ("debug", "info", "warning", "error")), r.stderr
    assert "Traceback" not in r.stdout + r.stderr


def test_missing_api_keys_file_exits_2_naming_it(tiny_index, tmp_path):
    missing = tmp_path / "no_keys"
    r = run_cli([], clean_env(FILL_INDEX=str(tiny_index), FILL_API_KEYS_FILE=str(missing)))
    assert r.returncode == 2, r.stdout + r.stderr
    assert str(missing) in r.stderr and "FILL_API_KEYS_FILE" in r.stderr
    assert "Traceback" not in r.stdout + r.stderr


def test_a_client_sending_its_headers_slowly_is_disconnected(start_server, tiny_index):
    port = free_port()
    server = start_server([], clean_env(FILL_INDEX=str(tiny_index), FILL_PORT=str(port), FILL_HEADER_TIMEOUT="1"), port)
    server.wait_ready()
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        closed = False
        for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 40:  # one byte every 0.2 s
            try:
                sock.sendall(bytes([byte]))
                time.sleep(0.2)
                sock.setblocking(False)
                try:
                    closed = sock.recv(1) == b""
                except BlockingIOError:
                    pass
                finally:
                    sock.setblocking(True)
            except (BrokenPipeError, ConnectionResetError):
                closed = True
            if closed:
                break
    assert closed, "the server kept a connection whose headers never ended"
    assert time.monotonic() - t0 < 5
    # and a client sending its request at once is served on a connection kept open longer than the deadline
    with httpx.Client(base_url=server.url, timeout=10) as client:
        assert client.get("/healthz").status_code == 200
        time.sleep(1.5)
        assert client.get("/healthz").status_code == 200


def trickle(port: int, head: bytes, body: bytes, gap: float = 0.2) -> bytes | None:
    """Send `head` at once, then `body` a byte every `gap` s: what the server sent before it closed the connection,
    or None when it kept the connection to the end."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        received = b""
        for byte in body:
            try:
                sock.sendall(bytes([byte]))
                time.sleep(gap)
                sock.setblocking(False)
                try:
                    while chunk := sock.recv(65536):
                        received += chunk
                    return received  # b"": the server closed its side
                except BlockingIOError:
                    pass
                finally:
                    sock.setblocking(True)
            except (BrokenPipeError, ConnectionResetError):
                return received
    return None


def test_a_client_sending_its_body_slowly_gets_408_and_is_disconnected(start_server, tiny_index):
    port = free_port()
    server = start_server([], clean_env(FILL_INDEX=str(tiny_index), FILL_PORT=str(port), FILL_BODY_TIMEOUT="1"), port)
    server.wait_ready()
    body = b'{"text": "Marie Curie was born in <mask> .", "top_k": 1}'
    head = (
        b"POST /fill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
    )
    t0 = time.monotonic()
    received = trickle(port, head, body)
    assert received is not None, "the server kept a connection whose body never ended"
    assert time.monotonic() - t0 < 5
    assert received.startswith(b"HTTP/1.1 408 "), received
    assert json.loads(received.partition(b"\r\n\r\n")[2])["error_type"] == "request_timeout", received
    assert "no complete request body in 1.0 s" in server.output()
    with httpx.Client(base_url=server.url, timeout=30) as client:  # a body sent at once is served
        assert client.post("/fill", content=body, headers={"content-type": "application/json"}).status_code == 200


@pytest.mark.parametrize("given, want", [(None, "PASSIVE"), ("active", "active")])
def test_openmp_threads_wait_passively_unless_told_otherwise(given, want):
    """`python -m service` sets OMP_WAIT_POLICY (unless the environment does) in its main(), before FAISS (and
    torch, where a model runs on it) is imported; importing service.__main__ loads neither and writes no
    environment."""
    env = {k: v for k, v in clean_env().items() if k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    code = (
        "import os, sys, service.__main__ as m; "
        "assert 'torch' not in sys.modules and 'faiss' not in sys.modules; "
        "assert os.environ.get('OMP_WAIT_POLICY') == (sys.argv[1] or None); "
        "exec('try:\\n    m.main([\\'--help\\'])\\nexcept SystemExit:\\n    pass'); "
        "assert 'faiss' in sys.modules; print(os.environ['OMP_WAIT_POLICY'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, given or ""], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == want


def raw_exchange(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `request` as bytes and read the answer to the end: the server must close the connection after it."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        data = b""
        try:
            sock.sendall(request)
            while chunk := sock.recv(65536):  # b"": the server closed the connection
                data += chunk
        except (ConnectionResetError, BrokenPipeError):  # closed with our bytes unread (the 1 MB header): a reset
            pass
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def test_what_the_http_parser_refuses_is_answered_in_the_json_shape_and_closed(start_server, tiny_index):
    """Request smuggling's ambiguity (Content-Length and Transfer-Encoding), what h11 refuses (no Host, a bad
    Content-Length, a 1 MB header) and a path that is not UTF-8: one JSON error each, then the connection closes
    (raw_exchange reads until it does)."""
    port = free_port()
    server = start_server([], clean_env(FILL_INDEX=str(tiny_index), FILL_PORT=str(port)), port)
    server.wait_ready()
    post = b"POST /fill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    cases = {
        "both": (post + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "Transfer-Encoding"),
        "no host": (b"GET /healthz HTTP/1.1\r\n\r\n", 400, "Host"),
        "bad length": (post + b"Content-Length: 1x\r\n\r\n{}", 400, "malformed HTTP request"),
        "huge header": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 1_000_000 + b"\r\n\r\n", 431, "head"),
        "not utf-8 path": (b"DELETE /fill/%E9 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "UTF-8"),
    }
    for name, (request, status, words) in cases.items():
        got, headers, body = raw_exchange(port, request)
        assert got == status, (name, got, body)
        assert headers["content-type"] == "application/json" and headers.get("connection") == "close", (name, headers)
        data = json.loads(body)
        assert data["error_type"] == "bad_request" and words in data["error"], (name, data)
    with httpx.Client(base_url=server.url, timeout=10) as client:  # the server is fine after all of them
        assert client.get("/healthz").status_code == 200
