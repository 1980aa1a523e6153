"""The per-request cost budget (422 over it) and the deadline (504, the computation stops, the slot is
freed, other requests keep being served)."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient

import fill.engine

from service.api import create_app
from fill.budget import Budget, Deadline
from service.config import Settings
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import FillRequest
from service.state import ServiceState
from tests.service.test_api import assert_all_slots_free

SIXTEEN = " and ".join(["<mask>"] * 16) + " ."


@pytest.fixture(scope="module")
def engine(tiny_index) -> FillEngine:
    return FillEngine.open(EngineConfig(index=tiny_index))


def client_for(engine: FillEngine, **settings) -> tuple[TestClient, ServiceState]:
    s = Settings(index=engine.index.root, **settings)
    state = ServiceState(s, engine=engine)
    return TestClient(create_app(s, state=state), raise_server_exceptions=False), state


def test_candidates_cost_counts_k_blocks_and_spans_by_mode():
    request = FillRequest(text="<mask> and <mask>", k=100, blocks=2, max_span_tokens=3)
    assert Budget.candidates(request, "dense", 256) == 2 * 100 * 3
    assert Budget.candidates(request, "restricted", 256) == 2 * 2 * 256 * 3
    assert Budget.candidates(request, "hybrid", 256) == 2 * (100 + 512) * 3


def test_default_budget_admits_default_requests_and_refuses_the_worst(engine):
    defaults = Settings(index=engine.index.root)
    budget = Budget(defaults.max_candidates, defaults.max_evidence)
    for masks in (1, 2, 3, 4):  # a default hybrid request with up to 4 masks (block tokens 256)
        budget.check(FillRequest(text=" ".join(["<mask>"] * masks)), "hybrid", 256)
    worst = FillRequest(text=SIXTEEN, k=8192, max_span_tokens=32, top_k=100, evidence=20)
    with pytest.raises(Exception, match="FILL_MAX_CANDIDATES"):
        budget.check(worst, "hybrid", 256)


def test_over_budget_is_422_naming_the_fields_and_the_setting(engine):
    client, state = client_for(engine, max_candidates=5000, max_evidence=50)
    with client:
        r = client.post("/fill", json={"text": "<mask> <mask>", "mode": "dense", "k": 1024, "max_span_tokens": 4})
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert "2 masks x (k 1024) x max_span_tokens 4 = 8,192" in error and "FILL_MAX_CANDIDATES" in error
        r = client.post("/fill", json={"text": "<mask>", "mode": "dense", "top_k": 20, "evidence": 3,
                                         "max_span_tokens": 4})
        assert r.status_code == 422 and "1 mask x top_k 20 x evidence 3 = 60" in r.json()["error"]
        assert "FILL_MAX_EVIDENCE" in r.json()["error"]
        r = client.post("/fill", json={"text": "<mask>", "mode": "dense", "k": 1024, "max_span_tokens": 4})
        assert r.status_code == 200, r.text
        assert 'fill_requests_total{outcome="invalid"} 2.0' in client.get("/metrics").text
    assert_all_slots_free(state, state.settings)


def test_deadline_raises_timeout_after_its_time():
    deadline = Deadline(0.05)
    deadline.check("encode")
    time.sleep(0.06)
    with pytest.raises(Exception, match="timed out after 0.05 s") as info:
        deadline.check("rank")
    assert info.value.kind == "timeout" and "rank" in info.value.message


def test_a_slow_request_gets_504_stops_computing_and_others_are_served(engine, monkeypatch):
    """Each mask of a 'slow' request takes 0.3 s in rank: 16 masks would take 4.8 s; with a 1 s timeout
    it gets 504 after about 1 s (the engine stopped between masks), meanwhile a normal request is
    answered, and every slot is free afterwards."""
    ranked = []
    real_rank = fill.engine.rank_mask

    def slow_rank(parts, request):
        if request.text.startswith("slow"):
            ranked.append(time.perf_counter())
            time.sleep(0.3)
        return real_rank(parts, request)

    monkeypatch.setattr(fill.engine, "rank_mask", slow_rank)
    client, state = client_for(engine, request_timeout=1.0, max_candidates=10**9)
    with client:
        slow = {}

        def send_slow():
            t0 = time.perf_counter()
            slow["response"] = client.post("/fill", json={"text": "slow " + SIXTEEN, "k": 8, "max_span_tokens": 2})
            slow["seconds"] = time.perf_counter() - t0

        thread = threading.Thread(target=send_slow)
        thread.start()
        time.sleep(0.2)
        other = client.post("/fill", json={"text": "Marie Curie was born in <mask> ."})
        assert other.status_code == 200, other.text
        thread.join(10)
        r = slow["response"]
        assert r.status_code == 504, r.text
        assert r.json()["error_type"] == "timeout" and "FILL_REQUEST_TIMEOUT" in r.json()["error"]
        assert slow["seconds"] < 2.5
        assert len(ranked) <= 5  # it stopped: far fewer than 16 masks were ranked
        time.sleep(0.5)
        assert len(ranked) <= 5  # and nothing went on computing after the answer
        assert 'fill_requests_total{outcome="timeout"} 1.0' in client.get("/metrics").text
    assert_all_slots_free(state, state.settings)
