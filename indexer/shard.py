"""The on-disk shard format and its read side: a finished shard opened memory-mapped (written by indexer.shard_writer).

A shard directory holds
  vectors.npy    float16 [n, d]  token vectors for exact re-scoring (or int8 codes, see indexer.vectors;
                                 none with vector_dtype "none": index.faiss's codes score, indexer.ann_codes)
  scales.npy     float16 [n]     per-token scale of int8 vectors (int8 only)
  code_slots.npy uint32 [n]      each token's place among index.faiss's IVF codes (vector_dtype "none", IVF only)
  token_ids.npy  uint16 [n]      vocabulary ids (int32 when an id does not fit 16 bits)
  char_starts.npy, char_lengths.npy, block_chars.npy
                 char offsets of each token into its document text, compact (indexer.offsets)
  flags.npy      uint8 [n]       WORD_START / WORD_END bits
  blocks.npy     int64 [b, 3]    (document row in docs.arrow, first token, end token) per block
  docs.arrow     Arrow IPC file  columns id, title, text of the documents the blocks come from
  index.faiss    FAISS index (inner product) over the vectors; its type is chosen per shard (indexer.ann)
  checksums.npy  uint64         xxh3-64 of every 4 KiB of the files above but index.faiss (indexer.checksums)
  shard.json     counts and a checksum per file, written last
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import cast

import faiss
import numpy as np

from common.arrays import narrow
from common.errors import AppError
from indexer.ann_codes import AnnCodes
from indexer.checksums import FileCheck, load_checked, shard_sums
from indexer.doc_text import DocColumn, DocText
from indexer.integrity import check_shard_files, open_docs_mapped, read_faiss
from indexer.manifest import ShardInfo
from indexer.offsets import OFFSET_FILES, CharOffsets
from indexer.vectors import StoredVectors, touch_pages

# every shard's files but those of its vectors (vectors.npy, scales.npy, code_slots.npy) and shard.json
SHARD_FILES = ("token_ids.npy", *OFFSET_FILES, "flags.npy", "blocks.npy", "docs.arrow", "index.faiss")
# the files only a search and an exact re-scoring read (a shard opened for its text side does not open them)
DENSE_FILES = ("index.faiss", "vectors.npy", "scales.npy", "code_slots.npy")


def shard_name(number: int) -> str:
    return f"shard_{number:05d}"


def delta_bm25_name(name: str) -> str:
    """The file of a delta shard's own BM25, beside the shard's directory (indexer.update)."""
    return f"bm25_{name}.sqlite"


def read_shard_info(root: Path, number: int) -> ShardInfo | None:
    """The info of a finished shard, or None when it is missing or incomplete."""
    path = root / shard_name(number) / "shard.json"
    if not path.is_file():
        return None
    try:
        return ShardInfo.model_validate_json(path.read_text(encoding="utf-8"))
    except ValueError:
        return None


class Shard:
    """A finished shard opened read-only; large arrays are memory-mapped. Opening checks every file's
    structure against the shard's info (indexer.integrity), not its every byte (IndexFiles.verify); with the
    shard's block checksums (indexer.checksums) every read of its arrays and documents is checked, and
    docs.arrow in full when it opens.

    `blocks[b]` is block b's (document row in docs.arrow, first token, end token), int32 where they fit. What a
    shard keeps in memory is per block, 37 B (`blocks` 12, `block_starts` 8, CharOffsets' first char 4, DocText's
    13), and per shard (its FAISS index's list heads, the token histogram of `token_counts`); every per-token and
    per-document array is mapped."""

    def __init__(self, root: Path, info: ShardInfo, dim: int, dense: bool = True) -> None:
        self.info = info
        self.dense = dense  # False: the text side only (no FAISS index, no stored vectors: a Ray ingress's shards)
        self.dir = root / info.name
        check_shard_files(self.dir, info, dim)  # sizes, .npy headers, flags, scales, blocks (indexer.integrity)
        sums = shard_sums(self.dir, info.files)  # {} for a shard written before checksums: reads not checked
        self.checked = bool(sums)
        self.token_ids = load_checked(self.dir / "token_ids.npy", sums.get("token_ids.npy"))
        self.flags = load_checked(self.dir / "flags.npy", sums.get("flags.npy"))
        self.blocks = narrow(np.array(load_checked(self.dir / "blocks.npy", sums.get("blocks.npy"))))  # in memory
        self.block_starts = self.blocks[:, 1].astype(np.int64)  # contiguous: searched by int64 positions
        self.offsets = CharOffsets(self.dir, self.block_starts, sums)
        self.docs, base = open_docs_mapped(self.dir / "docs.arrow", info.documents)
        docs_check = FileCheck(self.dir / "docs.arrow", sums["docs.arrow"]) if sums else None
        if docs_check is not None:
            docs_check.everything()  # read in full by open_docs's validation anyway; the row offsets are copied
        self.columns = {
            name: DocColumn(self.docs.column(name), docs_check, base, self.dir / "docs.arrow")
            for name in ("id", "title", "text")
        }
        self.text = DocText(self.columns["text"], self.blocks, self.offsets)
        self._index = read_faiss(self.dir / "index.faiss", info, dim) if dense else None
        self._vectors: StoredVectors | AnnCodes | None = None
        if self._index is not None:
            self._vectors = (
                AnnCodes(self.dir, self._index, sums)
                if info.vector_dtype == "none"
                else StoredVectors(self.dir, info.vector_dtype, sums)
            )
        self.warmed = False

    @property
    def index(self) -> faiss.Index:
        """The shard's FAISS index (a shard opened for its text side only has none)."""
        if self._index is None:
            raise AppError(
                f"shard {self.info.name} was opened without its vectors (its text side only)", kind="internal"
            )
        return self._index

    @index.setter
    def index(self, index: faiss.Index) -> None:  # a bench's own index in its place (bench/bench_ann.py)
        self._index = index

    @property
    def vectors(self) -> StoredVectors | AnnCodes:
        """The stored vectors that re-score a hit exactly (or the FAISS codes' scores: indexer.ann_codes)."""
        if self._vectors is None:
            raise AppError(
                f"shard {self.info.name} was opened without its vectors (its text side only)", kind="internal"
            )
        return self._vectors

    @vectors.setter
    def vectors(self, vectors: StoredVectors | AnnCodes) -> None:  # a bench's codec in their place (bench_codecs)
        self._vectors = vectors

    def __len__(self) -> int:
        return self.info.tokens

    def warm(self) -> None:
        """Map every page of the files a fill reads at random (vectors, flags, offsets) into this process (checking
        each page's checksum as it is read, where the shard has them), and locate the blocks' text (DocText.load);
        once (a shard lent to a later generation stays warm)."""
        if self.warmed:
            return
        if self._vectors is not None:
            self._vectors.warm()
        self.text.load()
        for array in (self.flags, self.offsets.starts, self.offsets.lengths, self.token_ids):
            if hasattr(array, "check"):
                array.check.everything()  # reads every page: mapped, and checked
            elif array is not self.token_ids:
                touch_pages(array)
        self.warmed = True

    def block_of(self, positions: np.ndarray) -> np.ndarray:
        """Local block number of each token position."""
        return np.searchsorted(self.block_starts, positions, side="right") - 1

    def block_positions(self, blocks: np.ndarray) -> np.ndarray:
        """The position of every token of the local blocks `blocks`, block after block (int64; empty for none)."""
        if not len(blocks):
            return np.empty(0, dtype=np.int64)
        return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in self.blocks[blocks][:, 1:3].tolist()])

    @cached_property
    def _token_histogram(self) -> np.ndarray:
        return narrow(np.bincount(np.asarray(self.token_ids, dtype=np.int64)))

    def token_counts(self, ids: np.ndarray) -> np.ndarray:
        """How often each vocabulary id of `ids` occurs in the shard (tombstoned documents' tokens counted too);
        the histogram is made on the first call (one pass over token_ids) and kept."""
        histogram = self._token_histogram
        ids = np.asarray(ids, dtype=np.int64)
        out = np.zeros(ids.shape, dtype=np.int64)
        known = ids < histogram.size
        out[known] = histogram[ids[known]]
        return out

    # ids and texts: never null in a docs.arrow the indexer writes (from lists of str)
    def doc_text(self, row: int) -> str:
        return cast(str, self.columns["text"].get(row))

    def doc_id(self, row: int) -> str:
        return cast(str, self.columns["id"].get(row))

    def doc_title(self, row: int) -> str | None:
        return self.columns["title"].get(row)
