"""The HTTP API in process: validation errors, fill results with evidence, readiness, overload, fuzz."""

from __future__ import annotations

import json
import random
import re

import pytest
from fastapi.testclient import TestClient

from common.masks import MASK_PATTERN
from fill.engine import FillEngine
from service.api import create_app
from service.config import Settings
from service.state import ServiceState
from tests.conftest import CORPUS

DOCS = {d["id"]: d["text"] for d in CORPUS}
JSON_HEADERS = {"content-type": "application/json"}


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def settings(tiny_index) -> Settings:
    # no cost budget here, so the schema's own bounds are tested; the budget is tested in test_budget.py
    return Settings(index=tiny_index, max_candidates=10**9, max_evidence=10**9)


@pytest.fixture(scope="module")
def state(settings) -> ServiceState:
    return ServiceState(settings, engine=FillEngine.open(settings.engine_config()))


@pytest.fixture(scope="module")
def client(settings, state):
    app = create_app(settings, state=state)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def fill(client, **body):
    r = client.post("/fill", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def check_response(data: dict, text: str, params: dict | None = None) -> None:
    """Everything the contract promises about a 200 body for `text` with request `params`."""
    params = params or {}
    top_k = params.get("top_k", 5)
    n_evidence = params.get("evidence", 3)
    case_sensitive = params.get("case_sensitive", True)
    n_masks = len(MASK_PATTERN.findall(text))

    assert set(data) == {"filled", "masks", "took_ms", "timings_ms"}
    assert isinstance(data["took_ms"], (int, float)) and data["took_ms"] >= 0
    assert set(data["timings_ms"]) == {"encode", "search", "spans", "rank", "read"}
    assert all(v >= 0 for v in data["timings_ms"].values())
    assert sum(data["timings_ms"].values()) <= data["took_ms"] + 1e-3  # the stages are parts of the whole
    assert len(data["masks"]) == n_masks
    for i, mask in enumerate(data["masks"]):
        assert mask["index"] == i
        cands = mask["candidates"]
        assert mask["abstained"] == (not cands)
        assert len(cands) <= top_k
        scores = [c["score"] for c in cands]
        assert all(0.0 < s <= 1.0 for s in scores), scores
        assert scores == sorted(scores, reverse=True)
        confidences = [c["confidence"] for c in cands]
        assert all(0.0 <= p <= 1.0 for p in confidences), confidences
        assert confidences == sorted(confidences, reverse=True)  # monotone in the score
        assert not cands or confidences[0] >= params.get("min_confidence", 0.0)
        assert sum(scores) <= 1.0 + 1e-9
        phrases = [c["phrase"] for c in cands]
        keys = phrases if case_sensitive else [p.lower() for p in phrases]
        assert len(set(keys)) == len(keys), f"duplicate phrases {phrases}"
        for c in cands:
            assert c["phrase"] and c["phrase"] == c["phrase"].strip()
            assert len(c["evidence"]) <= n_evidence
            if n_evidence == 0:
                assert c["evidence"] == []
            else:
                assert c["evidence"], f"phrase {c['phrase']!r} has no evidence"
            ev_scores = [e["score"] for e in c["evidence"]]
            assert ev_scores == sorted(ev_scores, reverse=True)
            seen = set()
            for e in c["evidence"]:
                assert set(e) == {"doc_id", "block", "start", "end", "context", "score"}
                assert e["doc_id"] in DOCS, e
                doc = DOCS[e["doc_id"]]
                assert 0 <= e["start"] < e["end"] <= len(doc), e
                found = doc[e["start"] : e["end"]]
                if case_sensitive:
                    assert found == c["phrase"], (found, c["phrase"], e)
                else:
                    assert found.lower() == c["phrase"].lower(), (found, c["phrase"], e)
                assert found in e["context"], e
                assert isinstance(e["block"], int) and e["block"] >= 0
                assert e["score"] > 0
                where = (e["doc_id"], e["start"], e["end"])
                assert where not in seen, f"evidence repeated: {where}"
                seen.add(where)

    # the filled text: each mask replaced by its top phrase (kept when there is none)
    segments = MASK_PATTERN.split(text)
    masks = MASK_PATTERN.findall(text)
    expected = segments[0]
    for m, (mask_text, seg) in enumerate(zip(masks, segments[1:])):
        cands = data["masks"][m]["candidates"]
        expected += (cands[0]["phrase"] if cands else mask_text) + seg
    assert data["filled"] == expected
    if all(m["candidates"] for m in data["masks"]):
        assert not MASK_PATTERN.search(data["filled"])


# ---------------------------------------------------------------- 422 validation

TOO_LONG = "<mask> " + "a" * 2000
SEVENTEEN = " ".join(["<mask>"] * 17)

INVALID_BODIES = {
    # text problems
    "no-mask": ({"text": "Paris is the capital of France."}, "text"),
    "no-mask-empty": ({"text": ""}, "text"),
    "17-masks": ({"text": SEVENTEEN}, "text"),
    "17-masks-mixed": ({"text": " ".join(["<mask>", "[MASK]"] * 8 + ["<mask>"])}, "text"),
    "too-long": ({"text": TOO_LONG}, "text"),
    "missing-text": ({}, "text"),
    "missing-text-with-others": ({"top_k": 3}, "text"),
    # bounds of each numeric field
    "top_k-0": ({"text": "<mask>", "top_k": 0}, "top_k"),
    "top_k-101": ({"text": "<mask>", "top_k": 101}, "top_k"),
    "top_k-negative": ({"text": "<mask>", "top_k": -5}, "top_k"),
    "k-0": ({"text": "<mask>", "k": 0}, "k"),
    "k-8193": ({"text": "<mask>", "k": 8193}, "k"),
    "k-huge": ({"text": "<mask>", "k": 10**30}, "k"),
    "max_span_tokens-0": ({"text": "<mask>", "max_span_tokens": 0}, "max_span_tokens"),
    "max_span_tokens-33": ({"text": "<mask>", "max_span_tokens": 33}, "max_span_tokens"),
    "alpha-low": ({"text": "<mask>", "alpha": -4.5}, "alpha"),
    "alpha-high": ({"text": "<mask>", "alpha": 4.5}, "alpha"),
    "evidence-negative": ({"text": "<mask>", "evidence": -1}, "evidence"),
    "evidence-21": ({"text": "<mask>", "evidence": 21}, "evidence"),
    # wrong types
    "text-int": ({"text": 123}, "text"),
    "text-null": ({"text": None}, "text"),
    "text-list": ({"text": ["<mask>"]}, "text"),
    "top_k-str": ({"text": "<mask>", "top_k": "five"}, "top_k"),
    "top_k-float": ({"text": "<mask>", "top_k": 2.5}, "top_k"),
    "top_k-null": ({"text": "<mask>", "top_k": None}, "top_k"),
    "k-list": ({"text": "<mask>", "k": [1]}, "k"),
    "max_span_tokens-object": ({"text": "<mask>", "max_span_tokens": {"a": 1}}, "max_span_tokens"),
    "alpha-str": ({"text": "<mask>", "alpha": "high"}, "alpha"),
    "evidence-float": ({"text": "<mask>", "evidence": 1.5}, "evidence"),
    "case_sensitive-str": ({"text": "<mask>", "case_sensitive": "maybe"}, "case_sensitive"),
    "case_sensitive-list": ({"text": "<mask>", "case_sensitive": []}, "case_sensitive"),
    "aggregate-mean": ({"text": "<mask>", "aggregate": "mean"}, "aggregate"),
    "aggregate-int": ({"text": "<mask>", "aggregate": 1}, "aggregate"),
    # unknown field
    "extra-field": ({"text": "<mask>", "topk": 3}, "topk"),
}


@pytest.mark.parametrize("body,field", list(INVALID_BODIES.values()), ids=list(INVALID_BODIES))
def test_invalid_body_gives_422_naming_the_field(client, body, field):
    r = client.post("/fill", json=body)
    assert r.status_code == 422, r.text
    data = r.json()
    assert data["error_type"] == "validation"
    assert field in data["error"], data
    assert isinstance(data["detail"], list) and data["detail"]
    assert any(field in [str(x) for x in d["loc"]] for d in data["detail"]), data["detail"]


def test_too_many_masks_error_says_how_many(client):
    data = client.post("/fill", json={"text": SEVENTEEN}).json()
    assert "17" in data["error"] and "16" in data["error"]


def test_no_mask_error_explains_the_problem(client):
    data = client.post("/fill", json={"text": "no mask here"}).json()
    assert "mask" in data["error"].lower()


RAW_INVALID = {
    "malformed-json": ('{"text": "<mask>"', "json"),
    "malformed-json-trailing-comma": ('{"text": "<mask>",}', "json"),
    "not-json": ("text=<mask>", "json"),
    "empty-body": ("", "body"),
    "array": ('["<mask>"]', "body"),
    "string": ('"<mask>"', "body"),
    "number": ("42", "body"),
    "null": ("null", "body"),
    "bool": ("true", "body"),
    "alpha-nan": ('{"text": "<mask>", "alpha": NaN}', "alpha"),
    "alpha-infinity": ('{"text": "<mask>", "alpha": Infinity}', "alpha"),
    "alpha--infinity": ('{"text": "<mask>", "alpha": -Infinity}', "alpha"),
    "lone-surrogate": ('{"text": "\\ud800 <mask>"}', "text"),
}


@pytest.mark.parametrize("raw,word", list(RAW_INVALID.values()), ids=list(RAW_INVALID))
def test_invalid_raw_body_gives_422(client, raw, word):
    r = client.post("/fill", content=raw.encode(), headers=JSON_HEADERS)
    assert r.status_code == 422, r.text
    data = r.json()
    assert data["error_type"] == "validation"
    assert word in data["error"].lower(), data
    assert isinstance(data["detail"], list) and data["detail"]


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_non_json_content_type_gives_415(client, content_type):
    headers = {"content-type": content_type} if content_type else {}
    r = client.post("/fill", content=b'{"text": "<mask>"}', headers=headers)
    assert r.status_code == 415, r.text
    assert r.json()["error_type"] == "unsupported_media_type"
    assert "application/json" in r.json()["error"]


def test_invalid_utf8_body_is_not_500(client):
    r = client.post("/fill", content=b'{"text": "\xff <mask>"}', headers=JSON_HEADERS)
    assert r.status_code < 500, r.text
    assert r.json()["error"]


def test_invalid_utf8_body_gives_422(client):
    r = client.post("/fill", content=b'{"text": "\xff <mask>"}', headers=JSON_HEADERS)
    assert r.status_code == 422, r.text
    assert r.json()["error_type"] == "validation"


def test_query_too_long_for_the_model_is_422_not_500(client):
    # under 2000 chars but far more tokens than the tiny BERT's 128 positions
    r = client.post("/fill", json={"text": "word " * 300 + "<mask>"})
    assert r.status_code == 422, r.text
    data = r.json()
    assert data["error_type"] == "validation"
    assert "text" in data["error"]
    assert data["detail"][0]["loc"] == ["body", "text"]


# ---------------------------------------------------------------- successful fills


def test_single_mask(client):
    text = "Paris is the capital of <mask> ."
    check_response(fill(client, text=text), text)


@pytest.mark.parametrize(
    "text",
    [
        "Marie Curie was born in <mask> in <mask> .",
        "Marie Curie was born in [MASK] in [MASK] .",
        "<mask> was born in [MASK] .",
        "[MASK]",
    ],
    ids=["two-angle", "two-bracket", "mixed", "bracket-only"],
)
def test_mask_spellings_and_two_masks(client, text):
    data = fill(client, text=text)
    check_response(data, text)
    assert len(data["masks"]) == len(MASK_PATTERN.findall(text))
    assert all(m["candidates"] for m in data["masks"])


def test_sixteen_masks(client):
    text = " and ".join(["<mask>" if i % 2 else "[MASK]" for i in range(16)]) + " ."
    opts = {"top_k": 2, "evidence": 1, "k": 256, "max_span_tokens": 4}  # 16 masks fit the cost budget so
    data = fill(client, text=text, **opts)
    assert len(data["masks"]) == 16
    check_response(data, text, opts)
    assert all(m["candidates"] for m in data["masks"])
    assert "<mask>" not in data["filled"] and "[MASK]" not in data["filled"]


@pytest.mark.parametrize("top_k", [1, 2, 3, 7])
def test_top_k_respected(client, top_k):
    text = "She died in <mask> , France ."
    data = fill(client, text=text, top_k=top_k)
    check_response(data, text, {"top_k": top_k})
    # the corpus has many more phrases than 7, so the list is full
    assert len(data["masks"][0]["candidates"]) == top_k


def test_top_k_100_and_large_k(client):
    text = "He was born in <mask> ."
    params = {"top_k": 100, "k": 8192, "max_span_tokens": 32, "evidence": 20}
    data = fill(client, text=text, **params)
    check_response(data, text, params)
    assert len(data["masks"][0]["candidates"]) > 7


def test_evidence_zero_gives_empty_lists(client):
    text = "<mask> is the capital of <mask> ."
    data = fill(client, text=text, evidence=0, top_k=5)
    check_response(data, text, {"evidence": 0, "top_k": 5})
    cands = [c for m in data["masks"] for c in m["candidates"]]
    assert cands and all(c["evidence"] == [] for c in cands)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_evidence_count_bounded(client, n):
    text = "Marie Curie was born in <mask> ."
    data = fill(client, text=text, evidence=n, top_k=10)
    check_response(data, text, {"evidence": n, "top_k": 10})
    assert max(len(c["evidence"]) for c in data["masks"][0]["candidates"]) <= n


def test_evidence_offsets_slice_the_corpus_document(client):
    text = "The Seine flows through <mask> . <mask> was born in Warsaw ."
    data = fill(client, text=text, top_k=20, evidence=20)
    check_response(data, text, {"top_k": 20, "evidence": 20})
    evidence = [e for m in data["masks"] for c in m["candidates"] for e in c["evidence"]]
    assert evidence
    assert {e["doc_id"] for e in evidence} <= {"d1", "d2", "d3"}  # d4 is empty
    for m in data["masks"]:
        for c in m["candidates"]:
            for e in c["evidence"]:
                assert DOCS[e["doc_id"]][e["start"] : e["end"]] == c["phrase"]


def test_phrase_with_several_occurrences_has_several_evidence(client):
    # "Paris" occurs twice in d2, "in" many times in d3: some top-20 phrase must have >1 occurrence
    text = "<mask>"
    data = fill(client, text=text, top_k=100, evidence=20, max_span_tokens=1)
    check_response(data, text, {"top_k": 100, "evidence": 20})
    assert any(len(c["evidence"]) > 1 for c in data["masks"][0]["candidates"])


@pytest.mark.parametrize("alpha", [-4.0, -1.0, 0.5, 2.0, 4.0])
def test_alpha_keeps_scores_normalised(client, alpha):
    text = "Allan Peiper is an Australian <mask> ."
    params = {"alpha": alpha, "top_k": 10}
    check_response(fill(client, text=text, **params), text, params)


def test_sum_and_max_aggregation(client):
    """Max: a phrase's mass is its best occurrence's score; sum adds up its occurrences. Max is the default."""
    text = "<mask> flows through Paris ."
    params = {"top_k": 100, "evidence": 20}
    ratios = {}
    for how in ("sum", "max"):
        data = fill(client, text=text, aggregate=how, **params)
        check_response(data, text, {**params, "aggregate": how})
        # the normalised score over the best evidence score: one constant for every phrase under max
        ratios[how] = [c["score"] / c["evidence"][0]["score"] for c in data["masks"][0]["candidates"]]
    assert max(ratios["max"]) == pytest.approx(min(ratios["max"]), rel=1e-4)
    assert max(ratios["sum"]) > 1.01 * min(ratios["sum"])  # phrases with several occurrences gain
    default = fill(client, text=text, **params)["masks"]
    assert default == fill(client, text=text, aggregate="max", **params)["masks"]


def test_case_insensitive(client):
    text = "<mask> flows through Paris ."
    params = {"case_sensitive": False, "top_k": 20, "evidence": 5}
    data = fill(client, text=text, **params)
    check_response(data, text, params)


@pytest.mark.parametrize("max_span_tokens", [1, 2, 32])
def test_max_span_tokens(client, max_span_tokens):
    text = "Allan Peiper was born in <mask> ."
    params = {"max_span_tokens": max_span_tokens, "top_k": 20}
    data = fill(client, text=text, **params)
    check_response(data, text, params)
    if max_span_tokens == 1:
        # a one-token span is at most one word: no white space inside
        assert all(" " not in c["phrase"] for c in data["masks"][0]["candidates"])


def test_k_one(client):
    text = "Paris is the capital of <mask> ."
    params = {"k": 1, "top_k": 5}
    check_response(fill(client, text=text, **params), text, params)


def test_deterministic(client):
    body = {"text": "Marie Curie died in <mask> in <mask> .", "top_k": 4}
    a, b = fill(client, **body), fill(client, **body)
    assert a["masks"] == b["masks"] and a["filled"] == b["filled"]


def test_boundary_values_accepted(client):
    text = "<mask>" + " " * (2000 - len("<mask>"))
    assert len(text) == 2000
    params = {"top_k": 1, "k": 1, "max_span_tokens": 1, "alpha": -4.0, "evidence": 0, "case_sensitive": False}
    check_response(fill(client, text=text, **params), text, params)


# ---------------------------------------------------------------- other endpoints


def test_healthz(client):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "alive"}


def test_readyz(client):
    r = client.get("/readyz")
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "ready"}


def test_info_matches_manifest(client, tiny_index):
    from indexer.manifest import Manifest

    m = Manifest.load(tiny_index)
    r = client.get("/info")
    assert r.status_code == 200, r.text
    info = r.json()
    assert info["counts"] == m.counts.model_dump()
    assert info["counts"]["documents"] == len(CORPUS)
    assert info["counts"]["empty_documents"] == sum(1 for d in CORPUS if not d["text"])
    assert info["dim"] == m.dim
    assert info["model"]["fingerprint"] == m.model.fingerprint
    assert info["index_type"] == m.index_type
    assert info["factories"] == sorted({s.factory for s in m.shards})
    assert info["created_at"] == m.created_at
    assert info["scoring"]["lexical_weight"] == {"dense": 0.0, "restricted": 0.0, "hybrid": 0.0}  # nothing fitted
    assert info["scoring"]["calibrated"] == {"dense": False, "restricted": False, "hybrid": False}


@pytest.fixture(scope="module")
def reader_client(tiny_index):
    from encoder.reader import BUNDLED_READER

    if not (BUNDLED_READER / "reader.json").is_file():
        pytest.skip("no bundled reader in this checkout")
    settings = Settings(index=tiny_index, max_candidates=10**9, max_evidence=10**9, reader_dir=BUNDLED_READER)
    state = ServiceState(settings, engine=FillEngine.open(settings.engine_config()))
    with TestClient(create_app(settings, state=state), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"top_k": 1, "evidence": 1},
        {"case_sensitive": False, "mode": "dense"},
        {"mode": "restricted", "max_span_tokens": 3, "min_confidence": 0.2},
    ],
)
@pytest.mark.parametrize("text", ["Marie Curie was born in <mask> .", "<mask> is the capital of <mask> ."])
def test_fills_with_the_reader_keep_the_contract(reader_client, text, params):
    r = reader_client.post("/fill", json={"text": text, **params})
    assert r.status_code == 200, r.text
    data = r.json()
    check_response(data, text, params)
    assert data["timings_ms"]["read"] > 0


def test_info_says_whether_the_reader_is_on(client, reader_client):
    on = reader_client.get("/info").json()["reader"]
    assert on["on"] is True and on["name"] == "default_reader" and on["card"]["max_tokens"] > 0
    off = client.get("/info").json()["reader"]
    assert off["on"] is False and off["name"] is None


def test_reader_switched_off_per_request_and_refused_without_one(client, reader_client):
    text = "Marie Curie was born in <mask> ."
    off = fill(reader_client, text=text, reader=False)
    assert off["masks"] == fill(client, text=text)["masks"] and off["timings_ms"]["read"] == 0
    r = client.post("/fill", json={"text": text, "reader": True})
    assert r.status_code == 422 and "no reader" in r.json()["error"], r.text


def test_metrics_counts_fill_requests(client):
    fill(client, text="<mask>")
    r = client.get("/metrics")
    assert r.status_code == 200
    assert "fill_requests" in r.text
    assert 'fill_requests_total{outcome="ok"}' in r.text
    assert "fill_seconds" in r.text
    ok = float(re.search(r'fill_requests_total\{outcome="ok"\} (\S+)', r.text).group(1))
    for stage in ("encode", "search", "spans", "rank"):  # one observation per stage per answered fill
        assert float(re.search(rf'fill_stage_seconds_count\{{stage="{stage}"\}} (\S+)', r.text).group(1)) == ok


def test_docs_and_openapi(client):
    r = client.get("/docs")
    assert r.status_code == 200 and "html" in r.headers["content-type"]
    r = client.get("/openapi.json")
    assert r.status_code == 200
    spec = r.json()
    assert "/fill" in spec["paths"] and "post" in spec["paths"]["/fill"]
    for path in ("/healthz", "/readyz", "/info", "/metrics"):
        assert path in spec["paths"]
    schemas = spec["components"]["schemas"]
    assert "FillRequest" in schemas
    assert {"min_confidence", "lexical_weight"} <= set(schemas["FillRequest"]["properties"])
    assert schemas["FillRequest"]["properties"]["min_confidence"]["maximum"] == 1.0
    assert "confidence" in schemas["Candidate"]["required"]
    assert "abstained" in schemas["MaskFill"]["properties"]


def test_min_confidence_abstains_and_keeps_the_mask(client):
    text = "Marie Curie was born in <mask> . Paris is the capital of <mask> ."
    answered = fill(client, text=text)
    check_response(answered, text)
    tops = [m["candidates"][0]["confidence"] for m in answered["masks"]]
    # a threshold between the two masks' top confidences: the weaker mask abstains, the other is filled
    if tops[0] != tops[1]:
        weak, strong = (0, 1) if tops[0] < tops[1] else (1, 0)
        cut = (tops[0] + tops[1]) / 2
        data = fill(client, text=text, min_confidence=cut)
        check_response(data, text, {"min_confidence": cut})
        assert data["masks"][weak] == {"index": weak, "candidates": [], "abstained": True}
        assert data["masks"][strong]["candidates"] == answered["masks"][strong]["candidates"]
    data = fill(client, text=text, min_confidence=1.0)
    check_response(data, text, {"min_confidence": 1.0})
    if max(tops) < 1.0:
        assert data["filled"] == text and all(m["abstained"] for m in data["masks"])
    r = client.post("/fill", json={"text": text, "min_confidence": 1.5})
    assert r.status_code == 422 and "min_confidence" in r.json()["error"]


def test_unknown_route_is_404_json(client):
    r = client.get("/nope")
    assert r.status_code == 404
    assert r.json()["error_type"] == "not_found"


def test_wrong_method_is_405(client):
    r = client.get("/fill")
    assert r.status_code == 405
    assert r.json()["error_type"] == "method_not_allowed"
    assert r.headers["allow"] == "POST"


# ---------------------------------------------------------------- 429


def test_overloaded_gives_429(client, state, settings):
    acquired = 0
    try:
        for _ in range(settings.max_concurrency):
            assert state.requests.slots.acquire(blocking=False)
            acquired += 1
        r = client.post("/fill", json={"text": "<mask>"})
        assert r.status_code == 429, r.text
        data = r.json()
        assert data["error_type"] == "overloaded"
        assert str(settings.max_concurrency) in data["error"]
    finally:
        for _ in range(acquired):
            state.requests.slots.release()
    # the slots are back: requests go through again, and nothing leaked
    r = client.post("/fill", json={"text": "<mask>"})
    assert r.status_code == 200, r.text
    assert 'fill_requests_total{outcome="overloaded"}' in client.get("/metrics").text


def assert_all_slots_free(state, settings) -> None:
    """Every concurrency slot can be taken (none leaked); they are given back afterwards."""
    got = 0
    try:
        while got < settings.max_concurrency and state.requests.slots.acquire(blocking=False):
            got += 1
        assert got == settings.max_concurrency
    finally:
        for _ in range(got):
            state.requests.slots.release()


def test_slots_released_after_errors(client, state, settings):
    # the query-too-long path (too many tokens) and successful path must each give the slot back
    for _ in range(settings.max_concurrency + 2):
        assert client.post("/fill", json={"text": "word " * 300 + "<mask>"}).status_code == 422
        assert client.post("/fill", json={"text": "<mask>"}).status_code == 200
    assert_all_slots_free(state, settings)


def test_concurrent_requests_never_500(client, state, settings):
    """More simultaneous requests than slots: each is answered 200 or 429, and the slots all come back."""
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"Marie Curie was born in <mask> in {'<mask>' if i % 2 else '[MASK]'} ." for i in range(24)]
    with ThreadPoolExecutor(max_workers=12) as pool:
        responses = list(pool.map(lambda t: client.post("/fill", json={"text": t, "top_k": 3}), texts))
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 429}, codes
    assert 200 in codes
    for t, r in zip(texts, responses):
        if r.status_code == 200:
            check_response(r.json(), t, {"top_k": 3})
        else:
            assert r.json()["error_type"] == "overloaded"
    assert_all_slots_free(state, settings)


# ---------------------------------------------------------------- 503


@pytest.fixture(scope="module")
def unloaded_client(settings):
    app = create_app(settings, state=ServiceState(settings))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_not_ready_fill_gives_503(unloaded_client):
    r = unloaded_client.post("/fill", json={"text": "<mask>"})
    assert r.status_code == 503, r.text
    data = r.json()
    assert data["error_type"] == "not_ready"
    assert "loading" in data["error"]


def test_not_ready_readyz_and_info_give_503(unloaded_client):
    for path in ("/readyz", "/info"):
        r = unloaded_client.get(path)
        assert r.status_code == 503, (path, r.text)
        assert r.json()["error_type"] == "not_ready"


def test_not_ready_still_alive(unloaded_client):
    assert unloaded_client.get("/healthz").status_code == 200
    assert unloaded_client.get("/metrics").status_code == 200


def test_failed_load_gives_503_naming_the_problem(tmp_path):
    missing = tmp_path / "no_such_index"
    settings = Settings(index=missing)
    state = ServiceState(settings)
    state.load()
    assert not state.ready and state.engine is None
    assert state.error and str(missing) in state.error
    app = create_app(settings, state=state)
    with TestClient(app, raise_server_exceptions=False) as c:
        for method, path, kw in (
            ("post", "/fill", {"json": {"text": "<mask>"}}),
            ("get", "/readyz", {}),
            ("get", "/info", {}),
        ):
            r = getattr(c, method)(path, **kw)
            assert r.status_code == 503, (path, r.text)
            data = r.json()
            assert data["error_type"] == "not_ready"
            assert "failed to load" in data["error"]
            assert str(missing) not in data["error"] and str(tmp_path) not in data["error"]  # no server paths
            assert "no_such_index" in data["error"]
            assert "manifest.json" in data["error"]
        assert c.get("/healthz").status_code == 200


def test_lifespan_loads_in_background(settings):
    """Without a ready-made state the app loads the engine itself and becomes ready."""
    import time

    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as c:
        deadline = time.monotonic() + 60
        while True:
            r = c.get("/readyz")
            if r.status_code == 200:
                break
            assert r.status_code == 503, r.text
            assert time.monotonic() < deadline, r.text
            time.sleep(0.1)
        assert c.post("/fill", json={"text": "<mask>"}).status_code == 200


# ---------------------------------------------------------------- fuzz


def _random_value(rng: random.Random, depth: int = 0):
    kind = rng.choice(["int", "bigint", "float", "special", "str", "bool", "null", "list", "dict"])
    if kind == "int":
        return rng.randint(-10, 120)
    if kind == "bigint":
        return rng.choice([-(10**20), 10**20, 2**63, -(2**63) - 1, 8192, 8193, 10**400])
    if kind == "float":
        return rng.choice([rng.uniform(-10, 10), 0.5, 1.0, 5.0, -0.0, 1e308, -1e308, 1e-320])
    if kind == "special":
        return rng.choice(["NaN", "Infinity", "-Infinity"])  # JSON-ish literals, as strings
    if kind == "str":
        return _random_text(rng)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [] if depth > 1 else [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {} if depth > 1 else {"a": _random_value(rng, depth + 1)}


def _random_text(rng: random.Random) -> str:
    pieces = [
        "<mask>",
        "[MASK]",
        "<MASK>",
        "[mask]",
        "<mask",
        "MASK]",
        "Paris",
        "born in",
        " ",
        "\n",
        "\t",
        "é",
        "日本",
        "\u0000",
        "\u200b",
        "🙂",
        ".",
        ",",
        "<",
        ">",
        "[",
        "]",
        "'",
        '"',
        "\\",
        "France",
    ]
    n = rng.choice([0, 1, 2, 3, 5, 10, 20, 40])
    text = "".join(rng.choice(pieces) for _ in range(n))
    if rng.random() < 0.6:
        text += " <mask>"  # most texts have a mask, so that many requests get past validation
    r = rng.random()
    if r < 0.05:
        text = "a" * rng.choice([1999, 2000, 2001]) + "<mask>"
    elif r < 0.1:
        text = " ".join(["<mask>"] * rng.choice([15, 16, 17, 40]))
    return text


FIELDS = ["text", "top_k", "k", "max_span_tokens", "alpha", "evidence", "case_sensitive"]
VALID = {
    "top_k": lambda rng: rng.randint(1, 100),
    "k": lambda rng: rng.choice([1, 2, 16, 1024, 8192]),
    "max_span_tokens": lambda rng: rng.randint(1, 32),
    "alpha": lambda rng: rng.uniform(-4, 4),
    "evidence": lambda rng: rng.randint(0, 20),
    "case_sensitive": lambda rng: rng.random() < 0.5,
}


def _random_body(rng: random.Random):
    if rng.random() < 0.08:
        return _random_value(rng)  # not an object at all
    body = {}
    for f in FIELDS:
        r = rng.random()
        if r < 0.15:
            continue  # omitted
        if f == "text":
            body[f] = _random_text(rng) if r < 0.9 else _random_value(rng)
        elif r < 0.88:
            body[f] = VALID[f](rng)
        else:
            body[f] = _random_value(rng)
    if rng.random() < 0.1:
        body[rng.choice(["extra", "Text", "topK", ""])] = _random_value(rng)
    return body


def _fuzz_cases(n: int = 60, seed: int = 1234):
    rng = random.Random(seed)
    return [_random_body(rng) for _ in range(n)]


FUZZ = _fuzz_cases()


@pytest.mark.parametrize("body", FUZZ, ids=[f"case{i}" for i in range(len(FUZZ))])
def test_fuzz_never_500(client, body):
    raw = json.dumps(body, allow_nan=True)
    r = client.post("/fill", content=raw.encode(), headers=JSON_HEADERS)
    assert r.status_code in (200, 422), (r.status_code, raw[:300], r.text[:500])
    data = r.json()
    if r.status_code == 422:
        assert data["error_type"] == "validation" and data["error"]
    else:
        check_response(data, body["text"], body)


def test_fuzz_covers_both_outcomes(client):
    statuses = set()
    for body in FUZZ:
        statuses.add(client.post("/fill", content=json.dumps(body).encode(), headers=JSON_HEADERS).status_code)
    assert statuses == {200, 422}


def test_the_allocator_is_trimmed_once_no_request_is_in_flight(client, state, monkeypatch):
    """service.requests counts the requests in flight and starts common.process.IdleTrim's timer when the last ends
    (the memory a fill's temporaries leave in the allocator handed back), never while one is in flight."""
    trim = state.requests.trim
    calls = []
    monkeypatch.setattr(trim, "idle", lambda: calls.append("idle"))
    monkeypatch.setattr(trim, "busy", lambda: calls.append("busy"))
    r = client.post("/fill", json={"text": "The capital of France is <mask> ."})
    assert r.status_code == 200, r.text
    assert calls == ["busy", "idle"]
    state.requests._started()  # one in flight: a second ending is not the last
    client.post("/fill", json={"text": "<mask> is a city ."})
    assert calls[2:] == ["busy", "busy"]
    state.requests._ended()
    assert calls[-1] == "idle"
