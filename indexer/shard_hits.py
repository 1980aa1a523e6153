"""Hits over several shards: `ScoredHits`, one query's; `top_hits`, the k best of them (the rule every merge of
shards' hits follows, in one process or over shard groups); and `best_of_shards`, the best `want` hits of a query
over several shards in two rounds, the same hits as asking every shard for `want` (indexer.phrase_index re-scores
the best refine * k of them all).

A FAISS search keeps a heap of the k best per query in every shard, and at 100M tokens in 13 shards keeping 13
heaps of 1024 cost more than scanning the lists (bench.bench_search over the 100M-token scale index: the whole search
p50 28.1 ms asking every shard for all, 23.1 in two rounds, the same hits). So:

  first round   each shard is asked for FIRST_SHARE times an even share of `want` (at least FIRST_MIN)
  threshold     per query, the want-th best ANN score over every shard's first answer (-inf when they hold fewer):
                at most the want-th best over every shard's whole answer, since those are more hits
  second round  a shard that answered as many hits as it was asked and whose worst is >= the threshold may hold
                more of the best `want`: it is asked again for `want`, for those queries only

A shard not asked again has every hit it left out below the threshold (its hits come best first), so below the
want-th best of all; every hit at or above that is in both rounds' answers, and the best `want` (ties broken by shard
and position, indexer.phrase_index.top_hits) are the same."""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

FIRST_SHARE = 2  # a shard's first answer: twice its even share of the hits wanted
FIRST_MIN = 256

Answer = tuple[np.ndarray, np.ndarray]  # FAISS's (scores, ids) for some queries, best first, id -1: no hit
Task = tuple[int, "np.ndarray | None", int]  # (shard, query rows or None for all, hits)


def first_round(want: int, shards: int) -> int:
    """Hits asked of each of `shards` shards first, when `want` are wanted of them all."""
    return min(want, max(FIRST_MIN, math.ceil(FIRST_SHARE * want / max(1, shards))))


def best_of_shards(
    search_all: Callable[[list[Task]], list[Answer]], groups: list[dict[int, int]], queries: int
) -> dict[int, Answer]:
    """Each shard's answer ((queries, hits) arrays) holding every hit of the best `group[s]` of its group's shards (a
    group: {shard: the hits wanted of the group, capped by that shard's size}), by `search_all(tasks)`: each task's
    (s, rows, hits) answer, shard s's best `hits` for the query rows `rows` (None: every query). Every group's
    first round runs in one call of `search_all`, their second rounds in another."""
    asked = {s: min(n, first_round(max(g.values()), len(g))) for g in groups if g for s, n in g.items()}
    answers = dict(zip(asked, search_all([(s, None, n) for s, n in asked.items()])))
    again: list[Task] = []
    for group in (g for g in groups if g):
        threshold = _threshold([answers[s] for s in group], max(group.values()), queries)
        for s, want in group.items():
            scores, ids = answers[s]
            if asked[s] < want and ids.shape[1] == asked[s]:  # it may hold more than it was asked for
                rows = np.flatnonzero((ids[:, -1] >= 0) & (scores[:, -1] >= threshold))
                again += [(s, rows, want)] if rows.size else []
    for (s, some, _), answer in zip(again, search_all(again) if again else []):
        assert some is not None  # a second round names its queries
        answers[s] = _with_rows(answers[s], some, answer)
    return answers


def _threshold(answers: list[Answer], want: int, queries: int) -> np.ndarray:
    """Per query, the want-th best score over `answers` (-inf where they hold fewer hits)."""
    scores = np.concatenate([np.where(ids >= 0, s, -np.inf) for s, ids in answers], axis=1)
    if scores.shape[1] < want:
        return np.full(queries, -np.inf)
    return np.partition(scores, scores.shape[1] - want, axis=1)[:, scores.shape[1] - want]


def _with_rows(first: Answer, rows: np.ndarray, again: Answer) -> Answer:
    """`first` widened to `again`'s width (no hit where it held none), its `rows` replaced by `again`."""
    width = max(first[1].shape[1], again[1].shape[1])
    scores = np.full((first[0].shape[0], width), -np.inf, dtype=np.float32)
    ids = np.full((first[1].shape[0], width), -1, dtype=np.int64)
    scores[:, : first[0].shape[1]], ids[:, : first[1].shape[1]] = first
    scores[rows, : again[0].shape[1]], ids[rows, : again[1].shape[1]] = again
    scores[rows, again[0].shape[1] :], ids[rows, again[1].shape[1] :] = -np.inf, -1
    return scores, ids


class ScoredHits(NamedTuple):
    """One query's hits over an index: each hit's score, shard number and token position in its shard."""

    scores: np.ndarray  # float32
    shard_no: np.ndarray  # int64
    positions: np.ndarray  # int64


def top_hits(scores: np.ndarray, shard_no: np.ndarray, positions: np.ndarray, k: int) -> ScoredHits:
    """The k best hits (all when there are at most k): every hit above the k-th best score, then those at it
    by (shard, position), so the choice among equal scores does not depend on how the hits were gathered."""
    if scores.size <= k:
        return ScoredHits(scores, shard_no, positions)
    kth = np.partition(scores, scores.size - k)[scores.size - k]
    above = np.flatnonzero(scores > kth)
    tied = np.flatnonzero(scores == kth)
    tied = tied[np.lexsort((positions[tied], shard_no[tied]))[: k - above.size]]
    top = np.concatenate([above, tied])
    return ScoredHits(scores[top], shard_no[top], positions[top])
