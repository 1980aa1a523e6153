"""The page at GET / in a real browser: Debian's chromium, headless, driven by selenium against a real server over the
bundled sample (with the bundled model and reader) plus one document whose text holds markup. Without chromium and
its driver the tests skip, and fail under CI (.ci/run installs them). With FILL_PAGE_SCREENSHOT=PATH the first test
saves what the browser shows there (docs/page.png is made so)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.service.test_server_process import clean_env, free_port, start_server  # noqa: F401 - a fixture

webdriver = pytest.importorskip("selenium.webdriver", reason="the page's tests need selenium (the test extra)")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.slow  # starts a server and a browser

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample" / "encyclopedia.jsonl"
MARKUP = '<script>window.hacked = 1</script><img src=x onerror="window.hacked = 2">'
WAIT = 180.0  # a bound on a hang, not a speed: each wait ends when the element is there


def browser_paths() -> tuple[str, str]:
    found = [shutil.which(n) for n in ("chromium", "chromium-browser")]
    binary, driver = next((f for f in found if f), None), shutil.which("chromedriver")
    if binary is None or driver is None:
        if os.environ.get("CI"):
            pytest.fail("chromium and chromedriver are not on PATH under CI: .ci/run installs Debian's packages")
        pytest.skip("chromium and its driver are not installed (apt-get install chromium chromium-driver)")
    return binary, driver


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    from indexer.build import BuildConfig, build_index

    root = tmp_path_factory.mktemp("page")
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows.append(
        {"id": "markup", "title": "Glimmerfen", "text": f"The Glimmerfen lighthouse stands in Port Vexley. {MARKUP}"}
    )
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    build_index(BuildConfig(corpus=corpus, out=root / "idx"))
    return root / "idx"


@pytest.fixture()
def browser():
    binary, driver = browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,1000"):
        options.add_argument(flag)
    chrome = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))
    try:
        yield chrome
    finally:
        chrome.quit()


def serve(start_server, index: Path, **env: str):
    port = free_port()
    server = start_server(["--index", str(index), "--port", str(port)], clean_env(**env), port)
    server.wait_ready()
    return server


def ask(browser, form: str, fields: dict[str, str]) -> None:
    for field, value in fields.items():
        box = browser.find_element(By.ID, field)
        if box.tag_name == "select":
            browser.execute_script("arguments[0].value = arguments[1]", box, value)
        else:
            box.clear()
            box.send_keys(value)
    browser.find_element(By.CSS_SELECTOR, f"#{form} button").click()


def shown(browser, css: str):
    return WebDriverWait(browser, WAIT).until(ec.visibility_of_element_located((By.CSS_SELECTOR, css)))


def test_fills_scores_errors_and_markup_in_a_real_browser(start_server, index, browser):
    server = serve(start_server, index)
    browser.get(server.url + "/")
    ask(browser, "fill-form", {"fill-text": "Marie Curie was born in <mask> .", "fill-evidence": "5"})
    first = shown(browser, ".fill-result .candidate .phrase")
    assert first.text == "Warsaw"
    assert browser.find_element(By.CSS_SELECTOR, ".filled mark.fill").text == "Warsaw"
    marks = browser.find_elements(By.CSS_SELECTOR, ".fill-result .candidate:first-child ol.evidence mark")
    assert marks and all(m.text.lower() == "warsaw" for m in marks)  # highlighted in place in its passages
    assert "took" in browser.find_element(By.CSS_SELECTOR, ".timings").text
    if os.environ.get("FILL_PAGE_SCREENSHOT"):
        browser.save_screenshot(os.environ["FILL_PAGE_SCREENSHOT"])

    ask(browser, "fill-form", {"fill-text": "The Glimmerfen lighthouse stands in <mask> ."})
    assert shown(browser, ".fill-result .candidate .phrase").text in "Port Vexley"  # its words, from that document
    passages = [p.text for p in browser.find_elements(By.CSS_SELECTOR, ".fill-result .candidate:first-child .context")]
    assert any(MARKUP[:52] in p for p in passages), passages  # the document's markup, as characters
    assert browser.execute_script("return window.hacked") is None  # shown as text, never run
    assert not browser.find_elements(By.CSS_SELECTOR, "#result script, #result img")

    ask(browser, "fill-form", {"fill-text": "Zorblax Quint was born in <mask> .", "fill-min-confidence": "0.5"})
    assert "abstained" in shown(browser, ".fill-result .abstained").text
    assert browser.find_element(By.CSS_SELECTOR, ".filled .open-mask").text == "<mask>"

    ask(browser, "score-form", {"score-text": "Marie Curie was born in <mask> .", "score-choices": "Warsaw, Paris"})
    shown(browser, ".score-result .choice")
    labels = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".score-result .choice .phrase")]
    widths = [e.get_attribute("style") for e in browser.find_elements(By.CSS_SELECTOR, ".score-result .bar-fill")]
    assert labels == ["Warsaw", "Paris"] and len(widths) == 2 and all("width" in w for w in widths)

    ask(browser, "fill-form", {"fill-text": "No mask here.", "fill-min-confidence": ""})
    error = shown(browser, "#error")
    assert "422" in error.text and "mask" in error.text.lower()
    assert not browser.find_elements(By.CSS_SELECTOR, "#result .fill-result")


def test_with_keys_the_page_asks_for_one_and_keeps_it_in_the_tab(start_server, index, browser):
    server = serve(start_server, index, FILL_API_KEYS="page-key")
    browser.get(server.url + "/")  # the page itself needs no key
    ask(browser, "fill-form", {"fill-text": "Marie Curie was born in <mask> ."})
    assert "401" in shown(browser, "#error").text
    assert browser.find_element(By.ID, "key").is_displayed()
    ask(browser, "fill-form", {"key": "page-key"})
    assert shown(browser, ".fill-result .candidate .phrase").text == "Warsaw"
    assert browser.execute_script("return sessionStorage.getItem('npm-fill-key')") == "page-key"
    assert browser.execute_script("return localStorage.length") == 0


RECORD_VIOLATIONS = """window.violations = [];
document.addEventListener("securitypolicyviolation",
  e => window.violations.push(e.violatedDirective + " " + e.blockedURI));"""


def test_the_api_docs_render_from_this_server_alone_under_their_policy(browser, tmp_path):
    """GET /docs in a real browser: Swagger UI shows the API's routes from the server's own files, with no violation
    of the docs' Content-Security-Policy (no inline script, nothing from elsewhere) and no request to another host.
    Only the docs and the schema are needed: the server has no index (not ready)."""
    from service.config import Settings
    from service.state import ServiceState
    from tests.service.test_wire import running

    settings = Settings(index=tmp_path / "no_index")
    with running(settings, ServiceState(settings)) as port:
        url = f"http://127.0.0.1:{port}"
        browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_VIOLATIONS})
        browser.get(url + "/docs")
        shown(browser, ".opblock-summary-path[data-path='/fill']")
        paths = {e.get_attribute("data-path") for e in browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
        assert {"/fill", "/score", "/readyz", "/admin/documents/{doc_id}"} <= paths, paths
        assert browser.execute_script("return window.violations") == []
        loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        assert loaded and all(name.startswith(url + "/") for name in loaded), loaded
