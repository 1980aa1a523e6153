"""Stored token vectors for exact re-scoring: float16, or int8 with one float16 scale per token.

int8 is symmetric scalar quantisation per vector: code = round(v / scale), scale = max|v| / 127,
so a stored vector costs d + 2 bytes instead of 2d (386 vs 768 bytes at d = 384) and decodes
to within scale / 2 per dimension.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from common.arrays import row_dot
from indexer.checksums import CheckedArray, load_checked
from indexer.manifest import VECTOR_DTYPES  # noqa: F401 - the storages this module reads

CHUNK = 65_536


def quantize_int8(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 codes [n, d], float16 scales [n]) of float vectors, chunked to bound memory."""
    n = vectors.shape[0]
    codes = np.empty(vectors.shape, dtype=np.int8)
    scales = np.empty(n, dtype=np.float16)
    for a in range(0, n, CHUNK):
        v = np.asarray(vectors[a : a + CHUNK], dtype=np.float32)
        s = np.abs(v).max(axis=1) / 127.0
        s16 = np.where(s > 0, s, 1.0).astype(np.float16)
        codes[a : a + CHUNK] = np.clip(np.rint(v / s16.astype(np.float32)[:, None]), -127, 127)
        scales[a : a + CHUNK] = s16
    return codes, scales


def touch_pages(array: np.ndarray, chunk: int = 1 << 26) -> None:
    """Read one byte of every page of a (memory-mapped) array, a chunk of `chunk` bytes at a time."""
    flat = array.reshape(-1).view(np.uint8)
    step = mmap.PAGESIZE
    for a in range(0, flat.size, chunk):
        int(flat[a : a + chunk : step].max(initial=0))


class StoredVectors:
    """Row access to a shard's re-scoring vectors: `vectors[rows]` is float32 whatever the storage. With the
    shard's block checksums (`sums`, indexer.checksums) every row read is checked. `rescores`: its products are
    exact, so they re-score the ANN's hits (indexer.ann_codes.AnnCodes: not)."""

    rescores = True

    def __init__(self, directory: Path, dtype: str, sums: dict[str, np.ndarray] | None = None) -> None:
        sums = sums or {}
        self.dtype = dtype
        self.data = load_checked(directory / "vectors.npy", sums.get("vectors.npy"))
        self.scales = load_checked(directory / "scales.npy", sums.get("scales.npy")) if dtype == "int8" else None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    def __len__(self) -> int:
        return self.data.shape[0]

    def warm(self) -> None:
        """Touch every page of the memory-mapped files, so that later random row reads take no page faults
        (a first read of a mapped page costs a fault even when the file is in the page cache)."""
        for array in (self.data, self.scales):
            if isinstance(array, CheckedArray):  # (the one with a `check`)
                array.check.everything()  # reads every page: mapped, and checked
            elif array is not None:
                touch_pages(array)

    def __getitem__(self, rows) -> np.ndarray:
        out = np.asarray(self.data[rows], dtype=np.float32)
        if self.scales is not None:
            out *= np.asarray(self.scales[rows], dtype=np.float32)[..., None]
        return out

    def dot(self, rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """Inner products of the rows' vectors with `queries` (one query [d] -> [rows]; [m, d] -> [rows, m]),
        float32. An int8 row's scale multiplies its products, not its d codes: the same values as
        `self[rows] @ queries` up to float rounding (the order of two products), at half the cost. One query's
        products are each row's own (common.arrays.row_dot: the same whichever rows are asked with it)."""
        q = np.asarray(queries, dtype=np.float32)
        data = np.asarray(self.data[rows], dtype=np.float32)
        out = row_dot(data, q) if q.ndim == 1 else data @ q.T
        if self.scales is not None:
            scales = np.asarray(self.scales[rows], dtype=np.float32)
            out *= scales if out.ndim == 1 else scales[:, None]
        return out
