"""The shard-local stage: one mask's candidate spans in ONE shard, scored exactly, with their phrase keys.

From the shard's start hits (extended forward) and end hits (extended backward) it forms every valid span
(fill.spans.spans_from_hits), keeps each once, re-scores each distinct start and end position exactly
from the stored vectors (q . v * scale, plus the weighted lexical prior of its block in restricted /
hybrid modes), and reads each span's text, stripped of surrounding white space and punctuation, as a
segment of a code-point buffer (fill.phrases). The result, `ShardCandidates`, is plain arrays and numbers:
everything after this stage (the global softmax, phrase grouping, ranking: fill.ranker) works from it
without looking inside a shard's arrays, so a remote shard could compute it and send it over a network.
Only evidence for the phrases shown goes back to the shard (fill.evidence)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from common.arrays import unique, unique_inverse
from common.packing import reduce_packed
from fill.phrases import shard_span_texts, strip_phrases
from fill.ragged import Ragged
from fill.spans import BlockPrior, spans_from_hits
from indexer.shard import Shard

Logits = Callable[[np.ndarray], tuple[np.ndarray, float]]
_LEN_BITS = 8  # span length - 1 < 256 (max_span_tokens <= 32)


@dataclass
class LexicalBonus:
    """What restricted / hybrid scoring adds to a position's logit: weight * prior(its global block)."""

    prior: BlockPrior
    weight: float


@dataclass
class Lexical:
    """A fill's BM25 side (restricted / hybrid): the block prior, the bonus it adds to a position's logit (None at
    lexical weight 0), and the blocks whose every token is a start and an end hit, as global numbers and per shard
    (their local numbers)."""

    prior: BlockPrior
    bonus: LexicalBonus | None
    blocks: np.ndarray
    by_shard: dict[int, np.ndarray]


@dataclass
class MaskQuery:
    """What a shard needs of one mask to form and score its candidates (the same for every shard)."""

    q_start: np.ndarray  # the mask's start query vector (output at MASK_s)
    q_end: np.ndarray  # its end query vector (output at MASK_e)
    scale: float  # similarity q . v * scale (the index's 1 / sqrt(dim))
    max_span_tokens: int
    bonus: LexicalBonus | None  # restricted / hybrid scoring with a non-zero lexical weight
    count_tokens: bool  # also count each span's tokens within its stripped phrase (the len of len^alpha)


@dataclass(frozen=True)
class CandidateForm:
    """A fill's candidates to form with its search, in one call to a shard group (fill.scatter): per mask its
    query (`bonus` None: the ingress adds it), and the BM25 blocks per shard (local numbers; none in dense mode)."""

    masks: tuple[MaskQuery, ...]
    blocks: dict[int, np.ndarray]


@dataclass
class ShardCandidates:
    """One mask's candidate spans in one shard, ordered by (first token, last token), each span once."""

    shard_no: int
    first: np.ndarray  # the span's first token (position in the shard)
    last: np.ndarray  # its last token
    start_logits: np.ndarray  # per distinct first token, ascending: q_start . v * scale (+ lexical bonus)
    start_of: np.ndarray  # per span: its first token's row of start_logits
    end_logits: np.ndarray  # per distinct last token, ascending: q_end . v * scale (+ lexical bonus)
    end_of: np.ndarray  # per span: its last token's row of end_logits
    start_max: float  # the best start logit before the bonus
    end_max: float  # the best end logit before the bonus
    block: np.ndarray  # per span: its global block number
    row: np.ndarray  # per span: its document's row in the shard
    char: np.ndarray  # per span: the char offset of its stripped phrase in the document
    keys: Ragged  # per span: its stripped phrase text (length 0: only white space / punctuation)
    tokens: np.ndarray | None  # per span: its tokens overlapping the stripped phrase (only when alpha != 0)
    blocks: np.ndarray  # the spans' distinct global blocks, ascending, and each one's first and end token
    bounds: np.ndarray  # [blocks, 2] (the reader's windows stay inside them, fill.windows)

    __reduce__ = reduce_packed  # pickled small (a shard group's answer on Ray), unpickled as it was

    @property
    def size(self) -> int:
        return int(self.first.size)

    def bounds_of(self, j: int) -> tuple[int, int]:
        """The first and end token of span j's block."""
        lo, hi = self.bounds[int(np.searchsorted(self.blocks, self.block[j]))]
        return int(lo), int(hi)


@dataclass(frozen=True)
class CandidateTask:
    """One mask's candidates in one shard (a fill.shard_group task): from its start and end hits there, plus
    every token of `blocks` (the shard's local numbers of BM25's blocks, restricted / hybrid) on both sides."""

    dense: ClassVar[bool] = True  # reads the shard's vectors: runs in its shard group

    shard_no: int
    start: np.ndarray  # positions of the start query's hits in the shard
    end: np.ndarray  # of the end query's
    blocks: np.ndarray
    query: MaskQuery

    __reduce__ = reduce_packed  # sent to a shard group on Ray: its positions pickled small

    def compute(self, shard: Shard) -> ShardCandidates | None:
        start, end = self.start, self.end
        if self.blocks.size:
            tokens = shard.block_positions(self.blocks)
            start, end = np.concatenate([start, tokens]), np.concatenate([end, tokens])
        return shard_candidates(shard, self.shard_no, start, end, self.query)


def shard_candidates(
    shard: Shard, shard_no: int, start_hits: np.ndarray, end_hits: np.ndarray, query: MaskQuery
) -> ShardCandidates | None:
    """The candidates of shard `shard` (number `shard_no`) from the positions of its start and end hits, or
    None when they form no valid span."""
    first, last = _spans(shard, start_hits, end_hits, query.max_span_tokens)
    if first.size == 0:
        return None
    return span_candidates(
        shard,
        shard_no,
        first,
        last,
        lambda at: exact_logits(shard, at, query.q_start, query.scale, query.bonus),
        lambda at: exact_logits(shard, at, query.q_end, query.scale, query.bonus),
        query.count_tokens,
    )


def span_candidates(
    shard: Shard,
    shard_no: int,
    first: np.ndarray,
    last: np.ndarray,
    start_logits_of: Logits,
    end_logits_of: Logits,
    count_tokens: bool,
) -> ShardCandidates:
    """The candidates of the given spans of one shard (ordered by (first, last), each once): the logits of
    their distinct starts and ends (`start_logits_of(positions)` -> (logits, best before any bonus)), blocks,
    documents and stripped phrase texts. The reader (fill.reading) scores its window spans through it too."""
    block_base = shard.info.block_base
    local_block = shard.block_of(first).astype(np.int64)
    starts, start_of = unique_inverse(first)
    ends, end_of = unique_inverse(last)
    start_logits, start_max = start_logits_of(starts)
    end_logits, end_max = end_logits_of(ends)
    raw, char_a = shard_span_texts(shard, local_block, first, last)
    keys = strip_phrases(raw)
    char = char_a + (keys.start - raw.start)
    tokens = _phrase_tokens(shard, first, last, char, char + keys.length) if count_tokens else None
    distinct = unique(local_block)  # (ascending already: the spans are ordered by first token)
    return ShardCandidates(
        shard_no=shard_no,
        first=first,
        last=last,
        start_logits=start_logits,
        start_of=start_of,
        end_logits=end_logits,
        end_of=end_of,
        start_max=start_max,
        end_max=end_max,
        block=local_block + block_base,
        row=shard.blocks[local_block, 0].astype(np.int64),
        char=char,
        keys=keys,
        tokens=tokens,
        blocks=distinct + block_base,
        bounds=np.asarray(shard.blocks[distinct, 1:3], dtype=np.int64),
    )


def _spans(shard: Shard, start_hits: np.ndarray, end_hits: np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) of the distinct valid spans from the hits, ordered by (first, last)."""
    firsts, lasts = [], []
    for hits, forward in ((start_hits, True), (end_hits, False)):
        if hits.size:
            a, b = spans_from_hits(hits, forward, max_len, shard.flags, shard.block_of)
            firsts.append(a)
            lasts.append(b)
    if not firsts:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    first, last = np.concatenate(firsts), np.concatenate(lasts)
    keys = unique(first << _LEN_BITS | (last - first))  # one int64 per span: 1-D unique is fast
    first = keys >> _LEN_BITS
    return first, first + (keys & ((1 << _LEN_BITS) - 1))


def exact_logits(
    shard: Shard, positions: np.ndarray, q: np.ndarray, scale: float, bonus: LexicalBonus | None
) -> tuple[np.ndarray, float]:
    """Exact logits of the (ascending, distinct) positions for query q, and the best before the bonus."""
    logits = np.empty(positions.size, dtype=np.float64)
    logits[:] = shard.vectors.dot(positions, q) * scale  # ascending rows: sequential reads
    best = float(logits.max())
    if bonus is not None:
        logits += bonus.weight * bonus.prior(shard.block_of(positions) + shard.info.block_base)
    return logits, best


def _phrase_tokens(shard: Shard, first: np.ndarray, last: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per span [first, last]: its tokens whose chars overlap [a, b) (its stripped phrase)."""
    steps = np.arange(int((last - first).max(initial=0)) + 1)
    pos = first[:, None] + steps[None, :]
    inside = pos <= last[:, None]
    offs = shard.offsets[np.where(inside, pos, first[:, None]).ravel()].reshape(pos.shape + (2,))
    counts: np.ndarray = (inside & (offs[..., 0] < b[:, None]) & (offs[..., 1] > a[:, None])).sum(axis=1)
    return counts
