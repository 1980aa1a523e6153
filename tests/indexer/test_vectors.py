"""int8 re-scoring vectors: quantisation error bound and StoredVectors decoding."""

from __future__ import annotations

import numpy as np

from indexer.vectors import StoredVectors, quantize_int8


def test_int8_error_within_half_a_step():
    rng = np.random.default_rng(0)
    v = (rng.standard_normal((1000, 48)) * rng.uniform(0.1, 10, (1000, 1))).astype(np.float32)
    codes, scales = quantize_int8(v)
    assert codes.dtype == np.int8 and scales.dtype == np.float16 and codes.shape == v.shape
    assert np.abs(codes).max() <= 127
    decoded = codes.astype(np.float32) * scales.astype(np.float32)[:, None]
    step = scales.astype(np.float32)[:, None]
    assert (np.abs(decoded - v) <= step * 0.5 + np.abs(v) * 1e-3 + 1e-6).all()
    # and inner products keep their order for nearly all pairs
    q = rng.standard_normal((20, 48)).astype(np.float32)
    agree = ((q @ decoded.T).argmax(1) == (q @ v.T).argmax(1)).mean()
    assert agree >= 0.95


def test_zero_vector_round_trips():
    codes, scales = quantize_int8(np.zeros((3, 8), np.float32))
    assert (codes == 0).all() and np.isfinite(scales).all()


def test_stored_vectors_decode_int8_and_float16(tmp_path):
    rng = np.random.default_rng(1)
    v = rng.standard_normal((50, 16)).astype(np.float16)
    a, b = tmp_path / "i8", tmp_path / "f16"
    a.mkdir(), b.mkdir()
    codes, scales = quantize_int8(v)
    np.save(a / "vectors.npy", codes, allow_pickle=False)
    np.save(a / "scales.npy", scales, allow_pickle=False)
    np.save(b / "vectors.npy", v, allow_pickle=False)
    i8, f16 = StoredVectors(a, "int8"), StoredVectors(b, "float16")
    assert i8.shape == f16.shape == (50, 16) and len(i8) == 50
    rows = np.array([3, 7, 49])
    np.testing.assert_array_equal(f16[rows], v[rows].astype(np.float32))
    assert i8[rows].dtype == np.float32
    np.testing.assert_allclose(i8[rows], v[rows].astype(np.float32), atol=float(scales[rows].max()))
    assert i8[5].shape == (16,)  # a single row too


def test_stored_vectors_dot_is_the_decoded_product(tmp_path):
    """`dot` scales the products instead of the codes: the decoded vectors' products up to float rounding, for one
    query and for several, int8 and float16."""
    rng = np.random.default_rng(2)
    v = rng.standard_normal((40, 32)).astype(np.float16)
    codes, scales = quantize_int8(v)
    (tmp_path / "i8").mkdir(), (tmp_path / "f16").mkdir()
    np.save(tmp_path / "i8" / "vectors.npy", codes, allow_pickle=False)
    np.save(tmp_path / "i8" / "scales.npy", scales, allow_pickle=False)
    np.save(tmp_path / "f16" / "vectors.npy", v, allow_pickle=False)
    rows, q = np.array([0, 4, 5, 39]), rng.standard_normal((3, 32)).astype(np.float32)
    for stored in (StoredVectors(tmp_path / "i8", "int8"), StoredVectors(tmp_path / "f16", "float16")):
        assert stored.dot(rows, q[0]).shape == (4,) and stored.dot(rows, q).shape == (4, 3)
        np.testing.assert_allclose(stored.dot(rows, q[0]), stored[rows] @ q[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(stored.dot(rows, q), stored[rows] @ q.T, rtol=1e-5, atol=1e-5)


def test_one_querys_products_do_not_depend_on_the_rows_asked_with_them(tmp_path):
    """A row's product with one query is the same bits asked alone, with a few rows or with thousands (what lets a
    Ray shard group score a superset of one process's rows and agree with it: fill.scatter)."""
    rng = np.random.default_rng(3)
    v = rng.standard_normal((4000, 256)).astype(np.float16)
    codes, scales = quantize_int8(v)
    np.save(tmp_path / "vectors.npy", codes, allow_pickle=False)
    np.save(tmp_path / "scales.npy", scales, allow_pickle=False)
    stored = StoredVectors(tmp_path, "int8")
    q = rng.standard_normal(256).astype(np.float32)
    every = stored.dot(np.arange(4000), q)
    for rows in (np.array([17]), np.array([5, 17, 900]), np.sort(rng.choice(4000, 1500, replace=False))):
        assert np.array_equal(stored.dot(rows, q), every[rows])


def _mapped_kb(path) -> int:
    """Resident kB of this process's mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in open("/proc/self/smaps", encoding="utf-8"):
        if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def test_touch_pages_maps_every_page_of_a_memory_mapped_file(tmp_path):
    from indexer.vectors import touch_pages

    path = tmp_path / "v.npy"
    np.save(path, np.arange(2**18, dtype=np.float32))  # 1 MiB
    array = np.load(path, mmap_mode="r")
    before = _mapped_kb(path)
    touch_pages(array, chunk=1 << 16)
    after = _mapped_kb(path)
    assert before < 512 and after >= 1024, (before, after)
