"""common.process: the process-wide settings entry points apply (in a fresh interpreter each: they are
process-wide), and that opening the engine, a library call, changes neither."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # fresh interpreters: `-m "not slow"` skips it

ROOT = Path(__file__).resolve().parents[2]

BLAS_THREADS = (
    "from threadpoolctl import threadpool_info; "
    "blas = [p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas']; "
)


def _run(code: str, env: dict | None = None) -> str:
    # a fresh interpreter's defaults: not the OPENBLAS_NUM_THREADS an earlier test's in-process
    # single_thread_blas() (fill-eval's run) left in this process's environment
    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, "OMP_NUM_THREADS": "2", **(env or {})},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_single_thread_blas_limits_blas_to_one_thread_also_for_libraries_loaded_later():
    code = (
        "import numpy; from common.process import single_thread_blas; "
        + BLAS_THREADS
        + "before = max(blas); single_thread_blas(); import scipy.linalg; "
        + BLAS_THREADS
        + "print(before, len(blas), max(blas))"
    )
    before, libraries, after = _run(code).split()
    assert int(before) == 2 and int(libraries) >= 2 and int(after) == 1  # numpy's OpenBLAS and scipy's


def test_opening_the_engine_leaves_the_blas_threads_alone(tiny_index):
    code = (
        f"import numpy; from fill.engine import FillEngine; from fill.config import EngineConfig; "
        f"FillEngine.open(EngineConfig(index={str(tiny_index)!r})).close(); " + BLAS_THREADS + "print(max(blas))"
    )
    assert _run(code).splitlines()[-1] == "2"


def test_passive_openmp_keeps_a_given_policy():
    code = (
        "import os; from common.process import passive_openmp; passive_openmp(); print(os.environ['OMP_WAIT_POLICY'])"
    )
    assert _run(code, {"OMP_WAIT_POLICY": "active"}) == "active"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert out.stdout.strip() == "PASSIVE"


def test_raise_open_files_limit_lifts_the_soft_limit_to_the_hard_one():
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(256, soft)
    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (%d, %d)); "
        "from common.process import raise_open_files_limit; before, after = raise_open_files_limit(); "
        "print(before, after, resource.getrlimit(resource.RLIMIT_NOFILE)[0])" % (low, hard)
    )
    before, after, now = map(int, _run(code).split())
    want = hard if hard != resource.RLIM_INFINITY else max(low, 1 << 20)
    assert (before, after, now) == (low, want, want)


def test_trim_malloc_hands_back_free_memory_on_glibc():
    from common.process import trim_malloc

    assert trim_malloc() is True  # this machine's C library is glibc


ARENAS = (  # threads that each allocate while the others hold theirs, then glibc's count of arenas (malloc_stats)
    "import ctypes, os, sys, threading; from common.process import limit_arenas; "
    "print(limit_arenas(int(sys.argv[1]))); libc = ctypes.CDLL('libc.so.6'); libc.malloc.restype = ctypes.c_void_p; "
    "held, go = [], threading.Barrier(7); "
    "threads = [threading.Thread(target=lambda: (held.append(libc.malloc(4000)), go.wait())) for _ in range(6)]; "
    "[t.start() for t in threads]; go.wait(); [t.join() for t in threads]; "
    "sys.stdout.flush(); os.dup2(1, 2); libc.malloc_stats()"
)


@pytest.mark.parametrize("limit", [0, 2])
def test_limit_arenas_caps_the_arenas_threads_take(limit):
    out = subprocess.run(
        [sys.executable, "-c", ARENAS, str(limit)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"},
    )
    assert out.returncode == 0, out.stderr
    arenas = sum(line.startswith("Arena ") for line in out.stdout.splitlines())
    assert out.stdout.splitlines()[0] == str(limit > 0)  # 0: glibc's default kept
    assert arenas == 2 if limit else arenas >= 4  # six threads allocating at once: one arena each by default


def test_idle_trim_trims_once_idle_and_never_while_busy(monkeypatch):
    """`idle()` starts a timer that trims; `busy()` before it fires cancels it (a server under load never trims)."""
    import threading

    from common import process

    trimmed = threading.Event()
    monkeypatch.setattr(process, "trim_malloc", lambda: trimmed.set() or True)
    waiting = process.IdleTrim(delay=3600)
    waiting.idle()
    timer = waiting._timer
    assert timer is not None
    waiting.idle()  # one timer at a time
    assert waiting._timer is timer
    waiting.busy()
    timer.join(30)
    assert not timer.is_alive() and not trimmed.is_set() and waiting.trims == 0
    quick = process.IdleTrim(delay=0.01)
    quick.idle()
    fired = quick._timer
    assert fired is not None
    fired.join(60)
    assert trimmed.is_set() and quick.trims == 1 and quick._timer is None
