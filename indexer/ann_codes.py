"""Re-scoring from the ANN index's own codes: a shard stored with `vector_dtype` "none" keeps no vectors.npy.

The product of a query with any token's vector is then FAISS's own estimate, read from index.faiss itself:
  Flat     the float32 vectors the index holds (exact);
  IVF      8-bit product-quantizer (IVF-PQ), scalar-quantizer (IVF-SQ) or float (IVF-Flat) codes, optionally
           behind a linear pre-transform (OPQ rotation): q'.(c + r), the token's list centroid (when the codes
           are residuals) plus its decoded code in the transformed space (q' the query transformed), which is
           the score the IVF search gives the token, so a hit's score and the score of a token next to it (a
           span's end) come from one code. IVF-PQ products come from lookup tables, as FAISS's search computes
           them (indexer.pq_tables), without decoding a code.
code_slots.npy (uint32 [n]) gives each token's place among the codes, list after list, written with the index
(`code_slots`). An index read with FAISS's IO_FLAG_MMAP keeps its lists in the file (OnDiskInvertedLists at
byte offsets of index.faiss): the codes are read from that file, memory-mapped, so they cost page cache, not
process memory; an index read without the flag (lists in RAM) has its codes gathered once, in list order.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import faiss
import numpy as np
from faiss.contrib.inspect_tools import get_invlist

from common.arrays import row_dot
from common.files import map_file
from indexer.ann import same_chain, unwrap
from indexer.checksums import load_checked
from indexer.pq_tables import PQTables
from indexer.vectors import touch_pages

CODE_SLOTS = "code_slots.npy"


def needs_slots(index: faiss.Index) -> bool:
    """Whether a shard of this index keeps code_slots.npy (an IVF index; a Flat one holds its vectors in order)."""
    return faiss.try_extract_index_ivf(index) is not None


def code_slots(index: faiss.Index) -> np.ndarray:
    """uint32 [ntotal]: each token's place among the IVF index's codes, list after list."""
    ivf = faiss.extract_index_ivf(index)
    slots = np.full(ivf.ntotal, np.iinfo(np.uint32).max, dtype=np.uint32)
    place = 0
    assert ivf.invlists is not None  # an IVF index's lists (a pointer in faiss's stubs, never null here)
    for lst in range(ivf.nlist):
        size = ivf.invlists.list_size(lst)
        if size:
            ids, _ = get_invlist(ivf.invlists, lst)
            slots[ids] = np.arange(place, place + size, dtype=np.uint32)
        place += size
    if place != ivf.ntotal or place >= np.iinfo(np.uint32).max or (slots == np.iinfo(np.uint32).max).any():
        raise ValueError(f"the IVF lists hold {place} codes for {ivf.ntotal} tokens, not each token once")
    return slots


class AnnCodes:
    """Row access to a shard's vectors as its ANN index codes them, with the interface of
    indexer.vectors.StoredVectors: `codes[rows]` decodes (float32, the original space), `dot` gives FAISS's
    own estimates. `rescores` is False: the ANN's hit scores are these products already."""

    rescores = False
    scales = None

    def __init__(self, directory: Path, index: faiss.Index, sums: dict[str, np.ndarray] | None = None) -> None:
        self.index = index  # keeps the FAISS memory (mapped file, centroids) the views below point into
        self.transforms, inner = unwrap(index)
        self.dim = index.d
        self.n = int(index.ntotal)
        self._own: tuple | None = None  # an IVF's codec (share_codec may lend another's); a Flat index has none
        self.tables: PQTables | None = None
        self._codec_owner: faiss.Index | None = None
        if isinstance(inner, faiss.IndexFlat):
            self.flat: np.ndarray | None = faiss.rev_swig_ptr(inner.get_xb(), self.n * inner.d).reshape(self.n, inner.d)
            return
        self.flat = None
        ivf = cast(faiss.IndexIVF, inner)  # not Flat: IVF (integrity.read_faiss checked index_codes_problem)
        self.decode = _decoder(ivf)
        self.code_size = int(ivf.code_size)
        self.slots = load_checked(directory / CODE_SLOTS, (sums or {}).get(CODE_SLOTS))
        quantizer = faiss.downcast_index(ivf.quantizer)  # read as a Flat one (get_xb): the usual coarse quantizer
        self.centroids = (
            faiss.rev_swig_ptr(quantizer.get_xb(), ivf.nlist * ivf.d).reshape(ivf.nlist, ivf.d)  # type: ignore[attr-defined]
            if ivf.by_residual
            else None
        )
        self.tables = _tables(ivf, self.centroids, self.transforms)  # products by lookup tables, where it can
        self._own = (self.transforms, self.decode, self.centroids, self.tables)
        assert ivf.invlists is not None  # an IVF index's lists (a pointer in faiss's stubs, never null here)
        lists = faiss.downcast_InvertedLists(ivf.invlists)
        sizes = np.array([lists.list_size(i) for i in range(ivf.nlist)], dtype=np.int64)
        self.list_starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        mapped = _mapped_lists(lists, sizes, self.code_size)
        if mapped is not None:  # read with IO_FLAG_MMAP_IFC: the lists are views into the file FAISS mapped
            self.data, self.byte_starts = mapped
        elif isinstance(lists, faiss.OnDiskInvertedLists):  # as FAISS maps index.faiss: codes at byte offsets
            self.data = map_file(Path(lists.filename or directory / "index.faiss"))  # no descriptor
            # lists.lists: a SWIG std::vector (at), which faiss's stubs call a list
            self.byte_starts = np.array([lists.lists.at(i).offset for i in range(ivf.nlist)], dtype=np.int64)  # type: ignore[attr-defined]
        else:  # lists in RAM: their codes gathered once, list after list
            parts = [get_invlist(lists, i)[1].reshape(-1) for i in range(ivf.nlist) if sizes[i]]
            self.data = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint8)
            self.byte_starts = self.list_starts * self.code_size

    def share_codec(self, other: "AnnCodes") -> bool:
        """Decode and transform with `other`'s own codec (its pre-transforms, codebooks and centroids; its FAISS index
        kept alive) where it equals this shard's own, else with this shard's own again: the shards of one template
        then read one copy of those tables, warm in the cache, instead of one each (13 at 100M tokens). Whether
        they are shared."""
        if self._own is None or other._own is None:
            return False
        self.transforms, self.decode, self.centroids, self.tables = self._own
        self._codec_owner = None
        if self.code_size != other.code_size or other is self:
            return False
        mine, theirs = unwrap(self.index)[1], unwrap(other.index)[1]
        if not (isinstance(mine, faiss.IndexIVFPQ) and isinstance(theirs, faiss.IndexIVFPQ)):
            return False
        own, lent = self._own[2], other._own[2]
        same_pq = np.array_equal(faiss.vector_to_array(mine.pq.centroids), faiss.vector_to_array(theirs.pq.centroids))
        same_centroids = np.array_equal(own, lent) if own is not None and lent is not None else own is lent
        if not (same_pq and same_centroids and same_chain(self._own[0], other._own[0])):
            return False
        self._codec_owner = other.index
        self.transforms, self.decode, self.centroids, self.tables = other._own
        return True

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.dim)

    def __len__(self) -> int:
        return self.n

    def warm(self) -> None:
        """Touch every page a fill reads at random: the slots and the codes (or the Flat vectors)."""
        if self.flat is not None:
            touch_pages(self.flat)
            return
        if hasattr(self.slots, "check"):
            self.slots.check.everything()
        else:
            touch_pages(self.slots)
        touch_pages(self.data)

    def codes(self, rows) -> tuple[np.ndarray, np.ndarray]:
        """(uint8 codes [len(rows), code_size], list number of each) of the rows."""
        place = np.asarray(self.slots[np.asarray(rows, dtype=np.int64)], dtype=np.int64)
        lists = np.searchsorted(self.list_starts, place, side="right") - 1
        first = self.byte_starts[lists] + (place - self.list_starts[lists]) * self.code_size
        # a row of code_size bytes starting at every byte (a view): one index a code, not one a byte (2x faster)
        starts = np.lib.stride_tricks.as_strided(
            self.data, (max(0, self.data.size - self.code_size + 1), self.code_size), (1, 1), writeable=False
        )
        return starts[first], lists

    def transformed(self, rows) -> np.ndarray:
        """float32 [len(rows), d']: the rows' vectors as coded, in the transformed space."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if self.flat is not None:
            return np.asarray(self.flat[rows], dtype=np.float32)
        codes, lists = self.codes(rows)
        out = self.decode(np.ascontiguousarray(codes))
        if self.centroids is not None:
            out += self.centroids[lists]
        return out

    def transform(self, queries: np.ndarray) -> np.ndarray:
        """Queries [m, d] as the index's pre-transforms map them."""
        return _applied(self.transforms, queries)

    def __getitem__(self, rows) -> np.ndarray:
        rows = np.asarray(rows)
        x = self.transformed(rows)
        for t in reversed(self.transforms):
            x = t.reverse_transform(x)
        return x.reshape(*rows.shape, self.dim)

    def dot(self, rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """Products of the rows' coded vectors with `queries` (one query [d] -> [rows]; [m, d] -> [rows, m]); one
        query's are each row's own (common.arrays.row_dot), whichever rows come with it."""
        if self.tables is not None:  # IVF-PQ: lookup tables (indexer.pq_tables), no code decoded
            codes, lists = self.codes(np.asarray(rows, dtype=np.int64).reshape(-1))
            out = self.tables.dot(codes, lists, np.atleast_2d(queries))
        elif np.ndim(queries) == 1:
            return row_dot(self.transformed(rows), self.transform(np.atleast_2d(queries))[0])
        else:
            out = self.transformed(rows) @ self.transform(np.atleast_2d(queries)).T
        return out[:, 0] if np.ndim(queries) == 1 else out


def _mapped_lists(
    lists: faiss.InvertedLists, sizes: np.ndarray, code_size: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """(one uint8 view spanning every list's codes, each list's byte offset in it) where every non-empty list's codes
    are a view into one file FAISS mapped (ArrayInvertedLists read with IO_FLAG_MMAP_IFC: page cache, not
    anonymous memory); None where any list holds its own copy. The view lives as long as the index."""
    full = np.flatnonzero(sizes)
    if not isinstance(lists, faiss.ArrayInvertedLists) or not full.size:
        return None
    if any(lists.codes.at(int(i)).is_owned for i in full):  # type: ignore[attr-defined]  # a SWIG vector
        return None
    starts = np.array([int(lists.get_codes(int(i))) for i in full], dtype=np.int64)  # addresses in the mapping
    low = int(starts.min())
    span = int((starts + sizes[full] * code_size).max()) - low
    data = faiss.rev_swig_ptr(lists.get_codes(int(full[int(np.argmin(starts))])), span)
    byte_starts = np.zeros(sizes.size, dtype=np.int64)
    byte_starts[full] = starts - low
    return data, byte_starts


def _applied(transforms: list, queries: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(queries, dtype=np.float32)
    for t in transforms:
        x = t.apply(x)
    return x


def _tables(ivf: faiss.IndexIVF, centroids: np.ndarray | None, transforms: list) -> PQTables | None:
    """The lookup tables of an IVF-PQ index with 8-bit codes (with its own pre-transforms); None for another."""
    if not isinstance(ivf, faiss.IndexIVFPQ) or ivf.pq.nbits != 8:
        return None
    return PQTables(ivf.pq, centroids, lambda queries: _applied(transforms, queries))


def _decoder(ivf: faiss.IndexIVF):
    """codes [n, code_size] -> float32 [n, d] of an IVF index's codes (residuals where the index codes them)."""
    if isinstance(ivf, faiss.IndexIVFPQ):
        return ivf.pq.decode
    if isinstance(ivf, faiss.IndexIVFScalarQuantizer):
        return ivf.sq.decode
    return lambda codes: codes.view(np.float32).reshape(codes.shape[0], ivf.d).copy()  # IVF-Flat: the floats


def share_codecs(vectors: list) -> int:
    """Every AnnCodes of `vectors` (shards' vectors, of any kind) decoding with the first one's codec where they are
    equal (AnnCodes.share_codec); how many share it."""
    codes = [v for v in vectors if isinstance(v, AnnCodes)]
    if codes:  # the first decodes with its own (a shard lent by an older generation may have borrowed another's)
        codes[0].share_codec(codes[0])
    return sum(c.share_codec(codes[0]) for c in codes[1:])
