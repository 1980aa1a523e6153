"""encoder.synonyms: the words nearest to a choice's words in the input-embedding space, each kept for one choice."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from encoder.synonyms import WordNeighbours


@pytest.fixture(scope="module")
def vocab(bert):
    return bert.tokenizer.get_vocab()


def _table(vocab: dict[str, int], placed: dict[str, list[float]], dim: int = 4) -> np.ndarray:
    """An embedding table: every token far out on its own random direction in dims 4+, the `placed` words at the
    given points of the first 4 dims (so their cosines are what the test says)."""
    g = np.random.default_rng(0)
    table = np.zeros((max(vocab.values()) + 1, dim + 64), dtype=np.float32)
    table[:, dim:] = g.standard_normal((table.shape[0], 64))
    for word, point in placed.items():
        table[vocab[word]] = 0.0
        table[vocab[word], :dim] = point
    return table


def test_neighbours_go_to_the_nearest_choice_best_first(bert, vocab):
    placed = {
        "great": [1, 0, 0, 0],
        "terrific": [0.95, 0.05, 0, 0],
        "wonderful": [0.9, 0.2, 0, 0],
        "terrible": [0, 1, 0, 0],
        "awful": [0.05, 0.95, 0, 0],
        "fantastic": [0.6, 0.55, 0, 0],  # a little nearer to great than to terrible
        "horrible": [0.45, 0.7, 0, 0],
    }  # near both, nearer to terrible
    words = WordNeighbours(bert.tokenizer, _table(vocab, placed), bert.phrase_ids)
    near = words.expand([[vocab["great"]], [vocab["terrible"]]], 3)
    assert [w for _, w in near[0]] == ["terrific", "wonderful", "fantastic"]
    assert [w for _, w in near[1]] == ["awful", "horrible"] + [w for _, w in near[1]][2:]
    assert all(vocab[w] == i for c in near for i, w in c)
    assert {w for _, w in near[0]}.isdisjoint(w for _, w in near[1])  # never one word for two choices
    assert words.expand([[vocab["great"]], [vocab["terrible"]]], 1) == [
        [(vocab["terrific"], "terrific")],
        [(vocab["awful"], "awful")],
    ]
    assert words.expand([[vocab["great"]], [vocab["terrible"]]], 0) == [[], []]


def test_given_words_are_never_added_and_a_choice_without_one_token_word_gets_none(bert, vocab):
    placed = {"great": [1, 0, 0, 0], "good": [0.99, 0.01, 0, 0], "terrific": [0.9, 0.1, 0, 0]}
    words = WordNeighbours(bert.tokenizer, _table(vocab, placed), bert.phrase_ids)
    near = words.expand([[vocab["great"], vocab["good"]], []], 1)
    assert near == [[(vocab["terrific"], "terrific")], []]


def test_candidates_are_whole_words_without_stopwords(bert):
    words = WordNeighbours(
        bert.tokenizer, np.random.default_rng(1).standard_normal((len(bert.tokenizer.get_vocab()), 8)), bert.phrase_ids
    )
    assert "great" in words.words and "terrible" in words.words
    assert not {"the", "was", "and", "it"} & set(words.words)  # stopwords
    assert all(w.isalpha() and len(w) >= 3 and not w.startswith("#") for w in words.words)
    assert all(bert.phrase_ids([w])[0] == [int(i)] for w, i in zip(words.words[:500], words.ids[:500]))
    assert np.unique(words.ids).size == words.ids.size


def test_the_encoder_builds_its_table_from_its_own_input_embeddings(bert):
    table = bert.model.get_input_embeddings().weight
    great, terrible = bert.phrase_ids(["great", "terrible"])
    near = bert.word_neighbours.expand([great, terrible], 5)
    unit = torch.nn.functional.normalize(table.detach().float(), dim=1)
    for mine, other, picked in ((great, terrible, near[0]), (terrible, great, near[1])):
        assert len(picked) == 5
        for i, _ in picked:  # each word nearer to its own choice's word than to the other's
            assert float(unit[i] @ unit[mine[0]]) > float(unit[i] @ unit[other[0]]) - 1e-3
    assert bert.word_neighbours is bert.word_neighbours  # built once
