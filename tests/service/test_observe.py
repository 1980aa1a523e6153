"""Request ids (X-Request-ID), JSON log lines, and the metrics' content."""

from __future__ import annotations

import json
import logging

import pytest
from fastapi.testclient import TestClient

from fill.engine import FillEngine
from service.api import create_app
from service.config import Settings
from service.observe import REQUEST_ID, JsonFormatter, TextFormatter
from service.state import ServiceState


@pytest.fixture(scope="module")
def client(tiny_index):
    settings = Settings(index=tiny_index)
    state = ServiceState(settings, engine=FillEngine.open(settings.engine_config()))
    with TestClient(create_app(settings, state=state), raise_server_exceptions=False) as c:
        yield c


def test_a_given_request_id_is_echoed(client):
    r = client.post("/fill", json={"text": "<mask>"}, headers={"X-Request-ID": "abc-123.x_y"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "abc-123.x_y"
    r = client.post("/fill", json={"text": "no mask"}, headers={"X-Request-ID": "err-1"})
    assert r.status_code == 422 and r.headers["x-request-id"] == "err-1"  # errors carry it too


@pytest.mark.parametrize("given", [None, "", "has space", "x" * 65, "semi;colon"])
def test_a_missing_or_unsafe_request_id_is_replaced(client, given):
    headers = {} if given is None else {"X-Request-ID": given}
    r = client.get("/healthz", headers=headers)
    rid = r.headers["x-request-id"]
    assert rid != given and len(rid) == 32 and int(rid, 16) >= 0
    assert client.get("/healthz").headers["x-request-id"] != rid  # a new one each time


def test_access_log_line_has_the_request_fields(client, caplog):
    with caplog.at_level(logging.INFO, logger="service.access"):
        client.post("/fill", json={"text": "<mask>"}, headers={"X-Request-ID": "logged-1"})
    lines = [rec for rec in caplog.records if rec.name == "service.access"]
    assert lines, caplog.text
    fields = lines[-1].fields
    assert fields["method"] == "POST" and fields["path"] == "/fill" and fields["status"] == 200
    assert fields["ms"] > 0


def test_json_formatter_writes_one_object_with_the_request_id():
    record = logging.LogRecord("service.x", logging.WARNING, __file__, 1, "a %s message", ("formatted",), None)
    record.fields = {"status": 503}
    token = REQUEST_ID.set("rid-7")
    try:
        line = JsonFormatter().format(record)
    finally:
        REQUEST_ID.reset(token)
    data = json.loads(line)
    assert data["message"] == "a formatted message" and data["level"] == "warning"
    assert data["logger"] == "service.x" and data["request_id"] == "rid-7" and data["status"] == 503
    assert "\n" not in line and "T" in data["time"]


def test_text_formatter_escapes_control_characters_so_no_line_can_be_forged():
    forged = "/x\n2026-11-25 00:00:00,000 ERROR service: forged\r\x1b[31m"
    record = logging.LogRecord("service.access", logging.INFO, __file__, 1, "%s %s %d", ("GET", forged, 404), None)
    line = TextFormatter().format(record)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert line.endswith("GET /x\\x0a2026-11-25 00:00:00,000 ERROR service: forged\\x0d\\x1b[31m 404")


def test_metrics_by_route_status_batches_and_what_is_served(client):
    client.post("/fill", json={"text": "Marie Curie was born in <mask> ."})
    client.post("/fill", json={"text": "no mask"})
    client.get("/no/such/path")
    text = client.get("/metrics").text
    assert 'http_requests_total{route="/fill",status="200"}' in text
    assert 'http_requests_total{route="/fill",status="422"}' in text
    assert 'http_requests_total{route="unmatched",status="404"}' in text  # no raw paths as labels
    assert "/no/such/path" not in text
    assert 'http_request_seconds_count{route="/fill"}' in text
    assert "fill_batch_size_count" in text and "fill_batch_tokens_bucket" in text
    assert "fill_queue_depth 0.0" in text and "fill_in_flight 0.0" in text
    tokens = client.get("/info").json()["counts"]["tokens"]
    assert f"index_tokens {float(tokens)}" in text and "index_shards" in text
    assert "model_info{" in text and 'fingerprint="' in text
    assert 'fill_stage_seconds_count{stage="encode"}' in text


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_every_line_break_and_control_is_escaped_in_both_formats(fmt):
    """The one rule of both formats: no C0 or C1 control, DEL or Unicode line separator is written raw (U+0085 came
    raw into text logs from a DELETE path), and a JSON line still decodes to the message as it was."""
    message = "DELETE /admin/documents/a\x85b\u2028c\u2029d\x7fe\x1cf\x9fg\ttab"
    record = logging.LogRecord("service.access", logging.INFO, __file__, 1, "%s", (message,), None)
    line = (TextFormatter() if fmt == "text" else JsonFormatter()).format(record)
    assert len(line.splitlines()) == 1
    assert not any(ch in line for ch in "\x85\u2028\u2029\x7f\x1c\x9f\t")
    if fmt == "json":
        assert json.loads(line)["message"] == message
    else:
        assert line.endswith("a\\x85b\\u2028c\\u2029d\\x7fe\\x1cf\\x9fg\\x09tab")
