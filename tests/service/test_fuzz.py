"""Schema-driven fuzzing with schemathesis against the app's own OpenAPI: for every documented operation,
requests generated from the schema (positive: valid by the schema; negative: violating it) are answered
without a 5xx, every error is in the one {error, error_type} shape, and positive cases' responses conform
to the documented responses.

FUZZ_EXAMPLES sets the examples per operation and mode (CI default 100: about 400 cases in all; the
benchmark run, bench/bench_fuzz.py, asks for more); FUZZ_COUNT_FILE, when set, gets one line per case.
(The hypothesis strategies are driven here directly: schemathesis' pytest plugin does not load under
pytest 9.)"""

from __future__ import annotations

import os
import shutil

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.specs.openapi.checks import positive_data_acceptance

from fill.engine import FillEngine
from service.api import create_app
from service.config import Settings
from service.state import ServiceState

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "100"))
AUTH = {"Authorization": "Bearer fuzz-key"}
MODES = [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]


@pytest.fixture(scope="module")
def operations(tiny_index, tmp_path_factory):
    from encoder.reader import BUNDLED_READER  # the default server: with its reader, so `reader: true` is valid

    reader = BUNDLED_READER if (BUNDLED_READER / "reader.json").is_file() else None
    index = tmp_path_factory.mktemp("fuzz") / "idx"  # a copy: the fuzzed admin routes add and delete documents
    shutil.copytree(tiny_index, index)
    # every accepted add writes a delta shard: no cap here (the cap's 503 has a test of its own, test_documents)
    s = Settings(
        index=index,
        admin_keys="fuzz-key",
        warm=False,
        request_timeout=30,
        reader_dir=reader,
        use_reader=reader is not None,
        max_delta_shards=100_000,
    )
    app = create_app(s, state=ServiceState(s, engine=FillEngine.open(s.engine_config())))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=AUTH)
    return [result.ok() for result in schema.get_all_operations()]


def test_every_route_is_fuzzed(operations):
    labels = {op.label for op in operations}
    assert {
        "POST /fill",
        "POST /score",
        "GET /readyz",
        "GET /info",
        "POST /admin/reload",
        "GET /metrics",
        "POST /admin/documents",
        "DELETE /admin/documents/{doc_id}",
    } <= labels, labels


def _record(method: str, path: str, status: int) -> None:
    count_file = os.environ.get("FUZZ_COUNT_FILE")
    if count_file:
        with open(count_file, "a", encoding="utf-8") as out:
            out.write(f"{method} {path} {status}\n")


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_no_5xx_and_one_error_shape(operations, mode):
    calls = []
    for op in operations:

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def fuzz(case):
            response = case.call(headers={**(case.headers or {}), **AUTH})
            _record(case.method, case.path, response.status_code)
            calls.append(response.status_code)
            assert response.status_code < 500, (case.method, case.path, case.body, response.text)
            if response.status_code >= 400:
                body = response.json()
                assert set(body) <= {"error", "error_type", "detail"}, body
                assert body["error"] and body["error_type"], body
            if mode is schemathesis.GenerationMode.POSITIVE:
                # rules the schema cannot state: the cost budget (a product of fields), whether a directory on
                # the server is an index, distinct labels over both forms of a choice, and whether the model's
                # tokenizer keeps a token of a phrase or writes two phrases alike, distinct document ids in one
                # update; their 422s are not "valid data rejected"
                beyond_schema = response.status_code == 422 and (
                    any(
                        rule in response.text
                        for rule in (
                            "request too expensive",
                            "repeats the label",
                            "no token",
                            "list each phrase once",
                            "appears twice",
                            "without a decimal point",  # JSON Schema counts 5.0 as an integer; strict numbers do not
                        )
                    )
                    or case.path == "/admin/reload"
                )
                case.validate_response(
                    response, headers=AUTH, excluded_checks=[positive_data_acceptance] if beyond_schema else None
                )

        try:
            fuzz()
        except Unsatisfiable:  # an operation without parameters or body has no invalid input to make
            assert mode is schemathesis.GenerationMode.NEGATIVE, op.label
    assert len(calls) >= (len(operations) if mode is schemathesis.GenerationMode.POSITIVE else EXAMPLES)
    assert 200 in calls if mode is schemathesis.GenerationMode.POSITIVE else 422 in calls


HOSTILE = {
    "deep array": "[" * 100_000 + "]" * 100_000,
    "deep object": '{"a":' * 50_000 + "1" + "}" * 50_000,
    "deep in a field": '{"text": "<mask>", "choices": ' + "[" * 20_000 + "]" * 20_000 + "}",
    "huge integer": '{"text": "<mask>", "k": 1' + "0" * 5000 + "}",
    "NaN": '{"text": "<mask>", "temperature": NaN}',
    "not UTF-8": b'{"text": "\xff\xfe"}',
    "empty": "",
}


@pytest.mark.parametrize("route", ["/fill", "/score", "/admin/reload", "/admin/documents"])
def test_hostile_bodies_get_a_4xx_in_the_one_shape(operations, route):
    """Bodies no schema generator makes (deep nesting, digits past any bound, NaN, bad bytes) to every POST
    route: a 4xx naming the problem, and the connection keeps working (bench/bench_fuzz.py runs this file)."""
    from starlette.testclient import TestClient

    app = operations[0].schema.app
    with TestClient(app, raise_server_exceptions=False) as client:
        for name, body in HOSTILE.items():
            r = client.post(route, content=body, headers={**AUTH, "Content-Type": "application/json"})
            _record("POST", route, r.status_code)
            assert 400 <= r.status_code < 500, (route, name, r.status_code, r.text[:300])
            assert set(r.json()) <= {"error", "error_type", "detail"} and r.json()["error"], (route, name, r.text[:300])
        assert client.get("/readyz").status_code == 200
