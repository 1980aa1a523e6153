"""POST /score in process: the contract (probabilities, order, evidence), its 422s, its budget and the
OpenAPI schema. The scoring itself is checked against a brute-force reference in tests/fill/test_choices.py."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from fill.engine import FillEngine
from service.api import create_app
from service.config import Settings
from service.state import ServiceState
from tests.conftest import CORPUS

DOCS = {d["id"]: d["text"] for d in CORPUS}


@pytest.fixture(scope="module")
def state(tiny_index) -> ServiceState:
    settings = Settings(index=tiny_index)
    return ServiceState(settings, engine=FillEngine.open(settings.engine_config()))


@pytest.fixture(scope="module")
def client(state):
    with TestClient(create_app(state.settings, state=state), raise_server_exceptions=False) as c:
        yield c


def score(client, **body):
    r = client.post("/score", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_probabilities_sum_to_one_in_the_requests_order_with_evidence(client):
    choices = ["Warsaw", {"label": "French places", "phrases": ["Paris", "Passy", "France"]}, "Alexandra, Victoria"]
    data = score(client, text="Marie Curie was born in <mask> . She died in <mask> .", choices=choices, evidence=2)
    assert set(data) == {"masks", "took_ms", "timings_ms"}
    assert [m["index"] for m in data["masks"]] == [0, 1]
    for mask in data["masks"]:
        assert [c["label"] for c in mask["choices"]] == ["Warsaw", "French places", "Alexandra, Victoria"]
        assert sum(c["probability"] for c in mask["choices"]) == pytest.approx(1.0)
        best = max(mask["choices"], key=lambda c: c["probability"])
        assert mask["predicted"] == best["label"] and not mask["abstained"]
        for c in mask["choices"]:
            assert (c["mass"] > 0) == bool(c["evidence"]) and len(c["evidence"]) <= 2
            for ev in c["evidence"]:  # the evidence is an occurrence of one of the choice's phrases
                phrases = [c["label"]] if c["label"] != "French places" else ["Paris", "Passy", "France"]
                assert DOCS[ev["doc_id"]][ev["start"] : ev["end"]] in phrases


def test_a_choice_that_never_occurs_gets_no_mass(client):
    mask = score(client, text="Paris is the capital of <mask> .", choices=["France", "Zorblax"])["masks"][0]
    assert mask["choices"][1]["mass"] == 0.0 and mask["choices"][1]["probability"] == 0.0
    assert mask["choices"][0]["probability"] == 1.0 and mask["predicted"] == "France"
    none = score(client, text="Paris is the capital of <mask> .", choices=["Zorblax", "Quux"])["masks"][0]
    assert none["abstained"] and none["predicted"] is None
    assert [c["probability"] for c in none["choices"]] == [0.5, 0.5]


def test_each_choice_lists_the_synonyms_that_voted_with_it(client):
    body = dict(text="Marie Curie was born in <mask> .", choices=["Warsaw", {"label": "city", "phrases": ["Paris"]}])
    mask = score(client, synonyms=3, **body)["masks"][0]
    words = [c["synonyms"] for c in mask["choices"]]
    assert [len(w) for w in words] == [3, 3] and not set(words[0]) & set(words[1])
    assert not {"warsaw", "paris"} & set(words[0] + words[1])  # a given word is never its own synonym
    assert all(c["synonyms"] == [] for c in score(client, synonyms=0, **body)["masks"][0]["choices"])


@pytest.mark.parametrize(
    "choices, where",
    [
        ([], "choices"),
        (["only"], "choices"),
        ([f"c{i}" for i in range(65)], "choices"),
        (["same", "same"], "repeats the label"),
        (["a", ""], "at least 1 character"),
        (["a", "   "], "pattern"),
        (["a", {"label": "b", "phrases": []}], "phrases"),
        (["a", {"label": "b", "phrases": ["ok", " "]}], "pattern"),
        (["a", {"label": "b", "phrases": ["ok", "\x1c"]}], "no token"),
        (["a", {"label": "", "phrases": ["x"]}], "label"),
        (["a", {"label": "b"}], "phrases"),
        (["a", {"label": "b", "phrases": ["x"], "extra": 1}], "extra"),
        (["a", 3], "choices"),
    ],
)
def test_a_bad_choice_list_is_a_422_naming_the_field(client, choices, where):
    r = client.post("/score", json={"text": "It was <mask> .", "choices": choices})
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error_type"] == "validation"
    assert any("choices" in [str(x) for x in d["loc"]] for d in body["detail"]), body
    assert where in r.text


@pytest.mark.parametrize("first, second", [("a", "b"), ("b", "a")])
def test_a_phrase_of_two_choices_is_a_422_naming_it_and_both_labels(client, first, second):
    """Before: 200, every synonym of "good" and so most of the vote to the choice listed first."""
    choices = [{"label": first, "phrases": ["good"]}, {"label": second, "phrases": ["fine", "Good"]}]
    r = client.post("/score", json={"text": "It was <mask> .", "choices": choices})
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error_type"] == "validation" and body["detail"][0]["loc"] == ["body", "choices"]
    assert "'good'" in body["error"] and "'Good'" in body["error"]
    assert f"choice {first!r}" in body["error"] and f"choice {second!r}" in body["error"]


def test_up_to_64_one_word_choices_with_the_default_synonyms_are_scored_and_65_refused(client, state):
    words = state.engine.encoder.word_neighbours.words[:65]
    data = score(client, text="It was <mask> .", choices=words[:64])  # every other field its default
    assert [c["label"] for c in data["masks"][0]["choices"]] == words[:64]
    assert all(len(c["synonyms"]) == 20 for c in data["masks"][0]["choices"])
    r = client.post("/score", json={"text": "It was <mask> .", "choices": words})
    assert r.status_code == 422 and "at most 64" in r.json()["error"], r.text


@pytest.mark.parametrize(
    "body",
    [
        {"choices": ["a", "b"]},
        {"text": "no mask here", "choices": ["a", "b"]},
        {"text": "<mask>", "choices": ["a", "b"], "k": 0},
        {"text": "<mask>", "choices": ["a", "b"], "temperature": 0},
        {"text": "<mask>", "choices": ["a", "b"], "scorer": "bm25"},
        {"text": "<mask>", "choices": ["a", "b"], "mode": "fuzzy"},
        {"text": "<mask>", "choices": ["a", "b"], "top_k": 3},
        {"text": "<mask>", "choices": ["a", "b"], "synonyms": 51},
        {"text": "<mask>", "choices": ["a", "b"], "synonyms": -1},
        {"text": "<mask>", "choices": ["a", "b"], "calibrate": "yes"},
    ],
)
def test_other_bad_fields_are_422(client, body):
    r = client.post("/score", json=body)
    assert r.status_code == 422, r.text


def test_the_cost_budget_applies(state):
    settings = Settings(index=state.settings.index, max_candidates=1000, max_evidence=4)
    with TestClient(
        create_app(settings, state=ServiceState(settings, engine=state.engine)), raise_server_exceptions=False
    ) as c:
        r = c.post("/score", json={"text": "It was <mask> .", "choices": ["a", "b"], "k": 600, "mode": "dense"})
        assert r.status_code == 422 and "FILL_MAX_CANDIDATES" in r.json()["error"]
        r = c.post(
            "/score",
            json={"text": "It was <mask> .", "choices": ["a", "b", "c"], "k": 10, "evidence": 2, "mode": "dense"},
        )
        assert r.status_code == 422 and "FILL_MAX_EVIDENCE" in r.json()["error"]
        assert (
            c.post(
                "/score",
                json={"text": "It was <mask> .", "choices": ["a", "b"], "k": 10, "evidence": 2, "mode": "dense"},
            ).status_code
            == 200
        )
        r = c.post("/score", json={"text": "It was <mask> .", "choices": ["a", "b"]})  # 2 x 100 blocks x 16 tokens
        assert r.status_code == 422 and "blocks" in r.json()["error"]


def test_score_is_in_the_openapi_schema(client):
    schema = client.get("/openapi.json").json()
    op = schema["paths"]["/score"]["post"]
    assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/ScoreRequest")
    assert op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/ScoreResult")
    request = schema["components"]["schemas"]["ScoreRequest"]
    assert request["properties"]["choices"]["minItems"] == 2 and request["properties"]["choices"]["maxItems"] == 64
    assert set(request["required"]) == {"text", "choices"}
