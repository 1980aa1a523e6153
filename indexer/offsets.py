"""Token character offsets stored compactly: 3 bytes per token instead of 8 for ordinary text.

A token's offsets (start, end) into its document text are stored as
  char_starts.npy   [n]  start minus the first character of the token's block
  char_lengths.npy  [n]  end - start
  block_chars.npy   int64 [b]  the first character of each block
each of the two per-token arrays in the smallest unsigned type that holds its largest value (uint16
and uint8 for ordinary text: a 128-token block spans a few hundred characters), so an unusual shard
(a huge unsplit token) costs more bytes instead of failing. `CharOffsets` reads them back as the
int64 [n, 2] array they encode.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.arrays import narrow
from indexer.checksums import load_checked

OFFSET_FILES = ("char_starts.npy", "char_lengths.npy", "block_chars.npy")


def _smallest_uint(values: np.ndarray) -> np.dtype:
    return np.min_scalar_type(int(values.max()) if values.size else 0)


def pack_offsets(offsets: np.ndarray, block_starts: np.ndarray) -> dict[str, np.ndarray]:
    """The three arrays for `offsets` (int [n, 2]) of tokens whose blocks start at `block_starts` (sorted, first 0)."""
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    block_starts = np.asarray(block_starts, dtype=np.int64)
    n = offsets.shape[0]
    if n == 0:
        return {
            "char_starts.npy": np.empty(0, np.uint8),
            "char_lengths.npy": np.empty(0, np.uint8),
            "block_chars.npy": np.zeros(block_starts.shape, np.int64),
        }
    if block_starts.size == 0 or block_starts[0] != 0 or np.any(np.diff(block_starts) < 0) or block_starts[-1] > n:
        raise ValueError("block starts must be sorted token positions beginning at 0")
    lengths = offsets[:, 1] - offsets[:, 0]
    if np.any(lengths < 0) or np.any(offsets[:, 0] < 0):
        raise ValueError("token offsets must be non-negative with end >= start")
    # first character of each block: the smallest start among its tokens (empty blocks get 0)
    sizes = np.diff(np.append(block_starts, n))
    block_chars = np.zeros(block_starts.shape, np.int64)
    filled = sizes > 0
    block_chars[filled] = np.minimum.reduceat(offsets[:, 0], block_starts[filled])
    relative = offsets[:, 0] - np.repeat(block_chars, sizes)
    return {
        "char_starts.npy": relative.astype(_smallest_uint(relative)),
        "char_lengths.npy": lengths.astype(_smallest_uint(lengths)),
        "block_chars.npy": block_chars,
    }


class CharOffsets:
    """The int64 [n, 2] offsets of a shard, decoded on access from the memory-mapped compact arrays.

    Indexes like the array it encodes: `offsets[i]`, `offsets[a:b]`, `offsets[positions]`, and a
    column with `offsets[rows, 0]` / `offsets[rows, 1]`."""

    def __init__(self, directory: Path, block_starts: np.ndarray, sums: dict[str, np.ndarray] | None = None) -> None:
        sums = sums or {}  # the shard's block checksums: every read of the per-token arrays checked (indexer.checksums)
        self.starts = load_checked(directory / "char_starts.npy", sums.get("char_starts.npy"))
        self.lengths = load_checked(directory / "char_lengths.npy", sums.get("char_lengths.npy"))
        self.block_chars = narrow(np.array(load_checked(directory / "block_chars.npy", sums.get("block_chars.npy"))))
        self.block_starts = np.asarray(block_starts, dtype=np.int64)
        if self.lengths.shape != self.starts.shape or self.block_chars.shape != self.block_starts.shape:
            raise ValueError(f"offset files in {directory} disagree in length")

    def span_chars(self, blocks: np.ndarray, first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start char of token `first`, end char of token `last`) of spans lying in the given blocks."""
        base = self.block_chars[blocks]
        start = base + np.asarray(self.starts[first], dtype=np.int64)
        return start, base + np.asarray(self.starts[last], dtype=np.int64) + np.asarray(
            self.lengths[last], dtype=np.int64
        )

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.starts.shape[0]), 2)

    def __len__(self) -> int:
        return int(self.starts.shape[0])

    def __getitem__(self, key):
        if isinstance(key, tuple):
            rows, column = key
            return self[rows][..., column]
        if isinstance(key, slice):
            key = np.arange(*key.indices(len(self)), dtype=np.int64)
        positions = np.asarray(key, dtype=np.int64)
        if positions.ndim and positions.size and (positions.min() < -len(self) or positions.max() >= len(self)):
            raise IndexError(f"token positions out of range for {len(self)} tokens")
        positions = np.where(positions < 0, positions + len(self), positions)
        block = np.searchsorted(self.block_starts, positions, side="right") - 1
        start = self.block_chars[block] + np.asarray(self.starts[positions], dtype=np.int64)
        return np.stack([start, start + np.asarray(self.lengths[positions], dtype=np.int64)], axis=-1)
