"""Tests for corpus.tokens: word-boundary flags, document tokenization with offsets."""

from __future__ import annotations

import numpy as np
import pytest

from corpus.tokens import WORD_END, WORD_START, boundary_flags, tokenize_documents

S, E = WORD_START, WORD_END


@pytest.fixture(scope="module")
def bert_tok(tiny_bert_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_bert_dir))


# ---------------------------------------------------------------- boundary_flags


@pytest.mark.parametrize(
    "word_ids, expected",
    [
        ([], []),
        ([0], [S | E]),
        ([0, 1, 2], [S | E, S | E, S | E]),
        ([0, 0, 0], [S, 0, E]),
        ([0, 0, 1, 2, 2], [S, E, S | E, S, E]),
        # special tokens (None) get no flags and do not join the words around them
        ([None, 0, 0, 1, None], [0, S, E, S | E, 0]),
        ([None, None], [0, 0]),
        ([None, 0, None, 0, None], [0, S | E, 0, S | E, 0]),
        # a pair: word ids restart in the second segment
        ([None, 0, 1, 1, None, 0, 0, None], [0, S | E, S, E, 0, S, E, 0]),
    ],
)
def test_boundary_flags(word_ids, expected):
    flags = boundary_flags(word_ids)
    assert flags.dtype == np.uint8
    assert flags.shape == (len(word_ids),)
    assert flags.tolist() == expected


def test_boundary_flags_every_word_has_one_start_and_one_end():
    word_ids = [0, 0, 0, 1, 2, 2, 3, 3, 3, 3, 4]
    flags = boundary_flags(word_ids)
    assert int(np.count_nonzero(flags & S)) == 5
    assert int(np.count_nonzero(flags & E)) == 5
    starts = np.flatnonzero(flags & S).tolist()
    ends = np.flatnonzero(flags & E).tolist()
    assert starts == [0, 3, 4, 6, 10]
    assert ends == [2, 3, 5, 9, 10]


def test_tokenize_documents_offsets_and_flags(bert_tok):
    texts = ["Allan Peiper was born.", "", "antidisestablishmentarianism"]
    docs = tokenize_documents(bert_tok, texts)
    assert [len(d) for d in docs][1] == 0
    for text, doc in zip(texts, docs):
        assert doc.ids.dtype == np.int32 and doc.offsets.shape == (len(doc), 2) and doc.flags.shape == (len(doc),)
        ref = bert_tok(text, add_special_tokens=False)["input_ids"]
        assert doc.ids.tolist() == ref
    first = docs[0]
    pieces = bert_tok.convert_ids_to_tokens(first.ids.tolist())
    assert pieces[:4] == ["allan", "pei", "##per", "was"]
    assert first.flags[:4].tolist() == [S | E, S, E, S | E]
    # a long word split into several word pieces: one start, one end
    long = docs[2]
    assert len(long) > 2
    assert long.flags[0] == S and long.flags[-1] == E and not long.flags[1:-1].any()
    assert texts[2][long.offsets[0, 0] : long.offsets[-1, 1]] == texts[2]
