"""A shard's document text as the UTF-8 bytes of docs.arrow (memory-mapped), addressed by character offset
block by block, so that the service can slice thousands of phrases with numpy instead of building a Python
string per document (fill.phrases).

For every block it keeps the byte where the block's text starts in the text buffer and whether the block's
text is all ASCII; then character c of the block's document is byte `start + c - first char of the block`.
Both are computed on first use (one pass over the shard's text, a few ms per million tokens).
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa

from indexer.offsets import CharOffsets


class DocText:
    def __init__(self, texts: pa.ChunkedArray, blocks: np.ndarray, offsets: CharOffsets):
        self._texts = texts
        self._blocks = blocks
        self._offsets = offsets
        self._lock = threading.Lock()
        self._ready = False

    def load(self) -> None:
        """Read the shard's text once to find each block's first byte and whether it is ASCII (else on first use)."""
        with self._lock:
            if self._ready:
                return
            self._rows = np.asarray(self._blocks[:, 0], dtype=np.int64)
            self.block_chars = np.asarray(self._offsets.block_chars, dtype=np.int64)  # first char of each block
            # one past the last char of each block: the largest token end (empty blocks: their first char)
            ends = np.asarray(self._offsets.starts, np.int64) + np.asarray(self._offsets.lengths, np.int64)
            firsts, lasts = np.asarray(self._blocks[:, 1], np.int64), np.asarray(self._blocks[:, 2], np.int64)
            full = lasts > firsts
            self.block_char_ends = self.block_chars.copy()
            if full.any():
                self.block_char_ends[full] += np.maximum.reduceat(ends, firsts[full])[: int(full.sum())]
            array = self._texts.combine_chunks() if self._texts.num_chunks != 1 else self._texts.chunk(0)
            offsets_type = np.int64 if pa.types.is_large_string(array.type) else np.int32
            _, offsets_buf, data_buf = array.buffers()
            doc_bytes = np.frombuffer(offsets_buf, dtype=offsets_type)[array.offset : array.offset + len(array) + 1]
            self.data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
            doc_bytes = doc_bytes.astype(np.int64)
            used = self.data[doc_bytes[0] : doc_bytes[-1]]
            if used.size == 0 or int(used.max()) < 128:  # all ASCII: a char is a byte
                self.block_bytes = doc_bytes[self._rows] + self.block_chars
                self.block_byte_ends = doc_bytes[self._rows] + self.block_char_ends
                self.block_ascii = np.ones(self._rows.shape, dtype=bool)
            else:  # char c of document r is the c-th UTF-8 lead byte from the document's first byte
                leads = np.flatnonzero((self.data[: doc_bytes[-1]] & 0xC0) != 0x80)
                first_lead = np.searchsorted(leads, doc_bytes)  # per document (and one past the last)

                def byte_of(rows: np.ndarray, chars: np.ndarray) -> np.ndarray:
                    i = first_lead[rows] + chars
                    inside = i < first_lead[rows + 1]
                    return np.where(inside, leads[np.minimum(i, leads.size - 1)], doc_bytes[rows + 1])

                self.block_bytes = byte_of(self._rows, self.block_chars)
                self.block_byte_ends = byte_of(self._rows, self.block_char_ends)
                self.block_ascii = (self.block_byte_ends - self.block_bytes) == (
                    self.block_char_ends - self.block_chars
                )
            self._ready = True

    def ascii_bytes(self, blocks: np.ndarray, chars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(whether each block is ASCII, the byte of each char `chars` of the block's document where it is)."""
        self.load()
        blocks = np.asarray(blocks, dtype=np.int64)
        return self.block_ascii[blocks], self.block_bytes[blocks] + (chars - self.block_chars[blocks])

    def block_codes(self, block: int) -> np.ndarray:
        """The code points of one block's text (for blocks that are not ASCII)."""
        self.load()
        text = bytes(self.data[int(self.block_bytes[block]) : int(self.block_byte_ends[block])]).decode("utf-8")
        return np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
