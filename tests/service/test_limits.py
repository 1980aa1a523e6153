"""Limits at the door (service.limits) and the request contract's strictness: 413, 415, strict types, HEAD,
Retry-After, the mask in the schema, messages that name the field."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from common.masks import MASK_PATTERN
from fill.engine import FillEngine
from fill.schemas import MASK_SCHEMA_PATTERN
from service.api import create_app
from service.config import Settings
from service.state import ServiceState

JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def settings(tiny_index) -> Settings:
    return Settings(index=tiny_index, max_body_bytes=2048)


@pytest.fixture(scope="module")
def state(settings) -> ServiceState:
    return ServiceState(settings, engine=FillEngine.open(settings.engine_config()))


@pytest.fixture(scope="module")
def client(settings, state):
    with TestClient(create_app(settings, state=state), raise_server_exceptions=False) as c:
        yield c


def test_body_over_the_limit_is_413_naming_the_limit(client):
    body = b'{"text": "<mask> ' + b"x" * 3000 + b'"}'
    r = client.post("/fill", content=body, headers=JSON)
    assert r.status_code == 413, r.text
    assert r.json()["error_type"] == "payload_too_large"
    assert "2048" in r.json()["error"] and str(len(body)) in r.json()["error"]


def test_streamed_body_over_the_limit_is_413(client):
    def chunks():  # no Content-Length: chunked transfer encoding
        yield b'{"text": "<mask> '
        for _ in range(10):
            yield b"y" * 500
        yield b'"}'

    r = client.post("/fill", content=chunks(), headers=JSON)
    assert r.status_code == 413, r.text
    assert "2048" in r.json()["error"]


def test_body_under_the_limit_is_served(client):
    assert client.post("/fill", json={"text": "<mask> " + "z " * 100}).status_code == 200


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "application/merge-patch+json"])
def test_json_media_types_are_accepted(client, content_type):
    r = client.post("/fill", content=b'{"text": "<mask>"}', headers={"content-type": content_type})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "field,value",
    [
        ("top_k", "5"),
        ("top_k", True),
        ("k", 10.5),
        ("drop_stopwords", 0),
        ("case_sensitive", "true"),
        ("alpha", "0.5"),
        ("max_span_tokens", False),
    ],
)
def test_types_are_strict(client, field, value):
    r = client.post("/fill", json={"text": "<mask>", field: value})
    assert r.status_code == 422, r.text
    assert r.json()["error"].startswith(field + ":"), r.json()


def test_an_integer_is_a_valid_float(client):
    assert client.post("/fill", json={"text": "<mask>", "alpha": 1}).status_code == 200


@pytest.mark.parametrize("route, field", [("/fill", "top_k"), ("/fill", "k"), ("/score", "k"), ("/score", "synonyms")])
def test_an_integral_float_is_not_an_integer(client, route, field):
    """Strict numbers: 5.0 is refused where an integer is wanted, naming the field and the fix."""
    body = {"text": "<mask>", field: 5.0, **({"choices": ["good", "bad"]} if route == "/score" else {})}
    r = client.post(route, json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"].startswith(field + ":") and "not 5.0" in r.json()["error"], r.text


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_say_so(client, raw):
    r = client.post("/fill", content=('{"text": "<mask>", "alpha": %s}' % raw).encode(), headers=JSON)
    assert r.status_code == 422, r.text
    assert "alpha" in r.json()["error"] and "finite" in r.json()["error"], r.json()


def test_invalid_json_names_the_position_and_the_problem(client):
    raw = b'{"text": "<mask>", }'
    r = client.post("/fill", content=raw, headers=JSON)
    assert r.status_code == 422, r.text
    message = r.json()["error"]
    assert message.startswith("body: invalid JSON at char "), message
    assert re.search(r"char \d+: \w", message), message


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_head_probes(client, path):
    r = client.head(path)
    assert r.status_code == 200 and r.content == b""


def test_429_says_when_to_retry(client, state, settings):
    taken = 0
    try:
        while state.requests.slots.acquire(blocking=False):
            taken += 1
        r = client.post("/fill", json={"text": "<mask>"})
    finally:
        for _ in range(taken):
            state.requests.slots.release()
    assert r.status_code == 429, r.text
    assert int(r.headers["retry-after"]) >= 1


def test_405_lists_the_allowed_methods(client):
    r = client.put("/fill", json={"text": "<mask>"})
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json()["error_type"] == "method_not_allowed"


def test_the_schema_requires_a_mask_as_the_validator_does(client):
    text = client.get("/openapi.json").json()["components"]["schemas"]["FillRequest"]["properties"]["text"]
    assert text["pattern"] == MASK_SCHEMA_PATTERN
    for sample in ["<mask>", "a [MASK] b", "<MaSk>", "[mask]", "no mask", "<mask", "[MASK", "mask>", ""]:
        assert bool(re.search(text["pattern"], sample)) == bool(MASK_PATTERN.search(sample)), sample


def test_info_shows_no_server_paths(client, tiny_index):
    info = client.get("/info").json()
    assert str(tiny_index.parent) not in str(info)
    assert info["index"] == tiny_index.name and "path" not in info["model"] and info["model"]["name"]
