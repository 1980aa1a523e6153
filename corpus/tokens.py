"""Tokenization of documents with char offsets and word boundaries (any HuggingFace fast tokenizer)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

logger = logging.getLogger(__name__)

# Boundary flags stored per token.
WORD_START = 1
WORD_END = 2


@dataclass(frozen=True)
class DocTokens:
    """The tokens of one document: ids, char offsets into its text, and word-boundary flags."""

    ids: np.ndarray  # int32 [n]
    offsets: np.ndarray  # int32 [n, 2] (start, end) char offsets into the document text
    flags: np.ndarray  # uint8 [n], WORD_START | WORD_END bits

    def __len__(self) -> int:
        return int(self.ids.shape[0])


def boundary_flags(word_ids: list[int | None]) -> np.ndarray:
    """WORD_START where a token begins a pre-tokenizer word, WORD_END where it ends one."""
    n = len(word_ids)
    flags = np.zeros(n, dtype=np.uint8)
    for i, w in enumerate(word_ids):
        if w is None:
            continue
        if i == 0 or word_ids[i - 1] != w:
            flags[i] |= WORD_START
        if i == n - 1 or word_ids[i + 1] != w:
            flags[i] |= WORD_END
    return flags


def tokenize_documents(tokenizer, texts: list[str]) -> list[DocTokens]:
    """Tokenize whole documents (no special tokens) keeping offsets and word boundaries."""
    enc = tokenizer(
        texts,
        add_special_tokens=False,
        return_offsets_mapping=True,
        return_attention_mask=False,
        return_token_type_ids=False,
        verbose=False,
    )
    out = []
    for i in range(len(texts)):
        ids = np.asarray(enc["input_ids"][i], dtype=np.int32)
        offsets = np.asarray(enc["offset_mapping"][i], dtype=np.int32).reshape(-1, 2)
        out.append(DocTokens(ids=ids, offsets=offsets, flags=boundary_flags(enc.word_ids(i))))
    return out
