"""service.lanes: a request's lane (its batching loop and its worker threads) follows its cost."""

from __future__ import annotations

import threading
import time

import pytest

from fill.prepared import Planned
from fill.schemas import FillRequest
from service.config import Settings
from service.lanes import Workers


class StubServing:
    batcher, heavy = "light batcher", "heavy batcher"


def planned(cost: float) -> Planned:
    return Planned(FillRequest(text=f"cost {cost} <mask>"), "dense", [0, 1, 2], [1], time.perf_counter(), cost)


@pytest.fixture
def workers(tmp_path):
    pools = Workers(Settings(index=tmp_path, fill_workers=1, heavy_workers=1, heavy_nice=0, heavy_weight=4.0))
    yield pools
    pools.close()


@pytest.mark.parametrize("cost, name", [(1.0, "light"), (4.0, "light"), (4.5, "heavy")])
def test_the_lane_follows_the_cost(workers, cost, name):
    lane = workers.lane(planned(cost), StubServing())
    assert lane.name == name and lane.batcher == f"{name} batcher"
    thread = lane.pool.submit(lambda: threading.current_thread().name).result(30)
    assert thread.startswith("fill-heavy" if name == "heavy" else "fill_")
