"""Hot reload: POST /admin/reload swaps the index without failing a request in flight or arriving; the
old index is released after its last request; a failed reload leaves the old index serving."""

from __future__ import annotations

import shutil
import threading

import pytest
from fastapi.testclient import TestClient

from service.api import create_app
from service.config import Settings
from fill.engine import FillEngine
from service.state import ServiceState

KEY = {"Authorization": "Bearer admin-key"}


@pytest.fixture()
def served(tiny_index, tmp_path):
    """A client over tiny_index with an API key, and a second copy of that index under another name."""
    other = tmp_path / "index-b"
    shutil.copytree(tiny_index, other)
    settings = Settings(index=tiny_index, api_keys="admin-key", warm=False)
    state = ServiceState(settings, engine=FillEngine.open(settings.engine_config()))
    with TestClient(create_app(settings, state=state), raise_server_exceptions=False) as client:
        yield client, state, other
    state.close()


def test_reload_swaps_to_another_index_and_releases_the_old(served):
    client, state, other = served
    old = state.serving
    r = client.post("/admin/reload", json={"index": str(other)}, headers=KEY)
    assert r.status_code == 200, r.text
    assert r.json()["index"] == "index-b" and r.json()["tokens"] > 0
    assert client.get("/info", headers=KEY).json()["index"] == "index-b"
    assert state.serving is not old
    assert old.batcher._closed  # released: no request was using it
    r = client.post("/fill", json={"text": "Marie Curie was born in <mask> ."}, headers=KEY)
    assert r.status_code == 200, r.text
    assert 'index_reloads_total{outcome="ok"} 1.0' in client.get("/metrics", headers=KEY).text


def test_reload_without_an_index_reads_the_configured_one_again(served):
    client, state, _ = served
    before = state.serving
    r = client.post("/admin/reload", json={}, headers=KEY)
    assert r.status_code == 200, r.text
    assert state.serving is not before and r.json()["index"] == state.settings.index.name


def test_a_failed_reload_keeps_the_old_index_serving(served, tmp_path):
    client, state, _ = served
    before = state.serving
    r = client.post("/admin/reload", json={"index": str(tmp_path / "nowhere")}, headers=KEY)
    assert r.status_code == 422, r.text
    assert "reload failed, still serving the previous index" in r.json()["error"]
    assert str(tmp_path) not in r.json()["error"]  # no server paths
    assert state.serving is before
    assert client.post("/fill", json={"text": "<mask>"}, headers=KEY).status_code == 200
    assert 'index_reloads_total{outcome="failed"} 1.0' in client.get("/metrics", headers=KEY).text


def test_reload_needs_the_key_and_keys_configured(served, tiny_index):
    client, _, other = served
    assert client.post("/admin/reload", json={"index": str(other)}).status_code == 401
    settings = Settings(index=tiny_index)
    with TestClient(create_app(settings, state=ServiceState(settings, engine=FillEngine.open(settings.engine_config()))),
                    raise_server_exceptions=False) as open_client:
        r = open_client.post("/admin/reload", json={"index": str(other)})
        assert r.status_code == 403 and r.json()["error_type"] == "forbidden"
        assert "FILL_API_KEYS" in r.json()["error"]


def test_reload_under_load_fails_no_request(served):
    client, state, other = served
    statuses: list[int] = []
    stop = threading.Event()

    def load():
        while not stop.is_set():
            statuses.append(client.post("/fill", json={"text": "The Seine flows through <mask> ."},
                                        headers=KEY).status_code)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for target in (other, state.settings.index, other):
            r = client.post("/admin/reload", json={"index": str(target)}, headers=KEY)
            assert r.status_code == 200, r.text
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert len(statuses) > 10 and set(statuses) == {200}, statuses
