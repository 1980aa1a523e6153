"""The probes (service.routes.probes): /readyz answers from the service's state, the warm-up fill that passed when the
index was installed and the index checks' verdict since, so that no call runs the engine, and it still turns 503 the
moment the served index fails a check; one client address flooding the probes gets 429 (service.probe_limit), on a
fake clock here, so that no test depends on how fast the machine is."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from fill.engine import FillEngine
from service.api import create_app
from service.config import Settings
from service.probe_limit import ProbeBuckets
from service.state import ServiceState

ENGINE_CALLS = ("fill", "score", "handle", "batch", "plan", "prepare", "finish")


@pytest.fixture()
def counted(monkeypatch) -> list[str]:
    """The names of the FillEngine methods called (every way a request reaches the engine), in order."""
    calls: list[str] = []
    for name in ENGINE_CALLS:
        method = getattr(FillEngine, name)

        def counting(self, *args, _method=method, _name=name, **kwargs):
            calls.append(_name)
            return _method(self, *args, **kwargs)

        monkeypatch.setattr(FillEngine, name, counting)
    return calls


def test_readyz_runs_no_fill_and_turns_503_when_the_index_fails_a_check(tiny_index, counted):
    settings = Settings(index=tiny_index, admin_keys="admin-key", warm=False, probe_rate=0)  # 400 probes, unlimited
    state = ServiceState(settings, engine=FillEngine.open(settings.engine_config()))
    assert counted.count("fill") == 1  # the warm-up, once, when the engine was installed
    counted.clear()
    with TestClient(create_app(settings, state=state), raise_server_exceptions=False) as client:
        for _ in range(200):
            assert client.get("/readyz").status_code == 200
            assert client.head("/readyz").status_code == 200
        assert counted == []  # 400 probes, not one engine call
        metrics = client.get("/metrics", headers={"Authorization": "Bearer admin-key"}).text
        assert 'fill_requests_total{outcome="ok"}' not in metrics  # and no fill counted either
        state.unserve(state.engine, "shard_00000/vectors.npy does not match the manifest's sha256")
        r = client.get("/readyz")
        assert r.status_code == 503 and r.headers["retry-after"], r.text
        assert r.json()["error_type"] == "not_ready"
        assert "index check failed: shard_00000/vectors.npy does not match" in r.json()["error"], r.text
        assert client.head("/readyz").status_code == 503
        assert client.get("/healthz").status_code == 200  # alive all the same
    assert counted == []
    state.close()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_refuses_past_its_burst_and_refills_at_its_rate():
    clock = FakeClock()
    buckets = ProbeBuckets(rate=10, burst=20, clock=clock)
    assert [buckets.take("10.0.0.1") for _ in range(20)] == [0.0] * 20  # the burst, all at one instant
    wait = buckets.take("10.0.0.1")
    assert wait == pytest.approx(0.1)  # the 21st: refused, one token a tenth of a second away
    assert buckets.take("10.0.0.2") == 0.0  # another address has its own full bucket
    clock.now += 0.1
    assert buckets.take("10.0.0.1") == 0.0  # a token refilled: one more is allowed...
    assert buckets.take("10.0.0.1") > 0  # ...and only one
    clock.now += 3600
    assert [buckets.take("10.0.0.1") for _ in range(21)].count(0.0) == 20  # refilled to the burst, no further


def test_a_kubelet_is_never_limited_while_another_address_floods():
    clock = FakeClock()
    buckets = ProbeBuckets(rate=10, burst=20, clock=clock)
    refused = 0
    for tick in range(3000):  # 30 s at 100 requests a second from the flood, 3 probes a second from the kubelet
        clock.now += 0.01
        refused += buckets.take("10.0.0.66") > 0
        if tick % 33 == 0:
            assert buckets.take("10.0.0.1") == 0.0  # a readiness, a liveness and a startup probe every second
    assert refused > 2500  # the flood gets ~10 a second through


def test_a_rate_of_0_is_no_limit():
    buckets = ProbeBuckets(rate=0, burst=1, clock=FakeClock())
    assert not buckets.enabled
    assert all(buckets.take("10.0.0.1") == 0.0 for _ in range(1000))
    assert len(buckets) == 0  # nothing kept either


def test_the_table_of_addresses_is_bounded_dropping_the_least_recently_seen():
    clock = FakeClock()
    buckets = ProbeBuckets(rate=1, burst=1, max_addresses=3, clock=clock)
    assert buckets.take("a") == 0.0 and buckets.take("b") == 0.0 and buckets.take("c") == 0.0
    assert buckets.take("a") > 0  # a seen again: now the most recent
    for n in range(10_000):  # a flood from many addresses
        buckets.take(f"10.1.{n // 256}.{n % 256}")
        assert len(buckets) <= 3
    assert buckets.take("a") == 0.0  # dropped meanwhile: a full bucket again


def test_a_flood_of_probes_from_one_client_gets_429_with_retry_after(tiny_index):
    settings = Settings(index=tiny_index, warm=False, probe_rate=0.001, probe_burst=3)
    state = ServiceState(settings, engine=FillEngine.open(settings.engine_config()))
    app = create_app(settings, state=state)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert [client.get("/readyz").status_code, client.head("/healthz").status_code] == [200, 200]
        assert client.get("/healthz").status_code == 200  # the burst of 3, spent on both probes
        for refused in (client.get("/readyz"), client.head("/readyz"), client.get("/healthz")):
            assert refused.status_code == 429, refused.text
            assert int(refused.headers["retry-after"]) >= 1
        body = client.get("/readyz").json()
        assert body["error_type"] == "overloaded" and "FILL_PROBE_RATE" in body["error"], body
        assert "0.001 a second per client address" in body["error"] and "bursts of up to 3" in body["error"], body
        assert client.post("/fill", json={"text": "<mask>"}).status_code == 200  # the other routes are not limited
        other = TestClient(app, client=("10.0.0.2", 1234))  # the same app, its requests from another address
        assert other.get("/readyz").status_code == 200
    state.close()
