import numpy as np
import pytest

from common.arrays import piece_starts, row_dot, unique, unique_inverse


def _cases():
    rng = np.random.default_rng(7)
    yield np.empty(0, dtype=np.int64)
    yield np.array([5], dtype=np.int64)
    yield np.array([3, 3, 3], dtype=np.int64)
    yield rng.integers(0, 50, 1000)  # many repeats
    yield rng.integers(-(1 << 62), 1 << 62, 5000)  # wide keys
    yield rng.integers(0, 1 << 40, 3000).astype(np.uint64)
    yield np.arange(100)[::-1].copy()


@pytest.mark.parametrize("x", list(_cases()), ids=lambda x: f"{x.dtype}-{x.size}")
def test_same_as_numpy(x):
    np.testing.assert_array_equal(unique(x), np.unique(x))
    values, inverse = unique_inverse(x)
    ref_values, ref_inverse = np.unique(x, return_inverse=True)
    np.testing.assert_array_equal(values, ref_values)
    np.testing.assert_array_equal(inverse, ref_inverse.ravel())
    values, index, inverse = unique_inverse(x, first=True)
    ref_values, ref_index, ref_inverse = np.unique(x, return_index=True, return_inverse=True)
    np.testing.assert_array_equal(values, ref_values)
    np.testing.assert_array_equal(index, ref_index)  # the first occurrence of each value
    np.testing.assert_array_equal(inverse, ref_inverse.ravel())
    assert values.dtype == x.dtype and index.dtype == np.int64 and inverse.dtype == np.int64


def test_piece_starts_are_the_sums_of_the_sizes_before():
    sizes = np.array([3, 0, 2, 5, 0], dtype=np.int32)
    starts = piece_starts(sizes)
    assert starts.tolist() == [0, 3, 3, 5, 10] and starts.dtype == np.int64
    pieces = [np.arange(n) + 10 * i for i, n in enumerate(sizes.tolist())]
    joined = np.concatenate(pieces)
    for i, piece in enumerate(pieces):  # piece i is [start, start + size) of the concatenation
        np.testing.assert_array_equal(joined[starts[i] : starts[i] + sizes[i]], piece)
    assert piece_starts(np.empty(0, dtype=np.int64)).tolist() == []
    assert piece_starts([4]).tolist() == [0]
    assert piece_starts(np.array([2, 3], dtype=np.uint32)).dtype == np.int64  # not uint64, not float


def test_row_dot_gives_each_row_the_same_bits_whatever_rows_come_with_it():
    """BLAS's gemv (`rows @ q`) sums a row in an order that depends on the rows around it; row_dot does not: a
    subset's values equal the superset's bit for bit (what lets shard groups score more rows than one process)."""
    rng = np.random.default_rng(0)
    data = rng.standard_normal((5000, 768)).astype(np.float32)
    gemv_differs = 0
    for _ in range(40):
        q = rng.standard_normal(768).astype(np.float32)
        rows = np.unique(rng.integers(0, data.shape[0], int(rng.integers(2, 2000))))
        sub = np.sort(rng.choice(rows, int(rng.integers(1, rows.size)), replace=False))
        at = np.searchsorted(rows, sub)
        full = row_dot(data[rows], q)
        assert full.dtype == np.float32 and np.array_equal(full[at], row_dot(data[sub], q))
        np.testing.assert_allclose(full, data[rows] @ q, rtol=1e-4, atol=1e-3)  # the same products, summed apart
        gemv_differs += int(((data[rows] @ q)[at] != data[sub] @ q).sum())
    print(f"gemv: {gemv_differs} values differed by the rows around them")  # 0 on some BLAS builds; row_dot: never
