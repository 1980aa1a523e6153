"""Bodies the JSON routes cannot parse (service.bodies): each 422 names the problem (nesting, a long integer, bytes
that are not UTF-8), as the documents route does; a compressed body is a 415 naming its encoding (service.limits)."""

from __future__ import annotations

import gzip

import pytest
from fastapi.testclient import TestClient

from fill.engine import FillEngine
from service.api import create_app
from service.config import Settings
from service.state import ServiceState

JSON = {"content-type": "application/json"}
ROUTES = ["/fill", "/score", "/admin/reload"]


@pytest.fixture(scope="module")
def client(tiny_index):
    """The default body limit (64 KiB): room for 10,000 levels of nesting; an admin key for /admin/reload."""
    settings = Settings(index=tiny_index, admin_keys="ops")
    state = ServiceState(settings, engine=FillEngine.open(settings.engine_config()))
    with TestClient(create_app(settings, state=state), raise_server_exceptions=False) as c:
        c.headers["Authorization"] = "Bearer ops"
        yield c


def refused(client: TestClient, route: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, str]:
    r = client.post(route, content=body, headers={**JSON, **(headers or {})})
    data = r.json()
    assert set(data) >= {"error", "error_type"} and "error parsing the body" not in data["error"], data
    return r.status_code, data["error"]


@pytest.mark.parametrize("route", ROUTES)
def test_a_body_nested_too_deeply_says_so(client, route):
    status, message = refused(client, route, b'{"text": "<mask>", "x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}")
    assert status == 422 and message.startswith("body: ") and "nested too deeply" in message, message


@pytest.mark.parametrize("route", ROUTES)
def test_an_integer_of_5000_digits_says_so(client, route):
    status, message = refused(client, route, b'{"text": "<mask>", "top_k": ' + b"7" * 5000 + b"}")
    assert status == 422 and "integer" in message and "5000 digits" in message and "4300" in message, message


@pytest.mark.parametrize(
    "body", [b'{"text": "<mask> \xff"}', '{"text": "<mask> café"}'.encode("latin-1")], ids=["invalid UTF-8", "latin-1"]
)
@pytest.mark.parametrize("route", ROUTES)
def test_a_body_that_is_not_utf8_says_so(client, route, body):
    status, message = refused(client, route, body)
    assert status == 422 and "not UTF-8" in message and "byte 0x" in message, message


def test_a_declared_charset_other_than_utf8_is_named(client):
    body = '{"text": "<mask> café"}'.encode("latin-1")
    _, message = refused(client, "/fill", body, {"content-type": "application/json; charset=latin-1"})
    assert "latin-1" in message and "UTF-8" in message, message


@pytest.mark.parametrize("encoding", ["gzip", "br", "deflate, gzip"])
@pytest.mark.parametrize("route", [*ROUTES, "/admin/documents"])
def test_a_compressed_body_is_415_naming_its_encoding(client, route, encoding):
    status, message = refused(client, route, gzip.compress(b'{"text": "<mask>"}'), {"content-encoding": encoding})
    assert status == 415 and encoding in message and "Content-Encoding" in message, message


@pytest.mark.parametrize("encoding", ["identity", "Identity"])
def test_an_identity_encoding_is_served(client, encoding):
    r = client.post("/fill", content=b'{"text": "<mask>"}', headers={**JSON, "content-encoding": encoding})
    assert r.status_code == 200, r.text


def test_invalid_json_still_names_the_position(client):
    status, message = refused(client, "/score", b'{"text": "<mask>", }')
    assert status == 422 and message.startswith("body: invalid JSON at char "), message
