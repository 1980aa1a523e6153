"""indexer/shard_hits.py: the best hits of several shards asked in two rounds are those of asking every shard for
all of them, ties included; a shard that may hold more is asked again, for those queries only."""

from __future__ import annotations

import numpy as np
import pytest

from indexer import shard_hits
from indexer.shard_hits import best_of_shards, first_round


def _shards(rng, sizes, queries, ties=False):
    """Per shard, every hit's score per query ([queries, size]; rounded to a few values where `ties`)."""
    out = [rng.standard_normal((queries, n)).astype(np.float32) for n in sizes]
    return [np.round(s) if ties else s for s in out]


def _searcher(scores, calls):
    def search_all(tasks):
        answers = []
        for s, rows, hits in tasks:
            calls.append((s, None if rows is None else rows.tolist(), hits))
            mine = scores[s] if rows is None else scores[s][rows]
            order = np.lexsort((np.broadcast_to(np.arange(mine.shape[1]), mine.shape), -mine), axis=1)[:, :hits]
            found = np.take_along_axis(mine, order, axis=1)
            ids = order.astype(np.int64)
            pad = hits - found.shape[1]  # FAISS pads a shard holding fewer than asked with id -1
            answers.append(
                (
                    np.pad(found, ((0, 0), (0, pad)), constant_values=-np.inf),
                    np.pad(ids, ((0, 0), (0, pad)), constant_values=-1),
                )
            )
        return answers

    return search_all


def _best(answers, want):
    """Per query, the best `want` (score, shard, id) over the answers, ties by (shard, id)."""
    out = []
    for row in range(next(iter(answers.values()))[0].shape[0]):
        hits = [
            (float(sc), s, int(i))
            for s, (scores, ids) in answers.items()
            for sc, i in zip(scores[row], ids[row])
            if i >= 0
        ]
        out.append(sorted(hits, key=lambda h: (-h[0], h[1], h[2]))[:want])
    return out


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("sizes", [[300, 300, 300, 300], [900, 40, 300, 5], [3, 2, 4, 1]])
def test_two_rounds_keep_the_best_hits_of_asking_every_shard_for_all(monkeypatch, sizes, ties):
    monkeypatch.setattr(shard_hits, "FIRST_MIN", 4)
    rng = np.random.default_rng(len(sizes) + sum(sizes) + ties)
    scores = _shards(rng, sizes, 6, ties)
    scores[0][:3] += 3.0  # three queries find most of their best hits in shard 0: asked again there
    want = 40
    calls: list = []
    group = {s: min(want, n) for s, n in enumerate(sizes)}
    rounds = best_of_shards(_searcher(scores, calls), [group], 6)
    full = dict(enumerate(_searcher(scores, [])([(s, None, group[s]) for s in group])))
    assert _best(rounds, want) == _best(full, want)
    asked_again = [c for c in calls if c[1] is not None]
    if sum(sizes) > want and sizes[0] > first_round(want, len(sizes)):
        again = {c[0]: set(c[1]) for c in asked_again}
        assert again[0] >= {0, 1, 2}  # shard 0, for those queries at least
        assert len(again[0]) < 6 or sizes[0] > sum(sizes) / 2  # all of them only where it holds most hits
        assert ties or len(set(sizes)) > 1 or list(again) == [0]  # others: ties, or a larger share of the hits
    assert all(c[2] == group[c[0]] for c in asked_again)  # asked again for all it may give


def test_groups_are_thresholded_apart_and_asked_in_two_calls(monkeypatch):
    monkeypatch.setattr(shard_hits, "FIRST_MIN", 2)
    rng = np.random.default_rng(3)
    scores = _shards(rng, [50] * 6, 2)
    scores[3] += 5.0  # the second group's best all in shard 3 (first round: 8 of the 12 wanted)
    batches: list = []
    search = _searcher(scores, [])

    def search_all(tasks):
        batches.append([t[0] for t in tasks])
        return search(tasks)

    groups = [{0: 12, 1: 12, 2: 12}, {3: 12, 4: 12, 5: 12}]
    got = best_of_shards(search_all, groups, 2)
    assert len(batches) == 2 and sorted(batches[0]) == list(range(6)) and batches[1] == [3]
    full = dict(enumerate(search([(s, None, 12) for s in range(6)])))
    for group in groups:
        assert _best({s: got[s] for s in group}, 12) == _best({s: full[s] for s in group}, 12)


def test_the_first_round_asks_twice_an_even_share():
    assert first_round(4096, 13) == 631 and first_round(1024, 13) == 256  # at least FIRST_MIN
    assert first_round(1024, 1) == 1024 and first_round(100, 3) == 100  # never more than wanted
