"""service.lanes: a request's lane follows its cost (batcher and worker threads), its wait for a batch ends at its
deadline, and its finish step runs in the request's context."""

from __future__ import annotations

import contextvars
import threading
import time
from concurrent.futures import Future

import pytest

from common.errors import AppError
from fill.deadline import Deadline
from fill.prepared import Planned
from fill.schemas import FillRequest
from service.config import Settings
from service.lanes import ServerLanes, Workers
from service.metrics import Metrics

REQUEST_ID = contextvars.ContextVar("request_id", default=None)


class StubBatcher:
    """A batcher whose futures are answered at once (or never, with `hold`)."""

    def __init__(self, name: str, hold: bool = False) -> None:
        self.name, self.hold, self.futures = name, hold, []

    def submit(self, planned: Planned) -> Future:
        future: Future = Future()
        self.futures.append(future)
        if not self.hold:
            future.set_result((self.name, planned.request.text))
        return future


class StubServing:
    def __init__(self, hold: bool = False) -> None:
        self.batcher, self.heavy = StubBatcher("light", hold), StubBatcher("heavy", hold)


def planned(cost: float) -> Planned:
    return Planned(FillRequest(text=f"cost {cost} <mask>"), "dense", [0, 1, 2], [1], time.perf_counter(), cost)


@pytest.fixture
def workers(tmp_path):
    pools = Workers(Settings(index=tmp_path, fill_workers=1, heavy_workers=1, heavy_nice=0))
    yield pools
    pools.close()


def test_the_lane_follows_the_cost(workers):
    metrics = Metrics()
    lanes = ServerLanes(StubServing(), workers, heavy_weight=4.0, metrics=metrics)
    light, heavy = planned(1.0), planned(4.5)
    assert lanes.prepare(light, Deadline(10)) == ("light", light.request.text)
    assert lanes.prepare(heavy, Deadline(10)) == ("heavy", heavy.request.text)
    thread = lambda: threading.current_thread().name  # noqa: E731
    assert lanes.finish(light, thread).startswith("fill_") and lanes.finish(heavy, thread).startswith("fill-heavy")
    counted = {
        s.labels["lane"]: s.value for m in metrics.lanes.collect() for s in m.samples if s.name.endswith("_total")
    }
    assert counted == {"light": 1.0, "heavy": 1.0}


def test_a_request_not_batched_by_its_deadline_times_out_in_the_queue_and_is_dropped(workers):
    serving = StubServing(hold=True)
    lanes = ServerLanes(serving, workers, heavy_weight=4.0, metrics=Metrics())
    t0 = time.perf_counter()
    with pytest.raises(AppError, match="queue stage") as caught:
        lanes.prepare(planned(1.0), Deadline(0.2))
    assert caught.value.kind == "timeout" and 0.15 < time.perf_counter() - t0 < 5
    assert serving.batcher.futures[0].cancelled()  # the batcher will not compute it


def test_the_finish_step_runs_in_the_requests_context(workers):
    lanes = ServerLanes(StubServing(), workers, heavy_weight=4.0, metrics=Metrics())
    REQUEST_ID.set("req-7")
    assert lanes.finish(planned(1.0), REQUEST_ID.get) == "req-7"
