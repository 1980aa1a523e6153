"""at_priority runs work on another thread at the lowered CPU priority, returning its value or raising its error."""

from __future__ import annotations

import os
import threading

import pytest

from common.priority import at_priority


def test_work_runs_on_another_thread_at_the_lowered_priority():
    caller = threading.get_native_id()

    def work():
        return threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    tid, nice = at_priority(19, work)
    assert tid != caller and nice == 19
    assert os.getpriority(os.PRIO_PROCESS, caller) < 19  # the caller keeps its priority


def test_the_error_of_the_work_is_raised_on_the_caller():
    with pytest.raises(ValueError, match="boom"):
        at_priority(10, lambda: (_ for _ in ()).throw(ValueError("boom")))
