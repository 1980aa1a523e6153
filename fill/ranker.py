"""The global ranker: one mask's candidates of every shard -> its phrases, best first.

The shards' start logits are joined and go through ONE softmax (likewise the end logits), so a span's
score P_start(first) + P_end(last) is normalised over the whole index; the spans' stripped texts are
grouped into phrases (fill.phrases: exact content, case-folded unless case-sensitive, stopword-only
fills dropped), a phrase's mass is the max or the sum of its spans' scores, and phrases are ranked by
mass * len^alpha. Shards are joined in ascending order, so the pool's spans are ordered by (shard, first
token, last token) and the result does not depend on how the index is split into shards' processes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.arrays import piece_starts
from fill.candidates import ShardCandidates
from fill.phrases import PhraseTable, phrase_table, rank_table
from fill.ragged import join_ragged
from fill.schemas import FillOptions
from fill.spans import softmax


@dataclass
class CandidatePool:
    """All shards' candidates of one mask, joined: pool span i is span i - offsets[p] of parts[p]."""

    parts: list[ShardCandidates]
    offsets: np.ndarray  # the pool index of each part's first span
    score: np.ndarray  # per span: P_start + P_end over the whole pool
    start_max: float  # the best start / end logit before any bonus (-inf when there is no span)
    end_max: float

    @classmethod
    def of(cls, parts: list[ShardCandidates]) -> "CandidatePool":
        sizes = np.array([p.size for p in parts], dtype=np.int64)
        offsets = piece_starts(sizes)
        if not parts:
            return cls(parts, offsets, np.empty(0), float("-inf"), float("-inf"))
        p_start = _probabilities([p.start_logits for p in parts], [p.start_of for p in parts])
        p_end = _probabilities([p.end_logits for p in parts], [p.end_of for p in parts])
        return cls(parts, offsets, p_start + p_end, max(p.start_max for p in parts), max(p.end_max for p in parts))

    def where(self, i: int) -> tuple[ShardCandidates, int]:
        """The part holding pool span i, and the span's index in it."""
        p = int(np.searchsorted(self.offsets, i, side="right")) - 1
        return self.parts[p], i - int(self.offsets[p])

    def block(self, i: int) -> int:
        part, j = self.where(i)
        return int(part.block[j])


def _probabilities(logits: list[np.ndarray], rows: list[np.ndarray]) -> np.ndarray:
    """Per span: the softmax over every part's distinct positions, read at the span's own position."""
    sizes = np.array([x.size for x in logits], dtype=np.int64)
    shift = piece_starts(sizes)
    probabilities: np.ndarray = softmax(np.concatenate(logits))[np.concatenate([r + d for r, d in zip(rows, shift)])]
    return probabilities


@dataclass
class RankedPhrase:
    text: str
    value: float  # mass * len^alpha over the sum of all phrases' values
    occurrences: list[int]  # pool spans, best score first


@dataclass
class RankedMask:
    pool: CandidatePool
    shown: list[RankedPhrase]  # the top_k phrases
    runner_up: float | None  # the second phrase's value (None when there is one phrase or none)

    @classmethod
    def of(cls, pool: CandidatePool, table: PhraseTable, ranked: list[tuple[int, float]], top_k: int) -> "RankedMask":
        """The first top_k of `ranked` ((phrase of `table`, value), best first, at least two when there are)
        as shown phrases, each with its pool spans best score first."""
        shown = []
        for phrase, value in ranked[:top_k]:
            occurrences = table.occurrences(phrase)
            best_first = occurrences[np.argsort(-pool.score[occurrences], kind="stable")]
            shown.append(RankedPhrase(table.text(phrase), value, best_first.tolist()))
        return cls(pool, shown, ranked[1][1] if len(ranked) > 1 else None)


def rank_mask(parts: list[ShardCandidates], options: FillOptions) -> RankedMask:
    """The top `options.top_k` phrases of one mask's candidates (`parts`: one per shard, ascending)."""
    pool = CandidatePool.of(parts)
    if not parts:
        return RankedMask(pool, [], None)
    if options.alpha:
        tokens = np.concatenate([p.tokens for p in parts])
    else:
        tokens = np.concatenate([p.last - p.first + 1 for p in parts])
    table = phrase_table(
        join_ragged([p.keys for p in parts]),
        pool.score,
        tokens,
        options.case_sensitive,
        options.aggregate,
        options.drop_stopwords,
        options.strict_spans,
    )
    ranked = rank_table(table, options.alpha, max(options.top_k, 2))  # the shown phrases and the runner-up
    return RankedMask.of(pool, table, ranked, options.top_k)
