"""Tests for encoder.tokens: word-boundary flags, the special-token template, mask splitting."""

from __future__ import annotations

import numpy as np
import pytest

from encoder.tokens import (
    WORD_END,
    WORD_START,
    Template,
    boundary_flags,
    count_masks,
    derive_template,
    split_on_masks,
    tokenize_documents,
)

S, E = WORD_START, WORD_END


@pytest.fixture(scope="module")
def bert_tok(tiny_bert_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_bert_dir))


@pytest.fixture(scope="module")
def roberta_tok(tiny_roberta_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_roberta_dir))


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


# ---------------------------------------------------------------- derive_template


def test_derive_template_bert(bert_tok):
    t = derive_template(bert_tok)
    cls, sep = bert_tok.cls_token_id, bert_tok.sep_token_id
    assert (cls, sep) == (101, 102)
    assert t == Template(
        single_prefix=[cls], single_suffix=[sep], pair_prefix=[cls], pair_mid=[sep], pair_suffix=[sep], second_type_id=1
    )


def test_derive_template_roberta(roberta_tok):
    t = derive_template(roberta_tok)
    bos, eos = roberta_tok.convert_tokens_to_ids(["<s>", "</s>"])
    assert t == Template(
        single_prefix=[bos], single_suffix=[eos], pair_prefix=[bos], pair_mid=[eos, eos], pair_suffix=[eos],
        second_type_id=0,
    )


@pytest.mark.parametrize("which", ["bert", "roberta"])
def test_template_reproduces_the_tokenizer(which, bert_tok, roberta_tok):
    """single_prefix + x + single_suffix and the pair layout are exactly what the tokenizer produces."""
    tok = bert_tok if which == "bert" else roberta_tok
    t = derive_template(tok)
    x = tok("Paris is the capital", add_special_tokens=False)["input_ids"]
    y = tok("of France", add_special_tokens=False)["input_ids"]
    assert tok("Paris is the capital")["input_ids"] == t.single_prefix + x + t.single_suffix
    assert tok("Paris is the capital", "of France")["input_ids"] == t.pair_prefix + x + t.pair_mid + y + t.pair_suffix


# ---------------------------------------------------------------- masks


@pytest.mark.parametrize(
    "text, segments",
    [
        ("no mask here", ["no mask here"]),
        ("a <mask> b", ["a ", " b"]),
        ("a [MASK] b", ["a ", " b"]),
        ("<MASK>", ["", ""]),
        ("[mask] and <Mask>", ["", " and ", ""]),
        ("x <mask>[MASK]<mAsK> y", ["x ", "", "", " y"]),
        ("Paris is the <mask> of France.", ["Paris is the ", " of France."]),
    ],
)
def test_split_on_masks(text, segments):
    assert split_on_masks(text) == segments
    assert count_masks(text) == len(segments) - 1


@pytest.mark.parametrize("text", ["mask", "<mask", "mask>", "[MASK", "< mask >", "<masks>x", "[ MASK ]", "<mas k>"])
def test_not_a_mask(text):
    assert count_masks(text) == 0
    assert split_on_masks(text) == [text]


def test_count_masks_mixed():
    assert count_masks("<mask> [MASK] <MASK> [mask] <Mask>") == 5
    assert count_masks("") == 0
