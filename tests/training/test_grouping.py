"""Tests for training.grouping: greedy groups of blocks that share rare content tokens."""

from __future__ import annotations

import numpy as np

from training.grouping import similar_order


def test_blocks_sharing_rare_tokens_are_grouped_together():
    rng = np.random.default_rng(0)
    # 4 topics of 4 blocks; each topic has its own rare tokens, all blocks share the common token 1
    topics = {k: [100 * (k + 1) + j for j in range(5)] for k in range(4)}
    sets, topic_of = [], []
    for i in rng.permutation(16).tolist():
        k = i % 4
        sets.append(np.array([1] + rng.choice(topics[k], size=3, replace=False).tolist() + [5000 + i]))
        topic_of.append(k)
    order = similar_order(sets, 4, np.random.default_rng(1), max_df=15)
    assert sorted(order.tolist()) == list(range(16))  # a permutation: every block exactly once
    groups = [order[a : a + 4] for a in range(0, 16, 4)]
    assert all(len({topic_of[i] for i in g}) == 1 for g in groups)


def test_order_depends_on_the_seed_only_and_leftovers_fill_groups():
    sets = [np.array([i]) for i in range(10)]  # nothing shared: groups are filled with leftovers
    a = similar_order(sets, 3, np.random.default_rng(7))
    b = similar_order(sets, 3, np.random.default_rng(7))
    assert np.array_equal(a, b) and sorted(a.tolist()) == list(range(10))
    c = similar_order(sets, 3, np.random.default_rng(8))
    assert not np.array_equal(a, c)


def test_common_tokens_do_not_link_and_rare_pairs_do():
    # token 9 is in every block (above max_df); blocks pair up through one rare token each
    partner = {0: 5, 5: 0, 1: 6, 6: 1, 2: 7, 7: 2, 3: 4, 4: 3}
    sets = [np.array([9, 40 + min(i, partner[i])]) for i in range(8)]
    for seed in range(5):
        order = similar_order(sets, 2, np.random.default_rng(seed), max_df=4).tolist()
        assert sorted(order) == list(range(8))
        assert all(partner[order[a]] == order[a + 1] for a in range(0, 8, 2))
