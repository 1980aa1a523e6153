"""POST /admin/documents and DELETE /admin/documents/{id}: the story of a corrected fact (with the bundled model),
fills that never fail while documents change, a writer beside the server, and the bad inputs."""

from __future__ import annotations

import json
import shutil
import threading
import time

import pytest
from fastapi.testclient import TestClient

from common.errors import AppError
from fill.engine import FillEngine
from indexer.build import BuildConfig, build_index
from indexer.compact import CompactConfig, run_compact
from indexer.lock import writer_lock
from indexer.update import AddConfig, run_add
from service.api import create_app
from service.config import Settings
from service.routes.documents import parse_documents
from service.state import ServiceState
from tests.conftest import CORPUS, write_jsonl

KEY = {"Authorization": "Bearer admin-key"}
ADA = "Ada Quint was born in <mask> ."


@pytest.fixture(scope="module")
def default_index(tmp_path_factory):
    """The test corpus indexed with the bundled default model (no --model)."""
    root = tmp_path_factory.mktemp("documents")
    build_index(BuildConfig(corpus=write_jsonl(root / "corpus.jsonl", CORPUS), out=root / "idx"))
    return root / "idx"


def _client(index, **options):
    settings = Settings(index=index, admin_keys="admin-key", warm=False, **options)
    state = ServiceState(settings, engine=FillEngine.open(settings.engine_config()))
    return TestClient(create_app(settings, state=state), raise_server_exceptions=False), state


def _top(client, mode: str = "hybrid") -> tuple[str, dict]:
    r = client.post("/fill", json={"text": ADA, "mode": mode, "evidence": 3}, headers=KEY)
    assert r.status_code == 200, r.text
    return r.json()["masks"][0]["candidates"][0]["phrase"], r.json()


def test_a_corrected_fact_is_filled_within_seconds_and_stays_corrected(default_index, tmp_path):
    index = tmp_path / "idx"
    shutil.copytree(default_index, index)
    client, state = _client(index)
    with client:
        r = client.post(
            "/admin/documents",
            json=[{"id": "ada", "title": "Ada Quint", "text": "Ada Quint was born in Lisbon."}],
            headers=KEY,
        )
        assert r.status_code == 200 and r.json()["generation"] == 1, r.text
        assert _top(client)[0] == "Lisbon"
        t0 = time.perf_counter()
        r = client.post(
            "/admin/documents",
            content='{"id": "ada", "title": "Ada Quint", "text": "Ada Quint was born in Porto."}\n',
            headers={**KEY, "Content-Type": "application/x-ndjson"},
        )
        assert r.status_code == 200 and r.json()["replaced"] == 1, r.text
        for mode in ("dense", "restricted", "hybrid"):
            top, body = _top(client, mode)
            assert top == "Porto" and "Lisbon" not in str(body), (mode, body)
            assert body["masks"][0]["candidates"][0]["evidence"][0]["context"] == "Ada Quint was born in Porto."
        assert time.perf_counter() - t0 < 10  # measured in docs/BENCHMARKS.md: well under 2 s
        assert client.get("/info", headers=KEY).json()["generation"] == 2
        assert "index_generation 2.0" in client.get("/metrics", headers=KEY).text
    state.close()
    client, state = _client(index)  # a restart
    with client:
        assert _top(client)[0] == "Porto" and "Lisbon" not in str(_top(client)[1])
    state.close()
    run_compact(CompactConfig(index=index))
    client, state = _client(index)
    with client:
        top, body = _top(client)
        assert top == "Porto" and "Lisbon" not in str(body)
        assert client.get("/info", headers=KEY).json()["counts"]["deleted_documents"] == 0
    state.close()


def test_a_deleted_document_is_gone_from_every_mode(default_index, tmp_path):
    index = tmp_path / "idx"
    shutil.copytree(default_index, index)
    client, state = _client(index)
    with client:
        r = client.delete("/admin/documents/d3", headers=KEY)
        assert r.status_code == 200 and r.json()["deleted"] == 1, r.text
        for mode in ("dense", "restricted", "hybrid"):
            r = client.post(
                "/fill",
                json={"text": "Marie Curie was born in <mask> .", "mode": mode, "top_k": 20, "evidence": 5},
                headers=KEY,
            )
            assert r.status_code == 200 and "Warsaw" not in r.text and '"d3"' not in r.text, (mode, r.text)
        r = client.delete("/admin/documents/d3", headers=KEY)
        assert r.status_code == 404 and "'d3'" in r.json()["error"], r.text
    state.close()


def test_fills_never_fail_while_documents_change(tiny_index, tmp_path):
    index = tmp_path / "idx"
    shutil.copytree(tiny_index, index)
    client, state = _client(index)
    statuses: list[int] = []
    done = threading.Event()

    def fill_loop():
        while not done.is_set():
            statuses.append(
                client.post("/fill", json={"text": "Paris is the <mask> of France ."}, headers=KEY).status_code
            )

    with client:
        loops = [threading.Thread(target=fill_loop) for _ in range(3)]
        for t in loops:
            t.start()
        for i in range(6):
            body = [{"id": f"n{i}", "text": f"Document {i} tells of the harbour town number {i}."}]
            assert client.post("/admin/documents", json=body, headers=KEY).status_code == 200
            assert client.delete(f"/admin/documents/n{i}", headers=KEY).status_code == 200
        done.set()
        for t in loops:
            t.join()
    state.close()
    assert statuses and set(statuses) == {200}, sorted(set(statuses))


def test_a_writer_beside_the_server(tiny_index, tiny_bert_dir, tmp_path):
    """`indexer add` on the served directory: the server goes on with its generation, takes the new one on an
    empty reload; while a writer holds the index, the admin routes answer 409 naming it."""
    index = tmp_path / "idx"
    shutil.copytree(tiny_index, index)
    client, state = _client(index)
    with client:
        corpus = write_jsonl(tmp_path / "add.jsonl", [{"id": "n1", "text": "Vexmoor is a harbour town."}])
        run_add(AddConfig(index=index, corpus=corpus, model=tiny_bert_dir, device="cpu", dtype="fp32"))
        assert client.get("/info", headers=KEY).json()["generation"] == 0
        assert client.post("/fill", json={"text": "<mask> is a harbour town ."}, headers=KEY).status_code == 200
        assert client.post("/admin/reload", json={}, headers=KEY).json()["generation"] == 1
        with writer_lock(index, "indexer compact"):
            r = client.delete("/admin/documents/n1", headers=KEY)
            assert r.status_code == 409 and "indexer compact" in r.json()["error"], r.text
        assert client.delete("/admin/documents/n1", headers=KEY).status_code == 200
    state.close()


def test_bad_document_requests(tiny_index, tmp_path):
    index = tmp_path / "idx"
    shutil.copytree(tiny_index, index)
    client, state = _client(index, max_documents_bytes=2048)
    with client:

        def post(body, **kw):
            return client.post(
                "/admin/documents",
                headers={**KEY, **kw.pop("headers", {})},
                **({"json": body} if not isinstance(body, str) else {"content": body}),
                **kw,
            )

        r = post([{"id": "a", "text": "fine"}, {"id": "b", "title": "no text"}])
        assert r.status_code == 422 and "document 1 (id 'b'): text: Field required" in r.json()["error"], r.text
        r = post('{"id": "a", "text": "x"}\nnot json\n', headers={"Content-Type": "application/x-ndjson"})
        assert r.status_code == 422 and "JSON lines" in r.json()["error"]
        assert post([]).status_code == 422
        assert post([{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]).status_code == 422
        r = post([{"id": "big", "text": "x" * 4000}])
        assert r.status_code == 413 and "2048" in r.json()["error"]
        assert post("id,text", headers={"Content-Type": "text/csv"}).status_code == 415
        assert client.post("/admin/documents", json=[{"id": "a", "text": "x"}]).status_code == 401
        r = post(
            "[" * 1000 + "]" * 1000, headers={"Content-Type": "application/json"}
        )  # json's parser recurses per level: a RecursionError was a 500
        assert r.status_code == 422 and "nested too deeply" in r.json()["error"], r.text
        for bad, what in (
            ({"id": "e", "text": ""}, "text"),
            ({"id": "e", "text": " \n "}, "text"),
            ({"id": "line\nbreak", "text": "x"}, "id"),
            ({"id": "tab\tid", "text": "x"}, "id"),
            ({"id": "e", "text": "x", "evil": 1}, "evil: Extra inputs are not permitted"),  # as every route refuses
            ({"id": 5, "text": "x"}, "id: Input should be a valid string"),  # strict types
        ):
            r = post([{"id": "ok", "text": "fine"}, bad])
            assert r.status_code == 422 and "document 1" in r.json()["error"] and what in r.json()["error"], r.text
        r = client.delete("/admin/documents/bell%07id", headers=KEY)
        assert r.status_code == 422 and "doc_id" in r.text and "pattern" in r.text, r.text
        info = client.get("/info", headers=KEY).json()
        assert info["generation"] == 0  # nothing was written
    state.close()
    settings = Settings(index=index, warm=False)  # no keys: the admin routes are off
    state = ServiceState(settings, engine=FillEngine.open(settings.engine_config()))
    with TestClient(create_app(settings, state=state), raise_server_exceptions=False) as client:
        assert client.post("/admin/documents", json=[{"id": "a", "text": "x"}]).status_code == 403
        assert client.delete("/admin/documents/d1").status_code == 403
    state.close()


@pytest.mark.parametrize("escaped", ["a%0Ab", "d1%0A", "%0Ad1", "d1%0D", "d1%09", "d1%00", "d1%7F", "d1%C2%85", "%0A"])
def test_a_control_character_in_a_deleted_id_is_a_422_and_deletes_nothing(tiny_index, tmp_path, escaped):
    """Any control character (C0, DEL, C1) in the id of a delete, a newline too (the route's path pattern once stopped
    at one: `a%0Ab` was a generic 404 and `d1%0A` deleted d1), is refused as the id's pattern, before the index."""
    index = tmp_path / "idx"
    shutil.copytree(tiny_index, index)
    client, state = _client(index)
    with client:
        r = client.delete(f"/admin/documents/{escaped}", headers=KEY)
        assert r.status_code == 422 and r.json()["error_type"] == "validation", r.text
        assert "doc_id" in r.json()["error"] and "pattern" in r.json()["error"], r.text
        assert client.get("/info", headers=KEY).json()["generation"] == 0  # nothing was written
        assert client.delete("/admin/documents/d1", headers=KEY).status_code == 200  # d1 was still there
    state.close()


def test_a_c1_control_character_in_an_added_id_is_refused():
    with pytest.raises(AppError, match="document 0 .*id: String should match pattern"):
        parse_documents(json.dumps({"id": "next\u0085line", "text": "x"}).encode(), "application/json")


def test_parse_documents_accepts_one_record_pretty_printed_and_json_lines_under_json():
    """One object (one line or pretty-printed) is one document; JSON lines sent as application/json still parse;
    anything else is a 422 naming the form expected."""
    pretty = '{\n  "id": "p1",\n  "title": "T",\n  "text": "Some text."\n}\n'
    for body, ctype in ((pretty, "application/json"), ('{"id": "p1", "title": "T", "text": "Some text."}', "")):
        (doc,) = parse_documents(body.encode(), ctype)
        assert (doc.id, doc.title, doc.text) == ("p1", "T", "Some text.")
    docs = parse_documents(b'{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n', "application/json")
    assert [d.id for d in docs] == ["a", "b"]
    with pytest.raises(AppError, match="document 0: record: Input should be a valid dictionary"):
        parse_documents(b'"just a string"', "application/json")
    with pytest.raises(AppError, match="nested too deeply"):
        parse_documents(b'{"id": ' + b"[" * 5000 + b"]" * 5000 + b"}", "application/json")


def test_adds_are_refused_past_the_delta_shard_cap_until_compacted(tiny_index, tmp_path):
    """Each delta shard keeps files open: past FILL_MAX_DELTA_SHARDS an add is a 503 naming `indexer compact`;
    deletes still work, and after a compaction and a reload adds are taken again."""
    index = tmp_path / "idx"
    shutil.copytree(tiny_index, index)
    client, state = _client(index, max_delta_shards=2)
    with client:

        def add(i):
            return client.post("/admin/documents", json=[{"id": f"n{i}", "text": f"New text {i}."}], headers=KEY)

        assert add(1).status_code == 200 and add(2).status_code == 200
        r = add(3)
        assert r.status_code == 503 and "indexer compact" in r.json()["error"] and r.headers["Retry-After"], r.text
        assert "index_delta_shards 2.0" in client.get("/metrics", headers=KEY).text
        assert client.delete("/admin/documents/n1", headers=KEY).status_code == 200
        run_compact(CompactConfig(index=index))
        assert client.post("/admin/reload", json={}, headers=KEY).status_code == 200
        assert add(3).status_code == 200
    state.close()


def test_a_change_in_flight_stops_uncommitted_when_the_server_drains_or_its_time_is_up(tiny_index, tmp_path):
    """SIGTERM (ServiceState.drain) and FILL_ADMIN_TIMEOUT stop an add between its encoding batches: a JSON 503
    with Retry-After or a 504 naming the setting, and the index unchanged."""
    index = tmp_path / "idx"
    shutil.copytree(tiny_index, index)
    body = [{"id": "late", "text": "A document that arrives too late."}]
    client, state = _client(index, admin_timeout=1e-9)
    with client:
        documents = client.get("/info", headers=KEY).json()["counts"]["documents"]
        r = client.post("/admin/documents", json=body, headers=KEY)
        assert r.status_code == 504 and "FILL_ADMIN_TIMEOUT" in r.json()["error"], r.text
        assert "nothing changed" in r.json()["error"]
    client, state = _client(index)
    with client:
        state.documents.drain()
        r = client.post("/admin/documents", json=body, headers=KEY)
        assert r.status_code == 503 and r.headers["Retry-After"] and "shutting down" in r.json()["error"], r.text
        info = client.get("/info", headers=KEY).json()
        assert info["counts"]["documents"] == documents and info["generation"] == 0
        assert client.delete("/admin/documents/late", headers=KEY).status_code == 404
    state.close()


def test_the_servers_signal_handler_starts_the_drain(tiny_index):
    import signal

    import uvicorn

    from service.server import DrainingServer

    settings = Settings(index=tiny_index)
    state = ServiceState(settings)
    server = DrainingServer(uvicorn.Config(create_app(settings, state=state)), state)
    server.handle_exit(signal.SIGTERM, None)
    assert server.should_exit and state.documents.draining
