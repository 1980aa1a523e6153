"""The arithmetic of NPM inference, free of I/O: spans from hits, softmax, the lexical prior, phrase
stripping, phrase masses and their ranking.

A span (i, j) is a run of tokens of one block, starting at a word start and ending at a word end,
at most `max_len` tokens long. Candidates come from start hits (extended forward) and end hits
(extended backward). With S the distinct candidate starts and E the distinct candidate ends,
    P_start = softmax over S of q_start . v_i * scale,  P_end = softmax over E of q_end . v_j * scale,
    score(i, j) = P_start(i) + P_end(j).
A lexical prior (hybrid scoring) adds w * prior(block) to both logits, prior(block) being the block's
BM25 score for the query (masks blanked) over the best block's (0 for a block BM25 did not return).
Phrases (original text, surrounding white space and punctuation stripped) aggregate the scores of
all their occurrences, by their SUM (NPM: the phrase's total probability) or their MAX (the best
single occurrence, as phrase retrieval such as DensePhrases ranks), and are ranked by
mass * len^alpha. The stages that use these: fill.candidates (one shard), fill.ranker (all shards).
"""

from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass
from typing import Callable

import numpy as np

from common.arrays import unique
from corpus.tokens import WORD_END, WORD_START
from indexer.checksums import CheckedArray


def spans_from_hits(
    hits: np.ndarray,
    forward: bool,
    max_len: int,
    flags: np.ndarray | CheckedArray,
    block_of: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """(first, last token) of every valid span that starts (forward) or ends (backward) at a hit position.

    `flags` are the shard's boundary flags; `block_of(positions)` gives each position's block.
    """
    hits = unique(np.asarray(hits, dtype=np.int64))
    n = int(flags.shape[0])
    anchor_bit = WORD_START if forward else WORD_END
    hits = hits[(np.asarray(flags[hits]) & anchor_bit) != 0]
    if hits.size == 0 or max_len < 1:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    steps = np.arange(max_len, dtype=np.int64)
    other = hits[:, None] + steps[None, :] if forward else hits[:, None] - steps[None, :]
    anchor = np.broadcast_to(hits[:, None], other.shape)
    inside = (other >= 0) & (other < n)
    other_c = np.clip(other, 0, n - 1)
    other_bit = WORD_END if forward else WORD_START
    ok = inside & ((np.asarray(flags[other_c.ravel()]).reshape(other.shape) & other_bit) != 0)
    ok &= block_of(other_c.ravel()).reshape(other.shape) == block_of(hits)[:, None]
    a, o = anchor[ok], other[ok]
    return (a, o) if forward else (o, a)


def softmax(x: np.ndarray) -> np.ndarray:
    if x.size == 0:
        return x.astype(np.float64)
    z = np.exp(x.astype(np.float64) - x.max())
    out: np.ndarray = z / z.sum()
    return out


@dataclass
class BlockPrior:
    """A lexical prior over blocks: each retrieved block's BM25 score over the best one's, in [0, 1];
    0 for blocks BM25 did not return."""

    blocks: np.ndarray  # global block ids, sorted
    values: np.ndarray

    @classmethod
    def from_bm25(cls, blocks: np.ndarray, scores: np.ndarray) -> "BlockPrior":
        blocks, scores = np.asarray(blocks, dtype=np.int64), np.asarray(scores, dtype=np.float64)
        best = float(scores.max()) if scores.size else 0.0
        order = np.argsort(blocks, kind="stable")
        values = np.clip(scores[order] / best, 0.0, 1.0) if best > 0 else np.zeros(order.size)
        return cls(blocks[order], values)

    def __call__(self, blocks: np.ndarray) -> np.ndarray:
        blocks = np.asarray(blocks, dtype=np.int64)
        if self.blocks.size == 0:
            return np.zeros(blocks.shape, dtype=np.float64)
        i = np.clip(np.searchsorted(self.blocks, blocks), 0, self.blocks.size - 1)
        return np.where(self.blocks[i] == blocks, self.values[i], 0.0)


STRIP_BELOW = 0x30000  # no white space or punctuation above (planes 3-16: ideographs, tags, private use)


@functools.lru_cache(maxsize=1)
def strip_chars(below: int = STRIP_BELOW) -> str:
    """Every white-space and punctuation (Unicode category P*) character, built once on first use (scanning
    the code points below `below`: tests/fill/test_spans.py checks that the whole range adds none)."""
    return "".join(c for c in map(chr, range(below)) if c.isspace() or unicodedata.category(c).startswith("P"))


def strip_phrase(text: str) -> tuple[int, int]:
    """(lead, end) such that text[lead:end] has no surrounding white space or punctuation."""
    if text[:1].isalnum() and text[-1:].isalnum():  # the common case: letters and digits are never stripped
        return 0, len(text)
    chars = strip_chars()
    end = len(text.rstrip(chars))
    lead = end - len(text[:end].lstrip(chars))
    return lead, end


def masses(code: np.ndarray, scores: np.ndarray, n: int, how: str) -> np.ndarray:
    """The mass of each of n phrases from its spans' scores (`code`: the phrase of each span, in span order):
    their max, or their sum added in span order, as a running sum would."""
    if how == "max":
        mass = np.zeros(n)
        np.maximum.at(mass, code, scores)
        return mass
    return np.bincount(code, weights=scores, minlength=n)


def top_values(values: np.ndarray, text: Callable[[int], str], n: int | None) -> list[tuple[int, float]]:
    """(index, value over the sum of all values) of the n largest values (ties: by text(index)); all when n
    is None. Only the values that can be among the first n are sorted."""
    total = float(values.sum()) if values.size else 0.0
    if n is not None and n < 1:
        return []
    pool = np.arange(values.size)
    if n is not None and n < values.size:
        cut = np.partition(values, values.size - n)[values.size - n]  # the n-th largest value
        pool = np.flatnonzero(values >= cut)  # every phrase that can be among the first n, ties included
    order = sorted(pool.tolist(), key=lambda i: (-values[i], text(i)))[:n]
    return [(i, float(values[i] / total) if total > 0 else 0.0) for i in order]
