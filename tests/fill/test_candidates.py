"""fill.candidates: exact logits (the lexical bonus added after the best logit is taken) and distinct spans."""

from __future__ import annotations

import pickle
from dataclasses import fields
from types import SimpleNamespace

import numpy as np
import pytest

from corpus.tokens import WORD_END, WORD_START
from fill.candidates import CandidateTask, LexicalBonus, MaskQuery, _spans, exact_logits
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import FillRequest
from fill.spans import BlockPrior
from indexer.vectors import StoredVectors
from tests.conftest import assert_same_fields


def _shard(n: int = 12, block_tokens: int = 6):
    rng = np.random.default_rng(0)
    flags = np.full(n, WORD_START | WORD_END, dtype=np.uint8)
    vectors = StoredVectors.__new__(StoredVectors)  # the real row access over an in-memory float array
    vectors.dtype, vectors.data, vectors.scales = "float16", rng.standard_normal((n, 4)).astype(np.float32), None
    return SimpleNamespace(
        vectors=vectors,
        flags=flags,
        block_of=lambda pos: np.asarray(pos) // block_tokens,
        info=SimpleNamespace(block_base=7),
    )


def test_logits_are_exact_and_the_bonus_comes_after_the_best():
    shard = _shard()
    q = np.random.default_rng(1).standard_normal(4).astype(np.float32)
    positions = np.array([0, 3, 8, 9])
    plain, best = exact_logits(shard, positions, q, 0.5, None)
    np.testing.assert_allclose(plain, shard.vectors[positions] @ q * 0.5, rtol=1e-6)
    assert best == pytest.approx(float(plain.max()))
    prior = BlockPrior.from_bm25(np.array([8]), np.array([2.0]))  # global block 8 = the shard's block 1
    boosted, best_boosted = exact_logits(shard, positions, q, 0.5, LexicalBonus(prior, 3.0))
    np.testing.assert_allclose(boosted - plain, [0.0, 0.0, 3.0, 3.0])
    assert best_boosted == best  # the encoder's best, before the bonus


def test_spans_are_distinct_ordered_and_stay_in_their_block():
    shard = _shard()
    first, last = _spans(shard, np.array([4, 4, 1]), np.array([5]), 3)
    spans = list(zip(first.tolist(), last.tolist()))
    assert spans == sorted(set(spans))
    assert (1, 1) in spans and (1, 3) in spans and (4, 5) in spans and (3, 5) in spans
    assert all(a // 6 == b // 6 for a, b in spans)  # never across a block
    assert all(b - a < 3 for a, b in spans)
    empty = _spans(shard, np.empty(0, np.int64), np.empty(0, np.int64), 3)
    assert empty[0].size == 0


def test_a_shards_candidates_travel_small_and_arrive_as_they_were(tiny_index):
    """What a shard group on Ray sends back for a mask (and the task it gets), pickled: the same arrays, dtypes
    included, in fewer bytes than its fields pickled one by one."""
    engine = FillEngine.open(EngineConfig(index=tiny_index, use_reader=False))
    try:
        prepared = engine.prepare([engine.plan(FillRequest(text="Marie Curie was born in <mask> .", mode="dense"))])[0]
        hits, q = prepared.hits[0], prepared.queries
        query = MaskQuery(q.q_start[0], q.q_end[0], engine.index.scale, 10, None, True)
        tasks = [
            CandidateTask(s, hits.start.in_shard(s), hits.end.in_shard(s), np.empty(0, dtype=np.int64), query)
            for s in sorted(set(hits.shard_nos()))
        ]
        found = [c for c in engine.shards.gather(tasks) if c is not None]
    finally:
        engine.close()
    assert found and sum(c.size for c in found) > 10
    for task in tasks:
        assert_same_fields(task, pickle.loads(pickle.dumps(task, protocol=5)))
    for candidates in found:
        assert_same_fields(candidates, pickle.loads(pickle.dumps(candidates, protocol=5)))
        one_by_one = sum(len(pickle.dumps(getattr(candidates, f.name), protocol=5)) for f in fields(candidates))
        assert len(pickle.dumps(candidates, protocol=5)) < 0.75 * one_by_one
