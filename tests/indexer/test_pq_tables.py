"""Products of queries with IVF-PQ codes by lookup tables: the same as decoding the codes and multiplying, the
tables of a query computed once, and only 8-bit codes taken."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from indexer import pq_tables
from indexer.ann import unwrap
from indexer.ann_codes import AnnCodes, code_slots
from indexer.pq_tables import PQTables

DIM = 32


def _ivfpq(factory: str, residual: bool = True) -> tuple[faiss.Index, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2000, DIM)).astype(np.float32)
    x[:, :4] *= 3
    index = faiss.index_factory(DIM, factory, faiss.METRIC_INNER_PRODUCT)
    faiss.extract_index_ivf(index).by_residual = residual
    index.train(x)
    index.add(x)
    return index, x


def _decoded_products(index: faiss.Index, ids: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Reference: the tokens' codes decoded (plus their list's centroid), times the transformed queries."""
    chain, ivf = unwrap(index)
    q = queries.astype(np.float32)
    for t in chain:
        q = t.apply(q)
    slots = code_slots(index)
    out = np.empty((ids.size, q.shape[0]), dtype=np.float64)
    for i, token in enumerate(ids):
        place, first = int(slots[token]), 0
        for lst in range(ivf.nlist):  # the token's list and its place there
            size = ivf.invlists.list_size(lst)
            if place < first + size:
                break
            first += size
        code = faiss.rev_swig_ptr(ivf.invlists.get_single_code(lst, place - first), ivf.code_size).copy()
        v = ivf.pq.decode(code[None, :])[0]
        if ivf.by_residual:
            v = v + ivf.quantizer.reconstruct(lst)
        out[i] = q @ v
    return out


@pytest.mark.parametrize("residual", [True, False], ids=["residual", "plain"])
def test_table_products_equal_decoding_the_codes(tmp_path, residual):
    index, x = _ivfpq("OPQ8,IVF16,PQ8", residual)
    faiss.write_index(index, str(tmp_path / "index.faiss"))
    np.save(tmp_path / "code_slots.npy", code_slots(index))
    codes = AnnCodes(tmp_path, faiss.read_index(str(tmp_path / "index.faiss"), faiss.IO_FLAG_MMAP_IFC))
    assert codes.tables is not None
    ids = np.array([0, 7, 1999, 512, 3])
    queries = x[[10, 20, 30]] + 0.05
    want = _decoded_products(index, ids, queries)
    np.testing.assert_allclose(codes.dot(ids, queries), want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(codes.dot(ids, queries[1]), want[:, 1], rtol=1e-5, atol=1e-4)


def test_a_querys_tables_are_computed_once_and_the_last_ones_kept(monkeypatch):
    index, x = _ivfpq("IVF16,PQ8")
    ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
    seen: list[int] = []

    def transform(q: np.ndarray) -> np.ndarray:
        seen.append(q.shape[0])
        return q

    centroids = np.stack([ivf.quantizer.reconstruct(i) for i in range(ivf.nlist)])
    tables = PQTables(ivf.pq, centroids, transform)
    monkeypatch.setattr(pq_tables, "KEEP", 3)
    first = tables.tables(x[0])
    assert tables.tables(x[0].copy()) is first and len(seen) == 1  # the same query: the tables kept
    for q in x[1:4]:
        tables.tables(q)
    assert len(seen) == 4
    tables.tables(x[0])  # pushed out by three later queries: computed again
    assert len(seen) == 5
    codes = np.array([[1, 2, 3, 4, 5, 6, 7, 8]], dtype=np.uint8)
    table, coarse = first
    assert coarse is not None
    want = sum(float(table[m * 256 + int(c)]) for m, c in enumerate(codes[0])) + float(coarse[5])
    assert tables.dot(codes, np.array([5]), x[:1])[0, 0] == pytest.approx(want, rel=1e-6)


def test_codes_of_other_widths_are_decoded_instead(tmp_path):
    index, x = _ivfpq("IVF16,PQ8x4")
    ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
    with pytest.raises(ValueError, match="8-bit"):
        PQTables(ivf.pq, None, lambda q: q)
    faiss.write_index(index, str(tmp_path / "index.faiss"))
    np.save(tmp_path / "code_slots.npy", code_slots(index))
    codes = AnnCodes(tmp_path, faiss.read_index(str(tmp_path / "index.faiss")))
    assert codes.tables is None
    ivf.nprobe = 16
    scores, ids = index.search(x[:1], 20)
    np.testing.assert_allclose(codes.dot(ids[0], x[0]), scores[0], rtol=1e-5, atol=1e-4)
