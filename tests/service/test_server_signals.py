"""The real server's life cycle: a damaged index exits 2 naming the file (the one start-up failure
behaviour), SIGHUP reloads the index directory, SIGTERM drains the requests in flight."""

from __future__ import annotations

import shutil
import signal
import threading
import time

import httpx
import pytest

from tests.service.test_server_process import clean_env, free_port, run_cli, start_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


def test_a_damaged_index_exits_2_naming_the_file(tiny_index, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_index, broken)
    bm25 = broken / "bm25.sqlite"
    bm25.write_bytes(bm25.read_bytes()[: bm25.stat().st_size // 2])  # truncated
    r = run_cli([], clean_env(FILL_INDEX=str(broken), FILL_PORT=str(free_port())))
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert "error:" in r.stderr and "bm25.sqlite" in r.stderr and "indexer build" in r.stderr
    assert "Traceback" not in out


def test_sighup_reloads_the_index_directory(start_server, tiny_index, tmp_path):
    port = free_port()
    server = start_server([], clean_env(FILL_INDEX=str(tiny_index), FILL_PORT=str(port), FILL_API_KEYS="k"), port)
    server.wait_ready()
    auth = {"Authorization": "Bearer k"}
    before = httpx.get(f"{server.url}/metrics", headers=auth).text
    assert 'index_reloads_total{outcome="ok"} 1.0' in before  # the first load
    server.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if 'index_reloads_total{outcome="ok"} 2.0' in httpx.get(f"{server.url}/metrics", headers=auth).text:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"no reload after SIGHUP:\n{server.output()}")
    r = httpx.post(f"{server.url}/fill", json={"text": "Marie Curie was born in <mask> ."}, headers=auth)
    assert r.status_code == 200, r.text
    assert server.proc.poll() is None


def test_sigterm_drains_requests_in_flight(start_server, tiny_index):
    """The batcher holds the first request 1.5 s for more (FILL_BATCH_WAIT_MS), so all six requests are
    in flight when SIGTERM comes at 0.5 s: every one is answered 200, then the process ends."""
    port = free_port()
    env = clean_env(FILL_INDEX=str(tiny_index), FILL_PORT=str(port), FILL_BATCH_WAIT_MS="1500")
    server = start_server([], env, port)
    server.wait_ready()
    results: list[int | str] = []

    def send(i: int):
        try:
            r = httpx.post(f"{server.url}/fill", json={"text": f"Marie Curie {i} was born in <mask> ."}, timeout=60)
            results.append(r.status_code)
        except httpx.HTTPError as exc:
            results.append(repr(exc))

    time.sleep(1.6)  # the readiness probe's own batch is done
    threads = [threading.Thread(target=send, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    assert not results  # still waiting for their batch
    server.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(90)
    code = server.proc.wait(60)
    assert results == [200] * 6, (results, server.output())
    assert code in (0, -signal.SIGTERM), server.output()  # uvicorn ends by re-raising the signal
    assert "Waiting for connections to close" in server.output()
    try:
        httpx.get(f"{server.url}/healthz", timeout=2)
        raise AssertionError("the server still accepts connections")
    except httpx.TransportError:
        pass
