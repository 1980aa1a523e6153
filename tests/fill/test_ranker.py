"""fill.ranker: one softmax over every shard's distinct positions; pool spans map back to their shard."""

from __future__ import annotations

import math

import numpy as np

from fill.candidates import ShardCandidates
from fill.ragged import Ragged
from fill.ranker import CandidatePool, rank_mask
from fill.schemas import FillOptions


def _part(shard_no: int, first, last, start_logits, end_logits, texts: list[str]) -> ShardCandidates:
    first, last = np.array(first, dtype=np.int64), np.array(last, dtype=np.int64)
    starts, start_of = np.unique(first, return_inverse=True)
    ends, end_of = np.unique(last, return_inverse=True)
    codes = np.frombuffer("".join(texts).encode("utf-32-le"), dtype="<u4").astype(np.uint32)
    length = np.array([len(t) for t in texts], dtype=np.int64)
    keys = Ragged(codes, np.cumsum(length) - length, length)
    return ShardCandidates(
        shard_no=shard_no,
        first=first,
        last=last,
        start_logits=np.array(start_logits, dtype=np.float64),
        start_of=start_of,
        end_logits=np.array(end_logits, dtype=np.float64),
        end_of=end_of,
        start_max=max(start_logits),
        end_max=max(end_logits),
        block=np.full(first.size, 10 * shard_no),
        row=np.zeros(first.size, np.int64),
        char=np.zeros(first.size, np.int64),
        keys=keys,
        tokens=None,
        blocks=np.array([10 * shard_no]),
        bounds=np.array([[0, 100]], dtype=np.int64),
    )


def _softmax(values: dict) -> dict:
    top = max(values.values())
    z = {k: math.exp(v - top) for k, v in values.items()}
    return {k: v / sum(z.values()) for k, v in z.items()}


def test_the_pool_softmaxes_over_the_distinct_positions_of_every_shard():
    # shard 0: spans (1, 2), (1, 3), (4, 4): starts {1, 4}, ends {2, 3, 4}; shard 2: span (1, 2)
    a = _part(0, [1, 1, 4], [2, 3, 4], [0.5, 1.5], [0.1, -0.4, 2.0], ["x", "y", "z"])
    b = _part(2, [1], [2], [3.0], [0.7], ["w"])
    pool = CandidatePool.of([a, b])
    ps = _softmax({(0, 1): 0.5, (0, 4): 1.5, (2, 1): 3.0})
    pe = _softmax({(0, 2): 0.1, (0, 3): -0.4, (0, 4): 2.0, (2, 2): 0.7})
    want = [ps[(0, 1)] + pe[(0, 2)], ps[(0, 1)] + pe[(0, 3)], ps[(0, 4)] + pe[(0, 4)], ps[(2, 1)] + pe[(2, 2)]]
    np.testing.assert_allclose(pool.score, want, rtol=1e-12)
    assert pool.start_max == 3.0 and pool.end_max == 2.0
    assert pool.where(3) == (b, 0) and pool.where(2) == (a, 2)
    assert pool.block(3) == 20 and pool.block(0) == 0


def test_an_empty_pool_ranks_nothing():
    ranked = rank_mask([], FillOptions())
    assert ranked.shown == [] and ranked.runner_up is None
    assert ranked.pool.score.size == 0 and ranked.pool.start_max == float("-inf")


def test_phrases_are_grouped_across_shards_and_ranked():
    a = _part(0, [1, 5], [1, 5], [2.0, 0.0], [2.0, 0.0], ["Paris", "Lyon"])
    b = _part(1, [3], [3], [2.0], [2.0], ["Paris"])
    ranked = rank_mask([a, b], FillOptions(aggregate="sum", top_k=2))
    assert [p.text for p in ranked.shown] == ["Paris", "Lyon"]
    assert sorted(ranked.shown[0].occurrences) == [0, 2]  # one occurrence in each shard
    assert ranked.shown[0].value > 0.9 and ranked.runner_up == ranked.shown[1].value
