"""Tests for common.errors: one table of kinds, one exit code."""

from __future__ import annotations

import pytest

from common.errors import EXIT_CODE, STATUS, AppError, cli_errors, kind_for_status


def test_every_kind_has_a_status_and_statuses_map_back():
    assert STATUS["validation"] == 422 and STATUS["overloaded"] == 429 and STATUS["not_ready"] == 503
    assert STATUS["timeout"] == 504 and STATUS["unauthorized"] == 401
    for kind, status in STATUS.items():
        if kind not in ("input", "bad_request"):  # input shares 503 with not_ready; a framework 503 is not_ready
            assert kind_for_status(status) == kind
    assert kind_for_status(400) == "validation"  # the framework's 400: a body it cannot parse, like bad JSON
    assert kind_for_status(599) == "internal"


def test_app_error_carries_kind_field_and_status():
    err = AppError("text: too long", kind="validation", field="text")
    assert (err.kind, err.field, err.status, str(err)) == ("validation", "text", 422, "text: too long")
    assert AppError("bad file").kind == "input"
    with pytest.raises(ValueError, match="unknown error kind"):
        AppError("x", kind="nonsense")


def test_cli_errors_prints_the_message_and_exits_2(capsys):
    with pytest.raises(SystemExit) as exc, cli_errors():
        raise AppError("corpus /x does not exist; check the path")
    assert exc.value.code == EXIT_CODE == 2
    assert capsys.readouterr().err == "error: corpus /x does not exist; check the path\n"
    with pytest.raises(KeyError), cli_errors():  # anything else is a bug: not swallowed
        raise KeyError("x")
