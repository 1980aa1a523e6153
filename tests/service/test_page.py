"""The page at GET / (service.routes.page): served from the package's files with a Content-Security-Policy that
allows nothing from elsewhere, open without a key while the API it calls still asks for one, off with FILL_PAGE=false.
What it shows and how it renders answers: tests/service/test_page_browser.py (a real browser)."""

from __future__ import annotations

import re
from importlib.resources import files

from service.config import Settings
from tests.service.test_auth import client_for, state  # noqa: F401 - a fixture

PAGE = files("service") / "page"


def test_the_page_and_its_files_are_served_with_a_policy_that_allows_only_them(state):
    with client_for(state) as c:
        page = c.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert '<script src="/page/app.js"' in page.text and 'href="/page/style.css"' in page.text
        for path, kind in (("/page/app.js", "text/javascript"), ("/page/style.css", "text/css")):
            r = c.get(path)
            assert r.status_code == 200 and r.headers["content-type"].startswith(kind)
            assert r.content == (PAGE / path.removeprefix("/page/")).read_bytes()
        policy = dict(p.strip().split(" ", 1) for p in page.headers["content-security-policy"].split(";"))
        assert policy["default-src"] == "'none'"
        assert policy["script-src"] == policy["style-src"] == policy["connect-src"] == "'self'"
        assert page.headers["x-content-type-options"] == "nosniff" and page.headers["x-frame-options"] == "DENY"
        missing = c.get("/page/nope.js")
        assert missing.status_code == 404 and "app.js and style.css" in missing.json()["error"]
        assert c.get("/page/index.html").status_code == 404  # the page is at / only
        assert "/" not in c.get("/openapi.json").json()["paths"]  # not part of the API


def test_the_page_fetches_nothing_from_elsewhere_and_never_renders_text_as_html():
    """Nothing in the page's files names another host, loads a font or writes HTML from a string: every text of an
    answer goes in as text (the browser test shows a passage's "<script>" as characters)."""
    for name in ("index.html", "app.js", "style.css"):
        text = (PAGE / name).read_text(encoding="utf-8")
        assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/|@import|url\(", text, re.I), name
    script = (PAGE / "app.js").read_text(encoding="utf-8")
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function", script)
    assert "localStorage" not in script and "sessionStorage" in script  # the key lives in the tab only


def test_the_page_needs_no_key_but_the_api_it_calls_does(state):
    with client_for(state, api_keys="key1") as c:
        assert c.get("/").status_code == 200 and c.get("/page/app.js").status_code == 200
        assert c.post("/fill", json={"text": "<mask>"}).status_code == 401
        assert c.get("/pages").status_code == 401  # only the page's own paths are open


def test_fill_page_false_leaves_the_api_only(state, monkeypatch):
    monkeypatch.setenv("FILL_PAGE", "false")
    assert Settings(index=state.settings.index).page is False
    with client_for(state, page=False) as c:
        assert c.get("/").status_code == 404 and c.get("/page/app.js").status_code == 404
        assert c.post("/fill", json={"text": "<mask>"}).status_code == 200


def test_head_answers_as_get_without_a_body(state):
    with client_for(state) as c:
        for path in ("/", "/page/app.js", "/favicon.ico"):
            got, head = c.get(path), c.head(path)
            assert head.status_code == 200 and head.content == b"", (path, head.status_code)
            assert head.headers["content-type"] == got.headers["content-type"]
            assert head.headers["content-length"] == str(len(got.content))


def test_the_icon_needs_no_key_even_with_the_page_off(state):
    """A browser asks for /favicon.ico on every page it shows (the page, /docs, a JSON answer): never a 401."""
    for page in (True, False):
        with client_for(state, api_keys="key1", page=page) as c:
            r = c.get("/favicon.ico")
            assert r.status_code == 200 and r.headers["content-type"] == "image/png", (page, r.text)
            assert r.content.startswith(b"\x89PNG\r\n\x1a\n") and len(r.content) < 2048
            assert "max-age" in r.headers["cache-control"] and r.headers["x-content-type-options"] == "nosniff"
            assert c.get("/favicon.png").status_code == 401  # only the icon's own path is open
