"""Process-wide settings that only a process's entry point applies (a `main()`, never a library module):
the fill engine and every tool that runs it call these before their first fill."""

from __future__ import annotations

import os


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


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # glibc's mallopt parameters (malloc.h)


def bounded_malloc(arenas: int = 2, mmap_threshold: int = 128 * 1024) -> bool:
    """Keep glibc's allocator from holding freed memory (returns whether it applied: glibc only). By default
    every thread that allocates gets an arena of its own (up to 8 a core: the shard pool, the batcher, the
    workers, FAISS's and torch's threads), and the mmap threshold rises to the largest block freed (up to 32
    MiB), after which a fill's large temporary arrays come from those arenas and stay resident when freed: the
    server's anonymous memory grew with the shards a fill searches. Here: `arenas` arenas, blocks over
    `mmap_threshold` mapped (and unmapped when freed), free memory above it at the top of the heap returned.
    MALLOC_ARENA_MAX / MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ in the environment win."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    settings = (
        ("MALLOC_ARENA_MAX", M_ARENA_MAX, arenas),
        ("MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, mmap_threshold),
        ("MALLOC_TRIM_THRESHOLD_", M_TRIM_THRESHOLD, 2 * mmap_threshold),
    )
    for env, param, value in settings:
        if env not in os.environ:
            mallopt(ctypes.c_int(param), ctypes.c_int(value))
    return True
