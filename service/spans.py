"""Span candidates, exact scoring and aggregation: the arithmetic of NPM inference, free of I/O.

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
mass * len^alpha.
"""

from __future__ import annotations

import functools
import sys
import unicodedata
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from common.arrays import unique, unique_inverse
from corpus.tokens import WORD_END, WORD_START
from service.schemas import AGGREGATIONS


def spans_from_hits(
    hits: np.ndarray, forward: bool, max_len: int, flags: np.ndarray, block_of
) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of every valid span that starts (forward) or ends (backward) at a hit.

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
    return z / z.sum()


@dataclass
class SpanScores:
    """Unique candidate spans of one mask across shards with their scores."""

    shard: np.ndarray
    start: np.ndarray
    end: np.ndarray
    score: np.ndarray  # P_start(start) + P_end(end)
    start_max: float = float("-inf")  # the best encoder logit q_start . v * scale among the candidate starts
    end_max: float = float("-inf")  # and among the candidate ends (both without any prior)


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


# bonus(shard number, positions) -> a logit added to each position's (the prior, weighted)
Bonus = Callable[[int, np.ndarray], np.ndarray]

_LEN_BITS = 8  # span length - 1 < 256 (max_span_tokens <= 32)
_POS_BITS = 36  # up to 68 billion tokens per shard; shard numbers get the remaining 19 bits
_POS_MASK = (1 << _POS_BITS) - 1


def score_spans(
    shard: np.ndarray, start: np.ndarray, end: np.ndarray, q_start: np.ndarray, q_end: np.ndarray,
    vectors: list, scale: float, bonus: Bonus | None = None,
) -> SpanScores:
    """Deduplicate spans and score them exactly from the stored vectors (`vectors[shard][pos]`),
    `bonus` (if given) added to the start and end logits before the softmaxes."""
    if shard.size == 0:
        return SpanScores(shard, start, end, np.empty(0))
    # one int64 key per span (1-D unique is several times faster than unique rows)
    keys = unique((shard << _POS_BITS | start) << _LEN_BITS | (end - start))
    shard, start = keys >> (_POS_BITS + _LEN_BITS), (keys >> _LEN_BITS) & _POS_MASK
    end = start + (keys & ((1 << _LEN_BITS) - 1))
    p_start, start_max = _position_probs(shard, start, q_start, vectors, scale, bonus)
    p_end, end_max = _position_probs(shard, end, q_end, vectors, scale, bonus)
    return SpanScores(shard, start, end, p_start + p_end, start_max, end_max)


def _position_probs(
    shard: np.ndarray, pos: np.ndarray, q: np.ndarray, vectors: list, scale: float, bonus: Bonus | None
) -> tuple[np.ndarray, float]:
    """Softmax over the distinct (shard, position) pairs, returned per input row, and the best logit
    before the bonus."""
    keys, inverse = unique_inverse(shard << _POS_BITS | pos)
    key_shard, key_pos = keys >> _POS_BITS, keys & _POS_MASK
    logits = np.empty(keys.shape[0], dtype=np.float64)
    q = np.asarray(q, dtype=np.float32)
    best = float("-inf")
    for s in unique(key_shard):
        rows = np.flatnonzero(key_shard == s)
        vecs = np.asarray(vectors[int(s)][key_pos[rows]], dtype=np.float32)  # sorted keys: sequential reads
        logits[rows] = vecs @ q * scale
        best = max(best, float(logits[rows].max()))
        if bonus is not None:
            logits[rows] += bonus(int(s), key_pos[rows])
    return softmax(logits)[inverse], best


@functools.lru_cache(maxsize=1)
def strip_chars() -> str:
    """Every white-space and punctuation (Unicode category P*) character, built once on first use."""
    return "".join(
        c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace() or unicodedata.category(c).startswith("P")
    )


def strip_phrase(text: str) -> tuple[int, int]:
    """(lead, end) such that text[lead:end] has no surrounding white space or punctuation."""
    if text[:1].isalnum() and text[-1:].isalnum():  # the common case: letters and digits are never stripped
        return 0, len(text)
    chars = strip_chars()
    end = len(text.rstrip(chars))
    lead = end - len(text[:end].lstrip(chars))
    return lead, end


@dataclass
class Phrase:
    text: str
    mass: float = 0.0
    tokens: int = 0
    occurrences: np.ndarray = field(  # span indices, ascending
        default_factory=lambda: np.empty(0, dtype=np.int64), compare=False)

    def rank_value(self, alpha: float) -> float:
        return self.mass * (self.tokens**alpha if alpha else 1.0)


def aggregate(
    keys: list[str | None], scores: np.ndarray, lengths: np.ndarray, case_sensitive: bool = True, how: str = "sum"
) -> list[Phrase]:
    """Sum (or take the max of) span scores per phrase key; spans whose key is None or empty are dropped.
    Phrases come in the order of their first occurrence, with that occurrence's text and length."""
    if how not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {how!r}")
    index: dict[str, int] = {}
    firsts: list[int] = []
    codes = []
    for idx, key in enumerate(keys):  # the one Python loop: a phrase number per span (-1: dropped)
        if not key:
            codes.append(-1)
            continue
        norm = key if case_sensitive else key.lower()
        code = index.get(norm)
        if code is None:
            code = index[norm] = len(firsts)
            firsts.append(idx)
        codes.append(code)
    n = len(firsts)
    code_of = np.asarray(codes, dtype=np.int64)
    kept = np.flatnonzero(code_of >= 0)
    mass = masses(code_of[kept], np.asarray(scores, dtype=np.float64)[kept], n, how)
    grouped = kept[np.argsort(code_of[kept], kind="stable")]
    bounds = np.searchsorted(code_of[grouped], np.arange(1, n))
    lengths = np.asarray(lengths)
    return [Phrase(text=keys[first], mass=float(m), tokens=int(lengths[first]), occurrences=occ)
            for first, m, occ in zip(firsts, mass.tolist(), np.split(grouped, bounds))]


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


def rank(phrases: list[Phrase], alpha: float, n: int | None = None) -> list[tuple[Phrase, float]]:
    """Phrases sorted by mass * len^alpha (ties: by text), with that value normalised over all phrases;
    only the first `n` when given (the same as the first n of the whole order, without sorting it all)."""
    values = np.array([p.rank_value(alpha) for p in phrases], dtype=np.float64)
    return [(phrases[i], value) for i, value in top_values(values, lambda i: phrases[i].text, n)]
