"""API keys (service.auth) and CORS, configured through Settings as the server is."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from common.errors import AppError
from fill.engine import FillEngine
from service.api import create_app
from service.config import Settings
from service.state import ServiceState


@pytest.fixture(scope="module")
def state(tiny_index) -> ServiceState:
    settings = Settings(index=tiny_index)
    return ServiceState(settings, engine=FillEngine.open(settings.engine_config()))


def client_for(state, **settings) -> TestClient:
    return TestClient(
        create_app(Settings(index=state.settings.index, **settings), state=state), raise_server_exceptions=False
    )


def test_without_keys_everything_is_open(state):
    with client_for(state) as c:
        assert c.post("/fill", json={"text": "<mask>"}).status_code == 200
        assert c.get("/info").status_code == 200


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "Bearer", "Basic a2V5MQ==", "key1", "Bearer key1x"])
def test_a_missing_or_wrong_key_is_401(state, authorization):
    headers = {"authorization": authorization} if authorization is not None else {}
    with client_for(state, api_keys="key1, key2") as c:
        for method, path, kw in (
            ("post", "/fill", {"json": {"text": "<mask>"}}),
            ("post", "/score", {"json": {"text": "<mask>", "choices": ["a", "b"]}}),
            ("get", "/info", {}),
            ("get", "/metrics", {}),
            ("get", "/openapi.json", {}),
            ("get", "/nope", {}),
        ):
            r = getattr(c, method)(path, headers=headers, **kw)
            assert r.status_code == 401, (path, r.text)
            assert r.json()["error_type"] == "unauthorized" and "Bearer" in r.json()["error"]
            assert r.headers["www-authenticate"] == "Bearer"


def test_every_configured_key_is_accepted_and_probes_need_none(state):
    with client_for(state, api_keys="key1, key2") as c:
        for key in ("key1", "key2"):
            r = c.post("/fill", json={"text": "<mask>"}, headers={"authorization": f"Bearer {key}"})
            assert r.status_code == 200, r.text
            r = c.post(
                "/score",
                json={"text": "<mask>", "choices": ["Paris", "Warsaw"]},
                headers={"authorization": f"Bearer {key}"},
            )
            assert r.status_code == 200, r.text
        assert c.get("/info", headers={"authorization": "bearer key2"}).status_code == 200  # scheme in any case
        assert c.get("/healthz").status_code == 200
        assert c.get("/readyz").status_code == 200


def test_keys_file(state, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# ops keys\n\nfilekey\n  other  \n")
    with client_for(state, api_keys_file=keys) as c:
        assert c.get("/info", headers={"authorization": "Bearer other"}).status_code == 200
        assert c.get("/info", headers={"authorization": "Bearer # ops keys"}).status_code == 401
        assert c.get("/info").status_code == 401


@pytest.mark.parametrize("content", [None, "# only a comment\n"])
def test_an_unusable_keys_file_is_refused_naming_it(state, tmp_path, content):
    path = tmp_path / "keys"
    if content is not None:
        path.write_text(content)
    with pytest.raises(AppError, match="keys file .*keys"):
        Settings(index=state.settings.index, api_keys_file=path).keys()


def test_cors_is_off_by_default_and_answers_configured_origins(state):
    preflight = {"origin": "https://app.example", "access-control-request-method": "POST"}
    with client_for(state) as c:
        r = c.options("/fill", headers=preflight)
        assert "access-control-allow-origin" not in r.headers
    with client_for(state, cors_origins="https://app.example", api_keys="k") as c:
        r = c.options("/fill", headers={**preflight, "access-control-request-headers": "authorization,content-type"})
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == "https://app.example"
        r = c.post(
            "/fill", json={"text": "<mask>"}, headers={"origin": "https://app.example", "authorization": "Bearer k"}
        )
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
        r = c.options("/fill", headers={**preflight, "origin": "https://evil.example"})
        assert r.headers.get("access-control-allow-origin") != "https://evil.example"


@pytest.mark.parametrize("cors", ["", "https://app.example"])
def test_an_options_request_that_is_no_preflight_needs_a_key(state, cors):
    """Only a CORS preflight (answered before the keys' gate, when CORS is on) goes without a key."""
    with client_for(state, cors_origins=cors, api_keys="k") as c:
        r = c.options("/fill")
        assert r.status_code == 401, r.text
        assert c.options("/fill", headers={"authorization": "Bearer k"}).status_code == 405  # the route has no OPTIONS
        r = c.options("/fill", headers={"origin": "https://app.example", "access-control-request-method": "POST"})
        assert r.status_code == (200 if cors else 401), r.text


ADMIN_ROUTES = [
    ("post", "/admin/reload", {"json": {}}),
    ("post", "/admin/documents", {"json": [{"id": "x", "text": "some text"}]}),
    ("delete", "/admin/documents/enc-001", {}),
]


@pytest.mark.parametrize("method, path, kw", ADMIN_ROUTES, ids=[f"{m} {p}" for m, p, _ in ADMIN_ROUTES])
def test_a_fill_key_gets_403_on_every_admin_route_and_nothing_changes(state, method, path, kw):
    before = state.serving
    with client_for(state, api_keys="fill-key", admin_keys="admin-key") as c:
        for body in (kw, {"json": {"index": 7}} if kw else {}):  # a bad body is refused by role first, not a 422
            r = getattr(c, method)(path, headers={"authorization": "Bearer fill-key"}, **body)
            assert r.status_code == 403 and r.json()["error_type"] == "forbidden", r.text
            assert "admin key" in r.json()["error"] and path in r.json()["error"] and "POST /fill" in r.json()["error"]
        r = c.post("/fill", json={"text": "<mask>"}, headers={"authorization": "Bearer fill-key"})
        assert r.status_code == 200, r.text  # a fill key still fills
    assert state.serving is before


def test_an_admin_key_may_use_every_route(state):
    with client_for(state, api_keys="fill-key", admin_keys="admin-key") as c:
        headers = {"authorization": "Bearer admin-key"}
        assert c.post("/fill", json={"text": "<mask>"}, headers=headers).status_code == 200
        r = c.post("/admin/reload", json={"index": 7}, headers=headers)
        assert r.status_code == 422 and "index" in r.text  # past the gate: the body is read and validated


def test_without_keys_the_admin_routes_are_refused_before_the_body(state):
    with client_for(state) as c:
        for method, path, _ in ADMIN_ROUTES:
            r = getattr(c, method)(path, json={"not": "a valid body"}) if method == "post" else c.delete(path)
            assert r.status_code == 403 and "FILL_ADMIN_KEYS" in r.json()["error"], (path, r.text)


def test_keys_file_roles(state, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# a fill key and an admin key\nreader\nops admin\nclient fill\n")
    assert Settings(index=state.settings.index, api_keys_file=keys).keys() == {
        "reader": "fill",
        "ops": "admin",
        "client": "fill",
    }
    with client_for(state, api_keys_file=keys) as c:
        assert c.post("/admin/reload", json={"index": 7}, headers={"authorization": "Bearer reader"}).status_code == 403
        assert c.post("/admin/reload", json={"index": 7}, headers={"authorization": "Bearer ops"}).status_code == 422


@pytest.mark.parametrize("line", ["ops root", "ops admin extra"])
def test_a_keys_file_line_with_an_unknown_role_is_refused_naming_the_line(state, tmp_path, line):
    keys = tmp_path / "keys"
    keys.write_text(f"reader\n{line}\n")
    with pytest.raises(AppError, match=r"keys file .*keys, line 2: .*fill or admin"):
        Settings(index=state.settings.index, api_keys_file=keys).keys()


def test_a_key_given_with_both_roles_anywhere_is_an_admin_key(state, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("ops\nboth admin\nboth\nreader\n")
    got = Settings(index=state.settings.index, admin_keys="ops", api_keys="reader", api_keys_file=keys).keys()
    assert got == {"ops": "admin", "both": "admin", "reader": "fill"}
