"""Tokenization with char offsets and word boundaries, and the model's special-token template."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import numpy as np

logger = logging.getLogger(__name__)

MASK_PATTERN = re.compile(r"<mask>|\[MASK\]", re.IGNORECASE)

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


@dataclass(frozen=True)
class Template:
    """Special tokens around one sequence (`single`) or a pair (`pair`, used for title + block)."""

    single_prefix: list[int]
    single_suffix: list[int]
    pair_prefix: list[int]
    pair_mid: list[int]
    pair_suffix: list[int]
    second_type_id: int  # token_type id of the second segment of a pair (0 for RoBERTa-style)


def _find(hay: list[int], needle: list[int], start: int = 0) -> int:
    for i in range(start, len(hay) - len(needle) + 1):
        if hay[i : i + len(needle)] == needle:
            return i
    raise ValueError("tokenizer template could not be derived")


def derive_template(tokenizer) -> Template:
    """Learn where the tokenizer puts its special tokens by encoding known texts."""
    a = tokenizer("hello", add_special_tokens=False)["input_ids"]
    b = tokenizer("world", add_special_tokens=False)["input_ids"]
    single = tokenizer("hello")["input_ids"]
    pa = _find(single, a)
    pair_enc = tokenizer("hello", "world")
    pair = pair_enc["input_ids"]
    p = _find(pair, a)
    q = _find(pair, b, p + len(a))
    types = pair_enc.get("token_type_ids") or [0] * len(pair)
    return Template(
        single_prefix=single[:pa],
        single_suffix=single[pa + len(a) :],
        pair_prefix=pair[:p],
        pair_mid=pair[p + len(a) : q],
        pair_suffix=pair[q + len(b) :],
        second_type_id=int(types[q]),
    )


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


def count_masks(text: str) -> int:
    return len(MASK_PATTERN.findall(text))


def split_on_masks(text: str) -> list[str]:
    """The text segments around each mask (len = masks + 1)."""
    return MASK_PATTERN.split(text)
