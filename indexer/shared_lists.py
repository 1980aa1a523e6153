"""The IVF lists the shards of one build share: a build trains its template once (indexer.templates), so every
IVF shard it writes holds the same pre-transforms (an OPQ rotation, for an index without stored vectors) and the
same coarse centroids. A query is then rotated and assigned to its lists once for all of them, and each shard
scans its own part of those lists (`search_preassigned`, the second half of what `search` does: the same hits).
Without this, a query's rotation and its comparison with every centroid (4096 x 384 multiply-adds a vector) ran
once per shard: 100 times at 100M tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import faiss
import numpy as np

from indexer.ann import is_exact, same_chain, unwrap


class Assigned(NamedTuple):
    """Queries assigned to their lists: as the lists see them (pre-transformed), their distances to their nearest
    lists, and those lists."""

    q: np.ndarray
    distances: np.ndarray
    lists: np.ndarray


@dataclass
class SharedLists:
    """The pre-transforms, coarse quantizer and nprobe of the IVF shards numbered `members` (those of the first IVF
    shard; `owner`, that shard's index, keeps them alive), and each member's IVF index behind its transforms."""

    owner: faiss.Index
    chain: list[faiss.VectorTransform]
    quantizer: faiss.Index
    nprobe: int
    ivfs: dict[int, faiss.IndexIVF]

    @property
    def members(self) -> set[int]:
        return set(self.ivfs)

    def assign(self, q: np.ndarray) -> Assigned:
        q = np.ascontiguousarray(q, dtype=np.float32)
        for transform in self.chain:
            q = transform.apply(q)
        distances, lists = self.quantizer.search(q, self.nprobe)
        return Assigned(q, distances, lists)

    def search(
        self, s: int, assigned: Assigned, k: int, params: faiss.SearchParameters | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Shard s's hits among the lists `assigned` holds ((scores, ids), as its own search would give)."""
        return search_preassigned(self.ivfs[s], assigned, k, params)


def shared_lists(indexes: list[faiss.Index], factories: list[str]) -> SharedLists | None:
    """The lists of the IVF indexes (by place) whose pre-transforms, centroids and nprobe equal the first IVF
    index's, when two or more share them; None otherwise."""
    first: tuple[faiss.Index, list[faiss.VectorTransform], faiss.IndexIVF, np.ndarray] | None = None
    ivfs: dict[int, faiss.IndexIVF] = {}
    for number, (index, factory) in enumerate(zip(indexes, factories)):
        chain, inner = unwrap(index)
        if not isinstance(inner, faiss.IndexIVF) or is_exact(factory):
            continue
        if first is None:
            first = (index, chain, inner, inner.quantizer.reconstruct_n(0, inner.nlist))
        elif (
            inner.nprobe != first[2].nprobe
            or not same_chain(chain, first[1])
            or not np.array_equal(inner.quantizer.reconstruct_n(0, inner.nlist), first[3])
        ):
            continue
        ivfs[number] = inner
    if first is None or len(ivfs) < 2:
        return None
    return SharedLists(first[0], first[1], first[2].quantizer, int(first[2].nprobe), ivfs)


def search_preassigned(
    ivf: faiss.IndexIVF, assigned: Assigned, k: int, params: faiss.SearchParameters | None
) -> tuple[np.ndarray, np.ndarray]:
    """`ivf.search_preassigned`, with search parameters where given (faiss's Python wrapper refuses them; the C++
    method takes them)."""
    q = np.ascontiguousarray(assigned.q, dtype=np.float32)
    distances = np.ascontiguousarray(assigned.distances, dtype=np.float32)
    lists = np.ascontiguousarray(assigned.lists, dtype=np.int64)
    scores, ids = np.empty((q.shape[0], k), dtype=np.float32), np.empty((q.shape[0], k), dtype=np.int64)
    ivf.search_preassigned_c(  # type: ignore[attr-defined]  # the SWIG method (not in faiss's stubs)
        q.shape[0],
        faiss.swig_ptr(q),
        k,
        faiss.swig_ptr(lists),
        faiss.swig_ptr(distances),
        faiss.swig_ptr(scores),
        faiss.swig_ptr(ids),
        False,
        params,
    )
    return scores, ids
