"""fill.deadline: a request's time limit."""

from __future__ import annotations

import time

import pytest

from fill.deadline import Deadline


def test_deadline_raises_timeout_after_its_time():
    deadline = Deadline(0.05)
    deadline.check("encode")
    assert 0.0 < deadline.left() <= 0.05
    time.sleep(0.06)
    with pytest.raises(Exception, match="timed out after 0.05 s") as info:
        deadline.check("rank")
    assert info.value.kind == "timeout" and "rank" in info.value.message
    assert deadline.left() < 0


def test_a_deadline_counts_from_the_start_it_is_given():
    deadline = Deadline(10.0, start=time.perf_counter() - 11.0)  # admitted 11 s ago
    with pytest.raises(Exception, match="in its queue stage"):
        deadline.check("queue")
