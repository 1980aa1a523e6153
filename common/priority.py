"""Work at a lower CPU priority than the requests a process serves (e.g. encoding documents beside a server)."""

from __future__ import annotations

import contextvars
import os
import threading
from typing import Callable, TypeVar

T = TypeVar("T")


def lower_this_thread(nice: int) -> None:
    """Lower the calling thread's CPU priority to `nice` (Linux: per thread, inherited by the threads it starts);
    nothing where that is not possible (not Linux, or not allowed)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (OSError, AttributeError):
        pass


def at_priority(nice: int, work: Callable[[], T]) -> T:
    """`work()` on a new thread whose CPU priority is lowered to `nice` (Linux: per thread; the threads it starts,
    e.g. its OpenMP team for the encoder, inherit it), so that the requests served meanwhile keep the cores. Meant
    for work that releases the GIL (a forward pass): a low-priority thread holding the GIL would stall the others."""
    out: dict = {}

    def run() -> None:
        lower_this_thread(nice)  # not Linux, or not allowed: the work runs at the usual priority
        try:
            out["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
            out["error"] = exc

    thread = threading.Thread(target=contextvars.copy_context().run, args=(run,), name="update")
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]
