"""What one side (starts or ends) of a tune-queries batch is scored against: for each query its top-k tokens of
the frozen index (searched as a fill searches, exact scores from the stored vectors: the index's own hard
negatives) plus some of its answer's occurrences that the search missed, their stored vectors, and which of them
are positives (the tokens an occurrence of an answer starts, or ends, at).

The tokens of the block a self-supervised query was made from are neither candidates nor positives
(training.tune_data). The loss (training.loss.multi_positive_nce over each query's own candidates) is the
marginal likelihood of the positives: the fill sums a phrase over all its occurrences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from indexer.phrase_index import PhraseIndex
from training.occurrences import find_occurrences, key, split_keys
from training.tune_data import TuneQuery


class Asked:
    """Queries with their positives: the keys of the tokens an answer's occurrence starts / ends at, outside the
    query's own block (training.occurrences). A query whose answers occur nowhere is dropped; one whose answers
    occur more than `max_occurrences` times is dropped too, or with `sample` (a queries file's: "English" is a fair
    answer) keeps that many of its occurrences, the same ones for a seed."""

    def __init__(
        self, index: PhraseIndex, queries: list[TuneQuery], max_occurrences: int, sample: bool = False, seed: int = 0
    ) -> None:
        rng = np.random.default_rng(seed)
        places = find_occurrences(index, [list(a) for q in queries for a in q.answers])
        self.queries: list[TuneQuery] = []
        self.starts: list[np.ndarray] = []
        self.ends: list[np.ndarray] = []
        at = 0
        for q in queries:
            mine = places[at : at + len(q.answers)]
            at += len(q.answers)
            other = np.flatnonzero(np.concatenate([p.blocks for p in mine]) != q.block)
            if not other.size or (other.size > max_occurrences and not sample):
                continue
            if other.size > max_occurrences:
                other = rng.choice(other, max_occurrences, replace=False)
            self.queries.append(q)
            self.starts.append(np.unique(np.concatenate([p.starts for p in mine])[other]))
            self.ends.append(np.unique(np.concatenate([p.ends for p in mine])[other]))

    def __len__(self) -> int:
        return len(self.queries)


@dataclass(frozen=True)
class SideTargets:
    vectors: np.ndarray  # float32 [queries, N, d]: each query's candidates' stored vectors (zeros past its own)
    allowed: np.ndarray  # bool [queries, N]: a candidate of that query
    positive: np.ndarray  # bool [queries, N]: an occurrence's first (or last) token
    top_is_positive: np.ndarray  # bool [queries]: the search's best token (own block aside) is a positive
    found: np.ndarray  # int [queries]: positives among the searched top k


def global_blocks(index: PhraseIndex, shard_no: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The global block of each (shard number, position) of opened shards."""
    at = {n: i for i, n in enumerate(index.numbers)}
    out = np.empty(positions.shape, dtype=np.int64)
    for number in np.unique(shard_no).tolist():
        rows = shard_no == number
        shard = index.shards[at[number]]
        out[rows] = shard.block_of(positions[rows]) + index.manifest.shards[number].block_base
    return out


def side_targets(
    index: PhraseIndex, queries: np.ndarray, positives: list[np.ndarray], excluded: list[int], k: int, extra: int
) -> SideTargets:
    """Targets of one side for a batch: `queries` [B, d] (this side's query vectors), `positives[i]` the keys of
    query i's positive tokens (its own block's already left out), `excluded[i]` its own global block (-1: none);
    the `extra` positives the search missed that score best with the query are added to its candidates (random
    ones, of answers with up to 2,000 occurrences, pulled the query toward the mean of all its answer's occurrences:
    its held-out best token fell, 6.1% -> 5.5% right in 100 steps on the T-REx dev index)."""
    hits = index.search_scored(queries, k)
    rows: list[np.ndarray] = []
    flags: list[np.ndarray] = []
    top, found = np.zeros(len(hits), dtype=bool), np.zeros(len(hits), dtype=np.int64)
    for i, h in enumerate(hits):
        keep = global_blocks(index, h.shard_no, h.positions) != excluded[i] if excluded[i] >= 0 else slice(None)
        keys, scores = key(h.shard_no[keep], h.positions[keep]), h.scores[keep]
        is_pos = np.isin(keys, positives[i])
        top[i] = bool(scores.size) and bool(is_pos[int(np.argmax(scores))])
        found[i] = int(is_pos.sum())
        missed = positives[i][~np.isin(positives[i], keys)]
        if missed.size > extra:  # the missed occurrences nearest the query: the ones it can reach
            near = gather_vectors(index, missed) @ queries[i]
            missed = missed[np.argsort(-near, kind="stable")[:extra]]
        rows.append(np.concatenate([keys, missed]))
        flags.append(np.concatenate([is_pos, np.ones(missed.size, dtype=bool)]))
    width = max(1, max(r.size for r in rows))
    allowed = np.zeros((len(rows), width), dtype=bool)
    positive = np.zeros((len(rows), width), dtype=bool)
    padded = np.zeros((len(rows), width), dtype=np.int64)
    for i, (r, f) in enumerate(zip(rows, flags)):
        allowed[i, : r.size], positive[i, : r.size], padded[i, : r.size] = True, f, r
    vectors = gather_vectors(index, padded) * allowed[..., None]
    return SideTargets(vectors, allowed, positive, top, found)


def gather_vectors(index: PhraseIndex, keys: np.ndarray) -> np.ndarray:
    """The stored vectors (float32) of the tokens of `keys` (any shape), read once each, in order, per shard."""
    flat = keys.reshape(-1)
    distinct, inverse = np.unique(flat, return_inverse=True)
    out = np.empty((distinct.size, index.manifest.dim), dtype=np.float32)
    shard_no, positions = split_keys(distinct)
    at = {n: i for i, n in enumerate(index.numbers)}
    for number in np.unique(shard_no).tolist():
        rows = np.flatnonzero(shard_no == number)
        out[rows] = index.shards[at[number]].vectors[positions[rows]]
    return out[inverse].reshape(*keys.shape, index.manifest.dim)
