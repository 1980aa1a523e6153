"""The bounded load test (bench.shared.run_load against the real server on loopback): 2,000 fills from 32
closed-loop clients get only 200s (or deliberate 429s), every 200 fills the request's masks, and the
server's RSS stays flat (figures printed; the 10,000-request run is `python -m bench.bench_load --load`)."""

from __future__ import annotations

import pytest

from bench.shared import rss_bytes, run_load
from tests.service.test_server_process import clean_env, free_port, start_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


TEXTS = [
    "Marie Curie was born in <mask> .",
    "The Seine flows through <mask> .",
    "<mask> is the capital of France .",
    "Allan Peiper was born in <mask> , Victoria .",
    "<mask> died in Passy , <mask> , in 1934 .",
]


def test_2000_requests_at_32_clients(start_server, tiny_index):
    port = free_port()
    server = start_server(
        [], clean_env(FILL_INDEX=str(tiny_index), FILL_PORT=str(port), FILL_LOG_LEVEL="warning"), port
    )
    server.wait_ready()
    bodies = [{"text": t, "top_k": 3} for t in TEXTS]
    warm = run_load(server.url, bodies, 32, 4000)  # the allocators' high-water marks settle in the first rounds
    assert warm.ok > 0, warm.summary()
    before = rss_bytes(server.proc.pid)
    result = run_load(server.url, bodies, 32, 2000)
    after = rss_bytes(server.proc.pid)
    summary = result.summary()
    print(f"load: {summary}; RSS {before / 2**20:.1f} -> {after / 2**20:.1f} MB")
    assert result.transport_errors == 0 and result.bad_bodies == 0, summary
    assert set(result.statuses) <= {200, 429} and result.ok >= 1000, summary
    assert sum(result.statuses.values()) == 2000
    # flat: rounds of 2,000 after the first grew RSS by 0-16 MB, then not at all (a leak of even 12 KB per
    # request would add 24 MB)
    assert after - before < 24 * 2**20, (before, after)
