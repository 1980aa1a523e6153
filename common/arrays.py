"""Distinct values of a 1-D integer array by one sort: what `np.unique` returns, faster on the hot path;
where each of a run of consecutive pieces starts (`piece_starts`); each row's product with a vector, the same
whatever rows come with it (`row_dot`).

numpy 2.4's `np.unique(x)` finds the values with a hash table and then sorts them, and with
`return_index` it sorts stably (timsort for 64-bit keys); on the 10^4-10^5 int64 keys of a fill both
are several times slower than one introsort of the keys. These give the same arrays as np.unique.
"""

from __future__ import annotations

import numpy as np


def _run_starts(s: np.ndarray) -> np.ndarray:
    """Over a sorted array: True where a run of equal values starts."""
    step = np.empty(s.size, dtype=bool)
    if s.size:
        step[0] = True
        np.not_equal(s[1:], s[:-1], out=step[1:])
    return step


def unique(x: np.ndarray) -> np.ndarray:
    """np.unique(x) of a 1-D array: its distinct values, ascending."""
    s = np.sort(np.asarray(x).ravel())
    return s[_run_starts(s)]


def unique_inverse(x: np.ndarray, first: bool = False):
    """np.unique(x, return_inverse=True) of a 1-D array: (values, inverse), values[inverse] == x; with
    `first`, (values, index, inverse) as return_index adds: the lowest index of each value in x."""
    x = np.asarray(x).ravel()
    order = np.argsort(x)
    s = x[order]
    step = _run_starts(s)
    inverse = np.empty(x.size, dtype=np.int64)
    inverse[order] = np.cumsum(step) - 1
    values = s[step]
    if not first:
        return values, inverse
    index = np.minimum.reduceat(order, np.flatnonzero(step)) if s.size else np.empty(0, dtype=np.int64)
    return values, index.astype(np.int64, copy=False), inverse


def piece_starts(sizes) -> np.ndarray:
    """Where each of consecutive pieces of these sizes starts (int64): the sum of the sizes before it, so
    piece i is [out[i], out[i] + sizes[i]) of their concatenation; np.cumsum(sizes) - sizes."""
    sizes = np.asarray(sizes).astype(np.int64, copy=False)
    return np.cumsum(sizes) - sizes


def narrow(values: np.ndarray) -> np.ndarray:
    """An int64 array as int32 when every value fits (half the memory), else as it is."""
    if values.dtype == np.int64 and (values.size == 0 or (values.min() >= 0 and values.max() < 2**31)):
        return values.astype(np.int32)
    return values


def row_dot(rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """rows [n, d] float32 times q [d] float32 -> [n]: each row's value the same bits whichever other rows are
    asked with it (BLAS's gemv, `rows @ q`, sums a row in an order that depends on how many rows come with it and
    where it sits: ~0.1% of values differ in their last bit). A shard group on Ray scores a superset of the
    positions one process would (fill.scatter), so the two agree only with this. The product alone takes 1.1-3x
    gemv's (3,000 rows of 768: 1.55 against 0.55 ms); a fill's p50 did not move (docs/BENCHMARKS.md)."""
    out: np.ndarray = np.einsum("ij,j->i", rows, q)
    return out
