"""docs.arrow's string columns read checked, and a shard's document text as the UTF-8 bytes of docs.arrow
(memory-mapped), addressed by character offset block by block, so that the service can slice thousands of phrases
with numpy instead of building a Python string per document (fill.phrases).

`DocColumn` reads one column's rows (`get`) after checking the bytes they occupy in the file against the shard's
block checksums (indexer.checksums): the row's two offsets and its characters; `DocText` checks the bytes of the
blocks whose text it hands out. For every block DocText keeps the byte where the block's text starts in the text
buffer and whether the block's text is all ASCII; then character c of the block's document is byte `start + c -
first char of the block`. Both are computed on first use (one pass over the shard's text, a few ms per million
tokens).
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa

from common.arrays import narrow, piece_starts
from indexer.checksums import FileCheck
from indexer.integrity import IndexDamaged, damaged
from indexer.offsets import CharOffsets


class DocColumn:
    """One string column of docs.arrow: its row offsets and its characters (memory-mapped), each read checked
    when the shard has checksums. A column of several chunks (not what indexer.shard_writer writes) is combined
    into memory, checked once."""

    def __init__(self, column: pa.ChunkedArray, check: FileCheck | None, base: int, path: Path) -> None:
        self.path = path
        single = column.num_chunks == 1
        array = column.chunk(0) if single else column.combine_chunks()
        self.array = array
        self.check = check if single else None
        offsets_type = np.int64 if pa.types.is_large_string(array.type) else np.int32
        validity, offsets_buf, data_buf = array.buffers()
        width = np.dtype(offsets_type).itemsize
        # [rows + 1], int32 (int64 for large strings), mapped: where each row's characters start (check_rows checks
        # the bytes of the offsets it reads as well as the characters)
        self.offsets = np.frombuffer(offsets_buf, dtype=offsets_type)[array.offset : array.offset + len(array) + 1]
        self.data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
        self._offsets_at = offsets_buf.address - base + array.offset * width
        self._data_at = data_buf.address - base if data_buf is not None else 0
        self._validity_at = validity.address - base if validity is not None else None
        self._width = width

    def __len__(self) -> int:
        return len(self.array)

    def check_rows(self, rows: np.ndarray) -> None:
        """Check the file's bytes of the rows: their offsets and validity bits, then the characters they bound."""
        if self.check is None:
            return
        rows = np.asarray(rows, dtype=np.int64).ravel()
        starts, ends = [self._offsets_at + rows * self._width], [self._offsets_at + (rows + 2) * self._width]
        if self._validity_at is not None:
            bits = self._validity_at + (self.array.offset + rows) // 8
            starts.append(bits)
            ends.append(bits + 1)
        self.check.ranges(np.concatenate(starts), np.concatenate(ends))
        self.check_bytes(self.offsets[rows].astype(np.int64), self.offsets[rows + 1].astype(np.int64))

    def check_bytes(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Check the file's bytes under [starts, ends) of the column's characters."""
        if self.check is not None:
            self.check.ranges(self._data_at + np.asarray(starts, np.int64), self._data_at + np.asarray(ends, np.int64))

    def check_all(self) -> None:
        if len(self):
            self.check_rows(np.arange(len(self)))

    def get(self, row: int) -> str | None:
        self.check_rows(np.array([row]))
        return self.array[row].as_py()


class DocText:
    def __init__(self, texts: DocColumn, blocks: np.ndarray, offsets: CharOffsets):
        self._texts = texts
        self._blocks = blocks
        self._offsets = offsets
        self._lock = threading.Lock()
        self._ready = False

    def load(self) -> None:
        """Read the shard's text once to find each block's first byte, its byte length and whether it is ASCII
        (else on first use): 13 B a block kept, besides CharOffsets' first char of each block."""
        with self._lock:
            if self._ready:
                return
            rows = np.asarray(self._blocks[:, 0], dtype=np.int64)
            self.block_chars = self._offsets.block_chars  # first char of each block (int32 where it fits, in memory)
            # one past the last char of each block: the largest token end (empty blocks: their first char)
            ends = np.asarray(self._offsets.starts, np.int64) + np.asarray(self._offsets.lengths, np.int64)
            firsts, lasts = np.asarray(self._blocks[:, 1], np.int64), np.asarray(self._blocks[:, 2], np.int64)
            full = lasts > firsts
            char_ends = np.array(self.block_chars, dtype=np.int64)
            if full.any():
                char_ends[full] += np.maximum.reduceat(ends, firsts[full])[: int(full.sum())]
            del ends
            self.data, doc_bytes = self._texts.data, self._texts.offsets.astype(np.int64)
            self._texts.check_bytes(doc_bytes[:1], doc_bytes[-1:])  # all of it: it is read below
            used = self.data[doc_bytes[0] : doc_bytes[-1]]
            if used.size == 0 or int(used.max()) < 128:  # all ASCII: a char is a byte
                self.block_bytes = doc_bytes[rows] + self.block_chars
                byte_ends = doc_bytes[rows] + char_ends
            else:  # char c of document r is the c-th UTF-8 lead byte from the document's first byte
                leads = np.flatnonzero((self.data[: doc_bytes[-1]] & 0xC0) != 0x80)
                first_lead = np.searchsorted(leads, doc_bytes)  # per document (and one past the last)

                def byte_of(rows: np.ndarray, chars: np.ndarray) -> np.ndarray:
                    i = first_lead[rows] + chars
                    inside = i < first_lead[rows + 1]
                    return np.where(inside, leads[np.minimum(i, leads.size - 1)], doc_bytes[rows + 1])

                self.block_bytes = byte_of(rows, self.block_chars)
                byte_ends = byte_of(rows, char_ends)
            sizes = byte_ends - self.block_bytes
            self.block_ascii = sizes == (char_ends - self.block_chars)
            self.block_sizes = narrow(sizes)  # bytes
            self._ready = True

    def ascii_bytes(self, blocks: np.ndarray, chars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(whether each block is ASCII, the byte of each char `chars` of the block's document where it is)."""
        self.load()
        blocks = np.asarray(blocks, dtype=np.int64)
        self.check_blocks(blocks)
        return self.block_ascii[blocks], self.block_bytes[blocks] + (chars - self.block_chars[blocks])

    def check_blocks(self, blocks: np.ndarray) -> None:
        """Check the file's bytes of the blocks' text (DocColumn.check_bytes)."""
        starts = self.block_bytes[blocks]
        self._texts.check_bytes(starts, starts + self.block_sizes[blocks])

    def blocks_codes(self, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The code points of several blocks' texts (blocks that are not ASCII, just given to `ascii_bytes`, which
        checked their bytes), decoded in one call: (their codes one block after another, where each block's
        codes start). A block's bytes begin at a UTF-8 lead byte and hold whole characters, so the blocks'
        bytes joined decode to their texts joined; a block whose first byte is not a lead byte, or bytes that
        are not UTF-8 (a shard without checksums, changed since it opened), raise IndexDamaged naming it."""
        self.load()
        blocks = np.asarray(blocks, dtype=np.int64)
        sizes = np.asarray(self.block_sizes[blocks], dtype=np.int64)
        at = piece_starts(sizes)  # each block's first byte among the joined bytes
        seg = np.repeat(np.arange(blocks.size), sizes)
        raw = np.asarray(self.data[np.arange(seg.size) - at[seg] + self.block_bytes[blocks].astype(np.int64)[seg]])
        leads = np.zeros(raw.size + 1, dtype=np.int64)  # lead bytes (one per character) before each byte
        np.cumsum((raw & 0xC0) != 0x80, out=leads[1:])
        full = np.flatnonzero(sizes > 0)
        inside = full[leads[at[full] + 1] == leads[at[full]]]  # blocks whose first byte continues a character
        if inside.size:
            raise self._not_utf8(int(blocks[inside[0]]), "its first byte continues a character")
        try:
            text = raw.tobytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            block = int(blocks[int(np.searchsorted(at, exc.start, side="right")) - 1])  # the one holding the byte
            raise self._not_utf8(block, exc.reason) from None
        return np.frombuffer(text.encode("utf-32-le"), dtype="<u4"), leads[at]

    def _not_utf8(self, block: int, reason: str) -> IndexDamaged:
        return damaged(self._texts.path, f"holds text that is not UTF-8 (block {block}: {reason})")
