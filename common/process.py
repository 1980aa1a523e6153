"""Process-wide settings that only a process's entry point applies (a `main()`, never a library module):
the fill engine and every tool that runs it call these before their first fill. And `IdleTrim`, the allocator's
free memory handed back when a server (service.requests) is idle."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import threading


def single_thread_blas() -> None:
    """One BLAS thread for the process. A fill's matrix products are small (hits x dim by dim x 2), so a
    second BLAS thread gains nothing, and its spin-waiting after each product took a core from the
    encoder and FAISS (docs/history/BENCHMARKS.md, "The latency issue at 10.5M tokens"). The last bits of a score
    depend on the BLAS thread count, so fills are those of OMP_NUM_THREADS=1 wherever they are computed.
    Limits the BLAS libraries loaded now, and (OPENBLAS_NUM_THREADS) those loaded later, such as scipy's
    when transformers or scikit-learn import it."""
    from threadpoolctl import threadpool_limits

    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    threadpool_limits(limits=1, user_api="blas")


def passive_openmp() -> None:
    """OpenMP threads (torch's encoder, FAISS) wait passively unless OMP_WAIT_POLICY is set: by default they
    spin after each parallel region, and under concurrent load that spinning took ~8 ms of CPU per fill from
    the threads finishing other fills (docs/history/BENCHMARKS.md, "The production service issue"). Must run
    before torch or FAISS is imported."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft limit of open files to the hard limit (returns (before, after) soft limits). A served index
    keeps a descriptor per memory-mapped file and per BM25 file: before small arrays were read into memory
    (common.files.load_mapped) a server kept ~7 per delta shard and, under a 1,024 soft limit, failed updates after
    ~140 of them although the hard limit allowed far more."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, target
    return soft, soft


def trim_malloc() -> bool:
    """Hand the memory glibc's allocator holds free back to the system (`malloc_trim(0)`: the free pages of every
    arena, not only the heap's top); whether it could (glibc only). A fill's large temporary arrays are freed into
    the allocator's arenas (one per thread that allocates, its mmap threshold risen to the largest block freed), where
    they stayed resident: the server's anonymous memory grew with the shards a fill searches."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


M_ARENA_MAX = -8  # mallopt's parameter (glibc's malloc.h)


def limit_arenas(n: int) -> bool:
    """At most `n` glibc malloc arenas from now on (`mallopt(M_ARENA_MAX, n)`, what MALLOC_ARENA_MAX=n does at start;
    0 keeps glibc's 8 per core); whether it was set (glibc only; MALLOC_ARENA_MAX in the environment wins). Each
    thread that allocates takes an arena of its own up to the limit and keeps what it frees there: a server's thread
    pools (requests, lanes, shard searches) held ~30-60 MiB that way (docs/BENCHMARKS.md "Server memory"). Call it
    before the process starts its threads: arenas already made stay."""
    libc = _libc()
    if n <= 0 or libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, n))


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim, libc.mallopt  # noqa: B018  # glibc's, or None
    except (OSError, AttributeError):
        return None
    return libc


class IdleTrim:
    """`trim_malloc` once the process has been idle for `delay` seconds: `busy()` when a request starts, `idle()`
    when the last one ends (a timer thread; a new request cancels it), so a server under steady load seldom trims."""

    def __init__(self, delay: float = 0.5) -> None:
        self.delay = delay
        self.trims = 0
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def busy(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def idle(self) -> None:
        with self._lock:
            if self._timer is None:
                self._timer = threading.Timer(self.delay, self._trim)
                self._timer.daemon = True
                self._timer.start()

    def _trim(self) -> None:
        with self._lock:
            if self._timer is None or threading.current_thread() is not self._timer:
                return  # cancelled meanwhile
            self._timer = None
        if trim_malloc():
            self.trims += 1
