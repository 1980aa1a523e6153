"""Occurrences of phrases in an index (training.occurrences) against a plain scan of every shard's tokens."""

from __future__ import annotations

import numpy as np

from corpus.tokens import WORD_END, WORD_START
from indexer.phrase_index import PhraseIndex
from training.occurrences import find_occurrences, key, split_keys


def scan(index: PhraseIndex, ids: list[int]) -> set[tuple[int, int, int]]:
    """(shard, first, last) of every word-aligned run equal to `ids` inside one block, by brute force."""
    out = set()
    for s, shard in enumerate(index.shards):
        tokens, flags = np.asarray(shard.token_ids).tolist(), np.asarray(shard.flags).tolist()
        for _, first, end in shard.blocks.tolist():
            for i in range(first, end - len(ids) + 1):
                j = i + len(ids) - 1
                if tokens[i : j + 1] == ids and flags[i] & WORD_START and flags[j] & WORD_END:
                    out.add((index.numbers[s], i, j))
    return out


def test_every_occurrence_is_found_and_nothing_else(tiny_index, bert):
    index = PhraseIndex(tiny_index)
    phrases = [bert.phrase_ids([p])[0] for p in ("France", "Paris", "Marie Curie", "born", "Atlantis")]
    places = find_occurrences(index, phrases)
    for ids, found in zip(phrases, places):
        shard_no, first = split_keys(found.starts)
        _, last = split_keys(found.ends)
        assert set(zip(shard_no.tolist(), first.tolist(), last.tolist())) == scan(index, ids)
    assert len(places[0]) == 2 and len(places[1]) == 2 and len(places[3]) == 3  # France, Paris, born
    assert len(places[4]) == 0
    index.close()


def test_blocks_are_the_global_blocks_of_the_occurrences(tiny_index, bert):
    index = PhraseIndex(tiny_index)
    (found,) = find_occurrences(index, [bert.phrase_ids(["Warsaw"])[0]])
    shard_no, first = split_keys(found.starts)
    at = {n: i for i, n in enumerate(index.numbers)}
    for s, p, block in zip(shard_no.tolist(), first.tolist(), found.blocks.tolist()):
        local = int(index.shards[at[s]].block_of(np.array([p]))[0])
        assert block == index.manifest.shards[s].block_base + local
    assert key(3, 5) == (3 << 40) | 5
    index.close()


def test_a_piece_of_a_word_is_not_an_occurrence(tiny_index, bert):
    """A run must start at a word start and end at a word end: the first piece of a split word is not the word."""
    index = PhraseIndex(tiny_index)
    ids = bert.phrase_ids(["Peiper"])[0]
    assert len(ids) > 1, "the test needs a word of several pieces"
    (whole,), (piece,) = find_occurrences(index, [ids]), find_occurrences(index, [ids[:1]])
    assert len(whole) == 1 and len(piece) == 0  # the text names him once (titles are not indexed)
    index.close()
