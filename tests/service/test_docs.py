"""GET /docs (service.routes.docs): Swagger UI from the package's files, never a CDN, under a policy that allows only
this origin's files, no inline script and no framing; the headers every response carries (service.api)."""

from __future__ import annotations

import re
from importlib.resources import files

from tests.service.test_auth import client_for, state  # noqa: F401 - a fixture

VENDORED = files("fastapi_offline") / "static"


def policy_of(response) -> dict[str, str]:
    return dict(p.strip().split(" ", 1) for p in response.headers["content-security-policy"].split(";") if p.strip())


def test_docs_load_swagger_ui_from_this_server_under_a_policy_that_allows_nothing_else(state):
    with client_for(state) as c:
        page = c.get("/docs")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", page.text, re.I), page.text  # no other host
        assert not re.search(r"<script(?![^>]*\bsrc=)", page.text), page.text  # no inline script
        scripts = re.findall(r'<script src="([^"]+)"', page.text)
        styles = re.findall(r'<link rel="stylesheet" href="([^"]+)"', page.text)
        assert scripts and styles
        for src in scripts + styles:
            r = c.get(f"/{src}")  # relative to /docs
            assert r.status_code == 200, (src, r.text)
            assert r.headers["content-security-policy"] and r.headers["x-content-type-options"] == "nosniff"
        for name in ("swagger-ui-bundle.js", "swagger-ui.css"):
            assert c.get(f"/docs/{name}").content == (VENDORED / name).read_bytes()
        policy = policy_of(page)
        assert policy["default-src"] == "'none'" and policy["script-src"] == "'self'"
        assert policy["connect-src"] == "'self'" and policy["frame-ancestors"] == "'none'"
        assert page.headers["x-frame-options"] == "DENY"
        assert c.head("/docs").status_code == 200 and c.head("/docs").content == b""
        assert c.get("/docs/nope.js").status_code == 404
        assert c.get("/redoc").status_code == 404  # ReDoc, from a CDN, is not served
        assert c.get("/docs/oauth2-redirect").status_code == 404  # no OAuth here


def test_docs_need_a_key_like_the_schema_they_show(state):
    with client_for(state, api_keys="key1") as c:
        assert c.get("/docs").status_code == 401 and c.get("/docs/swagger-ui.css").status_code == 401
        assert c.get("/docs", headers={"authorization": "Bearer key1"}).status_code == 200


def test_every_response_says_nosniff(state):
    with client_for(state, api_keys="key1", max_body_bytes=1024) as c:
        key = {"authorization": "Bearer key1"}
        answers = [
            c.get("/healthz"),
            c.get("/readyz"),
            c.head("/readyz"),
            c.get("/info"),  # 401
            c.get("/info", headers=key),
            c.get("/metrics", headers=key),
            c.get("/openapi.json", headers=key),
            c.get("/nope", headers=key),  # 404
            c.put("/fill", json={}, headers=key),  # 405
            c.post("/fill", json={"text": "no mask"}, headers=key),  # 422
            c.post("/fill", json={"text": "x" * 2000}, headers=key),  # 413, refused at the door
            c.post("/fill", content=b"text", headers={**key, "content-type": "text/plain"}),  # 415
            c.post("/admin/reload", json={}, headers=key),  # 403
            c.get("/"),
        ]
        assert {r.status_code for r in answers} == {200, 401, 403, 404, 405, 413, 415, 422}
        for r in answers:
            assert r.headers.get("x-content-type-options") == "nosniff", (r.request.url, r.status_code)
