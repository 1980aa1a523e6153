"""service.updates.DocumentChanges alone, over a stand-in for the service's state (the HTTP routes and a real
server: test_documents.py)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from common.errors import AppError
from service.config import Settings
from service.metrics import Metrics
from service.updates import DocumentChanges


class _State:
    def __init__(self, **settings) -> None:
        self.settings = Settings(index=Path("unused"), **settings)
        self.metrics = Metrics()
        self.served: list[Path] = []

    @contextmanager
    def using(self):
        raise AssertionError("a refused change must not touch the served engine")
        yield

    def serve_update(self, root: Path) -> None:
        self.served.append(root)


def test_the_check_stops_a_change_once_the_server_drains_or_its_time_is_up():
    changes = DocumentChanges(_State(admin_timeout=0.05))
    check = changes._check(time.perf_counter())
    check()  # in time, not draining: goes on
    time.sleep(0.06)
    with pytest.raises(AppError) as late:
        check()
    assert late.value.kind == "timeout" and "FILL_ADMIN_TIMEOUT" in late.value.message
    changes.drain()
    assert changes.draining
    with pytest.raises(AppError) as stopping:
        changes._check(time.perf_counter())()
    assert stopping.value.kind == "not_ready" and "nothing changed" in stopping.value.message


def test_a_ray_ingress_refuses_changes_before_touching_the_index():
    state = _State(backend="ray")
    with pytest.raises(AppError) as refused:
        DocumentChanges(state).apply(lambda update: None, "add 1 document")
    assert refused.value.kind == "conflict" and "indexer add" in refused.value.message and state.served == []
