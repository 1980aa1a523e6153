"""The per-request cost budget (422 over it) and the deadline (504, the computation stops, the slot is
freed, other requests keep being served)."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient

import fill.engine
from common.errors import AppError
from fill.budget import MATCHES_PER_FILL, Budget
from fill.choices import ChoicePhrases
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import FillRequest, ScoreRequest
from service.api import create_app
from service.config import Settings
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
    budget = Budget(defaults.max_candidates, defaults.max_evidence, defaults.max_search)
    for masks in (1, 2, 3, 4, 5):  # a default hybrid request with up to 5 masks (block tokens 256)
        budget.check(FillRequest(text=" ".join(["<mask>"] * masks)), "hybrid", 256)
    worst = FillRequest(text=SIXTEEN, k=8192, max_span_tokens=32, top_k=100, evidence=20)
    with pytest.raises(Exception, match="FILL_MAX_SEARCH"):
        budget.check(worst, "hybrid", 256)
    with pytest.raises(Exception, match="FILL_MAX_CANDIDATES"):
        budget.check(worst.model_copy(update={"k": 512}), "hybrid", 256)


def _choices(labels: int, phrases: int) -> list[dict]:
    return [{"label": f"c{c}", "phrases": [f"w{c}x{p}" for p in range(phrases)]} for c in range(labels)]


def test_a_scores_phrase_matches_count_in_its_budget_and_its_cost():
    """Every phrase of several tokens is matched at every retrieved token, a choice's one-token phrases once
    together: 64 choices x 32 phrases at 100 blocks is 105M matches (~5 default fills measured), refused by the
    default bound; 64 x 16 is accepted; from the request alone (no tokenizer) each phrase counts one lookup, never
    fewer than the tokenized count, and synonyms none (they join the one-token lookup of their choice)."""
    defaults = Settings(index="unused")
    budget = Budget(defaults.max_candidates, defaults.max_evidence, defaults.max_search, defaults.max_matches)
    two = ScoreRequest(text="It was <mask> .", choices=["great", "terrible"], synonyms=0, blocks=100)
    many = ScoreRequest(text="It was <mask> .", choices=_choices(64, 32), synonyms=0, blocks=100)
    assert Budget.phrases(two) == 2 and Budget.phrases(many) == 2048
    assert Budget.phrases(two.model_copy(update={"synonyms": 20})) == 2
    assert Budget.matches(many, "restricted", 256) == 1 * 2 * 100 * 256 * 2048
    budget.check(two, "restricted", 256)
    default = ScoreRequest(text="It was <mask> .", choices=["great", "terrible"])
    assert Budget.candidates(default, "restricted", 256) == 1 * 2 * default.blocks * 256 == defaults.max_candidates
    budget.check(default, "restricted", 256)  # the defaults within the default budget, exactly
    with pytest.raises(Exception, match="FILL_MAX_CANDIDATES"):
        budget.check(default.model_copy(update={"blocks": default.blocks + 1}), "restricted", 256)
    sixteen = ScoreRequest(text="It was <mask> .", choices=_choices(64, 16), synonyms=0, blocks=100)
    budget.check(sixteen, "restricted", 256)
    budget.check(sixteen.model_copy(update={"synonyms": 20}), "restricted", 256)
    with pytest.raises(Exception, match="2048 phrase lookups = 104,857,600 phrase matches.*FILL_MAX_MATCHES"):
        budget.check(many, "restricted", 256)
    assert Budget.cost(many, "restricted", 256) == pytest.approx(
        Budget.cost(two, "restricted", 256) + 2046 * 2 * 100 * 256 / MATCHES_PER_FILL
    )
    assert Budget.cost(many, "restricted", 256) > 12  # the heavy lane's, whatever its search


def test_the_default_budget_admits_64_one_word_choices_with_their_synonyms_and_refuses_one_lookup_more(engine):
    """What API.md and FILL_MAX_MATCHES's help say the defaults accept: a default one-mask score (restricted, 200
    blocks of the default build's 256 tokens: 102,400 retrieved tokens) of 64 one-word choices with their 20
    synonyms each (64 lookups: before, 64 x 21 phrases = 137,625,600 matches were refused), and up to 655
    lookups (2^26 // 102,400); one more is a 422 naming the product and the setting."""
    defaults = Settings(index="unused")
    budget = Budget(defaults.max_candidates, defaults.max_evidence, defaults.max_search, defaults.max_matches)
    words = engine.encoder.word_neighbours.words[:128]
    request = ScoreRequest(text="It was <mask> .", choices=words[:64])  # every other field its default
    phrases = ChoicePhrases.of(engine.encoder, request.choice_list(), request.synonyms)
    assert [len(near) for near in phrases.synonyms] == [20] * 64 and len(phrases.ids) == 64 * 21
    assert Budget.phrases(request, phrases) == 64
    budget.check(request, "restricted", 256, phrases)
    assert Budget.matches(request, "restricted", 256, phrases) == 102_400 * 64
    assert defaults.max_matches // 102_400 == 655

    def several_tokens(lookups: int) -> tuple[ScoreRequest, ChoicePhrases]:  # 64 choices of two-word phrases
        choices = [
            {
                "label": words[c],
                "phrases": [f"{words[c]} {words[64 + j]}" for j in range(lookups // 64 + (c < lookups % 64))],
            }
            for c in range(64)
        ]
        r = ScoreRequest(text="It was <mask> .", choices=choices)
        return r, ChoicePhrases.of(engine.encoder, r.choice_list(), r.synonyms)

    most, its_phrases = several_tokens(655)
    assert Budget.phrases(most, its_phrases) == 655 and not any(its_phrases.synonyms)
    budget.check(most, "restricted", 256, its_phrases)
    over, its_phrases = several_tokens(656)
    with pytest.raises(AppError) as caught:
        budget.check(over, "restricted", 256, its_phrases)
    assert caught.value.status == 422 and caught.value.message.startswith(
        "request too expensive: 102,400 retrieved tokens (masks x queries) x 656 phrase lookups = 67,174,400 "
        "phrase matches, over the server's budget of 67,108,864 (FILL_MAX_MATCHES;"
    )


def test_over_budget_is_422_naming_the_fields_and_the_setting(engine):
    client, state = client_for(engine, max_candidates=5000, max_evidence=50)
    with client:
        r = client.post("/fill", json={"text": "<mask> <mask>", "mode": "dense", "k": 1024, "max_span_tokens": 4})
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert "2 masks x (k 1024) x max_span_tokens 4 = 8,192" in error and "FILL_MAX_CANDIDATES" in error
        r = client.post(
            "/fill", json={"text": "<mask>", "mode": "dense", "top_k": 20, "evidence": 3, "max_span_tokens": 4}
        )
        assert r.status_code == 422 and "1 mask x top_k 20 x evidence 3 = 60" in r.json()["error"]
        assert "FILL_MAX_EVIDENCE" in r.json()["error"]
        r = client.post("/fill", json={"text": "<mask>", "mode": "dense", "k": 1024, "max_span_tokens": 4})
        assert r.status_code == 200, r.text
        assert 'fill_requests_total{outcome="invalid"} 2.0' in client.get("/metrics").text
    assert_all_slots_free(state, state.settings)


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


def test_search_cost_counts_masks_queries_and_k_and_refuses_the_heaviest_dense_request():
    request = FillRequest(text="<mask> and <mask>", k=100)
    assert Budget.search(request, "dense") == Budget.search(request, "hybrid") == 2 * 2 * 100
    assert Budget.search(request, "restricted") == 0
    budget = Budget(71680, 600)
    heaviest = FillRequest(text=SIXTEEN, mode="dense", k=4480, max_span_tokens=1)  # at the candidate budget
    budget.check(heaviest.model_copy(update={"text": "<mask>"}), "dense", 256)
    with pytest.raises(Exception, match="16 masks x 2 searches x k 4480 = 143,360 hits .*FILL_MAX_SEARCH"):
        budget.check(heaviest, "dense", 256)


def test_cost_is_in_default_fills():
    assert Budget.cost(FillRequest(text="<mask>"), "hybrid", 256) == 1.0
    assert Budget.cost(FillRequest(text="<mask> <mask>"), "hybrid", 256) == 2.0
    assert Budget.cost(FillRequest(text="<mask>", k=4096, max_span_tokens=1), "dense", 256) == 4.0  # its search
    assert Budget.cost(FillRequest(text="<mask>", max_span_tokens=1), "restricted", 256) < 1.0


def test_the_plan_carries_the_cost_the_service_chooses_a_lane_by(engine):
    """The cost is computed once, by `plan`, for fills and scores alike (the service reads `planned.cost`)."""
    block_tokens = engine.index.manifest.build.block_tokens
    requests = [
        FillRequest(text="<mask>"),
        FillRequest(text="<mask> and <mask>", k=4096, max_span_tokens=1),
        FillRequest(text="<mask>", mode="restricted", max_span_tokens=1),
        ScoreRequest(text="It was <mask> .", choices=["good", "bad"]),
    ]
    costs = []
    for request in requests:
        planned = engine.plan(request)
        assert planned.cost == Budget.cost(request, planned.mode, block_tokens)
        costs.append(planned.cost)
    assert len(set(costs)) == len(costs)  # four different costs: the cost follows the request


def test_heavy_requests_have_a_lane_of_their_own(engine, monkeypatch):
    """While a heavy request is held inside the engine, light ones are answered; the lanes are counted."""
    release = threading.Event()
    real_finish = FillEngine.finish

    def held_finish(self, prepared, deadline=None):
        if prepared.planned.request.k == 4096:
            release.wait(10)
        return real_finish(self, prepared, deadline)

    monkeypatch.setattr(FillEngine, "finish", held_finish)
    client, state = client_for(engine, fill_workers=1, heavy_workers=1)
    with client:
        heavy = {}
        threads = [
            threading.Thread(
                target=lambda i=i: heavy.update(
                    {
                        i: client.post(
                            "/fill",
                            json={
                                "text": "<mask> was born in <mask> .",
                                "k": 4096,
                                "max_span_tokens": 1,
                                "mode": "dense",
                            },
                        )
                    }
                )
            )
            for i in range(2)
        ]
        for t in threads:
            t.start()
        time.sleep(0.3)
        for _ in range(3):  # one light worker, both heavy requests held: light ones still pass
            r = client.post("/fill", json={"text": "Marie Curie was born in <mask> ."}, timeout=5)
            assert r.status_code == 200, r.text
        assert not heavy  # the heavy ones are still held
        release.set()
        for t in threads:
            t.join(10)
        assert [heavy[i].status_code for i in range(2)] == [200, 200]
        metrics = client.get("/metrics").text
        assert 'fill_lane_requests_total{lane="heavy"} 2.0' in metrics
        assert 'fill_lane_requests_total{lane="light"} 3.0' in metrics
    assert_all_slots_free(state, state.settings)


def test_the_budget_is_in_the_openapi_schema(engine):
    client, _ = client_for(engine, max_search=5000, max_candidates=7000, heavy_weight=3.0)
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("FillRequest", "ScoreRequest"):
        budget = schemas[name]["x-cost-budget"]
        assert (budget["max_search"], budget["max_candidates"], budget["heavy_lane_over"]) == (5000, 7000, 3.0)
        assert "search 5,000 hits" in schemas[name]["description"]


def test_the_heavy_lanes_threads_run_at_a_lower_cpu_priority(engine):
    import os

    _, state = client_for(engine, heavy_nice=9)
    base = os.getpriority(os.PRIO_PROCESS, 0)

    def priority() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    assert state.requests.workers.heavy.submit(priority).result() == max(base, 9)
    assert state.requests.workers.light.submit(priority).result() == base
    assert state.serving.heavy.run_on.submit(priority).result() == max(base, 9)  # its batches' search
    assert state.serving.batcher.run_on is None  # the light lane's: on the encoder's thread, at its priority
    state.close()
