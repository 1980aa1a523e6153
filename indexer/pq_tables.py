"""Products of a query with IVF-PQ codes from lookup tables (asymmetric distance computation, as FAISS's own
IVF-PQ search scores a list), instead of decoding every code into a vector first.

For a query q' (in the index's transformed space) and a token coded in list l with codes (c_1 .. c_M):

  q' . (centroid_l + decode(c))  =  q' . centroid_l  +  sum_m  q'_m . codebook_m[c_m]

The second term is M table lookups: `table[m, k] = q'_m . codebook_m[k]` (M x 256 products, once a query).
The first is one product a list, `q' . centroid_l` for every list at once (nlist x d', once a query).

A fill asks the same query of every shard (13 at 100M tokens) and each asks it for a few hundred to a few
thousand tokens: the shards of one build share one `PQTables` (indexer.ann_codes.AnnCodes.share_codec), which
keeps the tables of the last queries it was asked (`KEEP`), so a query's tables are computed once a fill, not once
a shard. Costs measured on one shard's 2,800 tokens (EPYC, one thread): decoding them and multiplying ~3 ms,
the lookups ~0.4 ms."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

import faiss
import numpy as np

KEEP = 32  # the queries whose tables are kept (a fill's two queries a mask, several fills at once)


class PQTables:
    """Lookup-table products of queries with the 8-bit codes of one IVF-PQ codec (its codebooks and, where the
    codes are residuals, its coarse centroids), the queries given in the original space (`transform` maps them)."""

    def __init__(
        self, pq: faiss.ProductQuantizer, centroids: np.ndarray | None, transform: Callable[[np.ndarray], np.ndarray]
    ) -> None:
        if pq.nbits != 8:
            raise ValueError(f"lookup tables need 8-bit codes, not {pq.nbits}-bit")
        self.m, self.ksub, self.dsub = int(pq.M), int(pq.ksub), int(pq.dsub)
        self._pq = pq  # (its index outlives this: AnnCodes keeps the index of every codec it decodes with)
        self._codebooks: np.ndarray | None = None  # copied at the first query (a shard that borrows a codec: never)
        self.centroids = centroids
        self.transform = transform
        self.offsets = (np.arange(self.m, dtype=np.intp) * self.ksub)[None, :]
        self._kept: OrderedDict[bytes, tuple[np.ndarray, np.ndarray | None]] = OrderedDict()
        self._lock = threading.Lock()

    def codebooks(self) -> np.ndarray:
        """float32 [M, ksub, dsub]: the product quantizer's codebooks (a copy, made once)."""
        with self._lock:
            if self._codebooks is None:
                self._codebooks = faiss.vector_to_array(self._pq.centroids).reshape(self.m, self.ksub, self.dsub)
            return self._codebooks

    def tables(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(float32 [M * ksub]: q'_m . codebook_m[k], float32 [nlist]: q' . centroid_l or None) of one query [d]."""
        query = np.ascontiguousarray(query, dtype=np.float32)
        key = query.tobytes()
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
                return kept
        q = self.transform(query[None, :])[0]
        table = np.einsum("mkd,md->mk", self.codebooks(), q.reshape(self.m, self.dsub)).astype(np.float32).ravel()
        kept = (table, None if self.centroids is None else (self.centroids @ q).astype(np.float32))
        with self._lock:
            self._kept[key] = kept
            while len(self._kept) > KEEP:
                self._kept.popitem(last=False)
        return kept

    def dot(self, codes: np.ndarray, lists: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """float32 [len(codes), m]: the products of each query [m, d] with the tokens of `codes` (uint8 [n, M]) coded
        in `lists` (their IVF lists)."""
        at = codes.astype(np.intp) + self.offsets  # each code's row of the flattened tables
        out = np.empty((codes.shape[0], queries.shape[0]), dtype=np.float32)
        for j, query in enumerate(queries):
            table, coarse = self.tables(query)
            out[:, j] = table[at].sum(axis=1)
            if coarse is not None:
                out[:, j] += coarse[lists]
        return out
