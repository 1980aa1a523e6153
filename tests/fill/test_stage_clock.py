"""fill.stage_clock: the time of each stage of a request, its deadline checked at every lap."""

from __future__ import annotations

import time

import pytest

from fill.deadline import Deadline
from fill.schemas import SCORE_STAGES, STAGES
from fill.stage_clock import StageClock


def test_laps_add_up_per_stage_after_the_batch_stages():
    clock = StageClock(12.5, 3.25, None)
    assert clock.timings() == {**dict.fromkeys(STAGES, 0.0), "encode": 12.5, "search": 3.25}
    time.sleep(0.02)
    clock.lap("spans")
    clock.lap("rank")
    time.sleep(0.02)
    clock.lap("rank")
    spent = clock.timings()
    assert spent["spans"] >= 20.0 and spent["rank"] >= 20.0  # slept 20 ms in each (at least)
    assert spent["read"] == 0.0 and spent["encode"] == 12.5


def test_a_lap_past_the_deadline_raises_naming_its_stage():
    deadline = Deadline(0.05)
    clock = StageClock(0.0, 0.0, deadline, SCORE_STAGES)
    assert set(clock.timings()) == set(SCORE_STAGES)
    time.sleep(0.06)
    with pytest.raises(Exception, match="in its score stage") as info:
        clock.lap("score")
    assert info.value.kind == "timeout"


def test_a_request_late_before_its_first_lap_times_out_in_the_queue():
    with pytest.raises(Exception, match="in its queue stage"):
        StageClock(0.0, 0.0, Deadline(1.0, start=time.perf_counter() - 2.0))
