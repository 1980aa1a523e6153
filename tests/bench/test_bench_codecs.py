"""bench/bench_codecs.py's RaBitQ path: products come from RaBitQ's own estimates, for the rows asked, in order."""

from __future__ import annotations

import faiss
import numpy as np

from bench.bench_codecs import EstimatedVectors


def test_estimated_products_follow_the_rows_and_track_the_exact_ones():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 64)).astype(np.float32)
    codec = faiss.index_factory(64, "RaBitQ4", faiss.METRIC_INNER_PRODUCT)
    codec.train(x)
    index = faiss.clone_index(codec)
    index.add(x)
    vectors = EstimatedVectors(codec.sa_encode(x), codec, 64, index)
    rows = np.array([2999, 5, 17, 5, 1200])
    q = rng.standard_normal((3, 64)).astype(np.float32)
    est = vectors.dot(rows, q)
    assert est.shape == (5, 3) and vectors.dot(rows, q[1]).shape == (5,)
    np.testing.assert_array_equal(est[1], est[3])  # a row asked twice gets its one estimate twice
    np.testing.assert_allclose(vectors.dot(rows, q[1]), est[:, 1])
    exact = x[rows] @ q.T
    assert np.corrcoef(est.ravel(), exact.ravel())[0, 1] > 0.9  # 4-bit RaBitQ estimates inner products closely
    assert np.abs(est - exact).max() < 0.5 * np.abs(exact).max()
